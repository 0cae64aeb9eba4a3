"""tools/mutation_test.py: the reviewed list of equivalent mutants, and the run's schedule (with
a fake test runner: the real pytest runs are exercised by running the tool itself)."""

import json
import queue
from pathlib import Path

import mutation_test as mt  # tests/conftest.py puts tools/ on sys.path
import pytest

TOY = '''"""A toy module."""


class Box:
    def put(self, x):
        self.items.append(x)
        return x

    def take(self, x):
        self.items.append(x)
        return x - 1
'''


def toy_mutants():
    return mt.enumerate_mutants("toy.py", TOY)


def entry(scope, **changes):
    fields = dict(
        module="toy.py",
        scope=scope,
        line="self.items.append(x)",
        kind="remove",
        original="self.items.append(x)",
        mutation="pass",
        reason="a test of the list",
    )
    return mt.Equivalent(**{**fields, **changes})


def test_mutants_know_the_class_and_function_they_sit_in():
    scopes = {(m.line, m.scope) for m in toy_mutants()}
    assert (6, "Box.put") in scopes and (10, "Box.take") in scopes


def test_an_entry_names_one_mutant_by_scope_line_and_mutation_not_by_line_number():
    listed = entry("Box.put")
    matched = [m for m in toy_mutants() if listed.matches(m)]
    assert [(m.line, m.scope) for m in matched] == [(6, "Box.put")]  # not the same line in take
    moved = mt.enumerate_mutants("toy.py", TOY.replace("class Box:", "\n\nclass Box:"))
    assert [m.line for m in moved if listed.matches(m)] == [8]  # it follows the code


def test_a_listed_entry_that_matches_no_mutant_stops_the_run():
    every = {"toy.py": toy_mutants()}
    mt.check_equivalents([entry("Box.put")], every, all_targets=True)  # matches: no error
    for stale in (
        entry("Box.gone"),
        entry("Box.put", mutation="x"),
        entry("Box.put", module="elsewhere.py"),
    ):
        with pytest.raises(SystemExit, match="match no mutant"):
            mt.check_equivalents([stale], every, all_targets=True)
    # --modules without elsewhere.py: its entries are not checked
    mt.check_equivalents([entry("Box.put", module="elsewhere.py")], every, all_targets=False)


def test_the_list_refuses_entries_without_a_reason(tmp_path):
    path = tmp_path / "equivalents.json"
    bad = {**entry("Box.put").__dict__, "reason": " "}
    path.write_text(json.dumps({"equivalents": [bad]}))
    with pytest.raises(SystemExit, match="non-empty"):
        mt.load_equivalents(path)


def test_every_listed_equivalent_still_matches_a_mutant_of_its_module():
    """The shipped list, against the modules as they are: an edit under an entry shows here
    (and stops the tool) until someone re-checks its reason."""
    listed = mt.load_equivalents()
    assert listed and all(e.reason.strip() for e in listed)
    modules = {e.module for e in listed}
    every = {m: mt.enumerate_mutants(m, (mt.ROOT / m).read_text()) for m in modules}
    mt.check_equivalents(listed, every, all_targets=False)
    targets = set(mt.target_modules(mt.ROOT))
    assert modules <= targets


def fake_tests(runs, seconds, lines, outcome_of, baseline=("passed",)):
    """A stand-in for `run_tests`: a traced run writes `seconds` (test -> its time) and
    `lines` (toy.py's line -> the tests that ran it) with the outcome `baseline` gives in
    turn; a run of a mutant appends (tests, the mutant's line) to `runs` and returns
    outcome_of(tests)."""
    baselines = iter(baseline)
    line_of = {mt.mutated_source(TOY, m): m.line for m in toy_mutants()}

    def run_tests(checkout, tests, timeout, keyword=None, trace=None):
        source = (checkout / "toy.py").read_text()
        if trace is not None:
            outcome = next(baselines)
            Path(trace["out"]).write_text(
                json.dumps(
                    {
                        "tests": {
                            t: [s, outcome]
                            for t, s in seconds.items()
                            if t in tests or t.split("::")[0] in tests
                        },
                        "lines": {"toy.py": lines},
                    }
                )
            )
            return outcome, 0.0
        assert source != TOY, "a module's tests run unmutated only once, traced"
        runs.append((list(tests), line_of[source]))
        return outcome_of(tests), 0.01

    return run_tests


