"""Your parts, kept: each chapter saves what you built, and the chapter-06 capstone runs the
engine on them. `save(pool=FreeListPool)` writes the cells that define `FreeListPool` (and its
base classes and helpers) to `my_paged_kv/pool.py` next to the notebook, or under
`$PAGED_KV_PARTS` (on Colab, a folder on your Drive): plain Python you can read, import and
diff. `load("pool")` imports it back; `load_all()` gives every part with a note on its origin.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import re
import runpy
from pathlib import Path
from typing import Any, NamedTuple

from paged_kv.course.checks.failures import STUB
from paged_kv.errors import InvalidArgument


class Part(NamedTuple):
    """One part the engine can take: the chapter that builds it (number and name), and what."""

    topic: str
    what: str

    @property
    def chapter(self) -> str:
        return self.topic[:2]

    @property
    def notebook(self) -> str:
        return f"exercises/{self.topic}_exercises.ipynb"


PARTS = {
    "pool": Part("01_block_pool", "your block pool (FreeListPool)"),
    "eviction": Part("03_eviction", "your eviction policy"),
    "block_hasher": Part("04_prefix_caching", "your chained hash (chained_hashes)"),
    "prefix_lookup": Part("04_prefix_caching", "your prefix lookup (cached_prefix)"),
    "allocate_table": Part("04_prefix_caching", "your all-or-nothing add (allocate_table)"),
    "attention": Part("05_paged_attention", "your paged decode attention"),
}


def parts_dir() -> Path:
    """Where parts are kept: $PAGED_KV_PARTS, else `my_paged_kv/` in the current directory."""
    return Path(os.environ.get("PAGED_KV_PARTS") or Path.cwd() / "my_paged_kv")


class Saved(list):
    """The paths `save` wrote: a list that a notebook cell does not echo (`save` prints)."""

    def _ipython_display_(self) -> None:
        pass


def save(**parts: Any) -> list[Path]:
    """Save each part as `<parts_dir()>/<name>.py`; return the paths. A part that still holds
    an exercise stub is saved, with a warning."""
    paths = Saved()
    for name, obj in parts.items():
        part, source, path = _part(name), _source_of(obj), parts_dir() / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# {part.what[0].upper() + part.what[1:]}, from {part.notebook}, saved by\n"
            f"# paged_kv.course.parts.save({name}={obj.__name__}). Edit it in the notebook and "
            f"save it again;\n# the capstone of chapter 06 runs the engine on it.\n\n"
            f"{source.rstrip()}\n\n\nPART = {obj.__name__}\n"
        )
        paths.append(path)
        stubbed = (f for f in _functions(obj) if any(STUB in str(c) for c in f.__code__.co_consts))
        stubs = [f"`{f.__name__}`" for f in stubbed]
        stub = (
            f": ⚠️ {', '.join(stubs)} still has a stub (raise NotImplementedError), so the "
            "capstone would fail on it; write it, run its cell and save again"
        )
        print(f"saved {part.what} as {_shown(path)}{stub if stubs else ''}")
    return paths


def load(name: str) -> Any:
    """The part saved as `name`, or None if it was never saved."""
    _part(name)
    path = parts_dir() / f"{name}.py"
    if not path.exists():
        return None
    return runpy.run_path(str(path), run_name=f"my_paged_kv.{name}")["PART"]


def load_all() -> dict[str, tuple[Any, str]]:
    """Every part: (your part, where it comes from), or (None, why it is missing)."""
    found: dict[str, tuple[Any, str]] = {}
    for name, part in PARTS.items():
        where = _shown(parts_dir() / f"{name}.py")
        try:
            obj = load(name)
            why = f"not saved yet (chapter {part.chapter}'s exercise notebook, {part.topic}_"
            why += "exercises.ipynb, saves it when run to its end, if you did that chapter)"
        except Exception as exc:  # a saved cell that no longer runs: say so, use the library's
            obj, why = None, f"{where} fails to load ({type(exc).__name__}: {exc})"
        found[name] = (obj, f"yours, from {where}" if obj else f"{why}; the library's is used")
    return found


def _part(name: str) -> Part:
    if name not in PARTS:
        raise InvalidArgument(f"unknown part {name!r}; the parts are {sorted(PARTS)}.")
    return PARTS[name]


def _shown(path: Path) -> str:
    return str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)


def _source_of(obj: Any) -> str:
    """The imports, definitions and assignments of the cells (or files) that define `obj` and
    what it needs from them, those first."""
    needed = _with_dependencies(obj, set())
    files = dict.fromkeys(file for target in needed for file in _files_of(target))
    sources = ["".join(linecache.getlines(file)) for file in files]
    if not sources or not all(sources):
        raise InvalidArgument(
            f"cannot read the source of {getattr(obj, '__name__', obj)!r}: define it in a "
            "notebook cell (or a .py file) and save it from there."
        )
    return "\n\n\n".join(map(_definitions, sources)) + "\n"


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def _definitions(source: str) -> str:
    """`source` without magics and other statements (a check call or a print would run again
    each time the part is loaded)."""
    lines = ["" if x.lstrip().startswith(("%", "!")) else x for x in source.splitlines()]
    for node in ast.parse("\n".join(lines)).body:
        if not isinstance(node, _KEPT):
            for i in range(node.lineno - 1, node.end_lineno or node.lineno):
                lines[i] = ""
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(lines).strip())


def _functions(obj: Any) -> list[Any]:
    """`obj` if a function, else the class's own methods (static, class methods, properties)."""
    if inspect.isfunction(obj):
        return [obj]
    values = [getattr(v, "fget", getattr(v, "__func__", v)) for v in vars(obj).values()]
    own = obj.__qualname__ + "."
    return [v for v in values if inspect.isfunction(v) and v.__qualname__.startswith(own)]


def _with_dependencies(obj: Any, seen: set[int]) -> list[Any]:
    """`obj` after what it needs from the same notebook: its base classes, and the functions
    and classes its code names as globals (helpers from other cells)."""
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    named = [f.__globals__.get(n) for f in _functions(obj) for n in _global_names(f.__code__)]
    bases = list(reversed(inspect.getmro(obj)[1:])) if inspect.isclass(obj) else []
    ours = [x for x in bases + named if inspect.isfunction(x) or inspect.isclass(x)]
    ours = [x for x in ours if x.__module__ == obj.__module__]
    return [*(d for x in ours for d in _with_dependencies(x, seen)), obj]


def _global_names(code: Any) -> list[str]:
    nested = [_global_names(c) for c in code.co_consts if inspect.iscode(c)]
    return [*code.co_names, *(name for names in nested for name in names)]


def _files_of(obj: Any) -> list[str]:
    functions = _functions(obj)
    if functions:
        return [f.__code__.co_filename for f in functions]
    # a class without methods: the latest notebook cell (IPython keeps them in linecache)
    header = re.compile(rf"^class {re.escape(obj.__name__)}\b", re.MULTILINE)
    cells = [
        name
        for name, entry in list(linecache.cache.items())
        if "ipykernel_" in name and len(entry) > 2 and header.search("".join(entry[2]))
    ]
    return cells[-1:]
