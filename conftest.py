"""pytest for the whole repository: the unit tests and every notebook (nbval).

Lives at the root so that `pytest notebooks/05_paged_attention.ipynb` alone builds the C++
kernel before the notebook runs, as a full `pytest` does, and so that `pytest -m quick` finds
the quick tier wherever its files are.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

QUICK = frozenset(
    {
        "tests/test_block_pool.py",
        "tests/test_block_table.py",
        "tests/test_manager.py",
        "tests/test_prefix_caching.py",
        "tests/test_attention.py",
        "tests/test_cpu_decode.py",
        "tests/test_pretrained.py",
        "notebooks/01_block_pool.ipynb",
    }
)
"""The quick tier (`pytest -m quick`, under a minute on 2 cores): the core unit tests, the C++
kernel and the trained model against their references, and one notebook. Proof that the set-up
worked; the full `pytest` is the test."""


def is_quick(path: Path) -> bool:
    """Whether the test file or notebook at `path` belongs to the quick tier."""
    return path.resolve().is_relative_to(ROOT) and (
        path.resolve().relative_to(ROOT).as_posix() in QUICK
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m quick` alone, skips collecting (importing) the test files and notebooks that
    hold no quick test; collecting everything takes longer than the quick tier runs."""
    if config.option.markexpr != "quick" or not collection_path.is_file():
        return None
    name = collection_path.name
    collectable = name.endswith(".ipynb") or (name.startswith("test_") and name.endswith(".py"))
    return True if collectable and not is_quick(collection_path) else None


def nbval_skip_reason(source: str) -> str | None:
    """Why a notebook cell marked `# NBVAL_SKIP` is skipped: the comment line right below the
    marker ("" if there is none); None for a cell without the marker."""
    lines = [line.strip() for line in source.splitlines()]
    markers = [i for i, line in enumerate(lines) if line.lstrip("#").strip() == "NBVAL_SKIP"]
    if not markers:
        return None
    below = lines[markers[0] + 1 : markers[0] + 2]
    return below[0].lstrip("#").strip() if below and below[0].startswith("#") else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test and notebook cell of the quick tier's files `quick`, and gives each
    `# NBVAL_SKIP` cell its skip reason (nbval's own skip names none), which `-rs` prints."""
    for item in items:
        if is_quick(item.path):
            item.add_marker(pytest.mark.quick)
        cell = getattr(item, "cell", None)
        reason = nbval_skip_reason(cell.source) if cell is not None else None
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason or "# NBVAL_SKIP, no reason below it"))


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
