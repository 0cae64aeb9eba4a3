"""Prefix caching: chained hashes, sharing, salts, forks with copy-on-write, reset, metrics."""

import os
import subprocess
import sys

import pytest

from paged_kv import (
    BlockState,
    CacheBusy,
    DuplicateSequence,
    InvalidArgument,
    KVCacheManager,
    UnknownSequence,
)
from paged_kv.cache.hashing import block_hashes, hash_block
from paged_kv.cache.hit_metrics import PrefixHitCounter

BS = 4
SHARED = list(range(100, 112))  # three full blocks of 4


def test_hash_chains_the_parent_so_equal_blocks_at_different_places_differ():
    a = block_hashes([1, 2, 3, 4, 1, 2, 3, 4], 4)
    assert len(a) == 2 and a[0] != a[1]  # same tokens, different prefix
    assert a[1] == hash_block(a[0], [1, 2, 3, 4])
    assert block_hashes([1, 2, 3], 4) == []  # a partial block has no hash
    assert block_hashes([1, 2, 3, 4], 4, extra_keys=("lora-a",)) != block_hashes([1, 2, 3, 4], 4)
    assert block_hashes([1, 2, 3, 4], 4, salt="t1") != block_hashes([1, 2, 3, 4], 4, salt=b"t1")


def test_hashes_are_identical_across_processes_with_different_hash_seeds():
    code = (
        "from paged_kv.cache.hashing import block_hashes;"
        "print([h.hex() for h in block_hashes(list(range(40)), 16, salt='tenant', "
        "extra_keys=('adapter', 3))])"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "12345")
    }
    assert len(outputs) == 1 and "[" in outputs.pop()


def test_a_second_request_hits_exactly_the_shared_full_blocks():
    m = KVCacheManager(16, BS)
    first = m.add_sequence("a", [*SHARED, 1, 2])
    second = m.add_sequence("b", [*SHARED, 7, 8, 9])
    assert m.num_cached_tokens("a") == 0 and m.num_cached_tokens("b") == 12
    assert second[:3] == first[:3] and second[3] != first[3]
    assert [m.pool.ref_count(b) for b in first[:3]] == [2, 2, 2]
    assert m.stats().blocks_saved_by_sharing == 3


def test_a_full_prompt_hit_still_computes_the_last_token():
    m = KVCacheManager(16, BS)
    m.add_sequence("a", SHARED)
    m.free_sequence("a")
    table = m.add_sequence("b", SHARED)
    assert m.num_cached_tokens("b") == 8  # two blocks hit; the third holds the last token
    assert m.pool.state(table[2]) is BlockState.IN_USE


def test_freed_blocks_are_found_again_until_evicted():
    m = KVCacheManager(4, BS)
    m.add_sequence("a", [*SHARED[:8], 1])
    m.free_sequence("a")
    assert m.pool.num_cached == 2
    m.add_sequence("b", [*SHARED[:8], 5])
    assert m.num_cached_tokens("b") == 8
    m.free_sequence("b")
    m.add_sequence("c", list(range(200, 215)))  # needs all 4 blocks: evicts both cached
    m.free_sequence("c")
    m.add_sequence("d", [*SHARED[:8], 5])  # 1 free block + 2 of c's, now cached, evicted
    assert m.num_cached_tokens("d") == 0
    assert m.stats().evictions == 4


def test_asking_for_prefix_hits_changes_nothing_and_agrees_with_adding():
    m = KVCacheManager(8, BS, eviction="lfu")
    m.add_sequence("a", [*SHARED, 1])
    m.free_sequence("a")

    def state():
        return m.snapshot(), m.hit_rates(), [m.pool.policy.count(b) for b in range(8)]

    before = state()
    assert m.num_prefix_hit_tokens([*SHARED, 9]) == 12
    assert m.num_prefix_hit_tokens(SHARED) == 8  # never the last token
    assert m.num_prefix_hit_tokens([*SHARED, 9], salt="other") == 0
    assert state() == before
    m.add_sequence("b", [*SHARED, 9])
    assert m.num_cached_tokens("b") == 12


def test_salted_requests_never_share():
    m = KVCacheManager(16, BS)
    m.add_sequence("a", [*SHARED, 1], salt="tenant-1")
    m.add_sequence("b", [*SHARED, 1], salt="tenant-2")
    m.add_sequence("c", [*SHARED, 1], salt="tenant-1")
    assert m.num_cached_tokens("b") == 0 and m.num_cached_tokens("c") == 12
    assert not set(m.block_table("a")) & set(m.block_table("b"))


def test_generated_tokens_are_registered_for_multi_turn_chat():
    m = KVCacheManager(16, BS)
    m.add_sequence("turn1", [1, 2, 3])
    m.append_tokens("turn1", [4, 5, 6, 7, 8, 9])  # the answer fills blocks 0 and 1
    m.free_sequence("turn1")
    m.add_sequence("turn2", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])  # history + new question
    assert m.num_cached_tokens("turn2") == 8


def test_lfu_counts_hits_per_block():
    m = KVCacheManager(8, BS, eviction="lfu")
    for i in range(3):
        m.add_sequence(i, [*SHARED[:4], i])
    assert m.pool.policy.count(m.block_table(0)[0]) == 3  # first use + two hits


def test_fork_shares_everything_and_append_copies_the_shared_last_block():
    m = KVCacheManager(16, BS)
    parent = m.add_sequence("p", [1, 2, 3, 4, 5, 6])
    assert m.fork("p", "c") == parent
    assert [m.pool.ref_count(b) for b in parent] == [2, 2]
    m.append_tokens("c", [70])
    child = m.block_table("c")
    assert child[0] == parent[0] and child[1] != parent[1]
    assert m.pop_block_copies() == [(parent[1], child[1])]
    assert m.pop_block_copies() == []
    assert [m.pool.ref_count(b) for b in (parent[1], child[1])] == [1, 1]
    m.append_tokens("p", [60])  # the parent's last block is its own again: no copy
    assert m.pop_block_copies() == [] and m.block_table("p") == parent


