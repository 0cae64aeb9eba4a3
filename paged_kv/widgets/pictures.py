"""Static pictures for chapters 00, 05 and 06, as pure HTML renderers.

- `render_memory_strips`: contiguous reservation vs paging as memory strips (the idea of the
  PagedAttention paper's Fig. 3): token states, reserved slots, internal and external
  fragmentation, and who could not be admitted.
- `render_decode_gather`: one decode step's query, its block table and the scattered K/V
  tiles it reads, optionally cut into split-K slices merged by log-sum-exp.
- `render_online_softmax`: the running max and sum of online softmax, tile by tile.
- `render_gantt`: the engine's requests on a step axis (waiting / prefill / decode /
  preempted), not wall-clock time, so the picture is the same on every machine.

Plain div/span with inline styles (no SVG, no script): what JupyterLab's sanitizer, nbviewer
and GitHub keep, so the stored outputs read everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from paged_kv.widgets.theme import (
    INK,
    MUTED,
    OKABE_ITO,
    OWNER_FILLS,
    PHASE_STYLES,
    card,
    esc,
    legend,
    swatch,
    text_on,
)

SLOT = 8  # px per token slot in the memory strips

STRIP_STYLES = {
    "token": {"fill": OKABE_ITO["blue"], "label": "token states (KV in use)"},
    "reserved": {"fill": OKABE_ITO["sky blue"], "label": "reserved for tokens still to come"},
    "internal": {"fill": OKABE_ITO["orange"], "label": "internal fragmentation (never used)"},
    "external": {"fill": "#b5b5b5", "label": "external fragmentation / free"},
    "free": {"fill": "#ffffff", "label": "free block"},
}


@dataclass(frozen=True)
class StripRequest:
    """A request in the memory strips: `length` tokens so far, `final` when it finishes."""

    name: str
    length: int
    final: int


def render_memory_strips(
    requests: Sequence[StripRequest], *, capacity: int, max_length: int, block_size: int
) -> str:
    """Two strips of the same `capacity` token slots.

    Contiguous: each request reserves `max_length` slots in arrival order (first fit); a
    request that does not fit waits. Paged: each request holds ceil(length / block_size)
    blocks, taken from a scattered free list; the rest stays free for more requests.
    Runs carry data-kind and data-request for tests."""
    contiguous: list[tuple[str, str, int]] = []  # (kind, request, slots)
    used, waiting = 0, []
    for r in requests:
        if used + max_length > capacity:
            waiting.append(r.name)
            continue
        contiguous += [
            ("token", r.name, r.length),
            ("reserved", r.name, r.final - r.length),
            ("internal", r.name, max_length - r.final),
        ]
        used += max_length
    contiguous.append(("external", "", capacity - used))
    num_blocks = capacity // block_size
    order = _scattered(num_blocks)
    owner: dict[int, tuple[str, int]] = {}  # block -> (request, tokens in it)
    paged_waiting, taken = [], 0
    for r in requests:
        need = -(-r.length // block_size)
        if taken + need > num_blocks:
            paged_waiting.append(r.name)
            continue
        for i in range(need):
            owner[order[taken + i]] = (r.name, min(block_size, r.length - i * block_size))
        taken += need
    paged: list[tuple[str, str, int]] = []
    for block in range(num_blocks):
        name, n = owner.get(block, ("", 0))
        if name:
            paged += [("token", name, n), ("internal", name, block_size - n)]
        else:
            paged.append(("free", "", block_size))
    colours = {r.name: OWNER_FILLS[i % len(OWNER_FILLS)] for i, r in enumerate(requests)}

    def total(runs: list[tuple[str, str, int]], kind: str) -> int:
        return sum(n for k, _, n in runs if k == kind)

    rows = []
    for title, runs, blocked, note in [
        ("contiguous: each request reserves its maximum length", contiguous, waiting, ""),
        (f"paged: blocks of {block_size} tokens, anywhere", paged, paged_waiting,
         "internal = the unfilled tail of a last block"),
    ]:  # fmt: skip
        counts = {k: total(runs, k) for k in STRIP_STYLES}
        admitted = len(requests) - len(blocked)
        summary = (
            f"{admitted} of {len(requests)} requests admitted"
            + (f" ({', '.join(blocked)} must wait)" if blocked else "")
            + f" · tokens {counts['token']}, reserved {counts['reserved']}, internal "
            f"{counts['internal']}, free or external {counts['external'] + counts['free']} slots"
        )
        rows.append(
            f'<div style="margin:6px 0 2px 0;color:{INK}"><b>{esc(title)}</b></div>'
            f"{_strip_html(runs, block_size if 'paged' in title else None, colours)}"
            f'<div style="color:{MUTED}">{esc(summary)}{" · " + esc(note) if note else ""}</div>'
        )
    items = [(swatch(s["fill"], "1px solid #6b6b6b"), s["label"]) for s in STRIP_STYLES.values()]
    items.append(("", f"letters: the request a slot belongs to · {capacity} slots"))
    return card(legend(items) + "".join(rows), "paged-kv-strips")


def _scattered(n: int) -> list[int]:
    """A fixed permutation of 0..n-1 that looks like a well-used free list."""
    step = next(s for s in (7, 5, 3, 11, 13, 1) if math.gcd(s, n) == 1)
    return [(i * step + 3) % n for i in range(n)]


def _strip_html(
    runs: list[tuple[str, str, int]], block_size: int | None, colours: dict[str, str]
) -> str:
    spans = []
    slot = 0
    for kind, name, n in runs:
        if n <= 0:
            continue
        fill = STRIP_STYLES[kind]["fill"]
        # Token slots take their request's hue as a band on top: who owns what stays visible.
        band = colours.get(name, fill) if kind == "token" else fill
        starts_block = block_size is not None and slot % block_size == 0
        left = "2px solid #111111" if starts_block else "0"
        text = name if n * SLOT >= 12 and name else ""
        spans.append(
            f'<span data-kind="{kind}" data-request="{esc(name)}" title="{esc(name or kind)}: '
            f'{n} slots ({STRIP_STYLES[kind]["label"]})" style="display:inline-flex;'
            f"align-items:center;justify-content:center;width:{n * SLOT}px;height:22px;"
            f"box-sizing:border-box;background:{fill};color:{text_on(fill)};border-left:{left};"
            f'border-top:5px solid {band};font-size:10px;overflow:hidden">{esc(text)}</span>'
        )
        slot += n
    return (
        '<div style="display:flex;flex-wrap:wrap;row-gap:4px;border:1px solid #111111;'
        f'width:fit-content;max-width:100%">{"".join(spans)}</div>'
    )


def render_decode_gather(
    block_table: Sequence[int],
    context_len: int,
    block_size: int,
    num_blocks: int,
    *,
    splits: int = 1,
) -> str:
    """One sequence's decode step: the query, its block table, and the pool's K/V tiles it
    reads (numbered in reading order, coloured by split-K slice), everything else untouched.
    Pool cells carry data-block-id and data-read ("" or the logical index)."""
    read = {block: i for i, block in enumerate(block_table)}
    per_slice = -(-len(block_table) // max(1, splits))
    slice_fill = [OWNER_FILLS[s % len(OWNER_FILLS)] for s in range(max(1, splits))]

    def slice_of(i: int) -> int:
        return i // per_slice

    query = (
        f'<div style="display:inline-block;padding:4px 8px;background:{OKABE_ITO["vermillion"]};'
        f'color:{text_on(OKABE_ITO["vermillion"])};border-radius:4px">query q: the new token '
        f"(one row per head)</div>"
    )
    table_cells = "".join(
        f'<span data-logical="{i}" style="display:inline-flex;flex-direction:column;'
        f"align-items:center;width:44px;border:1px solid #111111;background:"
        f'{slice_fill[slice_of(i)]};color:{text_on(slice_fill[slice_of(i)])}">'
        f"<b>L{i}</b>→{b}</span>"
        for i, b in enumerate(block_table)
    )
    pool_cells = []
    for block in range(num_blocks):
        i = read.get(block)
        if i is None:
            pool_cells.append(
                f'<span data-block-id="{block}" data-read="" style="display:inline-flex;'
                f"flex-direction:column;align-items:center;width:56px;height:44px;"
                f'border:1px dotted #6b6b6b;background:#ffffff;color:{MUTED};font-size:9px">'
                f"{block}<span>other</span></span>"
            )
            continue
        tokens = min(block_size, context_len - i * block_size)
        fill = slice_fill[slice_of(i)]
        pool_cells.append(
            f'<span data-block-id="{block}" data-read="{i}" style="display:inline-flex;'
            f"flex-direction:column;align-items:center;width:56px;height:44px;"
            f'border:2px solid #111111;background:{fill};color:{text_on(fill)};font-size:9px">'
            f"{block}<b>K,V of L{i}</b><span>{tokens}/{block_size} tok</span></span>"
        )
    steps = [
        f"1. look up the table row: {len(block_table)} blocks for {context_len} tokens",
        "2. for each entry, load that block's K and V tile from wherever it sits in the pool",
        "3. scores q·K, online softmax, weighted sum of V: the output for this token",
    ]
    if splits > 1:
        ranges = ", ".join(
            f"slice {s}: L{s * per_slice}–L{min(len(block_table), (s + 1) * per_slice) - 1}"
            for s in range(splits)
            if s * per_slice < len(block_table)
        )
        steps.append(
            f"split-K: {ranges}; each slice returns its partial output and log-sum-exp, "
            "merged with weights softmax(lse)"
        )
    flow = "".join(f'<div style="color:{INK}">{esc(s)}</div>' for s in steps)
    section = f'<div style="color:{MUTED};margin:6px 0 2px 0">'
    body = (
        f"{query}{section}block table (logical → physical)</div>"
        f'<div style="display:flex;flex-wrap:wrap;gap:3px">{table_cells}</div>'
        f"{section}the pool: K/V tiles read in table order (numbered L0, L1, …), others"
        f' untouched</div><div style="display:flex;flex-wrap:wrap;gap:3px">'
        f'{"".join(pool_cells)}</div><div style="margin-top:6px">{flow}</div>'
    )
    return card(body, "paged-kv-gather")


@dataclass(frozen=True)
class SoftmaxStep:
    """The state of online softmax after one tile."""

    tile: tuple[float, ...]
    running_max: float
    rescale: float  # exp(old max - new max): how much the old sum and output shrink
    running_sum: float
    output: float


def online_softmax_steps(
    scores: Sequence[float], values: Sequence[float], tile: int
) -> list[SoftmaxStep]:
    """Online softmax over `scores` in tiles, with scalar `values`: after each tile, the
    running max m, the rescale exp(m_old − m), the running sum l and the output o / l."""
    m, total, acc = -math.inf, 0.0, 0.0
    steps = []
    for start in range(0, len(scores), tile):
        s = scores[start : start + tile]
        v = values[start : start + tile]
        new_m = max(m, *s)
        rescale = math.exp(m - new_m) if m != -math.inf else 0.0
        weights = [math.exp(x - new_m) for x in s]
        total = total * rescale + sum(weights)
        acc = acc * rescale + sum(w * x for w, x in zip(weights, v, strict=True))
        m = new_m
        steps.append(SoftmaxStep(tuple(s), m, rescale, total, acc / total))
    return steps


def render_online_softmax(scores: Sequence[float], values: Sequence[float], tile: int) -> str:
    """A table of online softmax tile by tile, with bars for the running sum, ending with
    the exact softmax-weighted average for comparison."""
    steps = online_softmax_steps(scores, values, tile)
    exact_m = max(scores)
    w = [math.exp(s - exact_m) for s in scores]
    exact = sum(a * b for a, b in zip(w, values, strict=True)) / sum(w)
    top = max(s.running_sum for s in steps)
    head = "".join(
        f'<th style="text-align:left;padding:2px 8px;color:{INK}">{h}</th>'
        for h in ("tile", "scores", "running max m", "rescale e^(m_old−m)", "running sum l",
                  "output o/l")
    )  # fmt: skip
    rows = []
    for i, s in enumerate(steps):
        bar = (
            f'<span style="display:inline-block;height:10px;width:{80 * s.running_sum / top:.0f}px;'
            f'background:{OKABE_ITO["blue"]};margin-right:4px"></span>'
        )
        cells = [
            str(i),
            " ".join(f"{x:g}" for x in s.tile),
            f"{s.running_max:g}",
            "—" if i == 0 else f"{s.rescale:.3f}",
            f"{bar}{s.running_sum:.3f}",
            f"{s.output:.4f}",
        ]
        rows.append(
            "<tr>"
            + "".join(f'<td style="padding:2px 8px;color:{INK}">{c}</td>' for c in cells)
            + "</tr>"
        )
    note = (
        f'<div style="color:{INK};margin-top:4px">exact softmax average: {exact:.4f}, the same '
        "as the last row: no tile ever needed the whole row of scores</div>"
    )
    table = (
        '<table style="border-collapse:collapse;background:#ffffff;font-size:11px">'
        f"<tr>{head}</tr>{''.join(rows)}</table>"
    )
    return card(table + note, "paged-kv-softmax", title=f"online softmax, tiles of {tile}")


RequestId = TypeVar("RequestId", bound=Hashable)


def render_gantt(
    phases: Mapping[RequestId, Sequence[str | None]], *, current: int | None = None, width: int = 10
) -> str:
    """Requests as rows on a step axis: each step's cell is waiting, prefill, decode or
    preempted (blank: not yet arrived or finished). `current` marks a step. Runs carry
    data-phase, data-start and data-steps for tests."""
    num_steps = max((len(p) for p in phases.values()), default=0)
    rows = []
    for request, states in phases.items():
        spans = []
        step = 0
        for phase, n in _runs(states):
            if phase is None:
                spans.append(f'<span style="display:inline-block;width:{n * width}px"></span>')
            else:
                style = PHASE_STYLES[phase]
                glyph = style["glyph"] if n * width >= 7 else ""  # the glyph doubles the hue
                spans.append(
                    f'<span data-phase="{phase}" data-start="{step}" data-steps="{n}" '
                    f'title="request {esc(request)}: {phase}, steps {step}–{step + n - 1}" '
                    f'style="display:inline-flex;align-items:center;justify-content:center;'
                    f"width:{n * width}px;height:16px;box-sizing:border-box;background:"
                    f"{style['fill']};color:{text_on(style['fill'])};border-right:1px solid "
                    f'#ffffff;font-size:9px;overflow:hidden">{glyph}</span>'
                )
            step += n
        rows.append(
            f'<div data-request="{esc(request)}" style="display:flex;align-items:center;'
            f'height:18px"><span style="width:70px;color:{INK}">request {esc(request)}</span>'
            f'<span style="position:relative;display:flex">{"".join(spans)}</span></div>'
        )
    ticks = []
    every = 5 if num_steps <= 60 else 10 if num_steps <= 150 else 25
    for t in range(0, num_steps, every):
        ticks.append(
            f'<span style="position:absolute;left:{70 + t * width}px;color:{MUTED};'
            f'font-size:9px">{t}</span>'
        )
    axis = (
        f'<div style="position:relative;height:12px;width:{70 + num_steps * width}px">'
        f'{"".join(ticks)}</div><div style="color:{MUTED};margin-left:70px">engine step →'
        "</div>"
    )
    marker = ""
    if current is not None:
        marker = (
            f'<div data-current="{current}" style="position:absolute;top:0;bottom:0;'
            f"left:{70 + current * width}px;width:{width}px;box-sizing:border-box;"
            'border:2px solid #111111;pointer-events:none"></div>'
        )
    items = [(swatch(s["fill"], "1px solid #6b6b6b", s["glyph"]), s["label"])
             for s in PHASE_STYLES.values()]  # fmt: skip
    if current is not None:
        items.append(
            ('<span style="display:inline-block;width:8px;height:14px;border:2px solid #111111">'
             "</span>", f"step {current}")
        )  # fmt: skip
    body = (
        legend(items)
        + f'<div style="position:relative;width:fit-content">{"".join(rows)}{marker}</div>'
        + axis
    )
    return card(body, "paged-kv-gantt")


def _runs(states: Sequence[str | None]) -> list[tuple[str | None, int]]:
    runs: list[tuple[str | None, int]] = []
    for s in states:
        if runs and runs[-1][0] == s:
            runs[-1] = (s, runs[-1][1] + 1)
        else:
            runs.append((s, 1))
    return runs
