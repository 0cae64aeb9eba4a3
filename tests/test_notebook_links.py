"""Every link between lectures, exercises and solutions opens in JupyterLab started at the
repository root: a markdown link resolves from its notebook's own folder (as JupyterLab
resolves it), and a notebook named in a code span exists from the root (where the file browser
starts)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(
    path.relative_to(ROOT).as_posix()
    for folder in ("notebooks", "exercises", "solutions")
    for path in (ROOT / folder).glob("*.ipynb")
)
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:href|src)=\"([^\"]+)\"")
NAMED_NOTEBOOK = re.compile(r"`([\w./-]+\.ipynb)`")


def markdown_of(notebook: str) -> str:
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def local_targets(markdown: str) -> list[str]:
    """The relative link targets of `markdown`, without their #fragment (URLs left out)."""
    targets = [a or b for a, b in LINK.findall(markdown)]
    return [
        t.split("#")[0]
        for t in targets
        if not re.match(r"[a-zA-Z][\w+.-]*:", t) and not t.startswith("#")
    ]


def test_the_link_pattern_finds_markdown_and_html_links_but_not_urls():
    markdown = '[a](../x/y.ipynb#part) [b](https://e.org) <a href="z.md">z</a> [c](#top)'
    assert local_targets(markdown) == ["../x/y.ipynb", "z.md"]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_relative_link_resolves_from_the_notebooks_folder(notebook):
    folder = (ROOT / notebook).parent
    broken = [t for t in local_targets(markdown_of(notebook)) if not (folder / t).exists()]
    assert not broken, f"{notebook} links to missing {broken}"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebook_named_in_the_text_exists_from_the_repository_root(notebook):
    named = NAMED_NOTEBOOK.findall(markdown_of(notebook))
    missing = [n for n in named if "/" in n and not (ROOT / n).is_file()]
    assert not missing, f"{notebook} names {missing}, which JupyterLab at the root cannot open"
