"""`learner_manager` runs the manager on the learner's parts (a pool, a block hasher, a prefix
lookup, a table allocator), and the engine takes them with a decode attention function (and, as
before, an eviction policy and a scheduler): they serve exactly as the library's own parts, and
a wrong part fails loudly, naming itself."""

import functools
import hashlib
import inspect
import random
import struct

import pytest
import torch
from test_caching_pool import StackPool  # chapter 01's design: a stack of free ids

from paged_kv import InvalidArgument, KVCacheManager, OutOfBlocks
from paged_kv.attention import reference_decode
from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.eviction import LFU
from paged_kv.cache.ref_count_pool import RefCountPool
from paged_kv.course import checks
from paged_kv.course.learner_manager import LearnerManager, learner_manager
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM, greedy_dense
from paged_kv.serving.scheduler import Scheduler


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
    pool=StackPool,
    block_hasher=my_hashes,
    prefix_lookup=my_lookup,
    allocate_table=my_allocate_table,
)


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


@pytest.mark.parametrize("hooks", [ALL_HOOKS, {"pool": StackPool}, {"block_hasher": my_hashes}])
@pytest.mark.parametrize("seed", range(5))
def test_a_manager_on_the_learners_parts_hits_like_the_library(hooks, seed):
    ours = KVCacheManager(24, 4, eviction="lfu")
    theirs = learner_manager(24, 4, eviction="lfu", **hooks)
    assert isinstance(theirs, LearnerManager)
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
    manager = learner_manager(16, 4, prefix_lookup=lambda index, hashes, n, size: [])
    manager.add_sequence("a", list(range(9)))
    with pytest.raises(InvalidArgument, match="prefix_lookup returned"):
        manager.add_sequence("b", list(range(9)))
    with pytest.raises(InvalidArgument, match="block_hasher returned"):
        learner_manager(16, 4, block_hasher=lambda t, s, salt=None: []).add_sequence("a", [1] * 9)
    greedy = learner_manager(16, 4, allocate_table=lambda pool, hits, n: pool.allocate(n))
    greedy.add_sequence("a", list(range(9)))
    with pytest.raises(InvalidArgument, match="allocate_table returned"):
        greedy.add_sequence("b", list(range(9)))
    with pytest.raises(InvalidArgument, match="pages"):
        learner_manager(16, 4, pool=StackPool, blocks_per_page=4)
    with pytest.raises(InvalidArgument, match="hash chain"):
        learner_manager(8, 4, prefix_index="radix", block_hasher=my_hashes)


def test_without_parts_it_is_the_library_manager_and_a_pool_alone_works_on_a_radix_index():
    assert type(learner_manager(8, 4)) is KVCacheManager
    manager = learner_manager(8, 4, pool=StackPool, prefix_index="radix")
    manager.add_sequence("a", list(range(9)))
    manager.free_sequence("a")
    manager.add_sequence("b", list(range(9)))
    assert manager.num_cached_tokens("b") == 8 and isinstance(manager.pool.base, StackPool)


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
        manager_factory=functools.partial(learner_manager, **ALL_HOOKS),
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


def test_a_learners_pool_gets_the_caching_layer_the_library_pool_gets():
    pool = learner_manager(8, 4, pool=RefCountPool).pool
    assert type(pool) is CachingPool and isinstance(pool.base, RefCountPool)
    assert type(KVCacheManager(8, 4).pool).__mro__[1] is CachingPool  # BlockPool: the same layer


_STUB_POLICY = """class BucketLFU:
    def __init__(self):
        raise NotImplementedError("BucketLFU.__init__: replace this line with your code")


PART = BucketLFU
"""


def test_the_capstone_runs_on_the_saved_parts_a_stub_being_the_librarys(
    tmp_path, monkeypatch, capsys
):
    """Chapter 03's part saved as the exercise notebook ships it (a stub) is not run: the
    library's policy stands in and the capstone says why and which folder it read, beside the
    learner's chained hash, which it runs."""
    monkeypatch.setenv("PAGED_KV_PARTS", str(tmp_path))
    (tmp_path / "eviction.py").write_text(_STUB_POLICY)
    hashes = f"import hashlib\nimport struct\n\n\n{inspect.getsource(my_hashes)}\n"
    (tmp_path / "block_hasher.py").write_text(f"{hashes}\nPART = my_hashes\n")
    checks.check_capstone(Scheduler)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "The engine ran on:" and out[8].startswith("(parts are read from")
    said = dict(line.strip().split("  ", 1) for line in out[1:8])
    said = {what: why.strip() for what, why in said.items()}
    assert said["your chained hash (chained_hashes)"] == f"yours, from {tmp_path}/block_hasher.py"
    assert said["your eviction policy"] == (
        f"the library's: {tmp_path}/eviction.py still has the stub of `BucketLFU.__init__`, to "
        "write in 03_eviction_exercises.ipynb"
    )
    assert said["your block pool (FreeListPool)"].startswith("the library's: not saved yet")
    assert out[8] == f"(parts are read from {tmp_path}/, the folder PAGED_KV_PARTS names)"
