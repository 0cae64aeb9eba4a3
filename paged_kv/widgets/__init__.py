"""Views (chapters 00–06): ipywidgets and static pictures of the pool, the block tables,
eviction, the prefix tree, paged attention and a served run.

The renderers are pure functions (state in, HTML out) that the tests read; the widgets only
step through states. `theme` holds every colour (and the contrast maths), `plots` the plot
conventions shared by all chapters. They need the `course` extra (ipywidgets, matplotlib):
without it, importing this package raises `MissingExtra` naming it (`course_extra`).
"""

from paged_kv.widgets import course_extra  # noqa: F401 - first: checks the extra is installed
from paged_kv.widgets.block_map import block_changes, render_block_table_map
from paged_kv.widgets.engine_run import EngineRun, record_engine
from paged_kv.widgets.eviction_view import eviction_replay, render_eviction_html
from paged_kv.widgets.live_views import BlockPoolView, BlockTableView, PoolGrid
from paged_kv.widgets.pictures import (
    StripRequest,
    render_decode_gather,
    render_gantt,
    render_memory_strips,
    render_online_softmax,
)
from paged_kv.widgets.prefix_tree import prefix_tree_frames, render_prefix_tree_html
from paged_kv.widgets.render import block_kind, render_cache_html, render_pool_html
from paged_kv.widgets.replay_views import (
    EngineReplayView,
    OperationStepper,
    PrefixTreeView,
    TraceReplayView,
)

__all__ = [
    "BlockPoolView",
    "BlockTableView",
    "EngineReplayView",
    "EngineRun",
    "OperationStepper",
    "PoolGrid",
    "PrefixTreeView",
    "StripRequest",
    "TraceReplayView",
    "block_changes",
    "block_kind",
    "eviction_replay",
    "prefix_tree_frames",
    "record_engine",
    "render_block_table_map",
    "render_cache_html",
    "render_decode_gather",
    "render_eviction_html",
    "render_gantt",
    "render_memory_strips",
    "render_online_softmax",
    "render_pool_html",
    "render_prefix_tree_html",
]
