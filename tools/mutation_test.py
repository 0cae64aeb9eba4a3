"""Mutation testing for paged_kv: do the tests notice when the code is wrong?

For each target module, make small wrong versions (mutants) one at a time, run that module's
tests against each, and count a mutant *killed* when a test fails (or the run times out) and
*survived* when every test still passes. A survivor is a behaviour no test pins: write the
test, or explain why the mutant is equivalent (same behaviour) or the code dead.

    python tools/mutation_test.py                       # every target at HEAD, print results
    python tools/mutation_test.py --modules manager scheduler --max-per-module 40
    python tools/mutation_test.py --jobs 2 --save       # write bench/results/mutation.json
    python tools/mutation_test.py --modules hashing --list    # show the mutants, run nothing
    python tools/mutation_test.py --worktree --modules manager  # your uncommitted edits

Why a small driver on Python's `ast` rather than mutmut: the operators are exactly the ones
listed below and nothing else; mutants are enumerated in a fixed order and sampled with a
fixed seed, so two runs on the same commit test the same mutants; each mutant runs in its own
throwaway copy of the repository (never in the working tree, which others edit while this
runs), with only the tests mapped to its module; and there is no extra dependency, cache
directory or configuration format to keep working. The price: the mutated module is written
back with `ast.unparse`, so comments and formatting are lost in the copy (line numbers in the
report are those of the original source).

What is tested: by default the commit HEAD (`git archive`), so colleagues' half-done edits in
a shared working tree can neither fail the baseline nor make results unreproducible; the
report names the commit. `--worktree` tests the working tree's tracked modules instead.

Operators (each applied to one site at a time):
  compare     < <-> <=, > <-> >=, == <-> !=, is <-> is not, in <-> not in
  arith       + <-> - (binary and augmented; not on str/bytes literals)
  constant    an int constant n -> n + 1 and n - 1 (not bools, docstrings, annotations,
              f-strings)
  boolop      and <-> or
  negate      the condition of if / while / a conditional expression -> not (condition)
  remove      a statement inside a function body -> pass (docstrings excepted)
  return      return x -> return None

Skipped: `__init__.py` files (re-exports), `__repr__` methods (text for humans), annotations,
and any line carrying the comment `pragma: no mutate`.

Running: `pytest -x -q -p no:cacheprovider --hypothesis-seed=0` (without pyproject's nbval
options, ~3 s of imports per run) over the module's tests from TESTS, fast and specific files
first, with PYTHONDONTWRITEBYTECODE (a mutant of the same size written within the same second
must not reuse a stale .pyc). Each module's tests first run unmutated in the copy; a module
whose baseline fails is reported and skipped. The per-mutant timeout is
`max(--timeout, 3 x that baseline)`, so a busy machine does not count correct mutants as
killed; a timeout counts as killed (an infinite loop is a detected fault).

Cost: a run costs ~4 s of CPU to start plus the tests up to the first failure; a survivor
runs them all. Measured on 2 mostly idle cores, --jobs 2: 15 mutants per module (248 over
17 modules) took 19 minutes; the default, 12 per module, takes about 15. A busy machine
slows it in proportion; the run prints its elapsed time.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import fnmatch
import hashlib
import io
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "mutation.json"

# What gets mutated: glob patterns relative to the repository root. Add a layer by adding its
# pattern here (e.g. "paged_kv/tiers/*.py") and its tests to TESTS below.
TARGETS = (
    "paged_kv/cache/*.py",
    "paged_kv/serving/scheduler.py",
)
SKIP_FILES = ("__init__.py",)
SKIP_FUNCTIONS = frozenset({"__repr__"})

# Tests that pin each module, fastest and most specific first (pytest -x stops at the first
# failure). A module without its own entry uses the entry of the longest matching prefix.
# The one end-to-end test of a loader (chapter 07's tiers) under evictions and preemptions.
_TIERED_ENGINE = (
    "tests/test_tiers_local.py::"
    "test_engine_with_tiers_gives_the_same_tokens_through_evictions_and_preemptions"
)
_CACHE_CORE = (
    "tests/test_argument_edges.py",
    "tests/test_out_of_blocks_available.py",
    "tests/test_stats_recount.py",
    "tests/test_sequence_ownership.py",
    "tests/test_salt_isolation.py",
    "tests/test_manager.py",
    "tests/test_prefix_caching.py",
    "tests/test_token_zero.py",
    "tests/test_block_pool.py",
    "tests/test_stateful.py::TestManager",
    "tests/test_radix_cache.py",
    "tests/test_learner_hooks.py",
    _TIERED_ENGINE,
)
_POOL_MACHINE = "tests/test_stateful.py::TestPool"
_MANAGER_MACHINE = "tests/test_stateful.py::TestManager"
TESTS: dict[str, tuple[str, ...]] = {
    "paged_kv/cache/block_pool.py": (
        "tests/test_block_pool.py",
        "tests/test_argument_edges.py",
        "tests/test_out_of_blocks_available.py",
        "tests/test_stats_recount.py",
        "tests/test_manager.py",
        "tests/test_prefix_caching.py",
        _POOL_MACHINE,
    ),
    "paged_kv/cache/block_table.py": (
        "tests/test_block_table.py",
        "tests/test_manager.py",
        "tests/test_stats_recount.py",
        "tests/test_prefix_caching.py",
        _MANAGER_MACHINE,
    ),
    "paged_kv/cache/eviction.py": (
        "tests/test_eviction.py",
        "tests/test_block_pool.py",
        "tests/test_prefix_caching.py",
        "tests/test_argument_edges.py",
        _POOL_MACHINE,
    ),
    "paged_kv/cache/arc.py": (
        "tests/test_eviction_modern.py",
        "tests/test_eviction.py",
        "tests/test_block_pool.py",
    ),
    "paged_kv/cache/history_lfu.py": (
        "tests/test_eviction_history.py",
        "tests/test_eviction.py",
        "tests/test_block_pool.py",
    ),
    "paged_kv/cache/s3fifo.py": (
        "tests/test_eviction_modern.py",
        "tests/test_eviction.py",
        "tests/test_block_pool.py",
    ),
    "paged_kv/cache/tinylfu.py": (
        "tests/test_eviction_modern.py",
        "tests/test_eviction.py",
        "tests/test_block_pool.py",
    ),
    "paged_kv/cache/free_lists.py": (
        "tests/test_block_pool.py",
        "tests/test_argument_edges.py",
        _POOL_MACHINE,
    ),
    "paged_kv/cache/hashing.py": (
        "tests/test_hash_format.py",
        "tests/test_salt_isolation.py",
        "tests/test_prefix_caching.py",
        "tests/test_token_zero.py",
    ),
    "paged_kv/cache/hit_metrics.py": (
        "tests/test_prefix_caching.py",
        "tests/test_argument_edges.py",
    ),
    "paged_kv/cache/manager.py": _CACHE_CORE,
    "paged_kv/cache/prefix_cache.py": (
        "tests/test_prefix_caching.py",
        "tests/test_manager.py",
        _MANAGER_MACHINE,
    ),
    "paged_kv/cache/sequence.py": (
        "tests/test_sequence_ownership.py",
        "tests/test_prefix_caching.py",
        "tests/test_token_zero.py",
        "tests/test_manager.py",
        _MANAGER_MACHINE,
    ),
    "paged_kv/cache/snapshot.py": (
        "tests/test_block_pool.py",
        "tests/test_manager.py",
        "tests/test_replay.py",
    ),
    "paged_kv/cache/caching_pool.py": _CACHE_CORE,
    "paged_kv/cache/radix_cache.py": (
        "tests/test_radix_cache.py",
        "tests/test_salt_isolation.py",
        "tests/test_prefix_caching.py",
        "tests/test_manager.py",
    ),
    "paged_kv/cache/usage.py": (
        "tests/test_stats_recount.py",
        "tests/test_argument_edges.py",
        "tests/test_manager.py",
        "tests/test_prefix_caching.py",
    ),
    "paged_kv/cache/": _CACHE_CORE,  # any other cache module
    "paged_kv/serving/scheduler.py": (
        "tests/test_scheduler_behaviour.py",
        "tests/test_serving_argument_edges.py",
        "tests/test_token_zero.py",
        "tests/test_checks.py::test_the_library_scheduler_passes_the_engine_checks",
        "tests/test_scheduling_lpm.py",
        "tests/test_engine.py",
        _TIERED_ENGINE,
    ),
}

# A pytest -k expression per module, to leave out the costly cases that do not concern it:
# the scheduler does not care which eviction policy the engine's cache uses.
KEYWORDS: dict[str, str] = {
    "paged_kv/serving/scheduler.py": "not memory_pressure or lru",
}

# Copied into each throwaway checkout: what the tests import and read.
COPY = ("paged_kv", "tests", "tools", "pyproject.toml")
# pyproject's addopts are for notebooks (nbval); dropping them saves ~3 s of imports per run.
PYTEST_ARGS = (
    *("-x", "-q", "-p", "no:cacheprovider", "-p", "no:nbval", "-o", "addopts="),
    "--hypothesis-seed=0",
)


# -- mutants ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mutant:
    module: str  # path relative to the repository root
    index: int  # the node's position in ast.walk order of the parsed module
    kind: str
    arg: str  # which variant at that node (operator position, +1/-1, ...)
    line: int
    original: str
    mutation: str
    context: str  # the original source line

    @property
    def key(self) -> str:
        return f"{self.module}:{self.line}:{self.kind}:{self.index}:{self.arg}"


_COMPARE_SWAP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITH_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add}
_BOOL_SWAP = {ast.And: ast.Or, ast.Or: ast.And}


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


def _excluded_nodes(tree: ast.Module, lines: list[str]) -> set[int]:
    """ids of nodes never mutated: annotations, f-strings, docstrings, skipped functions and
    lines marked `pragma: no mutate` (with everything beneath them)."""
    excluded: set[int] = set()

    def exclude(node: ast.AST | None) -> None:
        if node is not None:
            excluded.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name in SKIP_FUNCTIONS:
                exclude(node)
            exclude(node.returns)
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                exclude(a.annotation)
            for a in (node.args.vararg, node.args.kwarg):
                if a is not None:
                    exclude(a.annotation)
        elif isinstance(node, ast.AnnAssign):
            exclude(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            exclude(node)
        scopes = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        if isinstance(node, scopes) and node.body and _is_docstring(node.body[0]):
            exclude(node.body[0])
        lineno = getattr(node, "lineno", None)
        if lineno is not None and "pragma: no mutate" in lines[lineno - 1]:
            exclude(node)
    return excluded


def _function_statements(tree: ast.Module) -> set[int]:
    """ids of statements that lie inside a function body, at any depth."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt) if isinstance(n, ast.stmt))
    return inside


