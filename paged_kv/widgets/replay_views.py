"""Steppers over recorded states, drawn through the pure renderers (`render`, `block_map`,
`eviction_view`, `prefix_tree`, `pictures`): `OperationStepper` replays manager operations as
the block-table map; `PrefixTreeView` grows the prefix tree; `TraceReplayView` replays an
eviction trace one request per step; `EngineReplayView` serves an engine's requests and steps
through its queues, map and timeline.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Any, cast

import ipywidgets as widgets

from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.snapshot import BlockState
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
from paged_kv.widgets.live_views import PoolGrid
from paged_kv.widgets.pictures import render_gantt
from paged_kv.widgets.prefix_tree import prefix_tree_frames, render_prefix_tree_html
from paged_kv.widgets.stepper import Stepper, caption_html
from paged_kv.widgets.theme import INK, MUTED, esc, esc_text


class OperationStepper(Stepper):
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
            self.view: PoolGrid | widgets.HTML = PoolGrid(self.snapshots[0], self.owners)
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


class PrefixTreeView(Stepper):
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
        body: list[widgets.Widget] = [self.tree, self.map] if show_map else [self.tree]
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


class TraceReplayView(Stepper):
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
            requests = cast("Sequence[Sequence[int]]", trace)  # its first item is a request
            self.requests = [tuple(r) for r in requests]
        else:
            flat = cast("Sequence[int]", trace)  # a flat trace of block keys
            self.requests = split_requests(list(flat), request_blocks or 1)
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


class EngineReplayView(Stepper):
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
