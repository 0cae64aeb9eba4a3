"""The new pictures: block-table map, eviction replay, prefix tree, chapter 00/05/06 pictures,
the colour theme and the plot conventions. Renderers are pure: state in, HTML out."""

import importlib
import inspect
import math
import pkgutil
import re
from html.parser import HTMLParser
from typing import Any, cast

import pytest
from widget_html import assert_readable, text_contrasts

from paged_kv import KVCacheManager
from paged_kv.cache.eviction import POLICIES
from paged_kv.study.operations import Add, Fork, Free
from paged_kv.study.trace_replay import trace_frames
from paged_kv.study.workloads import shared_prefixes
from paged_kv.widgets import (
    StripRequest,
    block_changes,
    eviction_replay,
    prefix_tree_frames,
    render_block_table_map,
    render_decode_gather,
    render_eviction_html,
    render_gantt,
    render_memory_strips,
    render_online_softmax,
    render_prefix_tree_html,
)
from paged_kv.widgets.eviction_view import reused_keys, split_requests
from paged_kv.widgets.pictures import online_softmax_steps
from paged_kv.widgets.theme import (
    CARD,
    COUNT_BINS,
    INK,
    MUTED,
    OWNER_FILLS,
    PHASE_STYLES,
    STATE_STYLES,
    contrast_ratio,
    count_colour,
    text_on,
)
from paged_kv.widgets.tier_view import render_block_sources_html


def forked_manager():
    m = KVCacheManager(12, 4)
    system = list(range(1000, 1008))
    m.add_sequence("a", [*system, 1, 2])
    m.add_sequence("b", [*system, 5])
    m.fork("b", "b2")
    return m


# -- theme --------------------------------------------------------------------------------


def test_theme_inks_reach_4_5_to_1_on_every_fill_the_views_use():
    fills = [
        CARD,
        *OWNER_FILLS,
        *(s["fill"] for s in STATE_STYLES.values()),
        *(c for *_, c in COUNT_BINS),
        *(s["fill"] for s in PHASE_STYLES.values()),
    ]
    ratios = {f: contrast_ratio(text_on(f), f) for f in fills}
    assert min(ratios.values()) >= 4.5, ratios
    assert contrast_ratio(INK, CARD) > 15 and contrast_ratio(MUTED, CARD) >= 7
    assert contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)


def test_count_scale_is_fixed_and_monotone_in_darkness():
    from paged_kv.widgets.theme import relative_luminance

    assert count_colour(1) == count_colour(1) and count_colour(3) == count_colour(4)
    steps = [relative_luminance(count_colour(n)) for n in (1, 2, 3, 5, 9, 17, 40)]
    assert steps == sorted(steps, reverse=True)


def test_every_renderer_is_readable_in_a_dark_page():
    m = forked_manager()
    frames = eviction_replay(split_requests(shared_prefixes(60, num_prefixes=8, seed=4), 6), 16)
    tree = prefix_tree_frames(KVCacheManager(12, 4), [Add("a", tuple(range(9))), Free("a")])
    htmls = [
        render_block_table_map(m.snapshot()),
        render_eviction_html(frames[5], prefix_keys={1, 2}, policy_name="lfu"),
        render_prefix_tree_html(tree[-1]),
        render_memory_strips(
            [StripRequest("A", 20, 28), StripRequest("B", 6, 18)],
            capacity=80,
            max_length=32,
            block_size=4,
        ),
        render_decode_gather([7, 2, 9], 11, 4, 12, splits=2),
        render_online_softmax([2.0, 0.5, 3.0, -1.0], [1, 2, 3, 4], 2),
        render_gantt({0: ["prefill", "decode", "preempted", "waiting", None]}, current=1),
        render_block_sources_html({7: ["device", "host", "disk", "remote", "computed"]}),
    ]
    for html in htmls:
        ratios = assert_readable(html)
        assert ratios, "no text found"


MARKUP = """<script>alert("x")</script>'&amp;"""
"""What a hostile trace key, sequence id or request name might hold: it must come out as text."""


