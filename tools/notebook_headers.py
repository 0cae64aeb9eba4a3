"""Keep every notebook's Colab badge and Colab install cell derived from pyproject's URL.

The repository URL is written once, in pyproject.toml [project.urls] Repository.
`python tools/notebook_headers.py` rewrites the headers; `--check` only reports drift.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
COURSE_DIRS = ("notebooks", "exercises", "solutions")
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
SETUP_FIRST_LINE = "# Setup: on Colab, install paged_kv"
COURSE_EXTRA = "course"  # pyproject's extra with the notebooks' widgets and plots


def repository_url() -> str:
    """The project's public repository URL, from pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'^Repository = "([^"]+)"', text, re.MULTILINE).group(1)


def badge(relative_path: str) -> str:
    """Markdown of the Open-in-Colab badge for the notebook at `relative_path`."""
    github = repository_url().removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{github}/blob/main/{relative_path}"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab})"


def setup_source() -> str:
    """The setup cell: installs the package with the course's extra (its widgets and plots)
    only when running in Google Colab."""
    return (
        f"{SETUP_FIRST_LINE} (elsewhere `./setup.sh` did it).\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    %pip install -q "paged_kv[{COURSE_EXTRA}] @ git+{repository_url()}"'
    )


def with_headers(nb: nbformat.NotebookNode, relative_path: str) -> list[str]:
    """Rewrite `nb`'s badge and setup cell in place; return what was changed."""
    changed = []
    title = nb.cells[0]
    if title.cell_type != "markdown" or not BADGE.search(title.source):
        raise ValueError(f"{relative_path}: the first cell must be markdown with a Colab badge")
    new_title = BADGE.sub(lambda _: badge(relative_path), title.source)
    if new_title != title.source:
        title.source = new_title
        changed.append("badge")
    setups = [
        c for c in nb.cells if c.cell_type == "code" and c.source.startswith(SETUP_FIRST_LINE)
    ]
    if len(setups) != 1:
        raise ValueError(
            f"{relative_path}: needs exactly one setup cell starting {SETUP_FIRST_LINE!r}"
        )
    if setups[0].source != setup_source():
        setups[0].source = setup_source()
        changed.append("setup cell")
    return changed


def course_notebooks() -> list[Path]:
    """Every notebook of the course, in a stable order."""
    return sorted(p for d in COURSE_DIRS for p in (ROOT / d).glob("*.ipynb"))


def main(check: bool) -> int:
    drift = []
    for path in course_notebooks():
        nb = nbformat.read(path, as_version=4)
        changed = with_headers(nb, path.relative_to(ROOT).as_posix())
        if changed:
            drift.append(f"{path.relative_to(ROOT)}: {', '.join(changed)}")
            if not check:
                nbformat.write(nb, path)
    print("\n".join(drift) or "all notebook headers are in sync")
    return 1 if drift and check else 0


if __name__ == "__main__":
    sys.exit(main(check="--check" in sys.argv))
