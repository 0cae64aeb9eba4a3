"""Your parts, kept: each chapter saves what you built, and the chapter-06 capstone runs the
engine on them.

`save(pool=FreeListPool)` writes the notebook cell(s) that define your `FreeListPool` to
`my_paged_kv/pool.py` next to the notebook (set `PAGED_KV_PARTS` to keep them elsewhere, for
example on a mounted drive on Colab, where each notebook runs on its own machine). Each file
is plain Python that you can read, import and diff: the package you built. `load("pool")`
imports it back; `load_all()` gives every part with a note on where it came from.

A part's cell must hold everything the part needs (its imports and helpers), because the
cell is what is saved. A class's base classes defined in other cells are saved with it.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import linecache
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paged_kv.errors import InvalidArgument


@dataclass(frozen=True)
class Part:
    """One part the engine can take: its hook's name, the chapter that builds it, and what."""

    name: str
    chapter: str
    what: str

    @property
    def notebook(self) -> str:
        return f"exercises/{self.chapter}_{_NOTEBOOKS[self.chapter]}_exercises.ipynb"


_NOTEBOOKS = {
    "01": "block_pool",
    "03": "eviction",
    "04": "prefix_caching",
    "05": "paged_attention",
}

PARTS = {
    part.name: part
    for part in (
        Part("pool", "01", "your block pool (FreeListPool)"),
        Part("eviction", "03", "your eviction policy"),
        Part("block_hasher", "04", "your chained hash (chained_hashes)"),
        Part("prefix_lookup", "04", "your prefix lookup (cached_prefix)"),
        Part("allocate_table", "04", "your all-or-nothing add (allocate_table)"),
        Part("attention", "05", "your paged decode attention"),
    )
}


def parts_dir() -> Path:
    """Where parts are kept: $PAGED_KV_PARTS, else `my_paged_kv/` in the current directory."""
    return Path(os.environ.get("PAGED_KV_PARTS") or Path.cwd() / "my_paged_kv")


class Saved(list):
    """The paths `save` wrote: a list, which a notebook cell does not echo (the lines `save`
    prints say it all)."""

    def _ipython_display_(self) -> None:
        pass


_STUB = "replace this line with your code"  # the exercise stubs' NotImplementedError


def save(**parts: Any) -> list[Path]:
    """Save each part's defining cell(s) as `my_paged_kv/<name>.py`; return the paths.

    A part whose source still holds an exercise stub is saved, with a warning."""
    paths = Saved()
    for name, obj in parts.items():
        if name not in PARTS:
            raise InvalidArgument(f"unknown part {name!r}; the parts are {sorted(PARTS)}.")
        source = _source_of(obj)
        folder = parts_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.py"
        part = PARTS[name]
        path.write_text(
            f"# {part.what[0].upper() + part.what[1:]}, from {part.notebook}, saved by\n"
            f"# paged_kv.course.parts.save({name}={obj.__name__}). Edit it in the notebook and "
            "save it again;\n# the capstone of chapter 06 runs the engine on it.\n\n"
            f"{source.rstrip()}\n\n\nPART = {obj.__name__}\n"
        )
        paths.append(path)
        stubs = _stubs(obj)
        stub = (
            f": ⚠️ {', '.join(stubs)} still has a stub (raise NotImplementedError), so the "
            "capstone would fail on it; write it, run its cell and save again"
            if stubs
            else ""
        )
        print(f"saved {part.what} as {_shown(path)}{stub}")
    return paths


def _stubs(obj: Any) -> list[str]:
    """The functions of `obj` (itself, or a class's methods) that still raise the stub."""
    functions = [getattr(v, "__func__", getattr(v, "fget", v)) for v in vars(obj).values()]
    found = []
    for function in [obj] if inspect.isfunction(obj) else functions:
        code = getattr(function, "__code__", None)
        if code is not None and any(
            isinstance(c, str) and c.endswith(_STUB) for c in code.co_consts
        ):
            found.append(f"`{function.__name__}`")
    return found


