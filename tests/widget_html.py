"""Helpers that read the views' HTML: block states, and the contrast of every text shown."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from paged_kv.widgets.theme import contrast_ratio

VOID = {"br", "img", "hr", "input", "meta", "link", "col", "wbr"}


def states_in(html: str) -> list[str]:
    return re.findall(r'data-state="(\w+)"', html)


class _Contrast(HTMLParser):
    """Walks the HTML keeping the inherited text colour and the nearest background, and
    records (text, ink, background, ratio) for every non-blank text node."""

    def __init__(self, page_ink: str, page_background: str) -> None:
        super().__init__()
        self.stack = [(page_ink, page_background)]
        self.found: list[tuple[str, str, str, float]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        ink, background = self.stack[-1]
        style = dict(attrs).get("style") or ""
        colour = re.search(r"(?:^|;)\s*color:\s*(#[0-9a-fA-F]{6})", style)
        fill = re.search(r"(?:^|;)\s*background(?:-color)?:\s*(#[0-9a-fA-F]{6})", style)
        if tag not in VOID:
            self.stack.append(
                (colour.group(1) if colour else ink, fill.group(1) if fill else background)
            )

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID and len(self.stack) > 1:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if data.strip() and not self.in_style:
            ink, background = self.stack[-1]
            self.found.append((data.strip(), ink, background, contrast_ratio(ink, background)))

    in_style = False

    def parse_starttag(self, i: int) -> int:  # skip the text of <style> blocks
        end = super().parse_starttag(i)
        self.in_style = self.lasttag == "style"
        return end


def text_contrasts(
    html: str, page_ink: str = "#e6e6e6", page_background: str = "#111111"
) -> list[tuple[str, str, str, float]]:
    """Every text node with its ink, background and contrast ratio. The page defaults are a
    dark theme's (light ink on a dark page): text that relied on the page's colours fails."""
    parser = _Contrast(page_ink, page_background)
    parser.feed(html)
    return parser.found


def assert_readable(html: str, minimum: float = 4.5) -> list[float]:
    """Fail with the offending texts if any contrast is below `minimum`; return the ratios."""
    found = text_contrasts(html)
    bad = [f for f in found if f[3] < minimum]
    assert not bad, f"{len(bad)} texts below {minimum}:1, e.g. {bad[:5]}"
    # and the same on a light page: a view must not depend on the theme
    light = text_contrasts(html, "#111111", "#ffffff")
    assert [f[3] for f in light] == [f[3] for f in found]
    return [f[3] for f in found]
