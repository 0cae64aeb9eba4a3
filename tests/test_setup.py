"""The first ten minutes: `./setup.sh` picks torch's build for the machine, CI runs the
README's commands as written, and `pytest -m quick` selects the quick tier."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SYSTEM_PACKAGES = ("python3-venv", "g++", "chromium", "redis-server")

# A stand-in for python3 (and the .venv's python): records each pip command in $PIP_LOG,
# answers pip's dry run with the wheel in $TORCH_REPORT, has no torch to report on; runs
# everything else with the real one.
FAKE_PYTHON = """#!/bin/sh
case "$1 $2" in "-c "*"import torch"*) exit 0 ;; esac
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  shift 2
  echo "$*" >> "$PIP_LOG"
  case "$*" in *--dry-run*) cat "$TORCH_REPORT" ;; esac
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def run_setup(
    tmp_path: Path, *, gpu: bool, torch_requires: list[str], args: list[str]
) -> list[str]:
    """Runs a copy of setup.sh with fake python and nvidia-smi; returns the pip commands."""
    shutil.copy(ROOT / "setup.sh", tmp_path / "setup.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in {
        "python3": FAKE_PYTHON,
        "nvidia-smi": "#!/bin/sh\n" + ("echo 'GPU 0: H100'" if gpu else "exit 9") + "\n",
    }.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    report = {"install": [{"metadata": {"name": "torch", "requires_dist": torch_requires}}]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PIP_LOG": str(tmp_path / "pip.log"),
        "TORCH_REPORT": str(tmp_path / "report.json"),
        "REAL_PYTHON": sys.executable,
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    done = subprocess.run(
        ["bash", str(tmp_path / "setup.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return (tmp_path / "pip.log").read_text().splitlines()


CUDA_TORCH = ['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"', "filelock"]


def test_without_a_gpu_a_cuda_torch_is_replaced_by_the_cpu_build(tmp_path):
    pip = run_setup(tmp_path, gpu=False, torch_requires=CUDA_TORCH, args=[])
    assert [c for c in pip if CPU_INDEX in c] == [f"install torch>=2.5 --index-url {CPU_INDEX}"]
    assert pip[-1] == "install -e .[dev]"
    assert pip.index(f"install torch>=2.5 --index-url {CPU_INDEX}") < len(pip) - 1


def test_a_torch_that_needs_no_cuda_is_kept(tmp_path):
    pip = run_setup(tmp_path, gpu=False, torch_requires=["filelock", "sympy"], args=["triton"])
    assert not [c for c in pip if CPU_INDEX in c]
    assert pip[-1] == "install -e .[dev,triton]"


def test_with_a_gpu_pip_keeps_its_cuda_torch(tmp_path):
    pip = run_setup(tmp_path, gpu=True, torch_requires=CUDA_TORCH, args=[])
    assert not [c for c in pip if CPU_INDEX in c or "--dry-run" in c]
    assert pip[-1] == "install -e .[dev]"


def test_setup_sh_is_executable_and_names_the_system_packages():
    script = ROOT / "setup.sh"
    assert script.stat().st_mode & stat.S_IXUSR
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    header = script.read_text().split("set -euo pipefail")[0]
    assert re.search(r"apt-get install " + " ".join(map(re.escape, SYSTEM_PACKAGES)), header)


def readme_block(title: str) -> str:
    """The first fenced block under the README section `title`."""
    section = (ROOT / "README.md").read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 2)[1]


def test_the_readme_has_one_setup_one_test_command_and_opens_the_course_at_the_root():
    block = readme_block("Set up and test")
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    commands = [c for c in commands if c]
    assert commands[0] == "sudo apt-get install " + " ".join(SYSTEM_PACKAGES)
    assert commands[1:] == [
        "./setup.sh",
        ".venv/bin/pytest -m quick",
        ".venv/bin/pytest",
        ".venv/bin/jupyter lab",
    ]


def ci_commands(text: str) -> list[str]:
    """The lines of a CI file as commands: YAML's `run:` and comments dropped, .ci/run's
    `run_pytest` (pytest, failing with a message when it collects nothing) read as pytest."""
    lines = [
        re.sub(r"^\s*(- )?(run: )?", "", line).split(" #")[0].strip() for line in text.splitlines()
    ]
    return [re.sub(r"^run_pytest\b", "pytest", line) for line in lines]


@pytest.mark.parametrize("ci", [".ci/run", ".github/workflows/ci.yml"])
def test_ci_runs_the_readme_commands_and_installs_its_system_packages(ci):
    text = (ROOT / ci).read_text()
    commands = ci_commands(text)
    default, triton = commands.index("./setup.sh"), commands.index("./setup.sh triton")
    assert default < commands.index("pytest -m quick") < commands.index("pytest") < triton
    assert {"ruff check .", "pyright"} <= set(commands[default:triton])
    assert "pyright" in commands[triton:]
    assert any(c.startswith("pytest tests/test_triton_*.py") for c in commands[triton:])
    for package in SYSTEM_PACKAGES:
        assert package in text, f"{ci} does not install {package}"
    assert "grep -v" not in text, "CI must not filter output that only one machine prints"


def test_ci_tests_every_python_the_package_claims():
    pyproject = (ROOT / "pyproject.toml").read_text()
    lowest = re.search(r'^requires-python = ">=3\.(\d+)"$', pyproject, re.MULTILINE)
    claimed = re.findall(r'"Programming Language :: Python :: 3\.(\d+)"', pyproject)
    matrix = re.search(
        r"^\s*python: \[(.*)\]$", (ROOT / ".github/workflows/ci.yml").read_text(), re.M
    )
    assert lowest and matrix
    minors = [int(m) for m in claimed]
    assert minors == list(range(int(lowest.group(1)), minors[-1] + 1))  # from the lowest, no gap
    assert re.findall(r'"3\.(\d+)"', matrix.group(1)) == claimed


def test_ci_pins_torch_only_through_the_constraints_variable():
    run = (ROOT / ".ci" / "run").read_text()
    assert 'export PIP_CONSTRAINT="$PWD/.ci/constraints.txt"' in run
    pins = [line for line in (ROOT / ".ci/constraints.txt").read_text().splitlines()]
    assert [p for p in pins if p and not p.startswith("#")] == ["torch==2.13.0"]


def test_the_dev_extra_leaves_triton_to_its_own_extra():
    pyproject = (ROOT / "pyproject.toml").read_text()
    dev = re.search(r"^dev = \[(.*)\]$", pyproject, re.MULTILINE)
    assert dev and "triton" not in dev.group(1)
    assert re.search(r'^triton = \["triton', pyproject, re.MULTILINE)


def root_conftest() -> ModuleType:
    """The repository's conftest.py, loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_quick_tier_holds_unit_tests_and_one_notebook():
    conftest = root_conftest()
    files = conftest.quick_files()
    assert all((ROOT / path).is_file() for path in files), "a quick-tier file is gone"
    assert [p for p in files if p.endswith(".ipynb")] == ["notebooks/01_block_pool.ipynb"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "quick", "--collect-only", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    selected = [line for line in done.stdout.splitlines() if "::" in line]
    assert {line.split("::")[0] for line in selected} == files
    for entry in conftest.QUICK:  # every entry selects something, and only what it names
        assert any(line.startswith(entry) for line in selected), entry
    pretrained = [line for line in selected if line.startswith("tests/test_pretrained.py")]
    assert len(pretrained) == 2, pretrained


def test_an_nbval_skip_reason_is_the_comment_below_the_marker():
    reason = root_conftest().nbval_skip_reason
    assert reason("x = 1") is None
    assert reason("# NBVAL_SKIP\n# it needs the network\nimport x") == "it needs the network"
    assert reason("#NBVAL_SKIP\nimport x") == ""


def test_every_skipped_notebook_cell_states_its_reason():
    reason = root_conftest().nbval_skip_reason
    skipped = {}
    for notebook in sorted(ROOT.glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            why = reason("".join(cell["source"])) if cell["cell_type"] == "code" else None
            if why is not None:
                skipped[notebook.name] = why
    assert skipped, "chapter 06's download cell is no longer skipped: update the README"
    assert all(len(why) > 20 for why in skipped.values()), skipped
    readme = (ROOT / "README.md").read_text()
    assert all(why in readme for why in skipped.values()), "README: say why the cell is skipped"
