"""Views of the block pool built from core ipywidgets only (no custom JavaScript).

`render_pool_html` turns a `PoolSnapshot` into HTML (pure, so tests can read it);
`BlockPoolView` shows a live pool or manager; `OperationStepper` replays a workload;
`TraceReplayView` replays a block-access trace with each block's count as a heat colour;
`EngineReplayView` serves an engine's requests and steps through its pool.
"""

from __future__ import annotations

import html
from collections.abc import Hashable, Sequence
from typing import Protocol

import ipywidgets as widgets

from paged_kv.engine import Engine
from paged_kv.eviction import EvictionPolicy
from paged_kv.manager import KVCacheManager
from paged_kv.replay import Operation, replay
from paged_kv.simulate import CacheFrame, trace_frames
from paged_kv.snapshot import BlockInfo, BlockState, PoolSnapshot

# How each kind of block looks. Colour is doubled by a border style and a glyph, so the
# states stay distinguishable in greyscale and for colour-blind readers.
STYLES: dict[str, dict[str, str]] = {
    "free": {"fill": "#ffffff", "border": "1px dotted #9e9e9e", "label": "free", "glyph": "·"},
    "in_use": {"fill": "#90caf9", "border": "2px solid #1565c0", "label": "in use", "glyph": "1"},
    "shared": {"fill": "#ce93d8", "border": "3px double #6a1b9a", "label": "shared", "glyph": "×n"},
    "cached": {"fill": "#ffe082", "border": "2px dashed #ef6c00", "label": "cached", "glyph": "C"},
}
HIGHLIGHT_OUTLINE = "3px solid #d50000"


class SnapshotSource(Protocol):
    """Anything that can describe its blocks: a `BlockPool` or a `KVCacheManager`."""

    def snapshot(self) -> PoolSnapshot: ...


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


class PoolGrid(widgets.VBox):
    """A snapshot drawn as a grid, with a menu that highlights one sequence's blocks."""

    def __init__(self, snapshot: PoolSnapshot | None = None) -> None:
        self.highlight = widgets.Dropdown(description="highlight", options=[("none", None)])
        self.grid = widgets.HTML()
        super().__init__([self.highlight, self.grid])
        self.add_class("paged-kv-grid")
        self.snapshot = snapshot
        self.highlight.observe(lambda _: self._draw(), names="value")
        if snapshot is not None:
            self.show(snapshot)

    def show(self, snapshot: PoolSnapshot) -> None:
        """Draw `snapshot`, keeping the highlighted sequence if it still owns blocks."""
        self.snapshot = snapshot
        keep = self.highlight.value
        seqs = list(snapshot.block_tables)
        self.highlight.options = [("none", None)] + [(str(s), s) for s in seqs]
        self.highlight.value = keep if keep in seqs else None
        self._draw()

    def _draw(self) -> None:
        if self.snapshot is not None:
            self.grid.value = render_pool_html(self.snapshot, self.highlight.value)


class BlockPoolView(PoolGrid):
    """A live view of a pool or manager: call `refresh()` after changing it."""

    def __init__(self, source: SnapshotSource) -> None:
        self.source = source
        super().__init__(source.snapshot())

    def refresh(self) -> None:
        """Redraw from the source's current state."""
        self.show(self.source.snapshot())