class _Parsed(HTMLParser):
    """Tags, attribute names, and every text node and attribute value (entities decoded)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.texts: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self.texts += [value or "" for _, value in attrs]

    def handle_data(self, data: str) -> None:
        self.texts.append(data)


def public_renderers() -> dict[str, object]:
    """Every public renderer: a function named render_* in any module of paged_kv.widgets."""
    import paged_kv.widgets as widgets

    found = {}
    for info in pkgutil.iter_modules(widgets.__path__):
        module = importlib.import_module(f"{widgets.__name__}.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("render_") and fn.__module__ == module.__name__:
                found[name] = fn
    return found


def markup_calls():
    """Renderer name -> (a call that puts MARKUP in every string input it has, whether it has
    any). A renderer missing here fails the test below: declare its string inputs."""
    from paged_kv.study.trace_replay import CacheFrame
    from paged_kv.widgets.eviction_view import Eviction, EvictionFrame
    from paged_kv.widgets.prefix_tree import TreeFrame, TreeNode

    m = KVCacheManager(12, 4)
    m.add_sequence(MARKUP, range(9))
    before = m.snapshot()
    m.fork(MARKUP, MARKUP + "2")
    m.add_sequence(MARKUP + "3", range(100, 103))
    m.free_sequence(MARKUP + "2")
    pool = m.snapshot()
    evicted = EvictionFrame(
        1, (MARKUP,), (False,), (0,), (Eviction(cast(Any, MARKUP), 1, MARKUP),),
        cast(Any, (MARKUP, None)), (1, 0), {MARKUP: cast(Any, [MARKUP])}, cast(Any, MARKUP), 0, 1,
    )  # fmt: skip
    node = TreeNode(MARKUP, None, 0, (1, 2), 0, "in_use", 2, MARKUP)
    cache = CacheFrame(1, cast(Any, MARKUP), False, 0, cast(Any, (MARKUP, None)), (1, 0))
    strips = [StripRequest(MARKUP, 20, 28), StripRequest(MARKUP + "2", 30, 32)]
    return {
        "render_pool_html": (lambda f: f(pool, highlight=MARKUP), True),
        "render_cache_html": (lambda f: f(cache), True),
        "render_eviction_html": (
            lambda f: f(evicted, prefix_keys={MARKUP}, policy_name=MARKUP), True),
        "render_block_table_map": (
            lambda f: f(pool, before, highlight=MARKUP, owners=[MARKUP]), True),
        "render_prefix_tree_html": (
            lambda f: f(TreeFrame(1, MARKUP, (node,), frozenset({MARKUP}), pool)), True),
        "render_memory_strips": (
            lambda f: f(strips, capacity=40, max_length=32, block_size=4), True),
        "render_gantt": (lambda f: f({MARKUP: ["prefill", "decode", None]}, current=1), True),
        "render_block_sources_html": (lambda f: f({MARKUP: ["device", "computed"]}), True),
        "render_decode_gather": (lambda f: f([7, 2, 9], 11, 4, 12, splits=2), False),
        "render_online_softmax": (lambda f: f([2.0, 0.5, 3.0], [1, 2, 3], 2), False),
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(public_renderers()))
def test_every_renderer_escapes_every_string_it_takes_from_data(name):
    calls = markup_calls()
    assert name in calls, f"{name} is a public renderer: add its string inputs to markup_calls"
    call, takes_text = calls[name]
    html = call(public_renderers()[name])
    assert "<script" not in html.lower(), "markup went out as markup"
    parsed = _Parsed(html)
    assert parsed.tags <= {"div", "span", "b", "i", "br", "ul", "li", "table", "tr", "th", "td"}
    odd = {a for a in parsed.attributes if a not in ("style", "title", "class")}
    assert all(a.startswith("data-") for a in odd), f"a quote broke out of an attribute: {odd}"
    assert not any(re.search("'&(?!amp;)", t) for t in parsed.texts), "an & went out unescaped"
    if takes_text:
        assert any(MARKUP in t for t in parsed.texts), "the string did not come back intact"


def test_contrast_checker_catches_text_that_relies_on_the_page():
    assert text_contrasts('<div style="background:#ffffff">hello</div>')[0][3] < 1.5


# -- block-table map ------------------------------------------------------------------------


def test_map_has_a_row_per_sequence_pointing_into_the_pool_and_shows_sharing():
    m = forked_manager()
    html = render_block_table_map(m.snapshot())
    rows = re.findall(r'data-seq="([^"]+)"', html)
    assert rows == ["a", "b", "b2"]
    points = re.findall(r'data-logical="(\d+)" data-points-to="(\d+)"', html)
    tables = [m.block_table(s) for s in rows]
    assert points == [(str(i), str(b)) for t in tables for i, b in enumerate(t)]
    first = m.block_table("a")[0]
    pointers = re.search(rf'data-block-id="{first}"[^>]*data-pointers="([^"]*)"', html).group(1)
    assert pointers == "a:L0 b:L0 b2:L0"  # three rows point at one block
    assert f"{first} ×3" in html


def test_block_changes_name_a_fork_a_copy_on_write_and_a_free():
    m = KVCacheManager(8, 4)
    m.add_sequence("p", [1, 2, 3, 4, 5, 6])
    before = m.snapshot()
    m.fork("p", "q")
    forked = m.snapshot()
    changes = block_changes(before, forked)
    assert changes.events == ["fork q from p: shares all 2 blocks [0, 1]"]
    assert changes.blocks == {0, 1}
    m.append_tokens("q", [7])
    cow = block_changes(forked, m.snapshot())
    [event] = cow.events
    assert event.startswith("copy-on-write: q L1 was shared block 1, now its own copy")
    assert cow.copies == {m.block_table("q")[1]: 1} and ("q", 1) in cow.entries
    html = render_block_table_map(m.snapshot(), forked)
    assert "⇐1" in html and "copy-on-write" in html
    grown = m.snapshot()
    m.free_sequence("p")
    assert block_changes(grown, m.snapshot()).events == [
        "free p: 1 still held by others [0], 1 free [1]"
    ]


def test_map_keeps_each_sequences_hue_when_others_come_and_go():
    m = KVCacheManager(8, 4, prefix_caching=False)
    m.add_sequence("x", [1])
    m.add_sequence("y", [2])
    hue = lambda html, seq: re.search(  # noqa: E731
        rf'data-seq="{seq}".*?data-logical="0"[^>]*background:(#\w+)', html
    ).group(1)
    both = render_block_table_map(m.snapshot(), owners=["x", "y"])
    m.free_sequence("x")
    alone = render_block_table_map(m.snapshot(), owners=["x", "y"])
    assert hue(both, "y") == hue(alone, "y") == OWNER_FILLS[1]


def test_map_of_a_big_pool_is_compact():
    m = KVCacheManager(512, 4)
    m.add_sequence("a", range(40))
    html = render_block_table_map(m.snapshot())
    assert html.count('data-block-id="') == 512 and "width:12px;height:12px" in html


# -- eviction replay ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_eviction_replay_agrees_with_trace_frames_access_by_access(policy):
    trace = shared_prefixes(300, num_prefixes=20, seed=1)
    ours = eviction_replay(split_requests(trace, 1), 24, policy)
    theirs = trace_frames(trace, 24, policy)
    assert [f.keys for f in ours] == [f.keys for f in theirs]
    if hasattr(POLICIES[policy](), "count"):
        assert [f.counts for f in ours] == [f.counts for f in theirs]
    for frame in ours[1:]:
        for e in frame.evictions:
            assert e.why and e.key not in frame.keys


def test_lfu_victims_are_named_with_their_count_and_place_in_the_bucket():
    frames = eviction_replay([(1,), (1,), (2,), (3,), (4,)], 3, "lfu")
    [evicted] = frames[5].evictions
    assert evicted.key == 2
    assert evicted.why.startswith("count 1, oldest of 2 in bucket 1")
    assert frames[5].queue == {"count 1": [3, 4], "count 2": [1]}
    assert frames[5].next_victim == 3
    html = render_eviction_html(frames[5], policy_name="lfu")
    assert "evicted key 2" in html and 'data-evicted="2"' in html and "✕2" in html


def test_lru_and_fifo_victims_say_when_they_were_last_used():
    for policy, rule in [("lru", "least recently used"), ("fifo", "first in the queue")]:
        frames = eviction_replay([(1, 2), (1,), (3,)], 2, policy)
        [evicted] = frames[3].evictions
        assert evicted.key == 2 and evicted.why.startswith(rule)
        assert frames[3].queue == {"oldest → newest": [1, 3]}


def test_other_policies_fall_back_to_naming_the_chooser():
    frames = eviction_replay([(1, 2, 3, 4, 5)], 2, "arc")
    assert all(e.why == "chosen by arc" for e in frames[1].evictions)


def test_prefix_keys_are_told_apart_from_private_ones():
    requests = split_requests(shared_prefixes(40, num_prefixes=3, seed=0), 6)
    shared = reused_keys(requests)
    assert shared and all(k < 12 for k in shared)  # prefix keys are 0..11 here
    frames = eviction_replay(requests, 8, "lfu")
    html = render_eviction_html(frames[3], prefix_keys=shared)
    kinds = dict(re.findall(r'data-key="(\d+)" data-count="\d+" data-kind="(\w+)"', html))
    assert {kinds[k] for k in kinds if int(k) in shared} == {"prefix"}
    assert {kinds[k] for k in kinds if int(k) not in shared} == {"private"}


# -- prefix tree ----------------------------------------------------------------------------


def test_prefix_tree_grows_shares_and_marks_cached_and_evicted_blocks():
    system = tuple(range(100, 108))  # two full blocks of 4
    ops = [
        Add("a", (*system, 1, 2, 3, 4, 9)),
        Add("b", (*system, 5, 6, 7, 8, 9)),
        Free("a"),
        Free("b"),
        Add("c", tuple(range(200, 217))),  # 5 blocks: only 6 in the pool, evicts
    ]
    frames = prefix_tree_frames(KVCacheManager(6, 4), ops)
    two = frames[2]
    assert [n.depth for n in two.nodes] == [0, 1, 2, 2]  # the shared prefix branches
    assert [n.ref_count for n in two.nodes[:2]] == [2, 2]
    html = render_prefix_tree_html(two)
    assert html.count('data-state="in_use"') == 4
    assert re.search(r'data-node="0"[^>]*grid-row:2 / span 2', html)  # spans both requests
    assert {n.state for n in frames[4].nodes} == {"cached"}
    states = [n.state for n in frames[5].nodes]
    assert "evicted" in states and "in_use" in states
    assert "line-through" in render_prefix_tree_html(frames[5])


def test_prefix_tree_shows_the_radix_index_when_there_is_one():
    try:
        manager = KVCacheManager(8, 4, prefix_index="radix")
    except TypeError:
        pytest.skip("this version has no radix prefix index")
    ops = [Add("a", tuple(range(13))), Add("b", (*range(8), 50, 51, 52, 53, 54)), Fork("b", "c")]
    frames = prefix_tree_frames(manager, ops)
    last = frames[-1]
    assert [n.depth for n in last.nodes] == [0, 1, 2, 2]
    assert all(n.group for n in last.nodes)
    assert "radix node" in render_prefix_tree_html(last)


# -- pictures -------------------------------------------------------------------------------


def test_memory_strips_show_reservation_waste_and_who_waits():
    requests = [StripRequest("A", 20, 28), StripRequest("B", 6, 18), StripRequest("C", 9, 30)]
    html = render_memory_strips(requests, capacity=80, max_length=32, block_size=4)
    contiguous, paged = html.split("paged: blocks")
    assert "2 of 3 requests admitted (C must wait)" in contiguous
    assert "3 of 3 requests admitted" in paged
    slots = lambda part, kind: sum(  # noqa: E731
        int(n) // 8 for n in re.findall(rf'data-kind="{kind}"[^>]*width:(\d+)px', part)
    )
    assert slots(contiguous, "internal") == (32 - 28) + (32 - 18)
    assert slots(contiguous, "external") == 80 - 64
    assert slots(paged, "token") == 35 and slots(paged, "internal") == 0 + 2 + 3


def test_decode_gather_reads_the_tables_blocks_in_order_and_nothing_else():
    html = render_decode_gather([7, 2, 9], 11, 4, 12, splits=2)
    read = dict(re.findall(r'data-block-id="(\d+)" data-read="(\d*)"', html))
    assert {b: i for b, i in read.items() if i} == {"7": "0", "2": "1", "9": "2"}
    assert "3/4 tok" in html and "slice 0: L0–L1, slice 1: L2–L2" in html


def test_online_softmax_ends_at_the_exact_softmax_average():
    scores, values = [2.0, 0.5, 3.0, -1.0, 1.0, 2.5], [1, 2, 3, 4, 5, 6]
    steps = online_softmax_steps(scores, values, 2)
    weights = [math.exp(s) for s in scores]
    exact = sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)
    assert steps[-1].output == pytest.approx(exact)
    assert [s.running_max for s in steps] == [2.0, 3.0, 3.0]
    assert steps[1].rescale == pytest.approx(math.exp(2.0 - 3.0))
    assert f"{exact:.4f}" in render_online_softmax(scores, values, 2)


def test_gantt_draws_runs_on_the_step_axis():
    html = render_gantt({0: ["prefill", "decode", "decode", None], 1: ["waiting", "prefill"]})
    runs = re.findall(r'data-phase="(\w+)" data-start="(\d+)" data-steps="(\d+)"', html)
    assert runs == [("prefill", "0", "1"), ("decode", "1", "2"), ("waiting", "0", "1"),
                    ("prefill", "1", "1")]  # fmt: skip
    assert "engine step" in html and " ms" not in html


def test_engine_run_phases_follow_admission_preemption_and_finish():
    from paged_kv.serving.engine import Engine
    from paged_kv.serving.model import TinyLM
    from paged_kv.serving.scheduler import SamplingParams
    from paged_kv.widgets import record_engine

    engine = Engine(TinyLM(seed=0), num_blocks=8, block_size=4, max_running=3)
    for prompt in ("a shared prefix: one", "a shared prefix: two", "x"):
        engine.add_request(prompt, SamplingParams(6))
    run = record_engine(engine)
    phases = run.phases()
    assert [row[0] for row in phases.values()] == ["prefill"] * 3
    for request, row in phases.items():
        assert row[-1] in (None, "decode"), request  # finished: nothing after the last decode
        assert row.count("prefill") == 1 + row.count("preempted")  # readmitted once each time
    assert any("preempted" in row for row in phases.values())


def test_record_engine_sees_requests_finish_that_the_engine_forgets_at_once():
    from paged_kv.serving.engine import Engine
    from paged_kv.serving.model import TinyLM
    from paged_kv.serving.scheduler import SamplingParams
    from paged_kv.widgets import record_engine

    runs = []
    for keep in (1000, 0):
        engine = Engine(TinyLM(seed=0), num_blocks=8, block_size=4, keep_finished=keep)
        for prompt in ("one", "two, longer", "x"):
            engine.add_request(prompt, SamplingParams(3 + len(prompt) % 4))
        runs.append(record_engine(engine))
    assert runs[0] == runs[1]
    assert sorted(r for s in runs[1].steps for r in s.finished) == [0, 1, 2]


# -- plots ----------------------------------------------------------------------------------


def test_every_policy_has_its_own_colour_and_marker_and_new_names_get_a_fallback():
    from paged_kv.widgets.plots import policy_style, policy_styles

    styles = policy_styles()
    assert set(POLICIES) <= set(styles) and "belady" in styles
    pairs = [(s["color"], s["marker"]) for s in styles.values()]
    assert len(set(pairs)) == len(pairs)
    assert len({s["color"] for s in styles.values()}) == len(styles)
    new = policy_style("clock-pro")
    assert new == policy_style("clock-pro") and new["label"] == "clock-pro"
    assert (new["color"], new["marker"]) not in pairs[: len(POLICIES)]


def test_course_style_and_helpers_produce_a_labelled_retina_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from paged_kv.widgets.plots import (
        block_size_ticks,
        finish,
        legend_outside,
        mark_default,
        policy_style,
        use_course_style,
    )

    use_course_style()
    fig, ax = plt.subplots()
    for name in ("lru", "lfu"):
        ax.plot([1, 4, 16], [0.1, 0.2, 0.3], **policy_style(name))
    block_size_ticks(ax, [1, 4, 16])
    mark_default(ax, 16, "default B = 16")
    finish(ax, title="t", xlabel="block size (tokens)", ylabel="hit rate")
    legend = legend_outside(ax)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16"]
    assert legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1
    assert matplotlib.rcParams["figure.figsize"][0] >= 8
    fig.savefig(tmp_path / "f.png")
    plt.close(fig)
