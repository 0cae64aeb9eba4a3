"""paged_kv.widgets.live_views: views that refresh from a live pool or manager."""

from widget_html import states_in

from paged_kv import BlockPool, KVCacheManager
from paged_kv.widgets import BlockPoolView


def test_view_refreshes_from_its_source_and_offers_each_sequence():
    m = KVCacheManager(4, 2)
    view = BlockPoolView(m)
    assert states_in(view.grid.value) == ["free"] * 4
    m.add_sequence("a", [1, 2, 3])
    view.refresh()
    assert states_in(view.grid.value) == ["in_use", "in_use", "free", "free"]
    assert [label for label, _ in view.highlight.options] == ["none", "a"]
    view.highlight.value = "a"
    assert "L1" in view.grid.value


def test_view_of_a_bare_pool():
    pool = BlockPool(4, 2)
    pool.allocate(1)
    assert states_in(BlockPoolView(pool).grid.value) == ["in_use", "free", "free", "free"]