class _Stepper(widgets.VBox):
    """Play / back / step / slider controls over `num_states` recorded states."""

    def __init__(self, num_states: int, body: list[widgets.Widget]) -> None:
        last = num_states - 1
        self.slider = widgets.IntSlider(value=0, min=0, max=last, description="step")
        self.play = widgets.Play(value=0, min=0, max=last, interval=700, description="play")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.back_button = widgets.Button(description="◀ back", tooltip="previous state")
        self.step_button = widgets.Button(description="step ▶", tooltip="next state")
        self.caption = widgets.HTML()
        self.back_button.on_click(lambda _: self.back())
        self.step_button.on_click(lambda _: self.step())
        self.slider.observe(lambda change: self._show(change["new"]), names="value")
        controls = widgets.HBox([self.play, self.back_button, self.step_button, self.slider])
        super().__init__([controls, self.caption, *body])
        self._show(0)

    @property
    def position(self) -> int:
        """Index of the state shown (0 is the start)."""
        return self.slider.value

    def step(self) -> None:
        """Show the next state."""
        self.slider.value = min(self.slider.value + 1, self.slider.max)

    def back(self) -> None:
        """Show the previous state."""
        self.slider.value = max(self.slider.value - 1, 0)

    def _show(self, k: int) -> None:
        raise NotImplementedError  # each stepper draws its own states


class OperationStepper(_Stepper):
    """Replay `ops` on `manager` and step through the states: play, step, back, slider.

    The operations are applied once, up front (the manager ends in the final state); the
    controls move between the recorded snapshots.
    """

    def __init__(self, manager: KVCacheManager, ops: Sequence[Operation]) -> None:
        self.ops = list(ops)
        self.snapshots = replay(manager, self.ops)
        self.view = PoolGrid(self.snapshots[0])
        super().__init__(len(self.snapshots), [self.view])
        self.add_class("paged-kv-stepper")

    def _show(self, k: int) -> None:
        snap = self.snapshots[k]
        what = self.ops[k - 1].describe() if k else "start"
        in_use = snap.count(BlockState.IN_USE)
        self.caption.value = (
            f"<b>step {k}/{len(self.ops)}</b>: {html.escape(what, quote=False)} — "
            f"{in_use} of {len(snap.blocks)} blocks in use"
        )
        self.view.show(snap)


class TraceReplayView(_Stepper):
    """A block-access trace replayed through a pool under `policy`, one access per step.

    Each block shows the key it caches and the policy's count for it as a heat colour, so
    LFU's hot blocks glow; the accessed block is outlined (solid: hit, dashed: miss).
    """

    def __init__(
        self,
        trace: Sequence[int],
        capacity: int,
        policy: str | EvictionPolicy | type[EvictionPolicy] = "lfu",
    ) -> None:
        self.frames = trace_frames(trace, capacity, policy)
        self.grid = widgets.HTML()
        super().__init__(len(self.frames), [self.grid])
        self.add_class("paged-kv-trace")

    def _show(self, k: int) -> None:
        frame = self.frames[k]
        hits = sum(f.hit for f in self.frames[1 : k + 1])
        what = (
            "start" if frame.key is None else f"key {frame.key}: {'hit' if frame.hit else 'miss'}"
        )
        self.caption.value = (
            f"<b>step {k}/{len(self.frames) - 1}</b>: {what} — hit rate so far "
            f"{hits / k if k else 0:.0%}"
        )
        self.grid.value = render_cache_html(frame)


class EngineReplayView(_Stepper):
    """Run `engine` until its queued requests finish, keeping the pool after every step; then
    step through what each step computed, who was preempted, and where the blocks went."""

    def __init__(self, engine: Engine) -> None:
        self.snapshots = [engine.manager.snapshot()]
        self.captions = [f"start: {len(engine.scheduler.waiting)} requests waiting"]
        while engine.has_unfinished():
            plan = engine.step()
            record = engine.timeline[-1]
            self.snapshots.append(engine.manager.snapshot())
            self.captions.append(
                f"computed {plan.describe()} — {record.running} running, {record.waiting} "
                "waiting (id:n = n tokens, * = prefill)"
            )
        self.view = PoolGrid(self.snapshots[0])
        super().__init__(len(self.snapshots), [self.view])
        self.add_class("paged-kv-engine")

    def _show(self, k: int) -> None:
        last = len(self.snapshots) - 1
        self.caption.value = f"<b>step {k}/{last}</b>: {html.escape(self.captions[k], quote=False)}"
        self.view.show(self.snapshots[k])


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
