"""Views of the block pool built from core ipywidgets only (no custom JavaScript).

Each view renders through the pure functions of `paged_kv.widgets.render`;
`BlockPoolView` shows a live pool or manager; `OperationStepper` replays a workload;
`TraceReplayView` replays a block-access trace with each block's count as a heat colour;
`EngineReplayView` serves an engine's requests and steps through its pool.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Protocol

import ipywidgets as widgets

from paged_kv.cache.eviction import PolicySpec
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.snapshot import BlockState, PoolSnapshot
from paged_kv.serving.engine import Engine
from paged_kv.study.operations import Operation, replay
from paged_kv.study.trace_replay import trace_frames
from paged_kv.widgets.render import render_cache_html, render_pool_html


class SnapshotSource(Protocol):
    """Anything that can describe its blocks: a `BlockPool` or a `KVCacheManager`."""

    def snapshot(self) -> PoolSnapshot: ...


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
        policy: PolicySpec = "lfu",
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
