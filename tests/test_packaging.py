"""The package as an engineer adopts it: the wheel's files and requirements, the library
without the course's extra, the lazily loaded names as type checkers see them, and the
README's serving-loop example run as written."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import paged_kv
import paged_kv.tiers
from paged_kv.cache import KVCacheManager

ROOT = Path(__file__).resolve().parent.parent
COURSE_ONLY = ("ipywidgets", "matplotlib", "IPython")  # and what they bring
LAZY = {"paged_kv": paged_kv._TORCH_NAMES, "paged_kv.tiers": paged_kv.tiers._LAZY}


def setuptools_version() -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in importlib.metadata.version("setuptools").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return ()


@pytest.mark.skipif(
    setuptools_version() < (77,), reason="building the wheel offline needs setuptools >= 77"
)
def test_the_wheel_ships_license_types_and_weights_and_needs_no_course_extra(tmp_path):
    source = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the code
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "paged_kv", source / "paged_kv", ignore=shutil.ignore_patterns("__pycache__")
    )
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip_wheel, "-q", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("paged_kv-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"paged_kv-{paged_kv.__version__}.dist-info"
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    assert {
        "paged_kv/py.typed",
        "paged_kv/serving/weights/tiny_lm.safetensors",
        "paged_kv/serving/weights/tiny_lm.safetensors.sha256",
    } <= names
    assert license_text.startswith("MIT License\n\nCopyright (c) 2026 the paged_kv authors\n")
    assert "License-Expression: MIT" in metadata
    requires = [
        Requirement(line.split(": ", 1)[1])
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    plain = {r.name for r in requires if r.marker is None}
    assert plain == {"torch", "numpy", "tqdm", "ninja", "safetensors"}
    course = {r.name for r in requires if str(r.marker) == 'extra == "course"'}
    assert course == {"ipywidgets", "matplotlib"}


# Run in a fresh interpreter where the course's packages cannot be imported: the library's
# core imports and runs, and paged_kv.widgets names the extra it needs.
WITHOUT_COURSE_EXTRA = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import name` raises ModuleNotFoundError, find_spec says None

import torch
import paged_kv, paged_kv.cache, paged_kv.attention, paged_kv.serving, paged_kv.tiers
import paged_kv.study
from paged_kv import Engine, KVCacheManager, load_tiny_lm, paged_decode
from paged_kv.errors import MissingExtra

manager = KVCacheManager(num_blocks=8, block_size=4)
manager.add_sequence("a", list(range(10)))
q, k, v = torch.randn(1, 2, 8), torch.randn(8, 4, 2, 8), torch.randn(8, 4, 2, 8)
out = paged_decode(q, k, v, torch.tensor([manager.block_table("a")]), torch.tensor([10]))
assert out.shape == (1, 2, 8)
completion = Engine(load_tiny_lm(), num_blocks=16).generate(["The block pool"], 4)[0]
assert len(completion.token_ids) == 4
try:
    import paged_kv.widgets
except MissingExtra as err:
    assert "pip install 'paged_kv[course]'" in str(err) and isinstance(err, ImportError)
else:
    raise AssertionError("paged_kv.widgets imported without ipywidgets and matplotlib")
loaded = [n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in {blocked!r}]
print("loaded:", sorted(loaded))
"""


def test_the_library_runs_without_the_course_extra():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_COURSE_EXTRA.format(blocked=COURSE_ONLY)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "loaded: []"


def type_checking_imports(module: str) -> dict[str, str]:
    """{name: module} of the imports under `if TYPE_CHECKING:` in `module`'s __init__.py."""
    path = ROOT / module.replace(".", "/") / "__init__.py"
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom) and imported.module
                found.update({alias.name: imported.module for alias in imported.names})
    return found


@pytest.mark.parametrize("module", sorted(LAZY))
def test_every_lazily_loaded_name_is_imported_for_type_checkers(module):
    lazy = LAZY[module]
    assert lazy, f"{module} loads nothing lazily any more: drop this test's entry"
    assert type_checking_imports(module) == lazy


def test_pyright_checks_a_user_script_against_the_lazily_loaded_names(tmp_path):
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent)) or shutil.which(
        "pyright"
    )
    if pyright is None:
        pytest.skip("pyright is not installed (the dev extra has it)")
    reveals = [f"reveal_type({module}.{name})" for module in LAZY for name in LAZY[module]]
    script = "import paged_kv\nimport paged_kv.tiers\n\npaged_kv.Engine(None, num_blocks=4)\n"
    (tmp_path / "user.py").write_text(script + "\n".join(reveals) + "\n")
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({"extraPaths": [str(ROOT)]}))
    done = subprocess.run(
        [pyright, "--outputjson", "--pythonpath", sys.executable, "user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]  # 1: errors found
    diagnostics = json.loads(done.stdout)["generalDiagnostics"]
    errors = [d for d in diagnostics if d["severity"] == "error"]
    assert [(e["range"]["start"]["line"], e["rule"]) for e in errors] == [
        (3, "reportArgumentType")
    ], errors
    assert '"None"' in errors[0]["message"] and '"TinyLM"' in errors[0]["message"]
    revealed = [d["message"] for d in diagnostics if d["severity"] == "information"]
    assert len(revealed) == len(reveals)
    assert not [m for m in revealed if m.endswith('"Any"') or "Unknown" in m], revealed


def readme_serving_loop() -> str:
    """The code block of the README section "Use it in your own serving loop"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use it in your own serving loop\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```\n", 1)[0]


def test_the_readme_serving_loop_runs_as_written():
    exec(compile(readme_serving_loop(), "README.md", "exec"), {})


def test_the_readme_serving_loop_catches_a_missing_discard_unwritten(monkeypatch):
    monkeypatch.setattr(KVCacheManager, "discard_unwritten", lambda self, block_ids: None)
    with pytest.raises(AssertionError):
        exec(compile(readme_serving_loop(), "README.md", "exec"), {})
