import re

from paged_kv import BlockPool, KVCacheManager
from paged_kv.study.operations import Add, Append, Free
from paged_kv.widgets import BlockPoolView, OperationStepper, render_pool_html


def states_in(html: str) -> list[str]:
    return re.findall(r'data-state="(\w+)"', html)


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


def test_highlight_outlines_a_sequence_and_labels_logical_blocks():
    m = KVCacheManager(6, 2)
    m.add_sequence("x", [1])
    m.add_sequence("a", range(5))  # blocks 1, 2, 3
    html = render_pool_html(m.snapshot(), highlight="a")
    labelled = re.findall(r'data-block-id="(\d+)"[^>]*outline[^>]*>.*?<b>(L\d+)</b>', html)
    assert labelled == [("1", "L0"), ("2", "L1"), ("3", "L2")]


def test_sequence_names_are_escaped():
    m = KVCacheManager(2, 2)
    m.add_sequence("<b>", [1])
    assert "&lt;b&gt;" in render_pool_html(m.snapshot(), highlight="<b>")


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


def test_stepper_steps_forward_and_back_through_recorded_states():
    ops = [Add("a", (1, 2, 3)), Append("a", (4,)), Append("a", (5,)), Free("a")]
    stepper = OperationStepper(KVCacheManager(4, 2), ops)
    in_use = lambda: states_in(stepper.view.grid.value).count("in_use")  # noqa: E731
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


def test_trace_replay_view_shows_keys_counts_and_hits():
    from paged_kv.widgets import TraceReplayView

    view = TraceReplayView([1, 2, 1, 3, 1, 4], capacity=2, policy="lfu")
    assert "step 0/6" in view.caption.value
    for _ in range(3):
        view.step()
    assert "key 1: hit" in view.caption.value
    assert re.findall(r'data-key="(\d*)" data-count="(\d+)"', view.grid.value) == [
        ("1", "2"),
        ("2", "1"),
    ]
    view.slider.value = 6  # 4 evicts 3 (count 1, least recent), not 1 (count 3)
    keys = re.findall(r'data-key="(\d*)"', view.grid.value)
    assert sorted(keys) == ["1", "4"] and "outline:3px dashed" in view.grid.value


def test_engine_replay_view_steps_through_the_pool_of_a_served_run():
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
    view.step()
    assert "computed 0:20* 1:4* 2:1*" in view.caption.value  # 1 hit 0's first 16 tokens
    assert "shared" in states_in(view.view.grid.value)
    seen = []
    while view.position < len(view.snapshots) - 1:
        view.step()
        seen.append(view.caption.value)
    assert any("preempted" in caption for caption in seen)
    assert "in_use" not in states_in(view.view.grid.value)  # all finished, blocks released
