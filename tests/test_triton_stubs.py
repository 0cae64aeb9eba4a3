"""typings/triton, the stubs pyright reads instead of an installed triton, against the triton
that is installed: every module, name and parameter they declare exists there, and a module
variable annotated with a class is an instance of it. A stub that drifts from Triton would make
pyright pass code that fails at run time; this fails first."""

import ast
import builtins
import importlib
import inspect
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed (extra: triton)")

STUBS = Path(__file__).resolve().parents[1] / "typings"


def stub_modules() -> list[tuple[str, ast.Module]]:
    """(module name, parsed stub) for every .pyi under typings/."""
    found = []
    for path in sorted(STUBS.rglob("*.pyi")):
        parts = path.relative_to(STUBS).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((name, ast.parse(path.read_text())))
    return found


def parameter_names(node: ast.FunctionDef) -> set[str]:
    arguments = node.args
    named = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
    starred = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return {a.arg for a in named + starred} - {"self"}


def real_parameters(function: object) -> set[str]:
    """The parameter names of a Triton function; @jit and @constexpr_function keep it as `.fn`."""
    return set(inspect.signature(getattr(function, "fn", function)).parameters) - {"self"}


def declares(owner: type, name: str) -> bool:
    """Whether a real class has `name`: a class attribute (read from the class's namespace, so
    that a descriptor such as a knob is not run), an annotation, or set in `__init__`."""
    if any(name in vars(c) or name in inspect.get_annotations(c) for c in owner.__mro__):
        return True
    init = getattr(owner.__init__, "__code__", None)
    return init is not None and name in init.co_names


def mismatches(owner: object, body: list[ast.stmt], where: str) -> list[str]:
    """What `body` (a stub module's or class's statements) declares that `owner` lacks."""
    problems = []
    for node in body:
        if isinstance(node, ast.FunctionDef):
            if not hasattr(owner, node.name):
                problems.append(f"{where}.{node.name} is missing")
            elif missing := parameter_names(node) - real_parameters(getattr(owner, node.name)):
                problems.append(f"{where}.{node.name} has no parameter {sorted(missing)}")
        elif isinstance(node, ast.ClassDef):
            real = getattr(owner, node.name, None)
            if not isinstance(real, type):
                problems.append(f"{where}.{node.name} is not a class")
            else:
                problems += mismatches(real, node.body, f"{where}.{node.name}")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            if isinstance(owner, type):
                if not declares(owner, name):
                    problems.append(f"{where}.{name} is missing")
            elif not hasattr(owner, name):
                problems.append(f"{where}.{name} is missing")
            elif isinstance(node.annotation, ast.Name):
                cls = getattr(owner, node.annotation.id, None) or getattr(
                    builtins, node.annotation.id
                )
                if not isinstance(getattr(owner, name), cls):
                    problems.append(f"{where}.{name} is not a {node.annotation.id}")
        elif isinstance(node, ast.ImportFrom) and not isinstance(owner, type):
            problems += [
                f"{where}.{alias.asname} is missing"
                for alias in node.names
                if alias.asname and not hasattr(owner, alias.asname)
            ]
    return problems


@pytest.mark.parametrize("name, stub", stub_modules(), ids=[n for n, _ in stub_modules()])
def test_the_stubs_declare_only_what_the_installed_triton_has(name, stub):
    assert mismatches(importlib.import_module(name), stub.body, name) == []


def test_the_check_finds_a_name_or_parameter_triton_lacks():
    import triton.language as tl

    stub = ast.parse(
        "def load(pointer, maks=None): ...\n"
        "def lod(pointer): ...\n"
        "class dtype:\n    width: int\n"
        "float32: constexpr\n"
    )
    assert mismatches(tl, stub.body, "tl") == [
        "tl.load has no parameter ['maks']",
        "tl.lod is missing",
        "tl.dtype.width is missing",
        "tl.float32 is not a constexpr",
    ]
