import re

from widget_html import assert_readable, states_in

from paged_kv import BlockPool, KVCacheManager
from paged_kv.study.operations import Add, Append, Fork, Free
from paged_kv.widgets import BlockPoolView, OperationStepper, render_pool_html


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


def test_every_view_carries_a_static_html_picture_and_a_short_text():
    m = KVCacheManager(4, 2)
    m.add_sequence("a", [1, 2, 3])
    bundle = BlockPoolView(m)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert states_in(bundle["text/html"]) == ["in_use", "in_use", "free", "free"]
    assert bundle["text/plain"].startswith("BlockPoolView")
    stepper = OperationStepper(KVCacheManager(4, 2), [Add("a", (1, 2, 3))], start=1)
    html = stepper._repr_mimebundle_()["text/html"]
    assert "step 1/1" in html and "static picture of step 1 of 1" in html
    assert len(html) < 20_000


def pool_states(stepper):
    return re.findall(r'data-block-id="\d+" data-state="(\w+)"', stepper.view.value)


def test_stepper_steps_forward_and_back_through_recorded_states():
    ops = [Add("a", (1, 2, 3)), Append("a", (4,)), Append("a", (5,)), Free("a")]
    stepper = OperationStepper(KVCacheManager(4, 2, prefix_caching=False), ops)
    in_use = lambda: pool_states(stepper).count("in_use")  # noqa: E731
    assert stepper.position == 0 and in_use() == 0
    stepper.step()
    assert in_use() == 2 and "add 'a'" in stepper.caption.value
    stepper.step()
    stepper.step()
    assert in_use() == 3 and "step 3/4" in stepper.caption.value
    stepper.back()
    assert in_use() == 2
    stepper.step_button.click()  # the button drives the same path
    stepper.step_button.click()
    stepper.step_button.click()  # past the end stays at the end
    assert stepper.position == 4 and in_use() == 0
    stepper.slider.value = 1
    assert in_use() == 2


def test_stop_stays_where_it_is_and_speed_sets_the_interval():
    ops = [Add("a", (1, 2, 3)), Append("a", (4,)), Free("a")]
    stepper = OperationStepper(KVCacheManager(4, 2), ops, start=2)
    assert stepper.position == 2 and stepper.play.value == 2
    stepper.play.playing = True
    stepper.stop_button.click()
    assert not stepper.play.playing and stepper.position == 2
    stepper.speed.value = 100
    assert stepper.play.interval == 100
    assert stepper.slider.layout.min_width == "300px"
    assert stepper.controls.layout.flex_flow == "row wrap"


def test_grid_stepper_remembers_the_highlight_after_scrubbing_past_its_end():
    ops = [Add("a", (1, 2, 3)), Free("a"), Add("a", (5,))]
    stepper = OperationStepper(KVCacheManager(4, 2, prefix_caching=False), ops, view="grid")
    stepper.step()
    stepper.view.highlight.value = "a"
    stepper.step()  # "a" is gone
    assert "L0" not in stepper.view.grid.value
    stepper.step()  # back again: still highlighted
    assert "<b>L0</b>" in stepper.view.grid.value


def test_map_stepper_outlines_and_names_what_changed():
    ops = [Add("p", (1, 2, 3)), Fork("p", "q"), Append("q", (9,))]
    stepper = OperationStepper(KVCacheManager(8, 4), ops)
    stepper.step()
    stepper.step()
    assert "fork q from p" in stepper.view.value
    stepper.step()
    assert "copy-on-write: q L0 was shared block 0, now its own copy" in stepper.view.value
    assert re.search(r'data-block-id="1"[^>]*outline:3px solid', stepper.view.value)


def test_trace_replay_view_takes_one_request_per_step_and_opens_at_the_first_eviction():
    from paged_kv.widgets import TraceReplayView

    view = TraceReplayView([1, 2, 1, 3, 1, 4], capacity=2, policy="lfu", request_blocks=2)
    assert len(view.frames) == 4 and view.position == 2  # request 2 (1, 3) evicts 2
    assert "step 2/3" in view.caption.value
    assert "evicted key 2" in view.grid.value
    view.slider.value = 3  # 4 evicts 3 (count 1), not 1 (count 3)
    keys = re.findall(r'data-key="(\d*)"', view.grid.value)
    assert sorted(keys) == ["1", "4"] and "outline:3px dashed" in view.grid.value
    assert re.search(r'data-kind="prefix"', view.grid.value)  # key 1 is reused


def test_engine_replay_view_steps_through_queues_map_and_timeline():
    from paged_kv.serving.engine import Engine
    from paged_kv.serving.model import TinyLM
    from paged_kv.serving.scheduler import SamplingParams
    from paged_kv.widgets import EngineReplayView

    engine = Engine(TinyLM(seed=0), num_blocks=8, block_size=4, max_running=3)
    for prompt in ("a shared prefix: one", "a shared prefix: two", "x"):
        engine.add_request(prompt, SamplingParams(6))
    view = EngineReplayView(engine)
    assert not engine.has_unfinished()
    assert len(view.snapshots) == engine.stats().steps + 1
    assert "3 requests waiting" in view.caption.value
    assert re.findall(r'data-queue="waiting".*?</div>', view.queues.value)
    view.step()
    assert "prefill of 0, 1, 2" in view.caption.value
    assert "0:20* 1:4* 2:1*" in view.caption.value  # 1 hit 0's first 16 tokens
    assert "×2" in view.map.value  # the shared prefix: two rows point at one block
    assert 'data-current="0"' in view.timeline.value
    seen = []
    while view.position < len(view.snapshots) - 1:
        view.step()
        seen.append(view.caption.value)
    assert any("preempted" in caption for caption in seen)
    assert 'data-phase="preempted"' in view.timeline.value
    assert "no sequences" in view.map.value  # all finished, blocks released
