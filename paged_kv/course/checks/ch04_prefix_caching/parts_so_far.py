"""Chapter 04's "your parts so far": the learner's hash, lookup and add inside a
`KVCacheManager` hit exactly what the library's parts hit on multi-tenant traffic."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.course.checks.failures import call, exercise, expect, expect_raises, passed
from paged_kv.errors import OutOfBlocks


@exercise(None, "your parts so far")
def check_prefix_parts(
    block_hasher: Callable[..., Any],
    prefix_lookup: Callable[..., Any],
    allocate_table: Callable[..., Any],
    *,
    pool: Any = None,
    eviction: Any = "lru",
    seed: int = 0,
) -> None:
    """Your three parts (and your pool and policy class, when given) inside a `KVCacheManager`,
    on multi-tenant traffic with shared system prompts, hit exactly what the library's parts
    hit (under the same eviction policy)."""
    from paged_kv.cache.manager import KVCacheManager

    hooks = {
        "block_hasher": block_hasher,
        "prefix_lookup": prefix_lookup,
        "allocate_table": allocate_table,
    }
    if pool is not None:
        hooks["pool"] = pool
    rng = random.Random(seed)
    systems = [[rng.randrange(300) for _ in range(rng.randint(8, 20))] for _ in range(3)]
    ours = KVCacheManager(40, 4, eviction=eviction)  # the same policy: the same victims
    theirs = call(
        "KVCacheManager(40, 4, ...) with your parts",
        KVCacheManager,
        40,
        4,
        eviction=eviction,
        **hooks,
    )
    live: list[int] = []
    hit_tokens = 0
    for i in range(150):
        prompt = rng.choice(systems) + [rng.randrange(300) for _ in range(rng.randint(1, 12))]
        salt = rng.choice([None, "alice", "bob"])
        if live and (rng.random() < 0.45 or not ours.can_allocate(len(prompt))):
            seq = live.pop(rng.randrange(len(live)))
            ours.free_sequence(seq)
            call(f"manager.free_sequence({seq})", theirs.free_sequence, seq)
            continue
        try:
            ours.add_sequence(i, prompt, salt=salt)
        except OutOfBlocks:
            expect_raises(
                OutOfBlocks,
                lambda i=i, p=prompt, s=salt: theirs.add_sequence(i, p, salt=s),
                f"request {i}: adding a {len(prompt)}-token prompt that does not fit",
            )
            continue
        call(
            f"manager.add_sequence({i}, <{len(prompt)} tokens>, salt={salt!r})",
            theirs.add_sequence,
            i,
            prompt,
            salt=salt,
        )
        live.append(i)
        expect(
            theirs.num_cached_tokens(i) == ours.num_cached_tokens(i),
            f"request {i} (salt {salt!r}): with your parts {theirs.num_cached_tokens(i)} prompt "
            f"tokens were prefix hits; the library finds {ours.num_cached_tokens(i)}.",
        )
        hit_tokens += ours.num_cached_tokens(i)
    passed(f"your prefix caching: {hit_tokens:,} prompt tokens hit, as the library's")
