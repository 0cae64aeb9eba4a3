"""Pure HTML renderers of the views: a snapshot or a replay frame in, an HTML string out.

The widgets only choose which state to render; tests read these strings directly.
"""

from __future__ import annotations

import html
from collections.abc import Hashable

from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.study.trace_replay import CacheFrame

# How each kind of block looks. Colour is doubled by a border style and a glyph, so the
# states stay distinguishable in greyscale and for colour-blind readers.
STYLES: dict[str, dict[str, str]] = {
    "free": {"fill": "#ffffff", "border": "1px dotted #9e9e9e", "label": "free", "glyph": "·"},
    "in_use": {"fill": "#90caf9", "border": "2px solid #1565c0", "label": "in use", "glyph": "1"},
    "shared": {"fill": "#ce93d8", "border": "3px double #6a1b9a", "label": "shared", "glyph": "×n"},
    "cached": {"fill": "#ffe082", "border": "2px dashed #ef6c00", "label": "cached", "glyph": "C"},
}
HIGHLIGHT_OUTLINE = "3px solid #d50000"


def block_kind(block: BlockInfo) -> str:
    """The style key of a block: free, in_use, shared or cached."""
    if block.state is BlockState.IN_USE:
        return "shared" if block.shared else "in_use"
    return block.state.value


def render_pool_html(snapshot: PoolSnapshot, highlight: Hashable | None = None) -> str:
    """HTML of the pool: a legend, then blocks grouped by page, `highlight`'s blocks outlined.

    Each block carries data-block-id, data-state and data-ref attributes for tests.
    """
    positions = _logical_positions(snapshot, highlight)
    cells = [
        _block_html(b, snapshot.block_size, positions.get(b.block_id)) for b in snapshot.blocks
    ]
    per_page = snapshot.blocks_per_page
    if per_page:
        free_pages = set(snapshot.free_pages())
        groups = [
            _page_html(p, cells[p * per_page : (p + 1) * per_page], p in free_pages)
            for p in range(len(cells) // per_page)
        ]
    else:
        groups = [_flex("".join(cells), gap="3px")]
    return (
        '<div class="paged-kv-pool" style="font-family:monospace;font-size:11px;line-height:1.25">'
        f"{_legend_html(snapshot, highlight)}{_flex(''.join(groups), gap='8px')}</div>"
    )


def render_cache_html(frame: CacheFrame) -> str:
    """HTML of one replay frame: cached key and count per block, heat by count."""
    hottest = max(frame.counts, default=0) or 1
    cells = []
    for block, (key, n) in enumerate(zip(frame.keys, frame.counts, strict=True)):
        heat = n / hottest
        fill = (
            "#ffffff" if key is None else f"hsl({40 - 40 * heat:.0f}, 95%, {88 - 38 * heat:.0f}%)"
        )
        border = "1px dotted #9e9e9e" if key is None else "1px solid #8d6e63"
        mark = ""
        if block == frame.block:
            mark = f"outline:3px {'solid' if frame.hit else 'dashed'} #1b5e20;outline-offset:1px;"
        label = "·" if key is None else f"{key}<br><span style='font-size:8px'>×{n}</span>"
        cells.append(
            f'<div data-block-id="{block}" data-key="{"" if key is None else key}" '
            f'data-count="{n}" '
            f'style="width:34px;height:34px;box-sizing:border-box;background:{fill};'
            f"border:{border};{mark}display:flex;flex-direction:column;align-items:center;"
            f'justify-content:center">{label}</div>'
        )
    legend = (
        "key and ×count per block · colour: white (free) → yellow (low count) → red (hottest) · "
        "outline: solid = hit, dashed = miss"
    )
    return (
        '<div class="paged-kv-cache" style="font-family:monospace;font-size:11px;line-height:1.25">'
        f"<div style='margin-bottom:6px'>{legend}</div>{_flex(''.join(cells), gap='3px')}</div>"
    )


def _logical_positions(snapshot: PoolSnapshot, seq: Hashable | None) -> dict[int, int]:
    """Block id -> its logical index in `seq`'s block table."""
    table = snapshot.block_tables.get(seq, ()) if seq is not None else ()
    return {block_id: i for i, block_id in enumerate(table)}


def _block_html(block: BlockInfo, block_size: int, logical: int | None) -> str:
    kind = block_kind(block)
    style = STYLES[kind]
    glyph = f"×{block.ref_count}" if kind == "shared" else style["glyph"]
    if logical is not None:
        glyph = f"L{logical}"
    owners = ", ".join(str(o) for o in block.owners) or "none"
    title = (
        f"block {block.block_id} · {style['label']} · ref {block.ref_count} · "
        f"owners: {owners} · {block.num_tokens}/{block_size} tokens"
    )
    fill = 100 * block.num_tokens // block_size
    outline = f"outline:{HIGHLIGHT_OUTLINE};outline-offset:1px;" if logical is not None else ""
    return (
        f'<div data-block-id="{block.block_id}" data-state="{kind}" data-ref="{block.ref_count}"'
        f' title="{html.escape(title)}" style="position:relative;width:34px;height:34px;'
        f"box-sizing:border-box;background:{style['fill']};border:{style['border']};{outline}"
        'display:flex;flex-direction:column;align-items:center;justify-content:center">'
        f'<span style="font-size:8px;color:#555">{block.block_id}</span>'
        f"<b>{html.escape(glyph)}</b>"
        f'<span style="position:absolute;left:0;bottom:0;height:3px;width:{fill}%;'
        'background:#37474f"></span></div>'
    )


def _page_html(page: int, cells: list[str], releasable: bool) -> str:
    label = f"page {page}" + (" · releasable" if releasable else "")
    colour = "#2e7d32" if releasable else "#555"
    return (
        f'<div data-page="{page}" data-releasable="{str(releasable).lower()}" '
        f'style="border:1px solid {colour};padding:3px;border-radius:4px">'
        f'<div style="color:{colour};margin-bottom:2px">{label}</div>'
        f"{_flex(''.join(cells), gap='3px')}</div>"
    )


def _legend_html(snapshot: PoolSnapshot, highlight: Hashable | None) -> str:
    counts = {kind: 0 for kind in STYLES}
    for b in snapshot.blocks:
        counts[block_kind(b)] += 1
    items = [
        f'<span style="display:inline-flex;align-items:center;gap:3px">'
        f'<span style="display:inline-block;width:14px;height:14px;box-sizing:border-box;'
        f'background:{s["fill"]};border:{s["border"]}"></span>'
        f"{s['label']} ({html.escape(s['glyph'])}): {counts[kind]}</span>"
        for kind, s in STYLES.items()
    ]
    if highlight is not None:
        items.append(
            f'<span style="outline:{HIGHLIGHT_OUTLINE};padding:0 3px">'
            f"{html.escape(str(highlight))}: L<i>i</i> = logical block i</span>"
        )
    items.append("bar = tokens filled")
    return _flex("".join(items), gap="12px", margin="0 0 6px 0")


def _flex(content: str, *, gap: str, margin: str = "0") -> str:
    return f'<div style="display:flex;flex-wrap:wrap;gap:{gap};margin:{margin}">{content}</div>'
