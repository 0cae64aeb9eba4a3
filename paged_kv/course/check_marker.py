"""The mark a passing check leaves for the grader: a display output of a MIME type only this
module writes, carrying the check's name and the nonce the grader gave the kernel through the
environment (`NONCE`). `grade` counts an exercise as passed only on such a mark, so a check
cell whose check call is commented out, or calls a check of the learner's own, or prints the
check's text, is "not checked". (Code in the same kernel can still read the nonce: the mark
stops mistakes and printed look-alikes, not a learner forging it on purpose.)
"""

from __future__ import annotations

import hmac
import os
from typing import Any

MIME = "application/vnd.paged-kv.check-passed+json"
NONCE = "PAGED_KV_GRADE_NONCE"


def leave(check: str, label: str, what: str) -> None:
    """Publish the mark of `check` passing, when a grader runs this kernel (else nothing)."""
    nonce = os.environ.get(NONCE)
    if not nonce:
        return
    try:
        from IPython.core.interactiveshell import InteractiveShell
        from IPython.display import publish_display_data
    except ImportError:  # not in a kernel: no grader is reading
        return
    if InteractiveShell.initialized():
        mark = {"check": check, "label": label, "what": what, "nonce": nonce}
        publish_display_data({MIME: mark})


def marks(outputs: list[dict[str, Any]], nonce: str) -> list[dict[str, str]]:
    """The marks among a cell's `outputs` that carry `nonce`: the checks that passed in it."""
    found = []
    for output in outputs:
        shown = output.get("data", {}) if output.get("output_type") == "display_data" else {}
        mark = shown.get(MIME)
        if not isinstance(mark, dict) or not isinstance(mark.get("check"), str):
            continue
        if hmac.compare_digest(str(mark.get("nonce", "")).encode(), nonce.encode()):
            found.append({k: str(mark.get(k, "")) for k in ("check", "label", "what")})
    return found
