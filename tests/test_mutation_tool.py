"""tools/mutation_test.py: its operators, exclusions and sampling, on a toy module, and one
real traced run of the toy's tests (the whole driver is exercised by running the tool itself)."""

import ast
import json
import subprocess
import sys

import mutation_test as mt  # tests/conftest.py puts tools/ on sys.path

TOY = '''"""A toy module."""

LIMIT: int = 3


def clamp(x: int, low: int = 0) -> int:
    """Docstrings are not mutated."""
    if x < low and x != 7:
        x = low + 1
    while x > LIMIT:
        x -= 1
    return x


def message(n):
    return f"{n + 1} items"  # f-strings are left alone


def skipped(n):
    return n + 1  # pragma: no mutate


class Box:
    def __repr__(self):
        return "Box" + str(1)
'''


def mutants():
    return mt.enumerate_mutants("toy.py", TOY)


def described(m):
    return (m.line, m.kind, m.original, m.mutation)


def test_each_operator_yields_its_mutants():
    found = {described(m) for m in mutants()}
    expected = {
        (8, "compare", "x < low", "x <= low"),
        (8, "compare", "x != 7", "x == 7"),
        (8, "boolop", "x < low and x != 7", "x < low or x != 7"),
        (8, "negate", "x < low and x != 7", "not (x < low and x != 7)"),
        (9, "arith", "low + 1", "low - 1"),
        (9, "constant", "1", "2"),
        (9, "constant", "1", "0"),
        (9, "remove", "x = low + 1", "pass"),
        (10, "compare", "x > LIMIT", "x >= LIMIT"),
        (11, "arith", "x -= 1", "x += 1"),
        (12, "return", "return x", "return None"),
        (12, "remove", "return x", "pass"),
        (8, "constant", "7", "8"),
        (8, "constant", "7", "6"),
        (3, "constant", "3", "4"),  # module constants and defaults are behaviour too
        (6, "constant", "0", "1"),
    }
    assert expected <= found


def test_docstrings_annotations_fstrings_pragmas_and_repr_are_left_alone():
    lines = {m.line for m in mutants()}
    assert not lines & {1, 7}  # docstrings
    assert 16 in lines and all(m.kind in ("remove", "return") for m in mutants() if m.line == 16)
    assert 20 not in lines  # pragma: no mutate
    assert 25 not in lines  # __repr__


def test_every_mutant_compiles_and_changes_the_module():
    base = ast.unparse(ast.parse(TOY))
    for m in mutants():
        source = mt.mutated_source(TOY, m)
        compile(source, "toy.py", "exec")
        assert source.strip() != base.strip(), m


def test_the_sample_is_fixed_by_the_seed_and_sorted_by_line():
    every = mutants()
    first = mt.sample(every, 5, 0, "toy.py")
    assert first == mt.sample(every, 5, 0, "toy.py")
    assert first != mt.sample(every, 5, 1, "toy.py")
    assert [m.line for m in first] == sorted(m.line for m in first)
    assert mt.sample(every, None, 0, "toy.py") == every


def test_every_target_module_has_tests_mapped():
    modules = mt.target_modules(mt.ROOT, mt.tracked_files())
    assert "paged_kv/cache/manager.py" in modules
    assert "paged_kv/serving/scheduler.py" in modules
    for module in modules:
        tests = mt.tests_for(module)
        assert tests and all((mt.ROOT / t.split("::")[0]).exists() for t in tests), module


def test_a_rerun_of_some_modules_is_saved_over_the_full_run_it_re_measures():
    entry = {"mutants_run": 2, "killed": 2}
    saved = {
        "commit": "a",
        "elapsed_s": 900,
        "score": 0.75,
        "skipped": [],
        "modules": {"m1": {"mutants_run": 2, "killed": 1}, "m2": entry},
        "survivors": [{"module": "m1", "line": 3}],
        "equivalents": [{"module": "m2", "line": 9}],
    }
    rerun = {
        "commit": "b",
        "elapsed_s": 30,
        "modules": {"m1": {"mutants_run": 1, "killed": 1}},
        "survivors": [],
        "equivalents": [{"module": "m1", "line": 3}],
    }
    merged = mt.merged_into(saved, rerun)
    assert merged["score"] == 1.0 and merged["modules"]["m2"] == entry
    assert merged["survivors"] == [] and len(merged["equivalents"]) == 2
    assert (merged["commit"], merged["elapsed_s"]) == ("a", 900)
    assert merged["reruns"] == [
        {
            "modules": ["m1"],
            "commit": "b",
            "source": None,
            "elapsed_s": 30,
            "cpu_s": None,
            "load_average_1min": None,
        }
    ]


def test_every_test_node_the_tool_runs_still_collects():
    """A node id whose test was renamed or removed fails the module's baseline (the scheduler
    was skipped so once); pytest collects every one the map names."""
    nodes = sorted({t for tests in mt.TESTS.values() for t in tests if "::" in t})
    args = ["--collect-only", "-q", "-p", "no:nbval", "-p", "no:xdist", "-o", "addopts="]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *args, *nodes],
        cwd=mt.ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:]


def test_a_mutants_lines_are_its_statements_or_a_compound_statements_header():
    by_kind = {(m.kind, m.original): m.lines for m in mutants()}
    assert by_kind[("compare", "x < low")] == (8,)  # the if's header, not its body
    assert by_kind[("remove", "x = low + 1")] == (9,)
    assert by_kind[("arith", "x -= 1")] == (11,)


def test_a_traced_run_says_which_test_ran_each_line(tmp_path):
    """The real run: a prewarmed child runs pytest under coverage.py, one context a test, and
    writes each test's time and outcome and the tests that ran each line ("" at import)."""
    (tmp_path / "toy.py").write_text(TOY)
    (tmp_path / "test_toy.py").write_text(
        "from toy import clamp\n\n"
        "def test_low():\n    assert clamp(-5) == 1\n\n"
        "def test_high():\n    assert clamp(9) == 3\n\n"
        "def test_fails():\n    assert clamp(1) == 2\n"
    )
    out = tmp_path / "trace.json"
    trace = {"include": [str(tmp_path / "toy.py")], "out": str(out)}
    try:
        outcome, _ = mt.run_tests(tmp_path, ["test_toy.py"], 120, trace=trace)
        again, _ = mt.run_tests(tmp_path, ["test_toy.py::test_low"], 120)  # untraced

    finally:
        mt.kill_live_runs()
    traced = json.loads(out.read_text())
    assert (outcome, again) == ("failed", "passed")
    assert {t: o for t, (_, o) in traced["tests"].items()} == {
        "test_toy.py::test_low": "passed",
        "test_toy.py::test_high": "passed",
        "test_toy.py::test_fails": "failed",
    }
    lines = traced["lines"]["toy.py"]
    assert lines["9"] == ["test_toy.py::test_low"]  # x = low + 1
    assert lines["11"] == ["test_toy.py::test_high"]  # x -= 1
    assert "" in lines["6"] and "" not in lines["8"]  # the def runs at import, its body in tests
