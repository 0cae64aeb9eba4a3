"""tools/mutation_test.py: the reviewed list of equivalent mutants, and the run's schedule (with
a fake test runner: the real pytest runs are exercised by running the tool itself)."""

import json
import queue
import tempfile
import threading
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


def test_equivalents_are_not_run_and_baselines_run_beside_other_modules_mutants(monkeypatch):
    """Each module's baseline runs before its mutants (their timeout comes from it) and is
    queued ahead of the previous module's mutants; listed equivalents are never run."""
    calls, lock = [], threading.Lock()
    second_baseline = threading.Event()
    waited_in_vain = []  # first's mutants that found no second baseline beside them

    def fake_run_tests(checkout, tests, timeout, keyword=None):
        mutated = (checkout / "toy.py").read_text() != TOY
        with lock:
            calls.append((tests[0], mutated))
        if (tests[0], mutated) == ("second", False):
            second_baseline.set()
        if (tests[0], mutated) == ("first", True) and not second_baseline.wait(timeout=10):
            waited_in_vain.append(tests[0])  # both workers were busy with first's mutants
        return ("failed" if mutated else "passed"), 0.01

    monkeypatch.setattr(mt, "run_tests", fake_run_tests)
    checkouts: queue.Queue[Path] = queue.Queue()
    runs = []
    for name in ("first", "second", "third"):
        mutants = toy_mutants()
        equivalent = [(m, entry(m.scope)) for m in mutants if entry(m.scope).matches(m)]
        skip = {m for m, _ in equivalent}
        runs.append(
            mt.ModuleRun(
                "toy.py",
                TOY,
                [m for m in mutants if m not in skip],
                equivalent,
                len(mutants),
                (name,),
                None,
            )
        )
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(2):
            copy = Path(tmp) / f"copy{j}"
            copy.mkdir()
            (copy / "toy.py").write_text(TOY)
            checkouts.put(copy)
        mt.run_all(runs, checkouts, 2, 0.0)
    # Thread timing decides the order of the calls; what must hold whatever it is: every
    # baseline runs once, and the next module's baseline runs while the first's mutants do.
    assert sorted(name for name, mutated in calls if not mutated) == ["first", "second", "third"]
    assert not waited_in_vain, "the next baseline runs alongside the previous module's mutants"
    for run in runs:
        first_mutant = next(i for i, c in enumerate(calls) if c == (run.tests[0], True))
        assert calls.index((run.tests[0], False)) < first_mutant
        entry_ = run.entry()
        assert entry_["equivalent"] == 2 and entry_["mutants_run"] == len(toy_mutants()) - 2
        assert entry_["killed"] == entry_["mutants_run"] and entry_["score"] == 1.0
    assert sum(1 for _, mutated in calls if mutated) == 3 * (len(toy_mutants()) - 2)


@pytest.mark.parametrize(
    ("outcomes", "runs_mutants"), [(["failed", "passed"], True), (["failed", "failed"], False)]
)
def test_a_baseline_gets_one_retry_before_its_module_is_skipped(
    monkeypatch, tmp_path, outcomes, runs_mutants
):
    """The other copy's run may collide with a baseline (ports, servers): a second failure
    skips the module, a pass on the retry runs it and says the first try failed."""
    baselines = iter(outcomes)

    def fake_run_tests(checkout, tests, timeout, keyword=None):
        if (checkout / "toy.py").read_text() == TOY:
            return next(baselines), 0.01
        return "failed", 0.01

    monkeypatch.setattr(mt, "run_tests", fake_run_tests)
    (tmp_path / "toy.py").write_text(TOY)
    checkouts: queue.Queue[Path] = queue.Queue()
    checkouts.put(tmp_path)
    mutants = toy_mutants()
    run = mt.ModuleRun("toy.py", TOY, mutants, [], len(mutants), ("t",), None)
    mt.run_all([run], checkouts, 1, 0.0)
    entry = run.entry()
    assert entry["baseline_first_try"] == "failed"
    assert ("error" not in entry) is runs_mutants
    assert entry["mutants_run"] == (len(mutants) if runs_mutants else 0)
