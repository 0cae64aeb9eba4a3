"""`python -m paged_kv.course grade` runs a learner's notebooks and fails on any check that does
not pass: solutions pass, untouched exercises are "not done", a planted mistake "failed" with its
message, a check cell that ran no check of the course "not checked", a notebook that cannot be
run "not graded" (and the next one is graded), and the exit status says so."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from paged_kv.course import check_marker, grade

ROOT = Path(__file__).resolve().parent.parent


def _copy(tmp_path, relative):
    target = tmp_path / Path(relative).name
    shutil.copy(ROOT / relative, target)
    return target


def test_a_solution_notebook_passes_every_check(tmp_path):
    result = grade.grade_notebook(_copy(tmp_path, "solutions/02_block_tables_solutions.ipynb"))
    assert [v.status for v in result.verdicts] == [grade.PASSED] * 4
    assert result.ok and not result.errors
    assert result.verdicts[0].label == "Exercise 1 (add_sequence and free_sequence)"
    assert result.verdicts[3].label == "Your parts so far"


def test_an_untouched_exercise_notebook_is_not_done(tmp_path):
    result = grade.grade_notebook(_copy(tmp_path, "exercises/02_block_tables_exercises.ipynb"))
    assert [v.status for v in result.verdicts] == [grade.NOT_DONE] * 4
    assert not result.ok and not result.errors
    assert "SequenceManager.__init__" in result.verdicts[0].message


def test_a_planted_mistake_fails_with_its_message_and_the_command_exits_1(tmp_path):
    path = _copy(tmp_path, "solutions/02_block_tables_solutions.ipynb")
    nb = nbformat.read(path, as_version=4)
    [cell] = [c for c in nb.cells if "def free_sequence" in c.source]
    assert "self.pool.release(table[::-1])" in cell.source
    cell.source = cell.source.replace("self.pool.release(table[::-1])", "self.pool.release(table)")
    nbformat.write(nb, path)
    done = subprocess.run(
        [sys.executable, "-m", "paged_kv.course", "grade", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout
    assert "❌ failed      Exercise 1 (add_sequence and free_sequence)" in report
    assert "last block first" in report  # the check's own message, under the verdict
    assert "✅ passed      Exercise 3 (slot_mapping)" in report
    assert "Total: 3 passed, 0 not done, 0 not checked, 1 failed" in report


def _mark(check, nonce, label="Exercise 2 (share)", what="fine"):
    mark = {"check": check, "label": label, "what": what, "nonce": nonce}
    return nbformat.v4.new_output("display_data", data={check_marker.MIME: mark})


def test_the_verdicts_read_the_marks_the_checks_left():
    def cell(*outputs, source="checks.check_share(X)"):
        return nbformat.v4.new_code_cell(source, outputs=list(outputs))

    def verdict(cell, heading="", first_error="", number=0):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        return grade._verdict(cell, errors, heading, first_error, number, "n0nce")

    stub = nbformat.v4.new_output(
        "error",
        ename="ExerciseNotDone",
        evalue="Exercise 1 (allocate) is not done yet: x",
        traceback=[],
    )
    wrong = nbformat.v4.new_output(
        "error", ename="CheckFailed", evalue="Capstone: request 0 differs", traceback=[]
    )
    other = nbformat.v4.new_output("error", ename="NameError", evalue="name 'X'", traceback=[])
    printed = nbformat.v4.new_output("stream", name="stdout", text="✅ Exercise 2 (share): fine\n")
    assert verdict(cell(_mark("check_share", "n0nce"))) == grade.Verdict(
        "Exercise 2 (share)", grade.PASSED, "fine"
    )
    assert verdict(cell(stub)).status == grade.NOT_DONE
    assert verdict(cell(wrong)) == grade.Verdict("Capstone", grade.FAILED, "request 0 differs")
    failed = verdict(cell(other), "Check exercise 3", "cell 4 raised X", 2)
    assert failed.label == "Check exercise 3" and "an earlier cell failed first" in failed.message
    # What is not the check's own mark, of this run, for every check the cell calls: not checked.
    for outputs in ([printed], [_mark("check_share", "another run")], []):
        unchecked = verdict(cell(*outputs), "Check exercise 2")
        assert unchecked.status == grade.NOT_CHECKED, outputs
        assert "`check_share` of the course did not run" in unchecked.message
    both = "checks.check_share(X)\nchecks.check_constant_share(X)"
    one_of_two = verdict(cell(_mark("check_share", "n0nce"), source=both))
    assert one_of_two.status == grade.NOT_CHECKED and "check_constant_share" in one_of_two.message
    none = verdict(cell(source="pass"))
    assert none.status == grade.NOT_CHECKED and "it ran no check" in none.message


def _notebook(path, *cells, checks=()):
    """A notebook of code `cells`; those at the indices in `checks` tagged `check`."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    for i in checks:
        nb.cells[i].metadata["tags"] = ["check"]
    nbformat.write(nb, path)
    return path


