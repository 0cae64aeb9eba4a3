"""The host-memory tier (paged_kv/tiers/host.py): its index stays right for any batch, a key
given twice in one batch included, under eviction pressure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.errors import InvalidArgument
from paged_kv.tiers import HostTier

KEYS = [f"host:{'a' * 32}:{i:064x}" for i in range(8)]


def blob(i: int, size: int = 10) -> bytes:
    return bytes([i]) * size


def check_index(tier: HostTier) -> None:
    """What the tier says it holds is what it holds, within its budget."""
    held = tier.stored_keys()
    sizes = [len(b) for b in tier.get_many(held) if b is not None]
    assert len(sizes) == len(held), "a key the tier lists has no blob"
    assert sorted(tier._index.keys()) == sorted(held)
    assert tier.usage() == (len(held), sum(sizes))
    assert sum(sizes) <= tier.capacity_bytes


def test_a_key_twice_in_one_batch_under_eviction_pressure_keeps_the_index_right():
    tier = HostTier(30)
    a, b, c, d = KEYS[:4]
    results = tier.put_many([(a, blob(0)), (b, blob(1)), (a, blob(0)), (c, blob(2)), (d, blob(3))])
    check_index(tier)
    assert results == [k in tier.stored_keys() for k in (a, b, a, c, d)]
    for i in range(4, 8):  # later puts evict the batch's keys: no KeyError
        tier.put_many([(KEYS[i], blob(i))])
        check_index(tier)
    assert tier.stats().evictions == 5


batches = st.lists(
    st.lists(st.tuples(st.integers(0, 7), st.integers(1, 25)), min_size=1, max_size=6),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(batches=batches, capacity=st.integers(20, 60), policy=st.sampled_from(["lru", "lfu"]))
def test_any_batches_with_repeated_keys_keep_the_index_right(batches, capacity, policy):
    tier = HostTier(capacity, eviction=policy)
    for batch in batches:
        items = [(KEYS[k], blob(k, size)) for k, size in batch]
        results = tier.put_many(items)
        check_index(tier)
        held = set(tier.stored_keys())
        assert results == [k in held for k, _ in items]
        tier.get_many([KEYS[k] for k, _ in batch[:2]])
        tier.delete([KEYS[batch[-1][0]]])
        check_index(tier)


@pytest.mark.parametrize(
    "item",
    [(KEYS[0], "text"), (KEYS[0], bytearray(b"mutable")), (KEYS[0], None), (5, b"blob")],
    ids=["str-blob", "bytearray", "none", "int-key"],
)
def test_a_pair_that_is_not_str_and_bytes_is_refused_before_anything_is_stored(item):
    tier = HostTier(1000)
    with pytest.raises(InvalidArgument, match="str and bytes"):
        tier.put_many([(KEYS[1], blob(1)), item])
    assert tier.usage() == (0, 0) and tier.stored_keys() == []


def test_a_read_refreshes_a_blocks_recency_and_a_miss_refreshes_nothing():
    tier = HostTier(20)  # room for two blobs of 10
    a, b, c, d = KEYS[:4]
    tier.put_many([(a, blob(0))])
    tier.put_many([(b, blob(1))])
    assert tier.get_many([a, d]) == [blob(0), None]  # a is now the most recent
    tier.put_many([(c, blob(2))])
    assert sorted(tier.stored_keys()) == sorted([a, c]), "b, not the block just read, goes"


def test_deletes_are_counted_by_the_keys_removed():
    tier = HostTier(100)
    tier.put_many([(KEYS[0], blob(0)), (KEYS[1], blob(1))])
    assert tier.delete([KEYS[0], KEYS[1], KEYS[2]]) == 2
    assert tier.stats().count("delete", "ok") == 2


def test_a_get_counts_the_keys_found_as_ok_and_the_absent_ones_as_misses():
    tier = HostTier(100)
    tier.put_many([(KEYS[0], blob(0))])
    assert tier.get_many([KEYS[0], KEYS[1], KEYS[2]]) == [blob(0), None, None]
    stats = tier.stats()
    assert (stats.count("get", "ok"), stats.count("get", "miss")) == (1, 2)
    assert stats.bytes_read == len(blob(0))
