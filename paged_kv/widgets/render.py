"""Pure HTML renderers of the pool: a snapshot in, an HTML string out.

The widgets only choose which state to render; tests read these strings directly. Every
element that holds text carries its own ink (see `theme`), and the whole picture sits on its
own card, so a dark page theme cannot wash it out. Above `COMPACT_ABOVE` blocks the grid turns
compact: small squares without text, several pages per row, so 512 blocks fit one screen.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable

from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.study.trace_replay import CacheFrame
from paged_kv.widgets.theme import (
    INK,
    MUTED,
    OUTLINE_CHANGED,
    OUTLINE_HIT,
    OUTLINE_MISS,
    STATE_STYLES,
    card,
    count_colour,
    esc,
    flex,
    legend,
    swatch,
    text_on,
)

STYLES = STATE_STYLES  # the name earlier chapters import
HIGHLIGHT_OUTLINE = OUTLINE_CHANGED
COMPACT_ABOVE = 128
CELL = 34  # px, a block in the full grid
SMALL = 12  # px, a block in the compact grid


def block_kind(block: BlockInfo) -> str:
    """The style key of a block: free, in_use, shared or cached."""
    if block.state is BlockState.IN_USE:
        return "shared" if block.shared else "in_use"
    return block.state.value


def render_pool_html(
    snapshot: PoolSnapshot,
    highlight: Hashable | None = None,
    *,
    compact: bool | None = None,
    changed: Collection[int] = (),
) -> str:
    """HTML of the pool: a legend, then blocks grouped by page.

    `highlight`'s blocks are outlined and labelled with their logical index (L0, L1, …) next
    to their state glyph; blocks in `changed` get a heavy outline. `compact` (default: more
    than `COMPACT_ABOVE` blocks) draws small squares without text. Each block carries
    data-block-id, data-state and data-ref attributes for tests.
    """
    if compact is None:
        compact = len(snapshot.blocks) > COMPACT_ABOVE
    positions = _logical_positions(snapshot, highlight)
    changed = set(changed)
    draw = _small_block_html if compact else _block_html
    cells = [
        draw(b, snapshot.block_size, positions.get(b.block_id), b.block_id in changed)
        for b in snapshot.blocks
    ]
    per_page = snapshot.blocks_per_page
    columns = min(per_page or 16, 8)
    width = columns * ((SMALL if compact else CELL) + 3)
    if per_page:
        free_pages = set(snapshot.free_pages())
        groups = [
            _page_html(p, cells[p * per_page : (p + 1) * per_page], p in free_pages, width, compact)
            for p in range(len(cells) // per_page)
        ]
        body = flex("".join(groups), gap="6px")
    else:
        body = flex("".join(cells), gap="3px")
    return card(_legend_html(snapshot, highlight, compact) + body, "paged-kv-pool")


def render_cache_html(frame: CacheFrame) -> str:
    """HTML of one trace-replay frame: the key and count each block caches, on the fixed
    count scale of `theme.COUNT_BINS` (the same colours in every frame)."""
    cells = []
    for block, (key, n) in enumerate(zip(frame.keys, frame.counts, strict=True)):
        fill = "#ffffff" if key is None else count_colour(max(n, 1))
        border = "1px dotted #6b6b6b" if key is None else "1px solid #3d3d3d"
        mark = ""
        if block == frame.block:
            mark = f"outline:{OUTLINE_HIT if frame.hit else OUTLINE_MISS};outline-offset:1px;"
        label = "·" if key is None else f"{esc(key)}<br><span style='font-size:9px'>×{n}</span>"
        cells.append(
            f'<div data-block-id="{block}" data-key="{"" if key is None else esc(key)}" '
            f'data-count="{n}" '
            f'style="width:{CELL}px;height:{CELL}px;box-sizing:border-box;background:{fill};'
            f"color:{text_on(fill)};border:{border};{mark}display:flex;flex-direction:column;"
            f'align-items:center;justify-content:center">{label}</div>'
        )
    return card(count_legend() + flex("".join(cells), gap="3px"), "paged-kv-cache")


def count_legend() -> str:
    """The fixed count scale, with the hit and miss outlines."""
    from paged_kv.widgets.theme import COUNT_BINS

    items = [(swatch("#ffffff", "1px dotted #6b6b6b", "·"), "free")]
    for low, high, colour in COUNT_BINS:
        text = f"×{low}" if high == low else (f"×{low}+" if high is None else f"×{low}–{high}")
        items.append((swatch(colour), text))
    items.append((_outline_swatch(OUTLINE_HIT), "hit"))
    items.append((_outline_swatch(OUTLINE_MISS), "miss"))
    return legend(items)


def _outline_swatch(outline: str) -> str:
    return (
        f'<span style="display:inline-block;width:12px;height:12px;outline:{outline};'
        'margin:2px;background:#ffffff"></span>'
    )


def _logical_positions(snapshot: PoolSnapshot, seq: Hashable | None) -> dict[int, int]:
    """Block id -> its logical index in `seq`'s block table."""
    table = snapshot.block_tables.get(seq, ()) if seq is not None else ()
    return {block_id: i for i, block_id in enumerate(table)}