def _segment(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.unparse(node)
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."


def _sites(tree: ast.Module, source: str) -> Iterator[tuple[int, ast.AST, str, str]]:
    """(index, node, kind, arg) for every mutation site, in ast.walk order."""
    lines = source.splitlines()
    excluded = _excluded_nodes(tree, lines)
    in_function = _function_statements(tree)
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in excluded:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE_SWAP:
                    yield index, node, "compare", str(i)
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAP:
            if not (_is_text(node.left) or _is_text(node.right)):
                yield index, node, "arith", ""
        elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH_SWAP:
            if not _is_text(node.value):
                yield index, node, "arith", ""
        elif isinstance(node, ast.BoolOp):
            yield index, node, "boolop", ""
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int)
            and not isinstance(node.value, bool)
        ):
            yield index, node, "constant", "+1"
            yield index, node, "constant", "-1"
        if isinstance(node, ast.If | ast.While | ast.IfExp):
            yield index, node, "negate", ""
        returns_none = isinstance(node, ast.Return) and (
            node.value is None
            or (isinstance(node.value, ast.Constant) and node.value.value is None)
        )
        if isinstance(node, ast.Return) and not returns_none:
            yield index, node, "return", ""
        if (
            isinstance(node, ast.stmt)
            and id(node) in in_function
            and not isinstance(node, ast.Pass | ast.Global | ast.Nonlocal)
            and not _is_docstring(node)
        ):
            yield index, node, "remove", ""


