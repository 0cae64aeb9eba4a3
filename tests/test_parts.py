"""`paged_kv.course.parts` keeps what a learner built: the defining cells of a part (and of its
helpers and base classes, defined in other cells), without the cells' other statements. What it
cannot keep so that it loads back, it refuses before writing; a part still a stub, or a file
that does not load, is not the learner's part; every message names the folder it read; and a
pytest run keeps its parts out of the learner's folders."""

import functools
import linecache
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import BlockPool, InvalidArgument, PagedKVError
from paged_kv.course import parts

ROOT = Path(__file__).resolve().parent.parent

CELL_A = """import hashlib


def helper(x):
    return hashlib.sha256(bytes([x])).digest()


print("a cell may print")
"""

CELL_B = """class Base:
    size = 2
"""

CELL_C = """%load_ext autoreload
from collections import Counter


class Pool(Base):
    def digest(self):
        return helper(self.size)

    @property
    def counts(self):
        return Counter([1, 1])


checks.check_something(Pool)  # a check call must not run again when the part is loaded
"""

STUBS = '''class Policy:
    def touch(self, block):
        raise NotImplementedError("Policy.touch: replace this line with your code")

    def count(self, block):
        raise NotImplementedError("Policy.count: replace this line with your code")

    def _enter(self, block):
        """Optional helper."""
        raise NotImplementedError("Policy._enter: replace this line with your code")


class Written(Policy):
    def touch(self, block):
        return block

    def count(self, block):
        return 0


class Helped(Written):
    def touch(self, block):
        return self._enter(block)
'''

_CELLS = iter(range(10**9))


def _run_cells(*cells, namespace=None):
    """Execute cells the way IPython does: each under its own file name, kept in linecache."""
    namespace = {"__name__": "__main__"} if namespace is None else namespace
    for source in cells:
        filename = f"/tmp/ipykernel_0/cell{next(_CELLS)}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        runnable = "\n".join(
            "" if line.startswith("%") or "checks." in line else line
            for line in source.splitlines()
        )
        exec(compile(runnable, filename, "exec"), namespace)
    return namespace


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_KV_PARTS", str(tmp_path / "my_paged_kv"))
    return tmp_path / "my_paged_kv"


def test_a_part_is_saved_with_its_helpers_and_bases_and_loads_back(folder):
    namespace = _run_cells(CELL_A, CELL_B, CELL_C)
    [path] = parts.save(pool=namespace["Pool"])
    text = path.read_text()
    assert path == folder / "pool.py"
    assert "def helper" in text and "class Base" in text and "class Pool(Base)" in text
    assert "print(" not in text and "checks." not in text and "%load_ext" not in text
    assert text.index("def helper") < text.index("class Pool") and text.endswith("PART = Pool\n")
    pool = parts.load("pool")()
    assert pool.digest() == namespace["helper"](2) and pool.counts == {1: 2}
    mine, why = parts.origin("pool")
    assert mine.__qualname__ == "Pool" and why == f"yours, from {path}"


def test_a_missing_part_says_which_folder_was_read_and_how_to_read_another(folder, monkeypatch):
    assert parts.load("pool") is None
    found = parts.load_all()
    assert set(found) == set(parts.PARTS) and all(part is None for part, _ in found.values())
    assert found["pool"][1].startswith("not saved yet") and "01_block_pool" in found["pool"][1]
    assert parts.searched() == f"parts are read from {folder}/, the folder PAGED_KV_PARTS names"
    monkeypatch.delenv("PAGED_KV_PARTS")
    monkeypatch.chdir(folder.parent)
    said = f"parts are read from {folder}/; set PAGED_KV_PARTS to read another folder"
    assert parts.searched() == said
    with pytest.raises(InvalidArgument, match="unknown part"):
        parts.save(scheduler=object)


def test_a_part_still_a_stub_is_saved_with_a_warning_and_loads_as_not_saved(folder, capsys):
    namespace = _run_cells(STUBS)
    saved = parts.save(eviction=namespace["Policy"])
    assert [p.name for p in saved] == ["eviction.py"]  # still the paths, in a list
    assert "still has the stub of `Policy.touch` and 1 more (raise" in capsys.readouterr().out
    assert parts.load("eviction") is None
    part, why = parts.origin("eviction")
    assert part is None and why.startswith(f"{folder}/eviction.py still has the stub of ")
    assert why.endswith("`Policy.touch` and 1 more, to write in 03_eviction_exercises.ipynb")
    assert "_enter" not in why  # an unused helper's stub: no matter
    parts.save(eviction=namespace["Written"])  # its base's touch is overridden, _enter unused
    assert "still has the stub" not in capsys.readouterr().out
    assert parts.load("eviction")().touch(3) == 3
    parts.save(eviction=namespace["Helped"])  # calls the helper, which is still a stub
    assert "still has the stub of `Policy._enter` (raise" in capsys.readouterr().out
    assert parts.load("eviction") is None


def _outer():
    def inner(token_ids, block_size, salt=None):
        return []

    return inner


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


