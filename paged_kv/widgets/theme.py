"""Colours of every view, chosen once: explicit, theme-proof, colour-blind safe, readable.

Every picture is drawn on its own light card (`CARD`) with explicit text colours, so it looks
the same in JupyterLab's light and dark themes, on GitHub and in nbviewer. Fills come from the
Okabe–Ito palette (safe for the common colour-vision deficiencies) and every colour is doubled
by a glyph, a label or a border style. `text_on(fill)` picks the darker or lighter ink for a
fill, whichever contrasts more; the tests compute the WCAG contrast of every text the
renderers emit (at least 4.5:1).
"""

from __future__ import annotations

import html
from collections.abc import Hashable, Iterable, Sequence

# The card every view is drawn on, and its inks.
CARD = "#ffffff"
INK = "#111111"  # 18.9:1 on the card
MUTED = "#525252"  # 7.8:1 on the card: secondary text
LIGHT_INK = "#ffffff"
FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:11px"

# Okabe & Ito (2008), "Color Universal Design": distinguishable with any common deficiency.
OKABE_ITO = {
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
    "black": "#000000",
}

# One hue per owner (sequence) in the block-table map; past eight, hues repeat with a dashed
# border so that two owners never look alike.
OWNER_FILLS = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")

# Block states: fill, border (style doubles the colour), glyph. Luminance falls from free to
# shared, so the states stay apart in greyscale too.
STATE_STYLES: dict[str, dict[str, str]] = {
    "free": {"fill": "#ffffff", "border": "1px dotted #6b6b6b", "label": "free", "glyph": "·"},
    "cached": {"fill": "#F0E442", "border": "2px dashed #7a6a00", "label": "cached", "glyph": "C"},
    "in_use": {"fill": "#56B4E9", "border": "2px solid #0b4f7a", "label": "in use", "glyph": "1"},
    "shared": {
        "fill": "#CC79A7",
        "border": "3px double #5c1f42",
        "label": "shared",
        "glyph": "×n",
    },
}

# The fixed colour scale of an eviction policy's count (the same in every frame): viridis
# steps, light to dark, one per doubling of the count.
COUNT_BINS: tuple[tuple[int, int | None, str], ...] = (
    (1, 1, "#fde725"),
    (2, 2, "#a0da39"),
    (3, 4, "#4ac16d"),
    (5, 8, "#1fa187"),
    (9, 16, "#277f8e"),
    (17, 32, "#365c8d"),
    (33, None, "#46327e"),
)

# The engine's request states on a step axis.
PHASE_STYLES: dict[str, dict[str, str]] = {
    "waiting": {"fill": "#dcdcdc", "label": "waiting", "glyph": "·"},
    "prefill": {"fill": "#E69F00", "label": "prefill", "glyph": "P"},
    "decode": {"fill": "#56B4E9", "label": "decode", "glyph": "D"},
    "preempted": {"fill": "#D55E00", "label": "preempted", "glyph": "✕"},
}

OUTLINE_CHANGED = "3px solid #000000"
OUTLINE_HIT = "3px solid #007a55"
OUTLINE_MISS = "3px dashed #b00020"


def relative_luminance(colour: str) -> float:
    """WCAG 2.1 relative luminance of a #rrggbb colour."""
    r, g, b = (int(colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4))

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)


def contrast_ratio(a: str, b: str) -> float:
    """WCAG contrast ratio of two #rrggbb colours (1 to 21; text needs 4.5)."""
    la, lb = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_on(fill: str) -> str:
    """The ink (near-black or white) that contrasts more with `fill`."""
    return INK if contrast_ratio(INK, fill) >= contrast_ratio(LIGHT_INK, fill) else LIGHT_INK


def count_colour(count: int) -> str:
    """The fixed scale's fill for a count of at least 1."""
    for low, high, colour in COUNT_BINS:
        if count >= low and (high is None or count <= high):
            return colour
    return COUNT_BINS[0][2]


def owner_colours(owners: Iterable[Hashable]) -> dict[Hashable, tuple[str, bool]]:
    """Owner -> (fill, dashed) in order of appearance: a hue each, dashed past the palette."""
    colours: dict[Hashable, tuple[str, bool]] = {}
    for owner in owners:
        if owner not in colours:
            i = len(colours)
            colours[owner] = (OWNER_FILLS[i % len(OWNER_FILLS)], i >= len(OWNER_FILLS))
    return colours


def esc(value: object) -> str:
    """HTML-escaped text of any value."""
    return html.escape(str(value))


def esc_text(value: object) -> str:
    """HTML-escaped text outside attributes (quotes kept as they are)."""
    return html.escape(str(value), quote=False)


def card(body: str, css_class: str, *, title: str = "") -> str:
    """A view's card: its own background and ink, so any page theme leaves it readable."""
    heading = (
        f'<div style="font-weight:bold;margin:0 0 4px 0;color:{INK}">{esc(title)}</div>'
        if title
        else ""
    )
    return (
        f'<div class="{css_class}" style="{FONT};line-height:1.3;background:{CARD};color:{INK};'
        f"padding:8px;border:1px solid #c8c8c8;border-radius:6px;max-width:100%;"
        f'overflow-x:auto;box-sizing:border-box">{heading}{body}</div>'
    )


def swatch(fill: str, border: str = "1px solid #6b6b6b", glyph: str = "") -> str:
    """A small legend square, with its glyph in the contrasting ink."""
    return (
        f'<span style="display:inline-flex;align-items:center;justify-content:center;'
        f"width:16px;height:16px;box-sizing:border-box;background:{fill};border:{border};"
        f'color:{text_on(fill)};font-size:9px">{esc(glyph)}</span>'
    )


def legend(items: Sequence[tuple[str, str]]) -> str:
    """A row of (swatch html, text) pairs that wraps on narrow screens."""
    cells = "".join(
        f'<span style="display:inline-flex;align-items:center;gap:4px;color:{INK}">'
        f"{mark}{text}</span>"
        for mark, text in items
    )
    return flex(cells, gap="4px 14px", margin="0 0 6px 0")


def flex(content: str, *, gap: str = "3px", margin: str = "0", extra: str = "") -> str:
    """A wrapping flex row."""
    return (
        f'<div style="display:flex;flex-wrap:wrap;gap:{gap};margin:{margin};{extra}">'
        f"{content}</div>"
    )
