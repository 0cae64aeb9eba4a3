import contextlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """Builds the C++ CPU decode kernel for this environment (once; later sessions find it
    built) before any test or notebook runs, so that no notebook cell pays for the build, prints
    its notice or runs into nbval's cell timeout. The progress line goes straight to the terminal.
    A failed build is reported here; the kernel's tests then skip and `paged_decode` warns and
    uses the torch reference."""
    from paged_kv.attention import cpu_decode

    if cpu_decode.built_library() is not None:
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        try:
            cpu_decode.build(out=sys.stdout)
        except cpu_decode.BuildError as err:
            print(f"paged_kv: the C++ CPU decode kernel did not build: {err}", flush=True)