def load(name: str) -> Any:
    """The part saved as `name`, or None if it was never saved."""
    if name not in PARTS:
        raise InvalidArgument(f"unknown part {name!r}; the parts are {sorted(PARTS)}.")
    path = parts_dir() / f"{name}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"my_paged_kv.{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PART


def load_all() -> dict[str, tuple[Any, str]]:
    """Every part: (your part or None, where it comes from / why it is missing)."""
    found: dict[str, tuple[Any, str]] = {}
    for name, part in PARTS.items():
        try:
            obj = load(name)
        except Exception as exc:  # a saved cell that no longer runs: say so, use the library's
            found[name] = (
                None,
                f"{_shown(parts_dir() / (name + '.py'))} fails to load "
                f"({type(exc).__name__}: {exc}); the library's is used",
            )
            continue
        if obj is None:
            found[name] = (
                None,
                f"not saved yet (chapter {part.chapter}'s exercise notebook, "
                f"{Path(part.notebook).name}, saves it when run to its end, if you did that "
                "chapter); the library's is used",
            )
        else:
            found[name] = (obj, f"yours, from {_shown(parts_dir() / (name + '.py'))}")
    return found


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _source_of(obj: Any) -> str:
    """The source of the cells (or files) that define `obj`, base classes' cells first."""
    files: list[str] = []
    for target in _with_dependencies(obj):
        for filename in _files_of(target):
            if filename not in files:
                files.append(filename)
    if not files:
        raise InvalidArgument(
            f"cannot find the source of {getattr(obj, '__name__', obj)!r}: define it in a "
            "notebook cell (or a .py file) and save it from there."
        )
    chunks = []
    for filename in files:
        lines = linecache.getlines(filename)
        if not lines:
            raise InvalidArgument(f"the source of {obj!r} ({filename}) cannot be read.")
        chunks.append(_definitions("".join(lines)))
    return "\n\n\n".join(chunks) + "\n"


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def _definitions(source: str) -> str:
    """The imports, definitions and assignments of a cell, without its other statements (a
    check call or a print would run again each time the part is loaded)."""
    source = "".join(
        line if not line.lstrip().startswith(("%", "!")) else "\n"
        for line in source.splitlines(keepends=True)
    )
    tree = ast.parse(source)
    lines = source.splitlines()
    out = ""
    previous_import = False
    for node in tree.body:
        if isinstance(node, _KEPT):
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            is_import = isinstance(node, ast.Import | ast.ImportFrom)
            gap = "" if not out else "\n" if is_import and previous_import else "\n\n\n"
            out += gap + "\n".join(lines[start - 1 : node.end_lineno])
            previous_import = is_import
    return out


def _with_dependencies(obj: Any, seen: set[int] | None = None) -> list[Any]:
    """`obj` after what it needs from the same notebook: a class's bases, and the functions
    and classes a function or method names as globals (helpers from other cells)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    needed: list[Any] = []
    if inspect.isclass(obj):
        for base in reversed(inspect.getmro(obj)[1:]):
            if base.__module__ == obj.__module__:
                needed += _with_dependencies(base, seen)
        functions = [getattr(v, "__func__", getattr(v, "fget", v)) for v in vars(obj).values()]
    else:
        functions = [obj]
    for function in functions:
        if not inspect.isfunction(function):
            continue
        for name in _global_names(function.__code__):
            value = function.__globals__.get(name)
            if (inspect.isfunction(value) or inspect.isclass(value)) and getattr(
                value, "__module__", None
            ) == obj.__module__:
                needed += _with_dependencies(value, seen)
    return [*needed, obj]


def _cell_defining(class_name: str) -> list[str]:
    """The latest notebook cell (kept in linecache by IPython) that defines `class_name`."""
    header = re.compile(rf"^class {re.escape(class_name)}\b", re.MULTILINE)
    cells = [
        name
        for name, entry in list(linecache.cache.items())
        if "ipykernel_" in name and len(entry) > 2 and header.search("".join(entry[2]))
    ]
    return cells[-1:]


def _global_names(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def _files_of(obj: Any) -> list[str]:
    if inspect.isfunction(obj):
        return [obj.__code__.co_filename]
    if not any(inspect.isfunction(getattr(v, "__func__", v)) for v in vars(obj).values()):
        return _cell_defining(obj.__name__)  # a class without methods: find its cell
    names = []
    for value in vars(obj).values():
        value = getattr(value, "__func__", value)  # staticmethod, classmethod
        value = getattr(value, "fget", value)  # property
        if inspect.isfunction(value) and value.__qualname__.startswith(obj.__qualname__ + "."):
            names.append(value.__code__.co_filename)
    return list(dict.fromkeys(names))
