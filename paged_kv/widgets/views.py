"""Views built from core ipywidgets only (no custom JavaScript).

Each view draws through the pure renderers (`render`, `block_map`, `eviction_view`,
`prefix_tree`, `pictures`); the widgets only choose which state to show. Steppers share one
control row: play/pause, stop (stays where it is), back, step, a speed menu and a slider with a
minimum width, on a full-width row of its own above the picture, which scrolls inside a box of
bounded height so the controls stay in view. Every view also carries a static HTML picture of
its current state in its output (`_repr_mimebundle_`), so GitHub, nbviewer and a notebook
that was not run show the picture instead of the widget's repr.

`BlockPoolView` shows a live pool or manager, `BlockTableView` a live manager's block-table
map; `OperationStepper` replays manager operations as the map; `PrefixTreeView` grows the
prefix tree; `TraceReplayView` replays an eviction trace one request per step;
`EngineReplayView` serves an engine's requests and steps through its queues, map and timeline.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Any, Protocol

import ipywidgets as widgets

from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.snapshot import BlockState, PoolSnapshot
from paged_kv.serving.engine import Engine
from paged_kv.study.operations import Operation, replay
from paged_kv.widgets.block_map import render_block_table_map
from paged_kv.widgets.engine_run import EngineRun, record_engine
from paged_kv.widgets.eviction_view import (
    eviction_replay,
    render_eviction_html,
    reused_keys,
    split_requests,
)
from paged_kv.widgets.pictures import render_gantt
from paged_kv.widgets.prefix_tree import prefix_tree_frames, render_prefix_tree_html
from paged_kv.widgets.render import render_pool_html
from paged_kv.widgets.theme import CARD, FONT, INK, MUTED, esc, esc_text

SPEEDS = [("slow (1.5 s)", 1500), ("normal (0.8 s)", 800), ("fast (0.3 s)", 300),
          ("fastest (0.1 s)", 100)]  # fmt: skip
# Play's own stop button jumps back to the first step; ours pauses where it is.
CONTROLS_CSS = (
    "<style>.paged-kv-controls .widget-play > button:nth-of-type(2){display:none}"
    ".paged-kv-controls .widget-slider .slider-container{min-width:160px}</style>"
)


def caption_html(text: str) -> str:
    """A caption line on the card's own background, readable in any page theme (with the
    controls' style rule: a caption sits under the controls in every stepper)."""
    return (
        f'{CONTROLS_CSS}<div class="paged-kv-caption" style="background:{CARD};color:{INK};'
        f'padding:4px 8px;border:1px solid #c8c8c8;border-radius:6px;{FONT}">{text}</div>'
    )


class SnapshotSource(Protocol):
    """Anything that can describe its blocks: a `BlockPool` or a `KVCacheManager`."""

    def snapshot(self) -> PoolSnapshot: ...


class _StaticPicture:
    """A widget whose output also holds a static HTML picture of what it shows now."""

    def static_html(self) -> str:
        raise NotImplementedError

    def _static_note(self) -> str:
        return ""

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if not bundle:
            return bundle
        note = self._static_note()
        bundle["text/html"] = self.static_html() + (caption_html(esc(note)) if note else "")
        bundle["text/plain"] = f"{type(self).__name__}: {note or 'run the notebook to interact'}"
        return bundle


class PoolGrid(_StaticPicture, widgets.VBox):
    """A snapshot drawn as a grid, with a menu that highlights one sequence's blocks.

    The chosen sequence is remembered: it is outlined again whenever it owns blocks."""

    def __init__(
        self, snapshot: PoolSnapshot | None = None, sequences: Sequence[Hashable] = ()
    ) -> None:
        self.highlight = widgets.Dropdown(
            description="highlight", options=[("none", None)], layout=widgets.Layout(width="auto")
        )
        self.grid = widgets.HTML()
        super().__init__([self.highlight, self.grid])
        self.add_class("paged-kv-grid")
        self.snapshot = snapshot
        self._known = list(sequences)
        self._wanted: Hashable | None = None
        self.highlight.observe(self._picked, names="value")
        if snapshot is not None:
            self.show(snapshot)

    def show(self, snapshot: PoolSnapshot, changed: Collection[int] = ()) -> None:
        """Draw `snapshot`, outlining `changed` blocks and the chosen sequence's."""
        self.snapshot, self._changed = snapshot, changed
        for seq in snapshot.block_tables:
            if seq not in self._known:
                self._known.append(seq)
        options = [("none", None)] + [(str(s), s) for s in self._known]
        if list(self.highlight.options) != options:
            wanted = self._wanted
            self.highlight.options = options
            self.highlight.value = wanted if wanted in self._known else None
            self._wanted = wanted
        self._draw()

    def _picked(self, change: dict[str, Any]) -> None:
        self._wanted = change["new"]
        self._draw()

    def static_html(self) -> str:
        return self.grid.value

    def _draw(self) -> None:
        if self.snapshot is not None:
            self.grid.value = render_pool_html(
                self.snapshot, self.highlight.value, changed=getattr(self, "_changed", ())
            )


