"""Eviction you can see: a trace replayed one request per step, each victim named with why.

`eviction_replay` runs requests (runs of block keys) through a real `BlockPool`, exactly as
`trace_frames` does access by access (the tests check they agree), and records after each
request: what each block holds, the policy's count for it, which keys were evicted and why
("evicted key 35: count 1, oldest of 3 in bucket 1"), and the policy's queue (LFU's buckets,
LRU's and FIFO's order). `render_eviction_html` draws one step: the cache on a fixed count
scale, shared-prefix keys apart from private ones, the victim marked, the queue beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.validation import require_positive_int
from paged_kv.widgets.render import count_legend
from paged_kv.widgets.theme import (
    INK,
    MUTED,
    OUTLINE_HIT,
    OUTLINE_MISS,
    card,
    count_colour,
    esc,
    flex,
    legend,
    text_on,
)

VICTIM_FILL = "#D55E00"  # vermillion; ink from text_on


@dataclass(frozen=True)
class Eviction:
    """A key the policy evicted to make room, from which block, and why."""

    key: int
    block: int
    why: str


@dataclass(frozen=True)
class EvictionFrame:
    """The cache after one request (step 0: empty, before any)."""

    step: int
    request: tuple[int, ...]  # the keys this request accessed, in order
    hits: tuple[bool, ...]  # hit or miss, per access
    blocks: tuple[int, ...]  # the block that held each accessed key
    evictions: tuple[Eviction, ...]
    keys: tuple[int | None, ...]  # key held by each block (None: free)
    counts: tuple[int, ...]  # the policy's count per block (accesses while cached without one)
    queue: dict[str, list[int]] = field(default_factory=dict)  # name -> keys, victim side first
    next_victim: int | None = None  # the key the policy would evict next (when full)
    hits_so_far: int = 0
    accesses_so_far: int = 0


def split_requests(trace: Sequence[int], request_blocks: int) -> list[tuple[int, ...]]:
    """A flat trace cut into requests of `request_blocks` keys (the last may be shorter)."""
    require_positive_int("request_blocks", request_blocks)
    return [tuple(trace[i : i + request_blocks]) for i in range(0, len(trace), request_blocks)]


def reused_keys(requests: Sequence[Sequence[int]]) -> set[int]:
    """Keys that occur in more than one request: shared prefix blocks, not private ones."""
    seen = Counter(key for request in requests for key in set(request))
    return {key for key, n in seen.items() if n > 1}


def eviction_replay(
    requests: Sequence[Sequence[int]], capacity: int, policy: PolicySpec = "lfu"
) -> list[EvictionFrame]:
    """Replay `requests` through a `BlockPool` of `capacity` blocks; one frame per request.

    Each access is handled as `trace_frames` does: a miss allocates (evicting through the
    policy when nothing is free) and keeps the content; a hit shares the cached block; then
    the block is released. Victims are explained from the policy's state just before.
    """
    require_positive_int("capacity", capacity)
    chosen = make_policy(policy)
    block_of: dict[int, int] = {}
    key_of: dict[int, int] = {}
    released_at: dict[int, int] = {}  # key -> access number when it last became evictable
    uses: dict[int, int] = {}  # key -> accesses since it was cached (policies without counts)
    evicted: list[int] = []

    def forget(block: int) -> None:
        evicted.append(block)

    pool = BlockPool(capacity, eviction=chosen, on_evict=forget)
    counts: Callable[[int], int] | None = getattr(pool.policy, "count", None)
    frames = [EvictionFrame(0, (), (), (), (), (None,) * capacity, (0,) * capacity)]
    access = hits_so_far = 0
    for step, request in enumerate(requests, start=1):
        hits, blocks, evictions = [], [], []
        for key in request:
            access += 1
            hit = key in block_of
            if hit:
                pool.share([block_of[key]])
            else:
                why_of = _explain(pool, key_of, released_at, counts) if not pool.num_free else {}
                evicted.clear()
                [block] = pool.allocate(1)
                for victim in evicted:
                    old = key_of.pop(victim)
                    del block_of[old]
                    uses.pop(old, None)
                    evictions.append(Eviction(old, victim, why_of.get(victim, "")))
                block_of[key], key_of[block] = block, key
                pool.keep_content([block])
            uses[key] = uses.get(key, 0) + 1
            pool.release([block_of[key]])
            released_at[key] = access
            hits.append(hit)
            blocks.append(block_of[key])
        hits_so_far += sum(hits)
        frames.append(
            EvictionFrame(
                step,
                tuple(request),
                tuple(hits),
                tuple(blocks),
                tuple(evictions),
                tuple(key_of.get(b) for b in range(capacity)),
                tuple(
                    (counts(b) if counts is not None else uses[key_of[b]]) if b in key_of else 0
                    for b in range(capacity)
                ),
                _queue(pool, key_of, released_at),
                _next_victim(pool, key_of, released_at),
                hits_so_far,
                access,
            )
        )
    return frames


def _explain(
    pool: BlockPool,
    key_of: dict[int, int],
    released_at: dict[int, int],
    counts: Callable[[int], int] | None,
) -> dict[int, str]:
    """Why each cached block would be the victim, from the policy's state now."""
    policy = pool.policy
    buckets = getattr(policy, "buckets", None)
    if buckets is not None and counts is not None:
        why = {}
        window = getattr(policy, "window", None)
        within = f" in the last {window:,} touches" if window else ""
        for bucket, members in buckets().items():
            for position, block in enumerate(members):
                rank = "oldest" if position == 0 else f"{_ordinal(position + 1)} oldest"
                why[block] = (
                    f"count {counts(block)}{within}, {rank} of {len(members)} in bucket {bucket}"
                    f" (the lowest non-empty)"
                )
        return why
    name = getattr(policy, "name", "policy")
    if name in ("lru", "fifo"):
        verb = "last used" if name == "lru" else "became evictable"
        rule = "least recently used" if name == "lru" else "first in the queue"
        return {b: f"{rule}: {verb} at access {released_at[k]}" for b, k in key_of.items()}
    return {b: f"chosen by {name}" for b in key_of}