def test_appending_after_a_fork_at_a_block_boundary_needs_no_copy():
    m = KVCacheManager(16, BS)
    m.add_sequence("p", [1, 2, 3, 4])
    m.fork("p", "c")
    m.append_tokens("c", [5])
    assert m.pop_block_copies() == [] and len(m.block_table("c")) == 2


def test_two_live_blocks_with_the_same_content_keep_the_first_registration():
    m = KVCacheManager(16, BS)
    m.add_sequence("a", SHARED[:4])  # a prompt of one full block: never a hit, computed
    m.add_sequence("b", SHARED[:4])  # computed again in its own block
    a, b = m.block_table("a")[0], m.block_table("b")[0]
    assert a != b and m.prefix_cache.hash_of(a) is not None and m.prefix_cache.hash_of(b) is None
    m.free_sequence("b")
    assert m.pool.state(b) is BlockState.FREE  # the duplicate is not cached


def test_reset_refuses_while_blocks_are_in_use():
    m = KVCacheManager(8, BS)
    m.add_sequence("a", [*SHARED, 1])
    with pytest.raises(CacheBusy, match="in use"):
        m.reset_prefix_cache()
    m.free_sequence("a")
    assert m.reset_prefix_cache() == 3
    m.add_sequence("b", [*SHARED, 1])
    assert m.num_cached_tokens("b") == 0 and len(m.prefix_cache) == 3


def test_prefix_caching_can_be_switched_off():
    m = KVCacheManager(8, BS, prefix_caching=False)
    m.add_sequence("a", [*SHARED, 1])
    m.add_sequence("b", [*SHARED, 1])
    assert m.num_cached_tokens("b") == 0 and m.prefix_cache is None
    m.free_sequence("a")
    assert m.pool.num_cached == 0


def test_hit_rates_over_all_requests_and_a_window():
    m = KVCacheManager(32, BS, hit_rate_window=2)
    m.add_sequence("a", [*SHARED, 1])  # 13 queried, 0 hit
    m.add_sequence("b", [*SHARED, 2])  # 13 queried, 12 hit
    m.add_sequence("c", [*SHARED, 3])
    rates = m.hit_rates()
    assert (rates.queried_tokens, rates.hit_tokens) == (39, 24)
    assert rates.window_requests == 2 and rates.window_hit_rate == pytest.approx(24 / 26)


def test_hit_counter_window_keeps_running_sums():
    counter = PrefixHitCounter(window=3)
    for q, h in [(10, 0), (10, 10), (10, 5), (10, 1)]:
        counter.record(q, h)
    rates = counter.rates()
    assert rates.hit_rate == pytest.approx(16 / 40)
    assert rates.window_hit_rate == pytest.approx(16 / 30)


# -- bad input: typed errors, nothing changed ----------------------------------------------


def prepared():
    m = KVCacheManager(8, BS)
    m.add_sequence("a", [*SHARED, 1])
    return m


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (lambda m: m.add_sequence("b", [1], salt=3), InvalidArgument),
        (lambda m: m.add_sequence("b", [1], salt=["x"]), InvalidArgument),
        (lambda m: m.add_sequence("b", [1, 2, 3, 4], extra_keys=(1.5,)), InvalidArgument),
        (lambda m: m.fork("zz", "b"), UnknownSequence),
        (lambda m: m.fork("a", "a"), DuplicateSequence),
        (lambda m: m.add_sequence("a", [1]), DuplicateSequence),
    ],
)
def test_bad_calls_change_nothing(action, error):
    m = prepared()
    before = (m.snapshot(), m.stats(), m.hit_rates(), len(m.prefix_cache))
    with pytest.raises(error):
        action(m)
    assert (m.snapshot(), m.stats(), m.hit_rates(), len(m.prefix_cache)) == before


def test_appending_to_a_freed_sequence_is_refused():
    m = prepared()
    m.free_sequence("a")
    with pytest.raises(UnknownSequence):
        m.append_tokens("a", [1])


# Tenants share cached blocks only within one namespace (salt and extra keys), whichever
# prefix index the manager uses: the hash chain mixes the namespace into every hash, the radix
# tree keeps one tree per namespace. A namespace that stopped separating would hand one
# tenant's KV (and so, through timing, its prompts) to another.


PROMPT = list(range(9))  # two full blocks of 4, then the last token


@pytest.mark.parametrize("index", ["hash", "radix"])
def test_only_the_same_salt_and_extra_keys_share_blocks(index):
    m = KVCacheManager(64, 4, prefix_index=index)
    namespaces = [
        {"salt": "t1"},
        {"salt": "t2"},
        {"salt": b"t1"},  # bytes are not the str of the same letters
        {},
        {"extra_keys": ("lora-a",)},
        {"extra_keys": ("lora-b",)},
        {"salt": "t1", "extra_keys": ("lora-a",)},
    ]
    for i, namespace in enumerate(namespaces):
        m.add_sequence(("first", i), PROMPT, **namespace)
        assert m.num_cached_tokens(("first", i)) == 0, namespace  # nobody else's blocks
    for i, namespace in enumerate(namespaces):
        m.add_sequence(("again", i), PROMPT, **namespace)
        assert m.num_cached_tokens(("again", i)) == 8, namespace  # its own, every time
        assert m.block_table(("again", i))[:2] == m.block_table(("first", i))[:2]
    tables = {tuple(m.block_table(("first", i))[:2]) for i in range(len(namespaces))}
    assert len(tables) == len(namespaces)