class BlockPoolView(PoolGrid):
    """A live view of a pool or manager: call `refresh()` after changing it."""

    def __init__(self, source: SnapshotSource) -> None:
        self.source = source
        super().__init__(source.snapshot())

    def refresh(self) -> None:
        """Redraw from the source's current state."""
        self.show(self.source.snapshot())


class BlockTableView(_StaticPicture, widgets.VBox):
    """The block-table map of a live manager; `refresh()` after changing it outlines what
    changed since the last refresh."""

    def __init__(self, manager: KVCacheManager) -> None:
        self.manager = manager
        self.map = widgets.HTML()
        super().__init__([self.map])
        self.add_class("paged-kv-table-view")
        self._last: PoolSnapshot | None = None
        self._owners: list[Hashable] = []
        self.refresh()

    def refresh(self) -> None:
        snap = self.manager.snapshot()
        self._owners += [s for s in snap.block_tables if s not in self._owners]
        self.map.value = render_block_table_map(snap, self._last, owners=self._owners)
        self._last = snap

    def static_html(self) -> str:
        return self.map.value


class _Stepper(_StaticPicture, widgets.VBox):
    """Play / stop / back / step / speed / slider over `num_states` recorded states."""

    def __init__(self, num_states: int, body: list[widgets.Widget], start: int = 0) -> None:
        last = num_states - 1
        start = max(0, min(start, last))
        self.slider = widgets.IntSlider(
            value=start, min=0, max=last, description="step",
            layout=widgets.Layout(min_width="300px", flex="1 1 300px"),
            style={"description_width": "36px"},
        )  # fmt: skip
        self.play = widgets.Play(
            value=start, min=0, max=last, interval=800, description="play", show_repeat=False
        )
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        button = widgets.Layout(width="auto")
        self.stop_button = widgets.Button(description="■ stop", tooltip="stop here", layout=button)
        self.back_button = widgets.Button(description="◀ back", tooltip="previous", layout=button)
        self.step_button = widgets.Button(description="step ▶", tooltip="next", layout=button)
        self.speed = widgets.Dropdown(
            options=SPEEDS, value=800, description="speed", layout=widgets.Layout(width="200px"),
            style={"description_width": "44px"},
        )  # fmt: skip
        self.caption = widgets.HTML()
        self.stop_button.on_click(lambda _: self.stop())
        self.back_button.on_click(lambda _: self.back())
        self.step_button.on_click(lambda _: self.step())
        self.speed.observe(lambda change: setattr(self.play, "interval", change["new"]), "value")
        self.slider.observe(lambda change: self._show(change["new"]), names="value")
        self.controls = widgets.HBox(
            [self.play, self.stop_button, self.back_button, self.step_button, self.speed,
             self.slider],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )  # fmt: skip
        self.controls.add_class("paged-kv-controls")
        self.body = widgets.VBox(
            body, layout=widgets.Layout(max_height="75vh", overflow="hidden auto")
        )
        super().__init__([self.controls, self.caption, self.body])
        self._num_states = num_states
        self._show(start)

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

    def stop(self) -> None:
        """Stop playing and stay on the state shown."""
        self.play.playing = False

    def _show(self, k: int) -> None:
        raise NotImplementedError  # each stepper draws its own states

    def _static_note(self) -> str:
        return (
            f"a static picture of step {self.position} of {self._num_states - 1}; "
            "run the notebook to step through"
        )

    def static_html(self) -> str:
        return self.caption.value + "".join(
            getattr(w, "value", "") for w in self.body.children if isinstance(w, widgets.HTML)
        )


