"""The engine and the manager take the learner's parts through public hooks: a pool, a block
hasher, a prefix lookup, a table allocator, a decode attention function (and, as before, an
eviction policy and a scheduler), and serve exactly as with the library's own parts."""

import functools
import hashlib
import random
import struct

import pytest
import torch

from paged_kv import BlockPool, InvalidArgument, InvalidBlock, KVCacheManager, OutOfBlocks
from paged_kv.attention import reference_decode
from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.eviction import LFU
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM, greedy_dense


class PlainPool:
    """Chapter 01's pool: a stack of free ids and reference counts, no caching."""

    def __init__(self, num_blocks, block_size=16):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.ref = [0] * num_blocks
        self.free_ids = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self):
        return len(self.free_ids)

    def ref_count(self, b):
        return self.ref[b]

    def allocate(self, n=1):
        if n > len(self.free_ids):
            raise OutOfBlocks("short", requested=n, available=len(self.free_ids))
        ids = [self.free_ids.pop() for _ in range(n)]
        for b in ids:
            self.ref[b] = 1
        return ids

    def share(self, ids):
        for b in ids:
            self.ref[b] += 1

    def release(self, ids):
        freed = []
        for b in ids:
            self.ref[b] -= 1
            if not self.ref[b]:
                self.free_ids.append(b)
                freed.append(b)
        return freed


def my_hashes(token_ids, block_size, salt=None):
    parent = b"\x00" if salt is None else b"\x01" + salt.encode()
    out = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start : start + block_size]
        parent = hashlib.sha256(parent + struct.pack(f"<{len(block)}q", *block)).digest()
        out.append(parent)
    return out


