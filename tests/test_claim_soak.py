"""tools/claim_soak.py on a tiny generated notebook (no lecture is run, no time asserted): which
cells it counts as claim failures, that every cell runs after one fails, that `# NBVAL_SKIP`
cells are left out, the summary and the JSON it saves, and that its CPU hog stops."""

import json

import claim_soak as cs  # tests/conftest.py puts tools/ on sys.path
import nbformat
import pytest

CELLS = [
    ("x = 1", []),
    ("# claim: x is 2\nassert x == 1\nassert x == 2, 'x is not 2'", ["claim"]),
    ("1 / 0", []),
    ("# claim: holds\nassert x == 1", ["claim"]),
    ("# NBVAL_SKIP\n# needs the network\nraise SystemExit('a skipped cell ran')", []),
    ("open('after.txt', 'w').write(str(x))", []),  # runs in the notebook's own directory
]


@pytest.fixture
def tiny(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A tiny lecture")]
    nb.cells += [nbformat.v4.new_code_cell(src, metadata={"tags": tags}) for src, tags in CELLS]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_failing_claim_cell_is_told_from_other_failures(tiny):
    stored = tiny.read_text()
    run = cs.run_notebook(tiny, timeout=60, round=3)
    assert (run.notebook, run.round) == ("tiny.ipynb", 3)
    assert run.claim_failures == [
        cs.Failure(2, "assert x == 2, 'x is not 2'", "AssertionError: x is not 2")
    ]
    assert run.other_failures == [cs.Failure(3, "1 / 0", "ZeroDivisionError: division by zero")]
    assert (tiny.parent / "after.txt").read_text() == "1"  # the cells after the failures ran
    assert tiny.read_text() == stored  # the notebook on disk is not written


def summary_of_two_runs():
    failed = cs.Run("a.ipynb", 0, 4.0, [cs.Failure(5, "assert ok", "AssertionError: no")])
    runs = [failed, cs.Run("a.ipynb", 1, 2.0), cs.Run("b.ipynb", 0, 7.0), cs.Run("a.ipynb", 2, 9.0)]
    runs[2].other_failures.append(cs.Failure(1, "boom()", "RuntimeError: boom"))
    return cs.summarize(runs)


def test_summary_counts_failures_and_times_per_notebook():
    summary = summary_of_two_runs()
    assert list(summary) == ["a.ipynb", "b.ipynb"]
    a, b = summary["a.ipynb"], summary["b.ipynb"]
    assert (a["runs"], a["median_s"], a["max_s"], a["runs_with_claim_failures"]) == (3, 4.0, 9.0, 1)
    assert a["claim_failures"] == [
        {"round": 0, "cell": 5, "line": "assert ok", "error": "AssertionError: no"}
    ]
    assert a["other_failures"] == [] and b["claim_failures"] == []
    assert b["other_failures"][0]["error"] == "RuntimeError: boom"


def test_the_table_has_a_row_per_notebook_and_a_line_per_failure():
    lines = cs.table(summary_of_two_runs()).splitlines()
    assert lines[2].split() == ["a.ipynb", "3", "1", "0", "4.0", "9.0"]
    assert lines[3].split() == ["b.ipynb", "1", "0", "1", "7.0", "7.0"]
    assert lines[4] == "a.ipynb run 1 cell 5 (claim): assert ok  -> AssertionError: no"
    assert lines[5] == "b.ipynb run 1 cell 1 (other): boom()  -> RuntimeError: boom"


def test_the_hog_is_stopped_when_the_block_ends_and_stops_itself_at_its_deadline():
    with cs.cpu_hog(2, 600) as hogs:
        assert len(hogs) == 2 and all(hog.poll() is None for hog in hogs)  # busy
    assert all(hog.returncode is not None for hog in hogs)  # stopped by the block's end
    with cs.cpu_hog(1, 0) as (hog,):
        assert hog.wait(timeout=60) == 0  # past its deadline it exits by itself, cleanly


def test_main_saves_every_run_and_fails_on_a_claim(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(cs, "RESULTS", tmp_path / "claim_soak.json")
    monkeypatch.setattr(cs, "ROOT", tmp_path)
    assert cs.main([str(tiny), "--runs", "2", "--hog", "1", "--save"]) == 1
    saved = json.loads((tmp_path / "claim_soak.json").read_text())
    assert (saved["runs"], saved["hog_processes"], saved["jobs"]) == (2, 1, 1)
    row = saved["notebooks"]["tiny.ipynb"]
    assert row["runs"] == 2 and [f["round"] for f in row["claim_failures"]] == [0, 1]
    assert {f["cell"] for f in row["other_failures"]} == {3}