class OperationStepper(_Stepper):
    """Replay `ops` on `manager` and step through the states as the block-table map.

    The operations are applied once, up front (the manager ends in the final state); the
    controls move between the recorded snapshots. Each step outlines the blocks and table
    entries it changed and names them under the map. `view="grid"` draws the pool grid (with
    a highlight menu) instead of the map.
    """

    def __init__(
        self,
        manager: KVCacheManager,
        ops: Sequence[Operation],
        *,
        start: int = 0,
        view: str = "map",
    ) -> None:
        self.ops = list(ops)
        self.snapshots = replay(manager, self.ops)
        self.owners: list[Hashable] = []
        for snap in self.snapshots:
            self.owners += [s for s in snap.block_tables if s not in self.owners]
        self.kind = view
        if view == "grid":
            self.view: widgets.Widget = PoolGrid(self.snapshots[0], self.owners)
        else:
            self.view = widgets.HTML()
        super().__init__(len(self.snapshots), [self.view], start)
        self.add_class("paged-kv-stepper")

    def _show(self, k: int) -> None:
        snap = self.snapshots[k]
        what = self.ops[k - 1].describe() if k else "start"
        in_use = snap.count(BlockState.IN_USE)
        self.caption.value = caption_html(
            f"<b>step {k}/{len(self.ops)}</b>: {esc_text(what)} — {in_use} of {len(snap.blocks)} "
            "blocks in use"
        )
        prev = self.snapshots[k - 1] if k else None
        if isinstance(self.view, PoolGrid):
            from paged_kv.widgets.block_map import block_changes

            self.view.show(snap, block_changes(prev, snap).blocks)
        else:
            self.view.value = render_block_table_map(snap, prev, owners=self.owners)

    def static_html(self) -> str:
        body = self.view.static_html() if isinstance(self.view, PoolGrid) else self.view.value
        return self.caption.value + body


class PrefixTreeView(_Stepper):
    """Apply `ops` to a prefix-caching `manager` and step through its prefix tree: the
    chained-hash blocks (or the radix index's nodes) as a tree that grows as requests
    arrive, each block in use, cached or evicted; with `show_map`, the block-table map below."""

    def __init__(
        self,
        manager: KVCacheManager,
        ops: Sequence[Operation],
        *,
        start: int = 0,
        show_map: bool = False,
    ) -> None:
        self.ops = list(ops)
        self.show_map = show_map
        self.frames = prefix_tree_frames(manager, self.ops)
        self.snapshots = [f.snapshot for f in self.frames]
        self.owners: list[Hashable] = []
        for snap in self.snapshots:
            self.owners += [s for s in snap.block_tables if s not in self.owners]
        self.tree = widgets.HTML()
        self.map = widgets.HTML()
        body = [self.tree, self.map] if show_map else [self.tree]
        super().__init__(len(self.frames), body, start)
        self.add_class("paged-kv-tree-view")

    def _show(self, k: int) -> None:
        frame = self.frames[k]
        self.caption.value = caption_html(
            f"<b>step {k}/{len(self.frames) - 1}</b>: {esc_text(frame.what)}"
        )
        self.tree.value = render_prefix_tree_html(frame)
        if self.show_map:
            prev = self.snapshots[k - 1] if k else None
            self.map.value = render_block_table_map(self.snapshots[k], prev, owners=self.owners)