def my_lookup(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for h in hashes[: (num_prompt_tokens - 1) // block_size]:
        if h not in index:
            break
        blocks.append(index[h])
    return blocks


def my_allocate_table(pool, hits, num_blocks):
    revived = sum(1 for b in hits if pool.ref_count(b) == 0)
    fresh = num_blocks - len(hits)
    if fresh > pool.num_available - revived:
        raise OutOfBlocks("short", requested=fresh, available=pool.num_available - revived)
    pool.share(hits)
    return hits + pool.allocate(fresh)


ALL_HOOKS = dict(
    pool=PlainPool,
    block_hasher=my_hashes,
    prefix_lookup=my_lookup,
    allocate_table=my_allocate_table,
)


def _pool_ops(seed):
    rng = random.Random(seed)
    return [(rng.choice("aaksrrk"), rng.random()) for _ in range(200)]


@pytest.mark.parametrize("seed", range(20))
def test_a_caching_pool_over_a_plain_pool_counts_like_block_pool(seed):
    evicted = {"theirs": [], "ours": []}
    ours = BlockPool(12, 4, eviction="lru", on_evict=evicted["ours"].append)
    theirs = CachingPool(PlainPool(12, 4), 12, 4, eviction="lru", on_evict=evicted["theirs"].append)
    held = {"ours": [], "theirs": []}  # the same logical blocks, side by side
    for op, x in _pool_ops(seed):
        pools = {"ours": ours, "theirs": theirs}
        if op == "a":
            n = int(x * 4)
            if n > ours.num_available:
                for pool in pools.values():
                    with pytest.raises(OutOfBlocks):
                        pool.allocate(n)
                continue
            for name, pool in pools.items():
                held[name].extend(pool.allocate(n))
        elif held["ours"]:
            i = int(x * len(held["ours"]))
            pair = {name: held[name][i] for name in pools}
            if op == "k":
                for name, pool in pools.items():
                    pool.keep_content([pair[name]])
            elif op == "s":
                for name, pool in pools.items():
                    pool.share([pair[name]])
                    held[name].append(pair[name])
            else:
                for name, pool in pools.items():
                    pool.release([held[name].pop(i)])
        assert (theirs.num_free, theirs.num_cached, theirs.num_in_use) == (
            ours.num_free,
            ours.num_cached,
            ours.num_in_use,
        )
        assert len(evicted["theirs"]) == len(evicted["ours"])
        assert sorted(theirs.ref_count(b) for b in held["theirs"]) == sorted(
            ours.ref_count(b) for b in held["ours"]
        )


def test_a_caching_pool_refuses_what_block_pool_refuses():
    pool = CachingPool(PlainPool(4, 4), 4, 4)
    a, b = pool.allocate(2)
    pool.keep_content([a])
    pool.release([a])
    assert pool.ref_count(a) == 0 and pool.num_cached == 1
    with pytest.raises(InvalidBlock):
        pool.release([a])  # cached: no reference left to drop
    with pytest.raises(InvalidBlock):
        pool.share([3])  # free
    with pytest.raises(InvalidBlock):
        pool.release([b, b])
    with pytest.raises(InvalidBlock):
        pool.release([-1])
    pool.share([a])  # a hit revives the cached block
    assert pool.ref_count(a) == 1 and pool.num_cached == 0


def _prefix_trace(seed):
    rng = random.Random(seed)
    systems = [[rng.randrange(50) for _ in range(rng.randint(4, 12))] for _ in range(3)]
    return [
        (
            rng.choice(systems) + [rng.randrange(50) for _ in range(rng.randint(1, 9))],
            rng.choice([None, "a", "b"]),
            rng.random(),
        )
        for _ in range(60)
    ]


@pytest.mark.parametrize("hooks", [ALL_HOOKS, {"pool": PlainPool}, {"block_hasher": my_hashes}])
@pytest.mark.parametrize("seed", range(5))
def test_a_manager_on_the_learners_parts_hits_like_the_library(hooks, seed):
    ours = KVCacheManager(24, 4, eviction="lfu")
    theirs = KVCacheManager(24, 4, eviction="lfu", **hooks)
    live = []
    for i, (tokens, salt, x) in enumerate(_prefix_trace(seed)):
        fits = ours.can_allocate(len(tokens)) and x < 0.8
        if fits:
            try:
                ours.add_sequence(i, tokens, salt=salt)
            except OutOfBlocks:
                fits = False
        if fits:
            theirs.add_sequence(i, tokens, salt=salt)
            assert theirs.num_cached_tokens(i) == ours.num_cached_tokens(i)
            live.append(i)
            if ours.can_append(i, 1):
                ours.append_tokens(i, [7])
                theirs.append_tokens(i, [7])
        elif live:
            seq = live.pop(int(x * len(live)))
            ours.free_sequence(seq)
            theirs.free_sequence(seq)
        a, b = ours.stats(), theirs.stats()
        assert (a.num_free_blocks, a.num_cached_blocks, a.evictions) == (
            b.num_free_blocks,
            b.num_cached_blocks,
            b.evictions,
        )


def test_a_wrong_hook_fails_loudly_and_names_itself():
    manager = KVCacheManager(16, 4, prefix_lookup=lambda index, hashes, n, size: [])
    manager.add_sequence("a", list(range(9)))
    with pytest.raises(InvalidArgument, match="prefix_lookup returned"):
        manager.add_sequence("b", list(range(9)))
    with pytest.raises(InvalidArgument, match="block_hasher returned"):
        KVCacheManager(16, 4, block_hasher=lambda t, s, salt=None: []).add_sequence("a", [1] * 9)
    greedy = KVCacheManager(16, 4, allocate_table=lambda pool, hits, n: pool.allocate(n))
    greedy.add_sequence("a", list(range(9)))
    with pytest.raises(InvalidArgument, match="allocate_table returned"):
        greedy.add_sequence("b", list(range(9)))
    with pytest.raises(InvalidArgument, match="pages"):
        KVCacheManager(16, 4, pool=PlainPool, blocks_per_page=4)


def test_the_engine_serves_dense_tokens_on_the_learners_parts():
    model = TinyLM(ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1), seed=0)
    calls = []

    def my_decode(q, k_cache, v_cache, block_tables, seq_lens):
        calls.append(len(q))
        return reference_decode(q, k_cache, v_cache, block_tables, seq_lens)

    system = list(b"You are a terse assistant.\n")
    prompts = [system + list(q) for q in (b"What is paging?", b"Why blocks?", b"Who evicts?")]
    engine = Engine(
        model,
        num_blocks=14,
        block_size=4,
        eviction=LFU,
        attention=my_decode,
        manager_factory=functools.partial(KVCacheManager, **ALL_HOOKS),
    )
    out = engine.generate(prompts, 12)
    assert [c.token_ids for c in out] == [greedy_dense(model, p, 12) for p in prompts]
    assert calls and isinstance(engine.manager.pool, CachingPool)
    assert engine.stats().prefill_tokens_saved > 0 and engine.stats().preemptions


def test_the_decode_hook_is_what_decodes():
    model = TinyLM(seed=0)  # two layers
    calls = []

    def zeros(q, k_cache, v_cache, block_tables, seq_lens):
        calls.append(tuple(q.shape))
        return torch.zeros_like(q)

    Engine(model, num_blocks=8, block_size=4, attention=zeros).generate([list(b"hello")], 6)
    assert len(calls) == 5 * 2  # every decode step (the first token comes from the prefill)


def test_caching_pool_has_every_pool_call_the_manager_makes():
    """The manager may only call on its pool what CachingPool offers too (pool= would break)."""
    import re
    from pathlib import Path

    import paged_kv.cache.manager as manager_module

    used = set(re.findall(r"self\.pool\.(\w+)", Path(manager_module.__file__).read_text()))
    pool = KVCacheManager(8, 4, pool=BlockPool).pool  # a CachingPool over a plain pool
    assert isinstance(pool, CachingPool)
    assert used and not used - set(dir(pool)), sorted(used - set(dir(pool)))
