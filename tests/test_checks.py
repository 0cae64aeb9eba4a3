"""The exercise checks fail on wrong code, with messages a learner can act on."""

import pytest

from paged_kv import BlockPool, OutOfBlocks
from paged_kv.cache.block_table import blocks_needed, grow_block_table, slot_mapping
from paged_kv.course import checks


class LeakyPool(BlockPool):
    """Takes blocks before checking there are enough: a failed allocate leaks."""

    def allocate(self, n=1):
        got = [self._free.take() for _ in range(min(n, self.num_free))]
        for b in got:
            self._ref[b] = 1
        if len(got) < n:
            raise OutOfBlocks("short", requested=n, available=len(got))
        return got


class ForgetfulPool(BlockPool):
    """Releases without checking ref counts: double frees go through."""

    def release(self, block_ids):
        for b in block_ids:
            if self._ref[b]:
                self._ref[b] -= 1
                if not self._ref[b]:
                    self._free.put(b)


class LazyPagesPool(BlockPool):
    """Reports every page as free."""

    def free_pages(self):
        return list(range(self.num_pages))


class StubPool(BlockPool):
    def allocate(self, n=1):
        raise NotImplementedError("exercise 1")


def test_a_leaky_allocate_is_caught():
    with pytest.raises(checks.CheckFailed, match="must change nothing"):
        checks.check_allocate(LeakyPool)


def test_a_double_free_is_caught():
    with pytest.raises(checks.CheckFailed, match="twice"):
        checks.check_release(ForgetfulPool)


def test_wrong_free_pages_are_caught():
    with pytest.raises(checks.CheckFailed, match="free_pages"):
        checks.check_free_pages(LazyPagesPool)


def test_a_stub_surfaces_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_allocate(StubPool)


def test_off_by_one_blocks_needed_is_caught():
    with pytest.raises(checks.CheckFailed, match=r"blocks_needed\(0, 16\) should be 0, got 1"):
        checks.check_blocks_needed(lambda t, s: t // s + 1)


def test_slot_mapping_with_block_index_instead_of_id_is_caught():
    def wrong(table, size, start, end):
        return list(range(start, end))  # forgets the table

    with pytest.raises(checks.CheckFailed, match=r"\[28, 29, 30, 31, 8, 9\]"):
        checks.check_slot_mapping(wrong)


def test_grow_that_extends_before_allocating_is_caught():
    def wrong(pool, table, num_tokens, num_new):
        need = blocks_needed(num_tokens + num_new, pool.block_size) - len(table)
        table.extend([-1] * need)
        table[len(table) - need :] = pool.allocate(need)
        return table[len(table) - need :]

    with pytest.raises(checks.CheckFailed, match="Allocate first"):
        checks.check_grow_block_table(wrong)


def test_grow_that_always_allocates_is_caught():
    def wrong(pool, table, num_tokens, num_new):
        new = pool.allocate(1)
        table.extend(new)
        return new

    with pytest.raises(checks.CheckFailed):
        checks.check_grow_block_table(wrong)


def test_line_counter_counts_loop_iterations():
    def loop(n):
        total = 0
        for i in range(n):
            total += i
        return total

    assert checks.count_lines_executed(lambda: loop(100)) > 10 * checks.count_lines_executed(
        lambda: loop(5)
    )


def test_library_passes_every_check():
    checks.check_allocate(BlockPool)
    checks.check_release(BlockPool)
    checks.check_free_pages(BlockPool)
    checks.check_constant_time_allocate(BlockPool)
    checks.check_blocks_needed(blocks_needed)
    checks.check_slot_mapping(slot_mapping)
    checks.check_grow_block_table(grow_block_table)


# -- chapter 03 ------------------------------------------------------------------------------


def test_library_policies_pass_the_eviction_checks():
    from paged_kv.cache.eviction import FIFO, LFU, LRU, AgingLFU

    checks.check_lfu(LFU)
    checks.check_aging(AgingLFU)
    for policy in (LRU, FIFO, LFU, AgingLFU):
        checks.check_policy_contract(policy)


def test_the_seed_heap_lfu_fails_the_size_bound():
    from paged_kv.course.naive import HeapLFU

    with pytest.raises(checks.CheckFailed, match="garbage is piling up"):
        checks.check_lfu(HeapLFU)


def test_lfu_with_the_wrong_tie_break_is_caught():
    from paged_kv.cache.eviction import LFU

    class MostRecentFirst(LFU):
        def evict(self):
            lowest = (self._nonempty & -self._nonempty).bit_length() - 1
            block = next(reversed(self._buckets[lowest]))
            self.forget(block)
            return block

    with pytest.raises(checks.CheckFailed, match="least recently touched"):
        checks.check_lfu(MostRecentFirst)


def test_plain_lfu_is_not_aging():
    from paged_kv.cache.eviction import LFU

    class NotAging(LFU):
        def __init__(self, window=4096):
            super().__init__()

    with pytest.raises(checks.CheckFailed, match="window=2"):
        checks.check_aging(NotAging)


def test_a_policy_that_evicts_blocks_in_use_breaks_the_contract():
    from paged_kv.cache.eviction import LRU

    class Reckless(LRU):
        def revive(self, block_id):
            pass  # keeps revived blocks as candidates

    with pytest.raises(checks.CheckFailed):
        checks.check_policy_contract(Reckless)


# -- chapter 04 ------------------------------------------------------------------------------


def library_share_cached_prefix(pool, cache, hashes, num_prompt_tokens):
    """What KVCacheManager.add_sequence does with the library's pieces."""
    hits = cache.longest_prefix(hashes[: (num_prompt_tokens - 1) // pool.block_size])
    pool.share(hits)
    return hits


def test_library_passes_the_prefix_caching_checks():
    from paged_kv.cache.block_table import copy_on_write
    from paged_kv.cache.hashing import block_hashes

    checks.check_chained_hash(block_hashes)
    checks.check_share_cached_prefix(library_share_cached_prefix)
    checks.check_copy_on_write(copy_on_write)


def test_an_unchained_hash_is_caught():
    import hashlib

    def per_block(tokens, size, salt=None):
        return [
            hashlib.sha256(repr((salt, tokens[i : i + size])).encode()).digest()
            for i in range(0, len(tokens) - size + 1, size)
        ]

    with pytest.raises(checks.CheckFailed, match="chain the parent"):
        checks.check_chained_hash(per_block)


def test_a_lookup_that_covers_the_last_token_is_caught():
    def greedy(pool, cache, hashes, num_prompt_tokens):
        hits = cache.longest_prefix(hashes)
        pool.share(hits)
        return hits

    with pytest.raises(checks.CheckFailed, match="last prompt token"):
        checks.check_share_cached_prefix(greedy)


def test_a_copy_that_forgets_the_old_reference_is_caught():
    def leaky(pool, table, num_tokens):
        if num_tokens % pool.block_size == 0 or pool.ref_count(table[-1]) == 1:
            return None
        [new] = pool.allocate(1)
        old, table[-1] = table[-1], new
        return old, new

    with pytest.raises(checks.CheckFailed, match="lose this table's reference"):
        checks.check_copy_on_write(leaky)
