"""pytest for the whole repository: the unit tests and every notebook (nbval).

Lives at the root so that `pytest notebooks/05_paged_attention.ipynb` alone builds the C++
kernel before the notebook runs, as a full `pytest` does, and so that `pytest -m quick` finds
the quick tier wherever its files are.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent

QUICK = (
    "tests/test_block_pool.py",
    "tests/test_block_table.py",
    "tests/test_manager.py",
    "tests/test_hashing.py",
    "tests/test_attention.py",
    "tests/test_cpu_decode.py",
    "tests/test_pretrained.py::test_the_shipped_weights",
    "tests/test_pretrained.py::test_engine_tokens_equal_dense_decoding_with_the_trained_weights[lru]",
    "notebooks/01_block_pool.ipynb",
)
"""The quick tier (`pytest -m quick`, under a minute on 2 cores), as pytest node id prefixes:
the core unit tests, the C++ kernel against its reference, the trained model loaded and served
exactly as dense decoding serves it, and one notebook. Proof that the set-up worked; the full
`pytest` is the test."""


def quick_files() -> set[str]:
    """The test files and notebooks that hold the quick tier, from the repository root."""
    return {entry.split("::")[0] for entry in QUICK}


def relative_to_root(path: Path) -> str | None:
    """`path` as a repository path (`tests/test_x.py`), None outside the repository."""
    path = path.resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m quick` alone, skips collecting (importing) the test files and notebooks that
    hold no quick test; collecting everything takes longer than the quick tier runs."""
    if config.option.markexpr != "quick" or not collection_path.is_file():
        return None
    name = collection_path.name
    collectable = name.endswith(".ipynb") or (name.startswith("test_") and name.endswith(".py"))
    return True if collectable and relative_to_root(collection_path) not in quick_files() else None


def nbval_skip_reason(source: str) -> str | None:
    """Why a notebook cell marked `# NBVAL_SKIP` is skipped: the comment line right below the
    marker ("" if there is none); None for a cell without the marker."""
    lines = [line.strip() for line in source.splitlines()]
    markers = [i for i, line in enumerate(lines) if line.lstrip("#").strip() == "NBVAL_SKIP"]
    if not markers:
        return None
    below = lines[markers[0] + 1 : markers[0] + 2]
    return below[0].lstrip("#").strip() if below and below[0].startswith("#") else ""


def xdist_group(nodeid: str) -> str:
    """The pytest-xdist group of a test: its file, so that one worker runs a notebook's cells
    in order and sets up a file's fixtures once; every notebook of `solutions/` (and of
    `exercises/`) in one group, since chapter 06's capstone loads the parts that the earlier
    chapters' notebooks save in their directory's `my_paged_kv/` (`notebook_parts`)."""
    path = nodeid.split("::")[0]
    folder = path.split("/")[0]
    return folder if folder in ("solutions", "exercises") else path


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test and notebook cell of the quick tier's files `quick`, gives each test
    its xdist group, and gives each `# NBVAL_SKIP` cell its skip reason (nbval's own skip names
    none), which `-rs` prints."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item.nodeid)))
        if item.nodeid.startswith(QUICK):
            item.add_marker(pytest.mark.quick)
        cell = getattr(item, "cell", None)
        reason = nbval_skip_reason(cell.source) if cell is not None else None
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason or "# NBVAL_SKIP, no reason below it"))


SESSION_PARTS = pytest.StashKey[Path]()
"""The temporary folder that keeps the parts (`paged_kv.course.parts`) saved while this pytest
session runs, its workers' too: the learner's own (`exercises/my_paged_kv/`, `$PAGED_KV_PARTS`)
are never read or written by the tests."""


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker runs on one thread of torch: the workers already fill the cores,
    and torch's threads in each would only wait on each other (on a busy machine one random
    fault-injection test of the engine took 112 s that way; the whole file takes 36 s now).
    The session's parts folder (`SESSION_PARTS`) is made here, by the controller, and removed
    when the session ends; its workers take the controller's."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.stash[SESSION_PARTS] = Path(workerinput["paged_kv_parts"])
    else:
        folder = Path(tempfile.mkdtemp(prefix="paged_kv-parts-"))
        config.stash[SESSION_PARTS] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, for each worker it starts: keep parts in the controller's folder."""
    node.workerinput["paged_kv_parts"] = str(node.config.stash[SESSION_PARTS])


def notebook_parts(session: Path, notebook: Path) -> Path:
    """Where a notebook that this session runs keeps the parts it saves: `my_paged_kv/` under
    its folder's path (from the repository root) in the session's folder, as a learner's sits
    beside their notebooks, so that every notebook of `solutions/` sees the parts the others
    save, and never those of `exercises/`."""
    folder = notebook.resolve().parent
    path = relative_to_root(folder) or folder.relative_to(folder.anchor).as_posix()
    return session / path / "my_paged_kv"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """nbval starts a notebook's kernel in its first cell's setup, with this process's
    environment: then `PAGED_KV_PARTS` names the notebook's folder of parts for this session."""
    if item.path.suffix != ".ipynb":
        return (yield)
    with pytest.MonkeyPatch.context() as patch:
        folder = notebook_parts(item.config.stash[SESSION_PARTS], item.path)
        patch.setenv("PAGED_KV_PARTS", str(folder))
        return (yield)


@pytest.fixture(autouse=True)
def parts_of_this_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test keeps the parts it saves, or that the kernels and graders it starts save, in
    a folder of its own under the session's (`PAGED_KV_PARTS`, unset it to test the default)."""
    name = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    folder = request.config.stash[SESSION_PARTS] / "tests" / name
    monkeypatch.setenv("PAGED_KV_PARTS", str(folder))
    return folder


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


NOTEBOOK_SECONDS: dict[str, float] = {}
"""Each notebook's run time so far (its cells' setup, call and teardown), by path."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Adds up each notebook's cells for the summary below."""
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        NOTEBOOK_SECONDS[path] = NOTEBOOK_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Prints every notebook's run time: each chapter is to run in under a minute on 2 cores."""
    if NOTEBOOK_SECONDS:
        terminalreporter.section("notebook run times")
        for path, seconds in sorted(NOTEBOOK_SECONDS.items()):
            terminalreporter.write_line(f"{seconds:6.1f} s  {path}")
