"""The course's files agree with each other: exercises, headers, environment, outputs."""

import json
import re
from pathlib import Path

import make_exercises
import nbformat
import notebook_headers
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = notebook_headers.course_notebooks()
MAX_NOTEBOOK_BYTES = 400_000


def test_committed_exercises_are_exactly_what_the_generator_makes():
    expected = make_exercises.expected_exercises()
    committed = sorted((ROOT / "exercises").glob("*.ipynb"))
    assert sorted(expected) == committed, "run: python tools/make_exercises.py"
    for path, text in expected.items():
        assert path.read_text() == text, (
            f"{path.name} is stale; run: python tools/make_exercises.py"
        )


def test_every_solution_has_solution_regions_and_check_cells():
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        regions = sum(c.source.count(make_exercises.BEGIN) for c in code)
        checks = [c for c in code if "check" in c.metadata.get("tags", [])]
        assert 2 <= len(checks) <= 4, f"{path.name}: {len(checks)} exercises"
        assert regions >= 2 and all("checks.check_" in c.source for c in checks)


def test_stub_generation_keeps_hints_and_refuses_top_level_regions():
    source = (
        "def f(x):\n    ### BEGIN SOLUTION\n    # Hint: add one\n"
        "    return x + 1\n    ### END SOLUTION\n"
    )
    assert make_exercises.stub_source(source, "t") == (
        "def f(x):\n    # Hint: add one\n"
        '    raise NotImplementedError("f: replace this line with your code")\n'
    )
    with pytest.raises(ValueError, match="inside a function"):
        make_exercises.stub_source("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "t")
    with pytest.raises(ValueError, match="without"):
        make_exercises.stub_source("def f():\n    ### BEGIN SOLUTION\n    pass", "t")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_opens_with_title_badge_setup_and_versions(path):
    nb = nbformat.read(path, as_version=4)
    rel = path.relative_to(ROOT).as_posix()
    title, setup, versions = nb.cells[:3]
    assert title.source.startswith("# ") and len(title.source.split("\n\n")) >= 3
    assert notebook_headers.badge(rel) in title.source
    assert setup.source == notebook_headers.setup_source()
    assert "__version__" in versions.source and "print(" in versions.source
    assert notebook_headers.with_headers(nb, rel) == []  # nothing to fix


def test_badges_and_install_cell_derive_from_the_one_repository_url():
    url = notebook_headers.repository_url()
    assert url.startswith("https://github.com/")
    assert f"git+{url}" in notebook_headers.setup_source()
    assert url.removeprefix("https://github.com/") in notebook_headers.badge("notebooks/x.ipynb")


def test_colab_and_the_grade_workflow_install_the_course_extra():
    extra = notebook_headers.COURSE_EXTRA
    pyproject = (ROOT / "pyproject.toml").read_text()
    packages = re.search(rf"^{extra} = \[(.*)\]$", pyproject, re.MULTILINE)
    assert packages and '"ipywidgets' in packages.group(1) and '"matplotlib' in packages.group(1)
    assert re.search(rf"^dev = \[\"paged_kv\[{extra},", pyproject, re.MULTILINE)
    assert f'"paged_kv[{extra}] @ git+' in notebook_headers.setup_source()
    workflow = (ROOT / ".github/workflows/grade-exercises.yml").read_text()
    assert f'-e ".[{extra},' in workflow


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_kept_small_and_free_of_tracebacks(path):
    nb = nbformat.read(path, as_version=4)
    assert path.stat().st_size < MAX_NOTEBOOK_BYTES
    executed = [c for c in nb.cells if c.cell_type == "code" and c.outputs]
    if path.parent.name == "exercises":
        assert not executed, "exercises are stored without outputs"
        return
    assert executed, f"{path.name} is stored without outputs; run tools/execute_notebooks.py"
    for cell in executed:
        assert all(o.output_type != "error" for o in cell.outputs), cell.source[:80]


def test_chapters_are_numbered_in_order():
    names = [p.name for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    chapters = [int(n[:2]) for n in names if n[2] == "_"]
    assert chapters == list(range(len(chapters)))
    appendices = [n for n in names if n[2] != "_"]  # 03b_...: an appendix to chapter 03
    assert all(n[2].isalpha() and n[3] == "_" and int(n[:2]) in chapters for n in appendices)


def test_environment_yml_installs_the_package_with_its_dev_extra():
    env = (ROOT / "environment.yml").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^\s+- python=3\.11$", env, re.MULTILINE)
    assert re.search(r"^\s+- pip$", env, re.MULTILINE)
    assert re.search(r'^\s+- -e "?\.\[dev\]"?$', env, re.MULTILINE), "pip must install -e .[dev]"
    # Anything else the environment lists must be something pyproject asks for too (conda
    # calls torch `pytorch`), with the same lower bound.
    dependencies = env.split("dependencies:", 1)[1]
    listed = re.findall(r"^\s+- ([A-Za-z][\w.-]*)(\S*)$", dependencies, re.MULTILINE)
    for name, bound in set(listed) - {("python", "=3.11"), ("pip", ""), ("pip", ":")}:
        pip_name = {"pytorch": "torch"}.get(name, name)
        assert f'"{pip_name}{bound}"' in pyproject, f"environment.yml lists {name}{bound}"
    requires = re.search(r'requires-python = ">=(\d+\.\d+)"', pyproject).group(1)
    assert tuple(map(int, requires.split("."))) <= (3, 11)


def test_readme_names_every_notebook_and_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        assert path.relative_to(ROOT).as_posix() in readme, f"README misses {path.name}"
    assert re.search(r"^\./setup\.sh\s", readme, re.MULTILINE)
    assert re.search(r"^\.venv/bin/pytest\s", readme, re.MULTILINE)


def test_ci_runs_the_readme_test_command_with_pinned_torch():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "torch==2.13.0" in (ROOT / ".ci" / "constraints.txt").read_text()
    assert "PIP_CONSTRAINT" in ci and re.search(r"^\s*(\S+/)?pytest\b", ci, re.MULTILINE)


def test_gpu_chapters_carry_the_accelerator_metadata():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        uses_cuda = "torch.cuda" in path.read_text()
        assert (nb["metadata"].get("accelerator") == "GPU") == uses_cuda, path.name


def test_the_which_policy_table_is_one_table_in_chapter_03_the_appendix_and_the_readme():
    def table(text: str) -> list[str]:
        start = text.index("| traffic |")
        rows = []
        for line in text[start:].splitlines():
            if not line.startswith("|"):
                break
            rows.append(line)
        return rows

    def markdown(name: str) -> str:
        cells = nbformat.read(ROOT / "notebooks" / name, as_version=4).cells
        return "\n\n".join(c.source for c in cells if c.cell_type == "markdown")

    chapter = table(markdown("03_eviction.ipynb"))
    assert len(chapter) >= 4
    assert table(markdown("03b_eviction_beyond_lfu.ipynb")) == chapter
    assert table((ROOT / "README.md").read_text()) == chapter
