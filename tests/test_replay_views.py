"""paged_kv.widgets.replay_views: operation, trace and engine replays."""

import re

from paged_kv import KVCacheManager
from paged_kv.study.operations import Add, Append, Fork, Free
from paged_kv.widgets import OperationStepper


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
