"""Views of a live pool or manager: `BlockPoolView` draws its grid (a menu highlights one
sequence's blocks), `BlockTableView` its block-table map; `refresh()` after changing it."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Any, Protocol

import ipywidgets as widgets

from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.snapshot import PoolSnapshot
from paged_kv.widgets.block_map import render_block_table_map
from paged_kv.widgets.render import render_pool_html
from paged_kv.widgets.stepper import StaticPicture


class SnapshotSource(Protocol):
    """Anything that can describe its blocks: a `BlockPool` or a `KVCacheManager`."""

    def snapshot(self) -> PoolSnapshot: ...


class PoolGrid(StaticPicture, widgets.VBox):
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


class BlockTableView(StaticPicture, widgets.VBox):
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
