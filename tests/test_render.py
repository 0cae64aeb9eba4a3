"""paged_kv.widgets.render: the pool grid as HTML, one cell per block."""

import re

from widget_html import assert_readable, states_in

from paged_kv import KVCacheManager
from paged_kv.widgets import render_pool_html


def test_html_has_one_cell_per_block_with_its_state_and_ref():
    m = KVCacheManager(8, 4, blocks_per_page=4)
    m.add_sequence("a", range(6))
    m.pool.share(m.block_table("a")[:1])
    html = render_pool_html(m.snapshot())
    assert states_in(html) == ["shared", "in_use"] + ["free"] * 6
    assert re.findall(r'data-ref="(\d+)"', html)[:3] == ["2", "1", "0"]
    assert "×2" in html  # the glyph says it without colour


def test_pages_are_grouped_and_free_ones_marked_releasable():
    m = KVCacheManager(8, 4, blocks_per_page=4)
    m.add_sequence("a", [1])
    html = render_pool_html(m.snapshot())
    assert re.findall(r'data-page="(\d+)" data-releasable="(\w+)"', html) == [
        ("0", "false"),
        ("1", "true"),
    ]
    assert "page 1 · releasable" in html


def test_legend_counts_every_state():
    m = KVCacheManager(6, 4)
    m.add_sequence("a", range(5))
    html = render_pool_html(m.snapshot())
    assert "free (·): 4" in html and "in use (1): 2" in html and "shared (×n): 0" in html


def test_highlight_outlines_a_sequence_and_labels_logical_blocks_keeping_the_share_glyph():
    m = KVCacheManager(6, 2)
    m.add_sequence("x", [1])
    m.add_sequence("a", range(5))  # blocks 1, 2, 3
    m.pool.share([2])
    html = render_pool_html(m.snapshot(), highlight="a")
    labelled = re.findall(r'data-block-id="(\d+)"[^>]*outline[^>]*>.*?<b>(L\d+)</b>', html)
    assert labelled == [("1", "L0"), ("2", "L1"), ("3", "L2")]
    block_2 = re.search(r'data-block-id="2".*?</div>', html).group(0)
    assert "×2" in block_2 and "L1" in block_2  # both: shared and its logical index


def test_sequence_names_are_escaped():
    m = KVCacheManager(2, 2)
    m.add_sequence("<b>", [1])
    assert "&lt;b&gt;" in render_pool_html(m.snapshot(), highlight="<b>")


def test_above_128_blocks_the_grid_is_compact_and_512_blocks_fit_a_screen():
    m = KVCacheManager(512, 16, blocks_per_page=16, allocation="pack_pages")
    for i in range(20):
        m.add_sequence(i, range(100 + 7 * i))
    html = render_pool_html(m.snapshot())
    assert len(states_in(html)) == 512
    assert "width:12px;height:12px" in html and "<b>" not in html.split("data-page")[1]
    pages = re.findall(r'data-page="\d+"[^>]*width:(\d+)px', html)
    assert len(pages) == 32 and all(int(w) <= 8 * 15 for w in pages)  # 4+ pages per 550 px
    assert "width:12px" not in render_pool_html(KVCacheManager(128, 4).snapshot())


def test_every_text_the_renderers_emit_contrasts_4_5_to_1_with_its_background():
    m = KVCacheManager(32, 4, blocks_per_page=8)
    for name, length in [("chat", 13), ("code", 22), ("tiny", 3)]:
        m.add_sequence(name, range(length))
    m.fork("chat", "chat-2")
    m.free_sequence("code")
    ratios = assert_readable(render_pool_html(m.snapshot(), highlight="chat"))
    big = KVCacheManager(256, 4)
    big.add_sequence("a", range(300))
    ratios += assert_readable(render_pool_html(big.snapshot()))
    assert min(ratios) >= 4.5
