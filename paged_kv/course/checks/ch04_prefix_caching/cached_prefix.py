"""Exercise 2 of chapter 04: the longest cached prefix is the leading run of hashes the index
holds, never covering the prompt's last token."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from paged_kv.cache.hashing import block_hashes
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.replay import Replay, search


@exercise(2, "cached_prefix")
def check_cached_prefix(fn: Callable[..., list[int]], *, seed: int = 0) -> None:
    """`fn(index, hashes, num_prompt_tokens, block_size)`: the blocks of the longest run of
    `hashes` *from the start* that `index` (hash -> block id, read-only) holds, never
    covering the prompt's last token."""

    def run(ops: list[Any], r: Replay) -> None:
        size, cached, holes, prompt = ops
        index: dict[bytes, int] = {}
        r.note("from paged_kv.cache.hashing import block_hashes")
        r.note("index = {}")
        block = 0
        for tokens in cached:
            ids = list(range(block, block + len(tokens) // size))
            block += len(ids)
            for b, digest in zip(ids, block_hashes(tokens, size), strict=True):
                index.setdefault(digest, b)
            r.note(f"index.update(zip(block_hashes({tokens}, {size}), {ids}))")
        if holes:  # evicted blocks leave holes in the chains
            gone = sorted(set(holes))
            for digest in [d for d, b in index.items() if b in gone]:
                del index[digest]
            r.note(f"for h in [h for h, b in index.items() if b in {gone}]: del index[h]")
        hashes = block_hashes(prompt, size)
        want = _reference_prefix(index, hashes, len(prompt), size)
        r.note(f"hashes = block_hashes({prompt}, {size})")
        got = r.run(
            f"cached_prefix(index, hashes, {len(prompt)}, {size})",
            fn,
            MappingProxyType(dict(index)),
            list(hashes),
            len(prompt),
            size,
        )
        got = list(got) if isinstance(got, list | tuple) else got
        if got != want:
            r.fail(
                _prefix_cause(got, want, index, hashes, len(prompt), size),
                f"the hits should be blocks {want}, got {got!r}"
                + _prefix_cause(got, want, index, hashes, len(prompt), size, long=True),
            )

    def make(rng: random.Random) -> list[Any]:
        size = rng.randint(1, 4)
        common = [rng.randrange(3) for _ in range(rng.randint(0, 4 * size))]
        cached = [
            common + [rng.randrange(3) for _ in range(rng.randint(0, 3 * size))]
            for _ in range(rng.randint(1, 3))
        ]
        total = sum(len(t) // size for t in cached)
        holes = [rng.randrange(max(total, 1)) for _ in range(rng.choice([0, 0, 1, 2]))]
        prompt = common + [rng.randrange(3) for _ in range(rng.randint(1, 3 * size))]
        if rng.random() < 0.3:
            prompt = rng.choice(cached)[: rng.randint(1, 5 * size)] or [0]
        return [size, cached, holes, prompt]

    search(run, make, trials=400, seed=seed, what="check_cached_prefix", keep=4)
    passed("the leading run of hits, never the last token, on 400 random trials")


def _reference_prefix(index: dict, hashes: list, n: int, size: int) -> list[int]:
    blocks = []
    for digest in hashes[: (n - 1) // size]:
        if digest not in index:
            break
        blocks.append(index[digest])
    return blocks


def _prefix_cause(
    got: Any, want: list[int], index: dict, hashes: list, n: int, size: int, long: bool = False
) -> str:
    cap = (n - 1) // size
    every = [index[d] for d in hashes if d in index]
    if isinstance(got, list) and got and all(isinstance(b, bytes) for b in got):
        why = "return the block ids the index maps the hashes to, not the hashes"
    elif isinstance(got, list) and len(got) > cap and len(got) * size >= n:
        why = (
            f"the last prompt token is never a hit (its logits must be computed): at most "
            f"(num_prompt_tokens - 1) // block_size = {cap} blocks"
        )
    elif isinstance(got, list) and got == every[: len(got)] and got != want[: len(got)]:
        why = "a hit is a run of hashes from the start; stop at the first hash the index lacks"
    else:
        why = "the hits are the longest run of hashes from the start that the index holds"
    return f" ({why})" if long else why