def _mutate(tree: ast.Module, index: int, kind: str, arg: str) -> tuple[ast.AST, str]:
    """Apply one mutation in place; return the node now standing there and its new text."""
    nodes = list(ast.walk(tree))
    node = nodes[index]
    if kind == "compare":
        i = int(arg)
        node.ops[i] = _COMPARE_SWAP[type(node.ops[i])]()
    elif kind == "arith":
        node.op = _ARITH_SWAP[type(node.op)]()
    elif kind == "boolop":
        node.op = _BOOL_SWAP[type(node.op)]()
    elif kind == "constant":
        node.value = node.value + (1 if arg == "+1" else -1)
    elif kind == "negate":
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    elif kind == "return":
        node.value = ast.Constant(value=None)
    elif kind == "remove":
        for parent in nodes:
            for _field, value in ast.iter_fields(parent):
                if isinstance(value, list) and any(v is node for v in value):
                    position = next(i for i, v in enumerate(value) if v is node)
                    value[position] = ast.copy_location(ast.Pass(), node)
                    return value[position], "pass"
        raise AssertionError(f"no parent for statement {index}")
    else:
        raise ValueError(kind)
    ast.fix_missing_locations(tree)
    shown = node.test if kind == "negate" else node
    return node, " ".join(ast.unparse(shown).split())[:120]