class TraceReplayView(_Stepper):
    """A block-access trace replayed through a pool under `policy`, one request per step.

    `request_blocks` cuts the flat trace into requests (or pass a list of requests). Each
    block shows its key and the policy's count on a fixed colour scale; shared-prefix keys
    (bold, solid border) stand apart from private ones (italic, dashed); the accessed blocks
    are outlined (solid: hit, dashed: miss); each victim is marked and the caption says why
    it was chosen; LFU's buckets (LRU's and FIFO's queue) stand beside the cache. Opens at
    the first step with an eviction (`start="first_eviction"`) or at `start`.
    """

    def __init__(
        self,
        trace: Sequence[int] | Sequence[Sequence[int]],
        capacity: int,
        policy: PolicySpec = "lfu",
        *,
        request_blocks: int | None = None,
        prefix_keys: Collection[int] | None = None,
        start: int | str = "first_eviction",
    ) -> None:
        if trace and not isinstance(trace[0], int):
            self.requests = [tuple(r) for r in trace]  # type: ignore[arg-type]
        else:
            self.requests = split_requests(list(trace), request_blocks or 1)  # type: ignore[arg-type]
        self.policy_name = make_policy(policy).name if isinstance(policy, str) else str(policy)
        self.frames = eviction_replay(self.requests, capacity, policy)
        self.prefix_keys = (
            set(prefix_keys) if prefix_keys is not None else reused_keys(self.requests)
        )
        if start == "first_eviction":
            start = next((f.step for f in self.frames if f.evictions), 0)
        self.grid = widgets.HTML()
        super().__init__(len(self.frames), [self.grid], int(start))
        self.add_class("paged-kv-trace")

    def _show(self, k: int) -> None:
        frame = self.frames[k]
        self.caption.value = caption_html(
            f"<b>step {k}/{len(self.frames) - 1}</b> · policy {esc(self.policy_name)} · one "
            "request per step"
        )
        self.grid.value = render_eviction_html(
            frame, prefix_keys=self.prefix_keys, policy_name=self.policy_name
        )


class EngineReplayView(_Stepper):
    """Run `engine` until its queued requests finish, recording every step; then step
    through the queues (waiting, running, finished), the block-table map (what changed
    outlined) and the requests' timeline on a step axis with the current step marked."""

    def __init__(self, engine: Engine, *, start: int = 0) -> None:
        self.run: EngineRun = record_engine(engine)
        self.snapshots = [self.run.start] + [s.snapshot for s in self.run.steps]
        self.phases = self.run.phases()
        self.owners: list[Hashable] = list(self.run.requests)
        self.queues = widgets.HTML()
        self.map = widgets.HTML()
        self.timeline = widgets.HTML()
        super().__init__(len(self.snapshots), [self.queues, self.map, self.timeline], start)
        self.add_class("paged-kv-engine")

    def _show(self, k: int) -> None:
        last = len(self.snapshots) - 1
        if k == 0:
            what = f"start: {len(self.run.start_waiting)} requests waiting"
            waiting, running, finished = self.run.start_waiting, (), ()
        else:
            s = self.run.steps[k - 1]
            what = f"step {s.step} computed " + _describe_work(s)
            waiting, running = s.waiting, s.running
            finished = tuple(r for t in self.run.steps[:k] for r in t.finished)
        self.caption.value = caption_html(f"<b>step {k}/{last}</b>: {esc_text(what)}")
        self.queues.value = _queues_html(waiting, running, finished, self.owners)
        prev = self.snapshots[k - 1] if k else None
        self.map.value = render_block_table_map(self.snapshots[k], prev, owners=self.owners)
        self.timeline.value = render_gantt(self.phases, current=k - 1 if k else None)


def _describe_work(s: Any) -> str:
    parts = []
    if s.prefill:
        parts.append("prefill of " + ", ".join(map(str, s.prefill)))
    if s.decode:
        parts.append("one decode token for " + ", ".join(map(str, s.decode)))
    text = "; ".join(parts) + f" ({s.computed.split(';')[0]} = id:tokens, * = prefill)"
    if s.preempted:
        text += f"; preempted {', '.join(map(str, s.preempted))} (blocks freed, recompute later)"
    if s.finished:
        text += f"; finished {', '.join(map(str, s.finished))}"
    return text


def _queues_html(
    waiting: Sequence[int], running: Sequence[int], finished: Sequence[int], owners: list[Hashable]
) -> str:
    from paged_kv.widgets.theme import card, owner_colours, swatch

    colours = owner_colours(owners)

    def chips(ids: Sequence[int]) -> str:
        if not ids:
            return f'<span style="color:{MUTED}">none</span>'
        return " ".join(
            f'<span style="display:inline-flex;align-items:center;gap:2px;color:{INK}">'
            f"{swatch(colours[r][0])}{r}</span>"
            for r in ids
        )

    rows = "".join(
        f'<div data-queue="{name}" style="margin:1px 0;color:{INK}"><b style="display:'
        f'inline-block;width:70px">{name}</b>{chips(ids)}</div>'
        for name, ids in (("waiting", waiting), ("running", running), ("finished", finished))
    )
    return card(rows, "paged-kv-queues")
