"""The block-table map: each sequence's logical blocks pointing into the physical pool.

One row per sequence, its logical blocks L0, L1, … in its own hue, each labelled with the
physical block it points to (`→7`); below, the pool, each block in its owner's hue and listing
who points at it (`a:L0 b:L0`), so a shared block shows several rows pointing at one block.
Given the previous snapshot, `block_changes` names what happened (a new block, a fork, a
copy-on-write, a free) and the blocks that changed are outlined. Pure: snapshots in, HTML out.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.widgets.render import COMPACT_ABOVE, block_kind
from paged_kv.widgets.theme import (
    INK,
    MUTED,
    OUTLINE_CHANGED,
    STATE_STYLES,
    card,
    esc,
    esc_text,
    flex,
    legend,
    owner_colours,
    swatch,
    text_on,
)

MAP_CELL = 52  # px: room for "a:L0" twice
MAX_POINTERS = 3  # pointer labels listed in a pool block before "+n"


@dataclass(frozen=True)
class BlockChanges:
    """What changed between two snapshots: sentences for the caption, and the blocks and
    (sequence, logical index) entries that changed, to outline."""

    events: list[str] = field(default_factory=list)
    blocks: set[int] = field(default_factory=set)
    entries: set[tuple[Hashable, int]] = field(default_factory=set)
    copies: dict[int, int] = field(default_factory=dict)  # destination -> source (copy-on-write)


def block_changes(prev: PoolSnapshot | None, cur: PoolSnapshot) -> BlockChanges:
    """Name what happened between `prev` and `cur`: sequences added (with their prefix hits)
    or forked, blocks appended, copy-on-write copies, sequences freed."""
    changes = BlockChanges()
    if prev is None:
        return changes
    before = {b.block_id: b for b in prev.blocks}
    for b in cur.blocks:
        old = before.get(b.block_id)
        if old is None or (old.state, old.ref_count, old.owners, old.num_tokens) != (
            b.state,
            b.ref_count,
            b.owners,
            b.num_tokens,
        ):
            changes.blocks.add(b.block_id)
    old_tables, new_tables = prev.block_tables, cur.block_tables
    for seq, table in new_tables.items():
        old = old_tables.get(seq)
        if old is None:
            parent = next(
                (p for p, t in old_tables.items() if tuple(t) == tuple(table) and p in new_tables),
                None,
            )
            if parent is not None and table:
                changes.events.append(
                    f"fork {seq!s} from {parent!s}: shares all {len(table)} blocks {list(table)}"
                )
            else:
                reused = [b for b in table if before[b].state is not BlockState.FREE]
                hits = f" ({len(reused)} prefix hits: {reused})" if reused else ""
                changes.events.append(f"add {seq!s}: blocks {list(table)}{hits}")
            changes.entries.update((seq, i) for i in range(len(table)))
            continue
        for i, block in enumerate(table):
            if i >= len(old):
                changes.events.append(f"{seq!s} L{i} → new block {block}")
                changes.entries.add((seq, i))
            elif old[i] != block:
                changes.events.append(
                    f"copy-on-write: {seq!s} L{i} was shared block {old[i]}, now its own copy "
                    f"{block}"
                )
                changes.entries.add((seq, i))
                changes.copies[block] = old[i]
    for seq, table in old_tables.items():
        if seq not in new_tables:
            after = {b.block_id: b for b in cur.blocks}
            kept = [b for b in table if after[b].state is BlockState.CACHED]
            held = [b for b in table if after[b].state is BlockState.IN_USE]
            freed = [b for b in table if after[b].state is BlockState.FREE]
            parts = [
                f"{len(kept)} cached {kept}" if kept else "",
                f"{len(held)} still held by others {held}" if held else "",
                f"{len(freed)} free {freed}" if freed else "",
            ]
            changes.events.append(f"free {seq!s}: " + ", ".join(p for p in parts if p))
    return changes


def render_block_table_map(
    snapshot: PoolSnapshot,
    prev: PoolSnapshot | None = None,
    *,
    highlight: Hashable | None = None,
    owners: list[Hashable] | None = None,
) -> str:
    """HTML of the map: sequence rows above, the physical pool below, what changed since
    `prev` outlined and listed. `owners` fixes the order of hues (e.g. every sequence a
    stepper will show), so a sequence keeps its colour from step to step.

    Rows carry data-seq, logical blocks data-logical and data-points-to, pool blocks
    data-block-id, data-state and data-pointers ("a:L0 b:L0"), for tests.
    """
    changes = block_changes(prev, snapshot)
    colours = owner_colours([*(owners or ()), *snapshot.block_tables])
    pointers: dict[int, list[tuple[Hashable, int]]] = {}
    for seq, table in snapshot.block_tables.items():
        for i, block in enumerate(table):
            pointers.setdefault(block, []).append((seq, i))
    rows = "".join(
        _row_html(seq, table, snapshot, colours, changes, seq == highlight)
        for seq, table in snapshot.block_tables.items()
    )
    if not rows:
        rows = f'<div style="color:{MUTED}">no sequences</div>'
    compact = len(snapshot.blocks) > COMPACT_ABOVE
    pool = "".join(
        _pool_block_html(b, snapshot.block_size, pointers.get(b.block_id, []), colours, changes,
                         compact)
        for b in snapshot.blocks
    )  # fmt: skip
    owner_items = [
        (swatch(fill, "2px dashed #111111" if dashed else "1px solid #111111"), esc(seq))
        for seq, (fill, dashed) in colours.items()
        if seq in snapshot.block_tables
    ]
    state_items = [
        (swatch(STATE_STYLES[k]["fill"], STATE_STYLES[k]["border"], STATE_STYLES[k]["glyph"]),
         STATE_STYLES[k]["label"])
        for k in ("free", "cached")
    ]  # fmt: skip
    marks = [
        ('<span style="display:inline-block;width:12px;height:12px;margin:2px;'
         f'outline:{OUTLINE_CHANGED}"></span>', "changed this step"),
        (f'<b style="color:{INK}">×n</b>', "shared by n sequences"),
    ]  # fmt: skip
    head = legend(owner_items + state_items + marks)
    section = f'<div style="color:{MUTED};margin:8px 0 3px 0">'
    body = (
        f"{head}{section}block tables (logical block → physical block)</div>{rows}"
        f"{section}physical pool ({len(snapshot.blocks)} blocks of {snapshot.block_size} tokens;"
        f" each block lists who points at it)</div>{flex(pool, gap='3px')}"
    )
    if changes.events:
        items = "".join(f"<li>{esc_text(e)}</li>" for e in changes.events)
        body += (
            f'<ul data-changes style="margin:6px 0 0 0;padding-left:18px;color:{INK}">{items}</ul>'
        )
    return card(body, "paged-kv-map")


def _row_html(
    seq: Hashable,
    table: tuple[int, ...],
    snapshot: PoolSnapshot,
    colours: dict[Hashable, tuple[str, bool]],
    changes: BlockChanges,
    highlighted: bool,
) -> str:
    fill, dashed = colours[seq]
    ink = text_on(fill)
    by_id = {b.block_id: b for b in snapshot.blocks}
    cells = []
    size = snapshot.block_size
    for i, block in enumerate(table):
        info = by_id[block]
        shared = f" ×{info.ref_count}" if info.ref_count > 1 else ""
        outline = (
            f"outline:{OUTLINE_CHANGED};outline-offset:1px;" if (seq, i) in changes.entries else ""
        )
        border = "2px dashed #111111" if dashed else "1px solid #111111"
        filled = 100 * min(size, info.num_tokens) // size
        cells.append(
            f'<div data-logical="{i}" data-points-to="{block}" title="{esc(seq)} logical block '
            f'{i} → physical block {block}" style="position:relative;width:{MAP_CELL}px;'
            f"height:30px;box-sizing:border-box;background:{fill};color:{ink};border:{border};"
            f'{outline}display:flex;flex-direction:column;align-items:center;justify-content:center">'
            f"<b>L{i}</b><span>→{block}{shared}</span>"
            f'<span style="position:absolute;left:0;bottom:0;height:3px;width:{filled}%;'
            f'background:{ink}"></span></div>'
        )
    name_style = "font-weight:bold;" if highlighted else ""
    label = (
        f'<span style="display:inline-flex;align-items:center;gap:4px;width:120px;'
        f'{name_style}color:{INK};overflow:hidden;text-overflow:ellipsis;white-space:nowrap">'
        f"{swatch(fill)}{esc(seq)}</span>"
    )
    return (
        f'<div data-seq="{esc(seq)}" style="display:flex;align-items:center;gap:3px;'
        f'margin:2px 0;flex-wrap:wrap">{label}{"".join(cells)}</div>'
    )


def _pool_block_html(
    block: BlockInfo,
    block_size: int,
    pointers: list[tuple[Hashable, int]],
    colours: dict[Hashable, tuple[str, bool]],
    changes: BlockChanges,
    compact: bool,
) -> str:
    kind = block_kind(block)
    state = STATE_STYLES[kind]
    outline = (
        f"outline:{OUTLINE_CHANGED};outline-offset:1px;" if block.block_id in changes.blocks else ""
    )
    label = " ".join(f"{seq}:L{i}" for seq, i in pointers)
    title = esc(
        f"block {block.block_id} · {state['label']} · ref {block.ref_count}"
        + (f" · {label}" if label else "")
        + f" · {block.num_tokens}/{block_size} tokens"
    )
    attrs = (
        f'data-block-id="{block.block_id}" data-state="{kind}" data-ref="{block.ref_count}" '
        f'data-pointers="{esc(label)}" title="{title}"'
    )
    if compact:
        fill = colours[pointers[0][0]][0] if pointers else state["fill"]
        border = {"free": "1px solid #9a9a9a", "cached": "1px dashed #4d4500"}.get(
            kind, "1px solid #111111"
        )
        return (
            f'<div {attrs} style="width:12px;height:12px;box-sizing:border-box;'
            f'background:{fill};border:{border};{outline}"></div>'
        )
    if not pointers:  # free or cached: the state's own look
        ink = text_on(state["fill"])
        body = f'<span style="font-size:9px">{block.block_id}</span><b>{esc(state["glyph"])}</b>'
        return (
            f'<div {attrs} style="width:{MAP_CELL}px;height:44px;box-sizing:border-box;'
            f"background:{state['fill']};color:{ink};border:{state['border']};{outline}"
            f'display:flex;flex-direction:column;align-items:center;justify-content:center">'
            f"{body}</div>"
        )
    bands = []
    shown = pointers[:MAX_POINTERS]
    for seq, i in shown:
        fill = colours[seq][0]
        bands.append(
            f'<span style="flex:1;display:flex;align-items:center;justify-content:center;'
            f"background:{fill};color:{text_on(fill)};font-size:9px;white-space:nowrap;"
            f'overflow:hidden">{esc(_short(seq))}:L{i}</span>'
        )
    if len(pointers) > MAX_POINTERS:
        bands.append(
            f'<span style="background:#ffffff;color:{INK};font-size:9px;text-align:center">'
            f"+{len(pointers) - MAX_POINTERS}</span>"
        )
    shared = len(pointers) > 1
    head_fill = "#111111"
    source = changes.copies.get(block.block_id)
    copied = "" if source is None else f" ⇐{source}"
    head = (
        f'<span style="background:{head_fill};color:#ffffff;font-size:9px;text-align:center">'
        f"{block.block_id}{f' ×{block.ref_count}' if shared or block.ref_count > 1 else ''}"
        f"{copied}</span>"
    )
    border = "3px double #111111" if block.ref_count > 1 else "1px solid #111111"
    return (
        f'<div {attrs} style="width:{MAP_CELL}px;height:44px;box-sizing:border-box;'
        f"border:{border};{outline}display:flex;flex-direction:column;overflow:hidden;"
        f'background:#ffffff">{head}{"".join(bands)}</div>'
    )


def _short(seq: Hashable, width: int = 6) -> str:
    text = str(seq)
    return text if len(text) <= width else text[: width - 1] + "…"
