"""pytest for the whole repository: the unit tests and every notebook (nbval).

Lives at the root so that `pytest notebooks/05_paged_attention.ipynb` alone builds the C++
kernel before the notebook runs, as a full `pytest` does.
"""

import contextlib
import sys

import pytest


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
