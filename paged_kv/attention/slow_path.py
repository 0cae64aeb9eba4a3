"""The notice of a slow attention path: why automatic dispatch took the torch reference.

`paged_decode(..., backend=None)` falls back to the torch reference when the fast kernel of the
tensors' device (the C++ kernel on the CPU, Triton on CUDA) cannot take the call: a cache that
is not contiguous (FlashInfer's interleaved `[blocks, 2, ...]` K/V, say), a dtype or head_dim
the kernel lacks, a gradient wanted. The answer is the same, only slower, so the first such
call for each reason warns with the reason and what to change; later ones stay quiet.
Asking for `backend="reference"` never warns.
"""

from __future__ import annotations

import warnings


class SlowPathWarning(UserWarning):
    """Automatic dispatch ran the torch reference because the fast kernel of the device
    could not take the call; the message says why and how to get the fast path."""


_told: set[tuple[str, str]] = set()  # (op, reason) pairs warned about in this process


def warn_slow_path(op: str, kernel: str, reason: str, *, stacklevel: int) -> None:
    """Warn, once per process for each `op` and `reason`, that `op` ("decode", "prefill")
    took the reference instead of `kernel` because of `reason`. `stacklevel` counts from
    the caller of this function up to the user's call."""
    if (op, reason) in _told:
        return
    _told.add((op, reason))
    warnings.warn(
        f"paged_{op} ran the torch reference, not the {kernel} kernel, because {reason}; the "
        f"kernel takes the call once that is changed. Pass backend='reference' to choose the "
        "reference and silence this warning (given once per process and reason).",
        SlowPathWarning,
        stacklevel=stacklevel + 1,
    )