REFUSED_CELLS = """
from collections import OrderedDict

LIMIT = 4


def uses_limit(token_ids, block_size, salt=None):
    return [LIMIT]


class Outer:
    class Inner:
        pass

    def method(self):
        return 1
"""


def _refused():
    """(what, argument) that `save` cannot keep so that `load` gives it back."""
    cells = _run_cells(REFUSED_CELLS)
    uses_limit = _run_cells("def uses_limit(t, b, salt=None):\n    return LIMIT\n", namespace=cells)
    return {
        "an instance": cells["Outer"](),
        "a partial": functools.partial(sorted, key=len),
        "an int": 3,
        "a lambda": lambda token_ids, block_size, salt=None: [],
        "a builtin": len,
        "a builtin class": dict,
        "a nested function": _outer(),
        "a decorated closure": _decorated(parts.save),
        "a bound method": cells["Outer"]().method,
        "a nested class": cells["Outer"].Inner,
        "the library's class": BlockPool,
        "a class from the standard library": cells["OrderedDict"],
        "a global from another cell": uses_limit["uses_limit"],
    }


@pytest.mark.parametrize("what", list(_refused()))
def test_what_cannot_be_kept_faithfully_is_refused_before_anything_is_written(folder, what):
    argument = _refused()[what]
    with pytest.raises(parts.CannotSave) as refused:
        parts.save(pool=argument)
    assert isinstance(refused.value, InvalidArgument)
    message = str(refused.value)
    assert "class or function" in message and "cell" in message, message
    assert not folder.exists()  # nothing written, not even the folder


def test_a_refused_part_among_several_writes_none_of_them(folder):
    namespace = _run_cells(CELL_A, CELL_B, CELL_C)
    with pytest.raises(parts.CannotSave):
        parts.save(pool=namespace["Pool"], block_hasher=functools.partial(namespace["helper"]))
    assert not folder.exists()


# A draw of cells: a part (a function or a class on a base) using a helper, a constant in its
# own cell, statements that must not be kept, in any order of the other cells.
@settings(max_examples=40, deadline=None)
@given(
    as_class=st.booleans(),
    k=st.integers(-1000, 1000),
    m=st.integers(-50, 50),
    noise=st.booleans(),
    helper_first=st.booleans(),
    inputs=st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=5),
)
def test_whatever_save_writes_load_reads_back_as_it_was(
    tmp_path_factory, as_class, k, m, noise, helper_first, inputs
):
    with pytest.MonkeyPatch.context() as patch:  # a folder for each example
        patch.setenv("PAGED_KV_PARTS", str(tmp_path_factory.mktemp("parts")))
        _round_trip(as_class, k, m, noise, helper_first, inputs)


def _round_trip(as_class, k, m, noise, helper_first, inputs):
    helper = f"import math\n\n\ndef helper(x):\n    return math.floor(x) + {k}\n"
    helper += "\n\nprint(helper(1))\nhelper(2)\n" if noise else ""
    base = f"class Base:\n    scale = {m}\n"
    if as_class:
        part = f"M = {m}\n\n\nclass Part(Base):\n    def __call__(self, x):\n"
        part += "        return [helper(v) * self.scale + M for v in x]\n"
    else:
        part = f"M = {m}\n\n\ndef part(x):\n    return [helper(v) * M for v in x]\n"
    cells = [helper, base, part] if helper_first else [base, helper, part]
    namespace = _run_cells(*cells)
    original = namespace["Part"]() if as_class else namespace["part"]
    parts.save(prefix_lookup=namespace["Part" if as_class else "part"])
    loaded = parts.load("prefix_lookup")
    assert loaded is not None and loaded.__name__ == ("Part" if as_class else "part")
    assert (loaded() if as_class else loaded)(inputs) == original(inputs)


CORRUPT = {
    "a syntax error": "def broken(:\n",
    "an error on import": "raise RuntimeError('broken')\n",
    "an exit on import": "raise SystemExit(3)\n",
    "no PART": "def fine():\n    return 1\n",
    "a PART that is a value": "PART = 3\n",
    "an error whose message raises": (
        "class Odd(Exception):\n    def __str__(self):\n        raise ValueError\n\n\nraise Odd()\n"
    ),
    "null bytes": "PART = 1\x00\n",
    "bytes that are not UTF-8": b"PART = '\xff\xfe'\n",
    "a KeyboardInterrupt on import": "raise KeyboardInterrupt\n",
    "a GeneratorExit on import": "raise GeneratorExit\n",
    "a PART whose __class__ raises": (
        "class Liar:\n    @property\n    def __class__(self):\n        raise KeyboardInterrupt\n"
        "\n\nPART = Liar()\n"
    ),
    "a PART whose metaclass refuses every attribute": (
        "class Meta(type):\n    def __getattribute__(cls, name):\n        raise GeneratorExit\n"
        "\n\nclass Part(metaclass=Meta):\n    pass\n\n\nPART = Part\n"
    ),
    "a folder": lambda path: path.mkdir(),
    "a FIFO": lambda path: os.mkfifo(path),  # opening it would block until a writer comes
    "a link to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "a link to a good part": lambda path: (
        (path.parent / "elsewhere.py").write_text("def f():\n    pass\n\n\nPART = f\n"),
        path.symlink_to(path.parent / "elsewhere.py"),
    ),
    "a sparse file of 64 MiB": lambda path: os.truncate(path.open("w").name, 64 << 20),
}


