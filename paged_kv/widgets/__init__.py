"""Views (chapters 01–06): ipywidgets that show the pool, a replayed trace and a served run.

`render_pool_html` and `render_cache_html` are pure functions (snapshot in, HTML out); the
widgets around them only step through states.
"""

from paged_kv.widgets.render import block_kind, render_cache_html, render_pool_html
from paged_kv.widgets.views import (
    BlockPoolView,
    EngineReplayView,
    OperationStepper,
    PoolGrid,
    TraceReplayView,
)

__all__ = [
    "BlockPoolView",
    "EngineReplayView",
    "OperationStepper",
    "PoolGrid",
    "TraceReplayView",
    "block_kind",
    "render_cache_html",
    "render_pool_html",
]