def enumerate_mutants(module: str, source: str) -> list[Mutant]:
    tree = ast.parse(source)
    lines = source.splitlines()
    mutants = []
    for index, node, kind, arg in _sites(tree, source):
        shown = node.test if kind == "negate" else node
        line = lines[node.lineno - 1].strip()
        original = line if kind == "remove" else _segment(source, shown)
        _, mutation = _mutate(copy.deepcopy(tree), index, kind, arg)
        if kind == "return":
            mutation = "return None"
        mutants.append(
            Mutant(
                module,
                index,
                kind,
                arg,
                node.lineno,
                original,
                mutation,
                lines[node.lineno - 1].strip()[:120],
            )
        )
    return mutants


def mutated_source(source: str, mutant: Mutant) -> str:
    tree = ast.parse(source)
    _mutate(tree, mutant.index, mutant.kind, mutant.arg)
    return ast.unparse(tree) + "\n"


def sample(mutants: list[Mutant], limit: int | None, seed: int, module: str) -> list[Mutant]:
    if limit is None or len(mutants) <= limit:
        return mutants
    chosen = random.Random(f"{seed}:{module}").sample(mutants, limit)
    return sorted(chosen, key=lambda m: (m.line, m.index, m.kind, m.arg))


# -- running --------------------------------------------------------------------------------


