"""Imports point one way: from course, widgets, study and serving down to cache.

Every module of the package is parsed (imports inside functions too) and each import of
another part of `paged_kv` must go to a lower layer, or stay inside its own subpackage.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import paged_kv

PACKAGE = Path(paged_kv.__file__).parent

# Lower numbers sit lower. Two parts on the same level (serving, study) must not import
# each other; the package root and `__main__` sit above everything. `tiers` (chapter 07)
# stores blocks' K/V bytes below the device pool: above attention, used by serving.
LAYERS = {
    "errors": 0,
    "validation": 1,
    "cache": 2,
    "attention": 3,
    "tiers": 4,
    "serving": 5,
    "study": 5,
    "widgets": 6,
    "course": 7,
}


def part_of(module: str) -> str | None:
    """The layer a dotted module name belongs to (`paged_kv.cache.pool` -> `cache`)."""
    parts = module.split(".")
    if parts[0] != "paged_kv" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def imported_modules(source: str, module: str) -> list[str]:
    """Dotted names of the paged_kv modules `source` imports (relative imports resolved)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            found.append(base)
    return [name for name in found if name.startswith("paged_kv")]


def layer_violations(source: str, module: str) -> list[str]:
    """Imports in `source` (the text of `module`) that point up or sideways."""
    here = part_of(module)
    if here is None:  # the package root and __main__ may import any layer
        return []
    bad = []
    for target in imported_modules(source, module):
        there = part_of(target)
        if there is None or there == here:
            continue
        if LAYERS[there] >= LAYERS[here]:
            bad.append(f"{module} imports {target} ({here} must not depend on {there})")
    return bad


def package_modules() -> list[tuple[str, Path]]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules.append((name, path))
    return modules


def test_every_subpackage_and_module_has_a_layer():
    for name, _path in package_modules():
        top = name.split(".")[1] if "." in name else None
        assert top in (*LAYERS, "__main__", None), f"{name}: give its folder a layer in LAYERS"


@pytest.mark.parametrize(("name", "path"), package_modules(), ids=lambda v: str(v))
def test_imports_point_down(name, path):
    assert layer_violations(path.read_text(), name) == []


def test_the_check_sees_an_upward_import_even_inside_a_function():
    source = "def f():\n    from paged_kv.serving.engine import Engine\n"
    assert layer_violations(source, "paged_kv.cache.manager") == [
        "paged_kv.cache.manager imports paged_kv.serving.engine (cache must not depend on serving)"
    ]
    sideways = "from paged_kv.study import replay_trace\n"
    assert layer_violations(sideways, "paged_kv.serving.engine")
    relative = "from ..serving import Engine\n"
    assert layer_violations(relative, "paged_kv.attention.storage")
    assert layer_violations("from paged_kv.cache import BlockPool\n", "paged_kv.serving.x") == []