def toy_run(tmp_path, mutants=None, equivalents=()):
    (tmp_path / "test_toy.py").write_text("")
    (tmp_path / "toy.py").write_text(TOY)
    checkouts: queue.Queue[Path] = queue.Queue()
    checkouts.put(tmp_path)
    mutants = toy_mutants() if mutants is None else mutants
    run = mt.ModuleRun("toy.py", TOY, mutants, list(equivalents), 7, ("test_toy.py",), None)
    return run, checkouts


def test_a_mutant_runs_first_the_tests_that_ran_its_lines_then_its_whole_list(
    monkeypatch, tmp_path
):
    """The tests that ran a mutant's line go first, fastest first; when they all pass (or
    none ran it), the whole list runs before it counts as a survivor. Lines run outside
    any test (an import: context "") run the whole list at once; equivalents never run."""
    every = toy_mutants()
    listed = [(m, entry(m.scope)) for m in every if entry(m.scope).matches(m)]
    mutants = [m for m in every if m not in {m for m, _ in listed}]
    runs = []
    seconds = {"test_toy.py::put": 0.5, "test_toy.py::take": 0.1, "test_toy.py::slow": 2.0}
    lines = {"5": [""], "7": ["test_toy.py::put"], "11": ["test_toy.py::slow", "test_toy.py::take"]}
    # put's tests miss its mutants (the whole list kills them); take's kill theirs at once
    kills = lambda tests: "passed" if tests == ["test_toy.py::put"] else "failed"  # noqa: E731
    monkeypatch.setattr(mt, "run_tests", fake_tests(runs, seconds, lines, kills))
    run, checkouts = toy_run(tmp_path, mutants, listed)
    mt.run_all([run], checkouts, 1, 0.0)
    assert sorted({line for _, line in runs}) == [7, 11], "the equivalents (lines 6, 10) wait"
    assert ["test_toy.py::take", "test_toy.py::slow"] in [t for t, line in runs if line == 11]
    assert all(t == ["test_toy.py::take", "test_toy.py::slow"] for t, ln in runs if ln == 11)
    on_7 = [t for t, line in runs if line == 7]
    assert on_7 == [["test_toy.py::put"], ["test_toy.py"]] * (len(on_7) // 2)
    report = run.entry()
    assert report["equivalent"] == 2 and report["killed"] == report["mutants_run"] == 7
    assert report["whole_list_runs"] == len(on_7) // 2 == 2
    assert report["baseline_s"] == 2.6 and report["timeout_s"] == 20.0


@pytest.mark.parametrize(
    ("baseline", "runs_mutants"), [(["failed", "passed"], True), (["failed", "failed"], False)]
)
def test_a_failing_baseline_test_gets_one_retry_before_its_module_is_skipped(
    monkeypatch, tmp_path, baseline, runs_mutants
):
    """The other copy's run may collide with a baseline (ports, servers): the tests that
    failed run once more; a second failure skips their module, a pass runs it and says the
    first try failed."""
    runs = []
    seconds = {"test_toy.py::put": 0.5}
    lines = {str(n): ["test_toy.py::put"] for n in range(5, 12)}
    fake = fake_tests(runs, seconds, lines, lambda tests: "failed", baseline)
    monkeypatch.setattr(mt, "run_tests", fake)
    run, checkouts = toy_run(tmp_path)
    mt.run_all([run], checkouts, 1, 0.0)
    report = run.entry()
    assert report["baseline_first_try"] == "failed"
    assert ("error" not in report) is runs_mutants
    assert report["mutants_run"] == len(runs) == (len(toy_mutants()) if runs_mutants else 0)