def tracked_files() -> set[str] | None:
    """Files git tracks in the working tree (None without git)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "paged_kv"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return set(out.split())


def target_modules(checkout: Path, only: set[str] | None = None) -> list[str]:
    """Modules matching TARGETS in `checkout` (and in `only`, when given)."""
    found = []
    for pattern in TARGETS:
        for path in sorted(checkout.glob(pattern)):
            rel = path.relative_to(checkout).as_posix()
            if path.name in SKIP_FILES or rel in found:
                continue
            if only is None or rel in only:
                found.append(rel)
    return found


def tests_for(module: str) -> tuple[str, ...]:
    if module in TESTS:
        return TESTS[module]
    prefixes = [p for p in TESTS if p.endswith("/") and module.startswith(p)]
    if not prefixes:
        raise SystemExit(f"no tests mapped for {module}: add it to TESTS in {__file__}")
    return TESTS[max(prefixes, key=len)]


def select_modules(modules: list[str], wanted: list[str] | None) -> list[str]:
    if not wanted:
        return modules
    chosen = []
    for name in wanted:
        hits = [
            m
            for m in modules
            if m == name or Path(m).stem == name or fnmatch.fnmatch(m, name) or m.endswith(name)
        ]
        if not hits:
            raise SystemExit(f"--modules {name}: not one of {', '.join(modules)}")
        chosen += [m for m in hits if m not in chosen]
    return chosen


def export(dst: Path, rev: str | None) -> Path:
    """What the tests need, as of commit `rev` (git archive) or, with None, of the working tree.

    A commit is the default: colleagues' half-done edits in a shared working tree must not
    make the baseline fail or the results unreproducible."""
    dst.mkdir(parents=True)
    if rev is None:
        ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
        for item in COPY:
            src = ROOT / item
            if src.is_dir():
                shutil.copytree(src, dst / item, ignore=ignore)
            elif src.exists():
                shutil.copy2(src, dst / item)
        return dst
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, *COPY],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dst, filter="data")
        else:  # Python < 3.11.4; the archive is our own repository's
            tar.extractall(dst)
    return dst


_LIVE: set[subprocess.Popen] = set()  # test runs in flight, killed if the driver stops
_LIVE_LOCK = threading.Lock()


def _kill(proc: subprocess.Popen) -> None:
    """Kill a test run and whatever it started (it leads its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_tests(
    checkout: Path, tests: tuple[str, ...], timeout: float, keyword: str | None = None
) -> tuple[str, float]:
    """'passed', 'failed' or 'timeout', and the seconds it took."""
    shutil.rmtree(checkout / ".hypothesis", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
    existing = [t for t in tests if (checkout / t.split("::")[0]).exists()]
    select = ("-k", keyword) if keyword else ()
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *PYTEST_ARGS, *select, *existing],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return "timeout", time.perf_counter() - began
    except BaseException:  # the driver is stopping: take the run down with it
        _kill(proc)
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    return ("passed" if returncode == 0 else "failed"), time.perf_counter() - began


def kill_live_runs() -> None:
    with _LIVE_LOCK:
        running = list(_LIVE)
    for proc in running:
        _kill(proc)


def check_imports_from(checkout: Path) -> None:
    """The copy must import its own paged_kv, not the editable install of the working tree."""
    out = subprocess.run(
        [sys.executable, "-c", "import paged_kv; print(paged_kv.__file__)"],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not out.startswith(str(checkout)):
        raise SystemExit(f"the throwaway copy imports paged_kv from {out}, not from {checkout}")


def git_commit(rev: str) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_module(
    module: str,
    source: str,
    mutants: list[Mutant],
    checkouts: queue.Queue[Path],
    args: argparse.Namespace,
) -> tuple[dict, list[dict]]:
    """The module's baseline, then each mutant in a free checkout; its entry and survivors."""
    tests, keyword = tests_for(module), KEYWORDS.get(module)
    checkout = checkouts.get()
    outcome, baseline = run_tests(checkout, tests, 30 * args.timeout, keyword)
    checkouts.put(checkout)
    entry: dict = {
        "sha256": hashlib.sha256(source.encode()).hexdigest(),
        "tests": list(tests) + ([f"-k {keyword}"] if keyword else []),
        "mutants_run": 0,
        "baseline_s": round(baseline, 1),
    }
    if outcome != "passed":
        entry["error"] = f"the unmutated tests {outcome}; module skipped"
        return entry, []
    timeout = max(args.timeout, 3 * baseline)

    done = iter(range(1, len(mutants) + 1))

    def run_one(mutant: Mutant) -> tuple[Mutant, str, float]:
        checkout = checkouts.get()
        target = checkout / mutant.module
        try:
            target.write_text(mutated_source(source, mutant))
            outcome, seconds = run_tests(checkout, tests, timeout, keyword)
        finally:
            target.write_text(source)
            checkouts.put(checkout)
        verdict = {"passed": "SURVIVED", "failed": "killed", "timeout": "killed (timeout)"}
        print(
            f"  [{next(done)}/{len(mutants)}] {Path(module).name}:{mutant.line} {mutant.kind} "
            f"{verdict[outcome]} in {seconds:.0f} s: {mutant.original}  =>  {mutant.mutation}",
            flush=True,
        )
        return mutant, outcome, seconds

    counts = {"passed": 0, "failed": 0, "timeout": 0}
    survivors = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        try:
            results = list(pool.map(run_one, mutants))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            kill_live_runs()
            raise
        for mutant, outcome, _seconds in results:
            counts[outcome] += 1
            if outcome == "passed":
                survivors.append(
                    {
                        "module": module,
                        "line": mutant.line,
                        "kind": mutant.kind,
                        "original": mutant.original,
                        "mutation": mutant.mutation,
                        "context": mutant.context,
                    }
                )
    killed = counts["failed"] + counts["timeout"]
    entry.update(
        mutants_run=len(mutants),
        killed=killed,
        timeouts=counts["timeout"],
        survived=counts["passed"],
        score=round(killed / len(mutants), 3) if mutants else None,
        timeout_s=timeout,
    )
    return entry, survivors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--modules", nargs="+", help="paths, stems (manager) or globs; default: all targets"
    )
    parser.add_argument(
        "--max-per-module", type=int, default=12, help="sample at most this many (0: all)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-module sample")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (copies)")
    parser.add_argument("--timeout", type=float, default=60.0, help="cap per mutant, seconds")
    parser.add_argument(
        "--rev", default="HEAD", help="commit to test (default HEAD; see --worktree)"
    )
    parser.add_argument(
        "--worktree",
        action="store_true",
        help="test the working tree instead of a commit (tracked modules only)",
    )
    parser.add_argument(
        "--include-untracked",
        action="store_true",
        help="with --worktree, also mutate modules git does not track",
    )
    parser.add_argument("--save", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--list", action="store_true", help="list the sampled mutants and stop")
    args = parser.parse_args(argv)
    limit = args.max_per_module or None
    rev = None if args.worktree else args.rev
    commit = git_commit(args.rev) if rev else git_commit("HEAD")

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="paged_kv_mutation_") as tmp:
        pristine = export(Path(tmp) / "pristine", rev)
        only = tracked_files() if rev is None and not args.include_untracked else None
        plan: dict[str, tuple[str, list[Mutant], int]] = {}
        for module in select_modules(target_modules(pristine, only), args.modules):
            source = (pristine / module).read_text()
            every = enumerate_mutants(module, source)
            plan[module] = (source, sample(every, limit, args.seed, module), len(every))

        if args.list:
            for module, (_, mutants, total) in plan.items():
                print(f"{module}: {len(mutants)} of {total} mutants")
                for m in mutants:
                    print(f"  {m.line:4d} {m.kind:8s} {m.original}  =>  {m.mutation}")
            return 0

        checkouts: queue.Queue[Path] = queue.Queue()
        for j in range(max(1, args.jobs)):
            checkout = Path(tmp) / f"copy{j}"
            shutil.copytree(pristine, checkout)
            checkouts.put(checkout)
        check_imports_from(pristine)
        print(
            f"testing {'the working tree' if rev is None else f'{rev} ({commit})'}: "
            f"{sum(len(p[1]) for p in plan.values())} mutants in {len(plan)} modules, "
            f"{args.jobs} at a time",
            flush=True,
        )

        report: dict[str, dict] = {}
        survivors: list[dict] = []
        for module, (source, mutants, total) in plan.items():
            entry, lost = run_module(module, source, mutants, checkouts, args)
            entry["mutants_total"] = total
            report[module] = entry
            survivors += lost
            if "error" in entry:
                print(f"{module}: {entry['error']}", flush=True)
                continue
            print(
                f"{module}: {entry['killed']}/{entry['mutants_run']} killed "
                f"({entry['timeouts']} by timeout), {entry['survived']} survived "
                f"[{time.perf_counter() - began:.0f} s]",
                flush=True,
            )

    run_all = sum(e["mutants_run"] for e in report.values())
    killed_all = sum(e.get("killed", 0) for e in report.values())
    result = {
        "tool": "tools/mutation_test.py",
        "source": "working tree" if rev is None else "commit",
        "commit": commit,
        "seed": args.seed,
        "max_per_module": limit,
        "jobs": args.jobs,
        "timeout_s": args.timeout,
        "elapsed_s": round(time.perf_counter() - began),
        "score": round(killed_all / run_all, 3) if run_all else None,
        "modules": report,
        "survivors": survivors,
    }
    print(f"\nscore {killed_all}/{run_all} in {result['elapsed_s']} s; survivors:")
    for s in survivors:
        print(f"  {s['module']}:{s['line']} {s['kind']}: {s['original']}  =>  {s['mutation']}")
    if args.save:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


def _stop(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        kill_live_runs()
        sys.exit(130)