def _title(block: BlockInfo, block_size: int) -> str:
    owners = ", ".join(str(o) for o in block.owners) or "none"
    return esc(
        f"block {block.block_id} · {STATE_STYLES[block_kind(block)]['label']} · "
        f"ref {block.ref_count} · owners: {owners} · {block.num_tokens}/{block_size} tokens"
    )


def _block_html(block: BlockInfo, block_size: int, logical: int | None, changed: bool) -> str:
    kind = block_kind(block)
    style = STATE_STYLES[kind]
    ink = text_on(style["fill"])
    glyph = f"×{block.ref_count}" if kind == "shared" else style["glyph"]
    outline = ""
    if changed:
        outline = f"outline:{OUTLINE_CHANGED};outline-offset:1px;"
    elif logical is not None:
        outline = f"outline:{HIGHLIGHT_OUTLINE};outline-offset:1px;"
    badge = ""
    if logical is not None:
        badge = (
            '<span style="position:absolute;right:-2px;top:-7px;background:#111111;'
            f'color:#ffffff;font-size:9px;padding:0 2px;border-radius:3px"><b>L{logical}</b></span>'
        )
    fill = 100 * block.num_tokens // block_size
    return (
        f'<div data-block-id="{block.block_id}" data-state="{kind}" data-ref="{block.ref_count}"'
        f' title="{_title(block, block_size)}" style="position:relative;width:{CELL}px;'
        f"height:{CELL}px;box-sizing:border-box;background:{style['fill']};color:{ink};"
        f"border:{style['border']};{outline}display:flex;flex-direction:column;"
        'align-items:center;justify-content:center">'
        f'<span style="font-size:9px;color:{ink}">{block.block_id}</span>'
        f"<b>{esc(glyph)}</b>{badge}"
        f'<span style="position:absolute;left:0;bottom:0;height:4px;width:{fill}%;'
        'background:#111111"></span></div>'
    )


def _small_block_html(block: BlockInfo, block_size: int, logical: int | None, changed: bool) -> str:
    kind = block_kind(block)
    style = STATE_STYLES[kind]
    border = {"free": "1px solid #9a9a9a", "cached": "1px dashed #4d4500"}.get(
        kind, "1px solid #111111"
    )
    outline = ""
    if changed or logical is not None:
        outline = "outline:2px solid #111111;outline-offset:0;"
    return (
        f'<div data-block-id="{block.block_id}" data-state="{kind}" data-ref="{block.ref_count}"'
        f' title="{_title(block, block_size)}" style="width:{SMALL}px;height:{SMALL}px;'
        f'box-sizing:border-box;background:{style["fill"]};border:{border};{outline}"></div>'
    )


def _page_html(page: int, cells: list[str], releasable: bool, width: int, compact: bool) -> str:
    if compact:  # a label that fits the narrow page
        label = f"p{page}" + (" releasable" if releasable else "")
    else:
        label = f"page {page}" + (" · releasable" if releasable else "")
    colour = "#006b3c" if releasable else MUTED
    return (
        f'<div data-page="{page}" data-releasable="{str(releasable).lower()}" '
        f'style="border:1px solid {colour};padding:3px;border-radius:4px;width:{width}px">'
        f'<div style="color:{colour};margin-bottom:2px;font-size:10px">{label}</div>'
        f"{flex(''.join(cells), gap='3px')}</div>"
    )


def _legend_html(snapshot: PoolSnapshot, highlight: Hashable | None, compact: bool) -> str:
    counts = {kind: 0 for kind in STATE_STYLES}
    for b in snapshot.blocks:
        counts[block_kind(b)] += 1
    items = [
        (swatch(s["fill"], s["border"], "" if compact else s["glyph"]),
         f"{s['label']} ({esc(s['glyph'])}): {counts[kind]}")
        for kind, s in STATE_STYLES.items()
    ]  # fmt: skip
    if highlight is not None:
        items.append(
            (_outline_swatch(HIGHLIGHT_OUTLINE), f"{esc(highlight)}: L<i>i</i> = logical block i")
        )
    if not compact:
        items.append(
            ('<span style="display:inline-block;width:16px;height:4px;background:#111111">'
             "</span>", "bar = tokens filled")
        )  # fmt: skip
    else:
        items.append(("", f"<span style='color:{INK}'>compact: hover a block for details</span>"))
    return legend(items)
