"""Where each block of a request came from (chapter 07): the device pool, host memory, disk,
Redis, or computed. A pure renderer (sources in, HTML out) and a small ipywidgets view.
"""

from __future__ import annotations

import html
from collections.abc import Hashable, Mapping, Sequence

import ipywidgets as widgets

from paged_kv.errors import InvalidArgument
from paged_kv.serving.engine import Engine
from paged_kv.widgets.stepper import StaticPicture
from paged_kv.widgets.theme import INK, card, text_on

# Colour doubled by a glyph and a border style, as in the pool view.
SOURCE_STYLES: dict[str, dict[str, str]] = {
    "device": {"fill": "#ce93d8", "border": "3px double #6a1b9a", "glyph": "dev"},
    "host": {"fill": "#a5d6a7", "border": "2px solid #2e7d32", "glyph": "host"},
    "disk": {"fill": "#90caf9", "border": "2px dashed #1565c0", "glyph": "disk"},
    "remote": {"fill": "#ffcc80", "border": "2px dotted #e65100", "glyph": "redis"},
    "computed": {"fill": "#ffffff", "border": "1px solid #9e9e9e", "glyph": "calc"},
}


def render_block_sources_html(sources: Mapping[Hashable, Sequence[str]]) -> str:
    """One row per request: its blocks in table order, each marked with where its K/V came
    from at the request's latest admission. Cells carry data-request, data-block and
    data-source attributes for tests."""
    counts = {s: 0 for s in SOURCE_STYLES}
    rows = []
    for request, blocks in sources.items():
        cells = []
        for i, source in enumerate(blocks):
            style = SOURCE_STYLES[source]
            counts[source] += 1
            cells.append(
                f'<div data-request="{html.escape(str(request))}" data-block="{i}" '
                f'data-source="{source}" title="block {i} · {source}" style="width:34px;'
                f"height:22px;box-sizing:border-box;background:{style['fill']};"
                f"border:{style['border']};color:{text_on(style['fill'])};display:flex;"
                "align-items:center;"
                f'justify-content:center;font-size:9px">{style["glyph"]}</div>'
            )
        rows.append(
            '<div style="display:flex;gap:3px;align-items:center;margin:2px 0">'
            f'<span style="width:70px;color:{INK}">request {html.escape(str(request))}</span>'
            f"{''.join(cells)}</div>"
        )
    legend = " · ".join(
        f'<span style="background:{s["fill"]};border:{s["border"]};padding:0 3px;'
        f'color:{text_on(s["fill"])}">'
        f"{s['glyph']}</span> {name}: {counts[name]}"
        for name, s in SOURCE_STYLES.items()
    )
    body = f'<div style="margin-bottom:6px;color:{INK}">{legend}</div>{"".join(rows)}'
    return card(body, "paged-kv-sources")


class BlockSourcesView(StaticPicture, widgets.VBox):
    """The sources of every admitted request of an engine with a store; `refresh()` after
    stepping it."""

    def __init__(self, engine: Engine) -> None:
        if engine.connector is None:
            raise InvalidArgument(
                "this engine has no store, so every block is device or computed; build it "
                "with Engine(..., store=TieredStore([...]))."
            )
        self.engine = engine
        self.html = widgets.HTML()
        super().__init__([self.html])
        self.refresh()

    def refresh(self) -> None:
        connector = self.engine.connector
        assert connector is not None  # refused in __init__ otherwise
        self.html.value = render_block_sources_html(connector.block_sources)

    def static_html(self) -> str:
        return self.html.value