@pytest.mark.parametrize("what", list(CORRUPT))
def test_a_corrupt_or_hostile_file_is_a_typed_error_shown_as_its_message(folder, what):
    folder.mkdir()
    content, path = CORRUPT[what], folder / "pool.py"
    if callable(content):
        content(path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    tracemalloc.start()
    try:
        with pytest.raises(parts.CorruptPart) as corrupt:
            parts.load("pool")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * parts.MAX_PART_BYTES  # a big file is refused by its size, not read
    assert isinstance(corrupt.value, PagedKVError) and corrupt.value.__cause__ is None
    message = str(corrupt.value)
    assert message.startswith(f"{path} ") and "save it again" in message, message
    shown = corrupt.value._render_traceback_()  # what IPython prints: the message, no frames
    assert "CorruptPart" in shown[0] and str(path) in shown[0] and len(shown) == 1
    part, why = parts.origin("pool")
    assert part is None and why == message  # the capstone says so, and the library's stands in
    assert parts.load("eviction") is None  # the other parts are not affected
    found = parts.load_all()  # one bad part breaks no other
    assert found["pool"] == (None, message) and found["eviction"][0] is None


def test_saving_replaces_a_planted_link_never_its_target(folder, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    folder.mkdir()
    (folder / "pool.py").symlink_to(target)
    [path] = parts.save(pool=_run_cells(CELL_A, CELL_B, CELL_C)["Pool"])
    assert target.read_text() == "keep me" and not path.is_symlink()
    assert parts.load("pool").__name__ == "Pool"
    assert sorted(p.name for p in folder.iterdir()) == ["pool.py"]  # no temporary file left


@pytest.mark.parametrize("where", ["a file", "/dev/null", "/proc/self"])
def test_a_parts_folder_that_cannot_be_used_is_a_typed_error_naming_the_variable(
    tmp_path, monkeypatch, where
):
    if where == "a file":
        where = str(tmp_path / "file")
        Path(where).write_text("not a folder")
    monkeypatch.setenv("PAGED_KV_PARTS", where)
    pool = _run_cells(CELL_A, CELL_B, CELL_C)["Pool"]
    with pytest.raises(InvalidArgument, match="PAGED_KV_PARTS") as refused:
        parts.save(pool=pool)
    assert where in str(refused.value) and "folder" in str(refused.value)
    if where != "/proc/self":  # a folder, only one that cannot be written to
        with pytest.raises(InvalidArgument, match="PAGED_KV_PARTS"):
            parts.load("pool")


def test_a_tilde_in_the_parts_folder_means_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PAGED_KV_PARTS", "~/parts")
    monkeypatch.chdir(tmp_path)
    [path] = parts.save(pool=_run_cells(CELL_A, CELL_B, CELL_C)["Pool"])
    assert path == tmp_path / "home" / "parts" / "pool.py" and not (tmp_path / "~").exists()
    assert parts.load("pool").__name__ == "Pool"


def _notebook(path, *cells):
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)


_SAVING = """from pathlib import Path

from paged_kv.course import parts


def mine(token_ids, block_size, salt=None):
    return {who!r}


parts.save(block_hasher=mine)
Path({report!r}).write_text(str(parts.parts_dir()))
"""

_LOADING = """from paged_kv.course import parts

found = parts.load("block_hasher")
assert found is not None and found([], 4) == {who!r}, parts.origin("block_hasher")
"""


def test_a_pytest_run_keeps_the_parts_its_notebooks_save_out_of_the_learners_folders(tmp_path):
    """The repository's conftest.py, on notebooks of `exercises/` and `solutions/` that save a
    part, and one that loads the part its folder saved, on two workers: nothing is written
    beside the notebooks nor in the learner's $PAGED_KV_PARTS; the parts go to one folder for
    the session, removed after it, where each notebook folder has its own."""
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    reports = {who: tmp_path / f"{who}.txt" for who in ("exercises", "solutions")}
    for who, report in reports.items():
        _notebook(tmp_path / who / "01_save.ipynb", _SAVING.format(who=who, report=str(report)))
    _notebook(tmp_path / "solutions" / "02_load.ipynb", _LOADING.format(who="solutions"))
    drive = tmp_path / "drive"  # the learner's own PAGED_KV_PARTS, left as it is
    env = {**os.environ, "PAGED_KV_PARTS": str(drive)}
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", "-q"]
    command += ["--nbval-current-env", "-n", "2", "--dist=loadgroup", "exercises", "solutions"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 passed" in done.stdout, done.stdout[-3000:]
    written = [p for p in tmp_path.rglob("*") if p.name in ("my_paged_kv", "block_hasher.py")]
    assert written == [] and not drive.exists()
    folders = {who: Path(report.read_text()) for who, report in reports.items()}
    session = folders["exercises"].parent.parent
    assert session.name.startswith("paged_kv-parts-") and not session.exists()  # removed
    assert folders == {who: session / who / "my_paged_kv" for who in folders}