def _queue(
    pool: BlockPool, key_of: dict[int, int], released_at: dict[int, int]
) -> dict[str, list[int]]:
    """The policy's candidates in victim order, as keys: LFU's buckets, LRU's/FIFO's queue."""
    policy = pool.policy
    buckets = getattr(policy, "buckets", None)
    if buckets is not None:
        return {f"count {c}": [key_of[b] for b in members] for c, members in buckets().items()}
    if getattr(policy, "name", "") in ("lru", "fifo"):
        order = sorted(key_of, key=lambda b: released_at[key_of[b]])
        return {"oldest → newest": [key_of[b] for b in order]}
    return {}


def _next_victim(
    pool: BlockPool, key_of: dict[int, int], released_at: dict[int, int]
) -> int | None:
    if pool.num_free or not key_of:
        return None
    queue = _queue(pool, key_of, released_at)
    if not queue:
        return None
    first = next(iter(queue.values()))
    return first[0] if first else None


def _ordinal(n: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def render_eviction_html(
    frame: EvictionFrame,
    *,
    prefix_keys: Collection[int] = (),
    policy_name: str = "",
) -> str:
    """HTML of one step: the cache (key and count per block on the fixed scale, accessed
    blocks outlined: solid hit, dashed miss; a victim's block marked ✕key), the caption that
    says why each victim went, and the policy's queue beside the cache.

    Blocks carry data-block-id, data-key, data-count, data-kind (prefix / private / free) and
    data-evicted (the key evicted from it this step) for tests."""
    accessed = {b: hit for b, hit in zip(frame.blocks, frame.hits, strict=True)}
    evicted_from = {e.block: e.key for e in frame.evictions}
    cells = []
    for block, (key, n) in enumerate(zip(frame.keys, frame.counts, strict=True)):
        cells.append(
            _cell(block, key, n, accessed.get(block), evicted_from.get(block), key in prefix_keys)
        )
    kinds = legend(
        [
            (_key_swatch(True), "shared prefix key (bold, solid border)"),
            (_key_swatch(False), "private key (italic, dashed border)"),
            (_victim_badge("k"), "evicted this step"),
        ]
    )
    grid = f'<div style="max-width:560px">{flex("".join(cells), gap="4px")}</div>'
    side = _queue_html(frame)
    body = (
        count_legend()
        + kinds
        + _caption_html(frame, policy_name, prefix_keys)
        + flex(grid + side, gap="12px", extra="align-items:flex-start")
    )
    return card(body, "paged-kv-eviction")


def _cell(
    block: int, key: int | None, n: int, hit: bool | None, victim: int | None, prefix: bool
) -> str:
    if key is None:
        fill, border, ink, label, kind = "#ffffff", "1px dotted #6b6b6b", MUTED, "·", "free"
    else:
        fill = count_colour(max(n, 1))
        ink = text_on(fill)
        border = "2px solid #111111" if prefix else "2px dashed #111111"
        weight = "font-weight:bold" if prefix else "font-style:italic"
        label = f"<span style='{weight}'>{esc(key)}</span><span style='font-size:9px'>×{n}</span>"
        kind = "prefix" if prefix else "private"
    outline = ""
    if hit is not None:
        outline = f"outline:{OUTLINE_HIT if hit else OUTLINE_MISS};outline-offset:1px;"
    badge = "" if victim is None else _victim_badge(str(victim), absolute=True)
    return (
        f'<div data-block-id="{block}" data-key="{esc("" if key is None else key)}" '
        f'data-count="{n}" data-kind="{kind}" '
        f'data-evicted="{esc("" if victim is None else victim)}" '
        f'title="block {block}" style="position:relative;width:40px;height:36px;'
        f"box-sizing:border-box;background:{fill};color:{ink};border:{border};{outline}"
        f'display:flex;flex-direction:column;align-items:center;justify-content:center">'
        f"{label}{badge}</div>"
    )


def _victim_badge(text: str, absolute: bool = False) -> str:
    place = "position:absolute;right:-4px;top:-8px;" if absolute else ""
    return (
        f'<span style="{place}background:{VICTIM_FILL};color:{text_on(VICTIM_FILL)};'
        f'font-size:9px;padding:0 2px;border-radius:3px">✕{esc(text)}</span>'
    )


def _key_swatch(prefix: bool) -> str:
    border = "2px solid #111111" if prefix else "2px dashed #111111"
    style = "font-weight:bold" if prefix else "font-style:italic"
    return (
        f'<span style="display:inline-flex;align-items:center;justify-content:center;width:20px;'
        f"height:16px;box-sizing:border-box;border:{border};background:#ffffff;color:{INK};"
        f'{style};font-size:9px">7</span>'
    )


def _caption_html(frame: EvictionFrame, policy_name: str, prefix_keys: Collection[int]) -> str:
    if frame.step == 0:
        text = "start: the cache is empty"
    else:
        accesses = " ".join(
            f"{k}{'✓' if hit else '✗'}" for k, hit in zip(frame.request, frame.hits, strict=True)
        )
        shared = sum(k in prefix_keys for k in frame.request)
        text = (
            f"request {frame.step}: keys {accesses} ({shared} shared-prefix, "
            f"{len(frame.request) - shared} private; ✓ hit, ✗ miss): "
            f"{sum(frame.hits)} hits, {len(frame.hits) - sum(frame.hits)} misses"
        )
    rate = frame.hits_so_far / frame.accesses_so_far if frame.accesses_so_far else 0.0
    lines = [f"<div>{esc(text)} · hit rate so far {rate:.0%}</div>"]
    for e in frame.evictions:
        lines.append(
            f'<div data-eviction="{esc(e.key)}"><b>evicted key {esc(e.key)}</b> from block '
            f"{e.block}{' (' + esc(policy_name) + ')' if policy_name else ''}: {esc(e.why)}</div>"
        )
    if frame.step and not frame.evictions:
        lines.append(f'<div style="color:{MUTED}">no eviction this step</div>')
    return f'<div data-caption style="margin:0 0 6px 0;color:{INK}">{"".join(lines)}</div>'


def _queue_html(frame: EvictionFrame) -> str:
    if not frame.queue:
        return ""
    rows = []
    for name, keys in frame.queue.items():
        chips = " ".join(
            f'<span style="background:{VICTIM_FILL};color:{text_on(VICTIM_FILL)};padding:0 2px">'
            f"{esc(k)}</span>"
            if k == frame.next_victim
            else esc(k)
            for k in keys
        )
        rows.append(
            f'<div data-bucket="{esc(name)}" style="color:{INK}"><b>{esc(name)}</b>: {chips}</div>'
        )
    note = (
        f'<div style="color:{MUTED};margin-top:4px">highlighted: the next victim</div>'
        if frame.next_victim is not None
        else ""
    )
    return (
        '<div data-queue style="min-width:200px;max-width:320px;border-left:2px solid #c8c8c8;'
        f'padding-left:8px;color:{INK}"><div style="color:{MUTED}">candidates, victim side '
        f"first</div>{''.join(rows)}{note}</div>"
    )
