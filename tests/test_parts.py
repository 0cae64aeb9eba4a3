"""`paged_kv.course.parts` keeps what a learner built: the defining cells of a part (and of its
helpers and base classes, defined in other cells), without the cells' other statements."""

import linecache

import pytest

from paged_kv import InvalidArgument
from paged_kv.course import parts

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


def _run_cells(*cells):
    """Execute cells the way IPython does: each under its own file name, kept in linecache."""
    namespace = {"__name__": "__main__"}
    for i, source in enumerate(cells):
        filename = f"/tmp/ipykernel_0/cell{i}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        runnable = "\n".join(
            "" if line.startswith("%") or "checks." in line else line
            for line in source.splitlines()
        )
        exec(compile(runnable, filename, "exec"), namespace)
    return namespace


def test_a_part_is_saved_with_its_helpers_and_bases_and_loads_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_KV_PARTS", str(tmp_path))
    namespace = _run_cells(CELL_A, CELL_B, CELL_C)
    [path] = parts.save(pool=namespace["Pool"])
    text = path.read_text()
    assert path == tmp_path / "pool.py"
    assert "def helper" in text and "class Base" in text and "class Pool(Base)" in text
    assert "print(" not in text and "checks." not in text and "%load_ext" not in text
    assert text.index("def helper") < text.index("class Pool") and text.endswith("PART = Pool\n")
    pool = parts.load("pool")()
    assert pool.digest() == namespace["helper"](2) and pool.counts == {1: 2}


def test_missing_and_broken_parts_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_KV_PARTS", str(tmp_path))
    assert parts.load("pool") is None
    (tmp_path / "eviction.py").write_text("raise RuntimeError('broken')\n")
    found = parts.load_all()
    assert found["pool"] == (None, found["pool"][1]) and "not saved yet" in found["pool"][1]
    assert found["eviction"][0] is None and "fails to load" in found["eviction"][1]
    with pytest.raises(InvalidArgument, match="unknown part"):
        parts.save(scheduler=object)


def a_stub(token_ids, block_size, salt=None):
    raise NotImplementedError("chained_hashes: replace this line with your code")


def a_hash(token_ids, block_size, salt=None):
    return []


def test_saving_a_stub_warns(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAGED_KV_PARTS", str(tmp_path))
    saved = parts.save(block_hasher=a_stub)
    assert [p.name for p in saved] == ["block_hasher.py"]  # still the paths, in a list
    assert "`a_stub` still has a stub" in capsys.readouterr().out
    parts.save(block_hasher=a_hash)
    assert "still has a stub" not in capsys.readouterr().out