def test_only_a_check_of_the_course_that_ran_passes(tmp_path):
    """Commented out, redefined, printed, or a learner's function calling `passed`: not checked;
    the course's own check, run in the graded kernel, passed."""
    stub = "class Pool:\n    def free_pages(self):\n        raise NotImplementedError"
    own = "from paged_kv.course.checks.failures import passed\n\n\ndef check_free_pages(cls):\n"
    path = _notebook(
        tmp_path / "nb.ipynb",
        stub,
        "# checks.check_free_pages(Pool)",
        "def check_free_pages(*args):\n    pass\n\n\ncheck_free_pages(Pool)",
        "print('✅ Exercise 3 (free_pages): free pages right on 150 random pools')",
        own + "    passed('fine')\n\n\ncheck_free_pages(Pool)",
        "from paged_kv import BlockPool\nfrom paged_kv.course import checks\n\n"
        "checks.check_allocate(BlockPool)",
        checks=range(1, 6),
    )
    result = grade.grade_notebook(path)
    assert [v.status for v in result.verdicts] == [grade.NOT_CHECKED] * 4 + [grade.PASSED]
    assert not result.ok and not result.errors and not result.stopped
    assert "`check_free_pages` of the course did not run" in result.verdicts[0].message
    assert result.verdicts[4].label == "Exercise 1 (allocate)"


def test_a_notebook_that_cannot_be_graded_is_reported_and_the_next_is_graded(
    tmp_path, monkeypatch, capsys
):
    """A folder, a missing file, a broken file, a cell past the timeout and a dead kernel are
    each that notebook's report; the notebooks after them are graded, the summary written."""
    (folder := tmp_path / "1_folder.ipynb").mkdir()
    (broken := tmp_path / "3_broken.ipynb").write_text("{not json")
    (not_a_notebook := tmp_path / "4_list.ipynb").write_text(json.dumps([1, 2]))
    exits = _notebook(tmp_path / "5_exits.ipynb", "import os\n\nos._exit(1)", "1", checks=[1])
    slow = _notebook(tmp_path / "6_slow.ipynb", "import time\n\ntime.sleep(60)", "1", checks=[1])
    paths = [folder, tmp_path / "2_missing.ipynb", broken, not_a_notebook, slow, exits]
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert grade.main([*map(str, paths), "--timeout", "2"]) == 1
    report = capsys.readouterr().out
    said = {
        folder: "it is a folder, not a notebook",
        paths[1]: "there is no such file",
        broken: "it is not a valid notebook (NotJSONError",
        not_a_notebook: "it is not a valid notebook",
        slow: "cell 0 was still running after the timeout of 2 s",
        exits: "the kernel died in cell 0",
    }
    for path, why in said.items():
        assert f"{path}  (" in report and f"❌ not graded: {why}" in report, why
    assert report.count("      not graded: ") == 2  # the check cells after the timeout, the death
    assert "6 notebook(s) not graded" in report
    assert "6 notebook(s) not graded" in summary.read_text()


CHECK = "from paged_kv import BlockPool\nfrom paged_kv.course import checks\n\n"
CHECK += "checks.check_allocate(BlockPool)"  # a check of the course that passes


@pytest.mark.parametrize("cells", [[], ["x = 1"]], ids=["empty", "checks deleted"])
def test_a_notebook_without_checks_is_reported_and_fails_the_run(tmp_path, capsys, cells):
    """An emptied notebook, or one whose check cells were deleted, grades nothing: it must not
    turn a CI job green."""
    passing = _notebook(tmp_path / "1_passing.ipynb", CHECK, checks=[0])
    bare = _notebook(tmp_path / "2_bare.ipynb", *cells)
    assert grade.main([str(passing), str(bare)]) == 1
    report = capsys.readouterr().out
    assert f"{bare}  (" in report and "❌ no checks: no cell is tagged `check`" in report
    assert report.count("❌ no checks") == 1  # the notebook with its check is graded as usual
    assert "Total: 1 passed, 0 not done, 0 not checked, 0 failed" in report
    assert report.rstrip().endswith(", 1 notebook(s) without checks")


def test_the_command_explains_itself_and_refuses_what_is_not_there(tmp_path, capsys, monkeypatch):
    from paged_kv.course.__main__ import main

    assert main(["--help"]) == 0 and "grade" in capsys.readouterr().out
    assert main(["frobnicate"]) == 2
    monkeypatch.chdir(tmp_path)  # no exercises/ here
    with pytest.raises(SystemExit):
        grade.main([])


def test_the_grader_keeps_the_learners_parts_beside_their_notebooks(tmp_path, monkeypatch):
    """Run as a learner runs it (no PAGED_KV_PARTS, in their checkout), the grader's parts are
    theirs: a chapter's notebook saves into `exercises/my_paged_kv/`, and a later one loads it."""
    saving = (
        "from paged_kv.course import parts\n\n\ndef mine(t, b, salt=None):\n    return 'mine'\n"
    )
    loading = "from paged_kv.course import parts\n\nfound = parts.load('block_hasher')\n"
    loading += "assert found([], 4) == 'mine'"  # (an error: the run would not be ok)
    (tmp_path / "exercises").mkdir()
    saved = [saving, "parts.save(block_hasher=mine)", CHECK]
    _notebook(tmp_path / "exercises" / "01_save_exercises.ipynb", *saved, checks=[2])
    _notebook(tmp_path / "exercises" / "02_load_exercises.ipynb", loading, CHECK, checks=[1])
    monkeypatch.delenv("PAGED_KV_PARTS")
    monkeypatch.chdir(tmp_path)
    assert grade.main([]) == 0
    saved = tmp_path / "exercises" / "my_paged_kv" / "block_hasher.py"
    assert saved.exists() and "return 'mine'" in saved.read_text()
