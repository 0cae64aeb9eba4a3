"""paged_kv.widgets.stepper: stepping through recorded states, and the static picture."""

import re

from widget_html import states_in

from paged_kv import KVCacheManager
from paged_kv.study.operations import Add, Append, Free
from paged_kv.widgets import BlockPoolView, OperationStepper


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
