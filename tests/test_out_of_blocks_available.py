"""`OutOfBlocks.requested` and `.available` when a new sequence's prefix hits revive cached
blocks: the hits are not counted among the blocks the rest of the prompt could have, since
sharing them takes them out of the cached (evictable) ones."""

import pytest

from paged_kv import KVCacheManager, OutOfBlocks

BS = 4
SYSTEM = list(range(100, 108))  # two full blocks


def holders(m: KVCacheManager, count: int) -> list[str]:
    """`count` one-token sequences, one block each: freeing one frees exactly one block."""
    names = [f"h{i}" for i in range(count)]
    for i, name in enumerate(names):
        m.add_sequence(name, [1000 + i])
    return names


@pytest.mark.parametrize("live_first_block", [False, True])
def test_available_excludes_the_cached_blocks_the_hits_revive(live_first_block):
    m = KVCacheManager(10, BS)
    m.add_sequence("a", [*SYSTEM, 1])  # 3 blocks; the two full ones are registered
    if live_first_block:  # the first hit block stays in use: a hit, but nothing revived
        m.add_sequence("c", [*SYSTEM[:4], 2])
    m.free_sequence("a")  # its full blocks become cached, the partial one free
    held = holders(m, m.stats().num_free_blocks - 2)  # leave 2 blocks free
    stats = m.stats()
    revived = 1 if live_first_block else 2
    assert stats.num_free_blocks == 2 and stats.num_cached_blocks == revived
    prompt = [*SYSTEM, *range(16)]  # 6 blocks: 2 hits, 4 to allocate
    assert m.num_prefix_hit_tokens(prompt) == 8
    snapshot = m.snapshot()

    with pytest.raises(OutOfBlocks) as refused:
        m.add_sequence("b", prompt)
    real = stats.num_free_blocks + stats.num_cached_blocks - revived
    assert refused.value.requested == 4
    assert refused.value.available == real == 2
    assert m.snapshot() == snapshot and "b" not in m

    # Exactly `requested - available` more blocks are needed: one short still fails...
    m.free_sequence(held.pop())
    with pytest.raises(OutOfBlocks) as still:
        m.add_sequence("b", prompt)
    assert (still.value.requested, still.value.available) == (4, 3)
    # ...and with that many freed, the add succeeds and uses up every block there was.
    m.free_sequence(held.pop())
    table = m.add_sequence("b", prompt)
    assert m.num_cached_tokens("b") == 8 and len(table) == 6
    stats = m.stats()
    assert stats.num_free_blocks == 0 and stats.num_cached_blocks == 0


def test_available_when_nothing_is_cached_is_the_free_count():
    m = KVCacheManager(6, BS)
    m.add_sequence("x", list(range(9)))  # 3 blocks, 2 registered but in use
    with pytest.raises(OutOfBlocks) as refused:
        m.add_sequence("y", list(range(50, 67)))  # 5 blocks, no hits
    assert (refused.value.requested, refused.value.available) == (5, 3)
    with pytest.raises(OutOfBlocks) as hits_in_use:
        m.add_sequence("z", [*range(9), *range(60, 72)])  # 2 hits in use, 4 more needed
    assert (hits_in_use.value.requested, hits_in_use.value.available) == (4, 3)
