"""Chapter 02: plausible wrong managers, each failing its check with a message naming it."""

import functools

import pytest

from paged_kv import (
    BlockPool,
    DuplicateSequence,
    InvalidArgument,
    KVCacheManager,
    UnknownSequence,
)
from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed, ExerciseNotDone


class SequenceManager:
    def __init__(self, pool):
        self.pool, self.block_size = pool, pool.block_size
        self.tables, self.lengths = {}, {}

    def _known(self, seq_id):
        if seq_id not in self.tables:
            raise UnknownSequence(f"no sequence {seq_id!r}")

    def add_sequence(self, seq_id, token_ids):
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        if not token_ids:
            raise InvalidArgument("empty")
        table = self.pool.allocate(-(-len(token_ids) // self.block_size))
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)

    def append_tokens(self, seq_id, token_ids):
        self._known(seq_id)
        total = self.lengths[seq_id] + len(token_ids)
        table = self.tables[seq_id]
        new = self.pool.allocate(max(0, -(-total // self.block_size) - len(table)))
        table.extend(new)
        self.lengths[seq_id] = total
        return new

    def free_sequence(self, seq_id):
        self._known(seq_id)
        self.pool.release(self.tables[seq_id][::-1])
        del self.tables[seq_id], self.lengths[seq_id]

    def block_table(self, seq_id):
        self._known(seq_id)
        return list(self.tables[seq_id])

    def num_tokens(self, seq_id):
        self._known(seq_id)
        return self.lengths[seq_id]

    def slot_mapping(self, seq_id, start=0, end=None):
        length = self.num_tokens(seq_id)
        end = length if end is None else end
        if not 0 <= start <= end <= length:
            raise InvalidArgument("range")
        table, size = self.tables[seq_id], self.block_size
        return [table[t // size] * size + t % size for t in range(start, end)]


def library_manager(pool):
    """KVCacheManager on the given pool, through the `pool=` hook."""
    return KVCacheManager(
        pool.num_blocks, pool.block_size, prefix_caching=False, pool=lambda n, size: pool
    )


def test_the_solution_and_the_library_pass():
    for manager in (SequenceManager, library_manager):
        checks.check_add_and_free(manager)
        checks.check_append(manager)
        checks.check_manager_slots(manager)
    checks.check_parts_so_far(SequenceManager, BlockPool)


# -- exercise 1: add and free ------------------------------------------------------------------


class RecordsBeforeAllocating(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        if not token_ids:
            raise InvalidArgument("empty")
        self.tables[seq_id], self.lengths[seq_id] = [], len(token_ids)
        self.tables[seq_id] = self.pool.allocate(-(-len(token_ids) // self.block_size))
        return list(self.tables[seq_id])


class AllocatesBeforeTheDuplicateCheck(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        table = self.pool.allocate(-(-len(token_ids) // self.block_size)) if token_ids else []
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        if not token_ids:
            raise InvalidArgument("empty")
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)


class OneBlockTooMany(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        if not token_ids:
            raise InvalidArgument("empty")
        table = self.pool.allocate(len(token_ids) // self.block_size + 1)
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)


class FreesTheHeadFirst(SequenceManager):
    def free_sequence(self, seq_id):
        self._known(seq_id)
        self.pool.release(self.tables.pop(seq_id))
        del self.lengths[seq_id]


class ForgetsToForget(SequenceManager):
    def free_sequence(self, seq_id):
        self._known(seq_id)
        self.pool.release(self.tables[seq_id][::-1])
        self.tables[seq_id] = []


class HandsOutItsOwnTable(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        super().add_sequence(seq_id, token_ids)
        return self.tables[seq_id]


class HandsOutItsOwnBlockTable(SequenceManager):
    def block_table(self, seq_id):
        self._known(seq_id)
        return self.tables[seq_id]


class ClearsThePrompt(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        table = super().add_sequence(seq_id, token_ids)
        token_ids.clear()
        return table


class KeyErrorForUnknownIds(SequenceManager):
    def _known(self, seq_id):
        self.tables[seq_id]


class AcceptsEmptyPrompts(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        table = self.pool.allocate(-(-len(token_ids) // self.block_size))
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)


@pytest.mark.parametrize(
    ("manager", "mistake"),
    [
        (
            RecordsBeforeAllocating,
            r"block_table\('c'\)` should raise UnknownSequence, but it returned \[\]: "
            "a refused add must not record the sequence",
        ),
        (AllocatesBeforeTheDuplicateCheck, "check the id before taking blocks"),
        (OneBlockTooMany, "take 2 blocks|need 2 blocks"),
        (FreesTheHeadFirst, "last block first"),
        (ForgetsToForget, r"free_sequence\('a'\)` should raise UnknownSequence"),
        (HandsOutItsOwnTable, "add_sequence must return a copy"),
        (HandsOutItsOwnBlockTable, "block_table must return a copy: the caller changed your table"),
        (ClearsThePrompt, "add_sequence changed the token_ids list it was given"),
        (KeyErrorForUnknownIds, "should raise UnknownSequence, but it raised KeyError"),
        (AcceptsEmptyPrompts, r"add_sequence\('e', \[\]\)` should raise InvalidArgument"),
    ],
)
def test_a_wrong_add_or_free_fails_naming_its_mistake(manager, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_add_and_free(manager)
    assert str(failure.value).startswith("Exercise 1 (add_sequence and free_sequence)")


# -- exercise 2: append ------------------------------------------------------------------------


class AllocatesOnEveryAppend(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        self._known(seq_id)
        new = self.pool.allocate(1) if token_ids else []
        self.tables[seq_id] += new
        self.lengths[seq_id] += len(token_ids)
        return new


class OneTokenEarly(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        self._known(seq_id)
        new = []
        for _ in token_ids:
            if (self.lengths[seq_id] + 1) % self.block_size == 0:
                new += self.pool.allocate(1)
            self.lengths[seq_id] += 1
        self.tables[seq_id] += new
        return new


class AtMostOneBlock(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        self._known(seq_id)
        total = self.lengths[seq_id] + len(token_ids)
        grow = -(-total // self.block_size) > len(self.tables[seq_id])
        new = self.pool.allocate(1) if grow else []
        self.tables[seq_id] += new
        self.lengths[seq_id] = total
        return new


class CountsBeforeAllocating(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        self._known(seq_id)
        self.lengths[seq_id] += len(token_ids)
        need = -(-self.lengths[seq_id] // self.block_size) - len(self.tables[seq_id])
        new = self.pool.allocate(max(0, need))
        self.tables[seq_id] += new
        return new


class ReturnsTheWholeTable(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        super().append_tokens(seq_id, token_ids)
        return self.block_table(seq_id)


class AppendsToUnknownIds(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        if seq_id not in self.tables:
            return []
        return super().append_tokens(seq_id, token_ids)


class ChecksTheIdOnlyWhenThereIsWork(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        if not token_ids:
            return []
        return super().append_tokens(seq_id, token_ids)


class ClearsTheTokens(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        new = super().append_tokens(seq_id, token_ids)
        token_ids.clear()
        return new


@pytest.mark.parametrize(
    ("manager", "mistake"),
    [
        (
            ChecksTheIdOnlyWhenThereIsWork,
            r"append_tokens\('zz', \[\]\)` should raise UnknownSequence \(an unknown id is "
            "refused even with nothing to append",
        ),
        (ClearsTheTokens, "append_tokens changed the token_ids list it was given"),
        (HandsOutItsOwnBlockTable, "block_table must return a copy: the caller changed your table"),
        (AllocatesOnEveryAppend, "a new block only when the last one is full"),
        (OneTokenEarly, "a new block only when the last one is full"),
        (AtMostOneBlock, r"should add 2 block\(s\)"),
        (CountsBeforeAllocating, "a refused append changes nothing"),
        (ReturnsTheWholeTable, "and return them"),
        (AppendsToUnknownIds, r"append_tokens\('zz', \[1\]\)` should raise UnknownSequence"),
    ],
)
def test_a_wrong_append_fails_naming_its_mistake(manager, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_append(manager)
    assert str(failure.value).startswith("Exercise 2 (append_tokens)")


# -- exercise 3: slot mapping ------------------------------------------------------------------


def _slots(fn):
    class Manager(SequenceManager):
        def slot_mapping(self, seq_id, start=0, end=None):
            return fn(self, seq_id, start, end)

    Manager.__name__ = fn.__name__
    return Manager


@_slots
def logical_positions(self, seq_id, start, end):
    end = self.num_tokens(seq_id) if end is None else end
    return list(range(start, end))


@_slots
def the_tables_capacity(self, seq_id, start, end):
    table, size = self.tables[seq_id], self.block_size
    end = len(table) * size if end is None else end
    return [table[t // size] * size + t % size for t in range(start, end)]


@_slots
def no_range_check(self, seq_id, start, end):
    table, size = self.tables[seq_id], self.block_size
    end = self.num_tokens(seq_id) if end is None else end
    return [table[t // size] * size + t % size for t in range(start, end)]


@_slots
def end_inclusive(self, seq_id, start, end):
    table, size = self.tables[seq_id], self.block_size
    end = self.num_tokens(seq_id) - 1 if end is None else end
    return [table[t // size] * size + t % size for t in range(start, end + 1)]


@_slots
def swapped_divmod(self, seq_id, start, end):
    length = self.num_tokens(seq_id)
    table, size = self.tables[seq_id], self.block_size
    end = length if end is None else end
    if not 0 <= start <= end <= length:
        raise InvalidArgument("range")
    return [table[t % len(table)] * size + t // len(table) for t in range(start, end)]


@_slots
def negative_start(self, seq_id, start, end):
    length = self.num_tokens(seq_id)
    end = length if end is None else end
    if not start <= end <= length:
        raise InvalidArgument("range")
    table, size = self.tables[seq_id], self.block_size
    return [table[t // size] * size + t % size for t in range(start, end)]


@_slots
def zero_end_as_no_end(self, seq_id, start, end):
    length = self.num_tokens(seq_id)
    end = end or length
    if not 0 <= start <= end <= length:
        raise InvalidArgument("range")
    table, size = self.tables[seq_id], self.block_size
    return [table[t // size] * size + t % size for t in range(start, end)]


class RoundsDown(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        if not token_ids:
            raise InvalidArgument("empty")
        table = self.pool.allocate(len(token_ids) // self.block_size)
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)


@pytest.mark.parametrize(
    ("manager", "mistake"),
    [
        (zero_end_as_no_end, "end=0 was treated as no end"),
        (RoundsDown, r"block\(s\) for \d+ tokens, but blocks of \d+ need \d+ \(round up"),
        (HandsOutItsOwnBlockTable, "block_table must return a copy: the caller changed your table"),
        (logical_positions, r"table\[t // block_size\]"),
        (the_tables_capacity, "not the table's capacity"),
        (no_range_check, "should raise InvalidArgument"),
        (end_inclusive, "`end` is exclusive"),
        (swapped_divmod, r"table\[t // block_size\]"),
        (negative_start, r"slot_mapping\('a', -1, \d+\)` should raise InvalidArgument"),
    ],
)
def test_a_wrong_slot_mapping_fails_naming_its_mistake(manager, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_manager_slots(manager)
    assert str(failure.value).startswith("Exercise 3 (slot_mapping)")
    assert "trial" in str(failure.value) and "pool = BlockPool(" in str(failure.value)


# -- your parts so far -------------------------------------------------------------------------


class PoolSharingEverything(BlockPool):
    """A chapter-01 pool whose allocate hands out a block that is still in use."""

    def allocate(self, n=1):
        ids = super().allocate(n)
        return [0 if b == 1 else b for b in ids]


class PoolReusingBlocks(BlockPool):
    """A chapter-01 pool that hands a block of one sequence to the next."""

    def allocate(self, n=1):
        return [b % 2 for b in super().allocate(n)]


@_slots
def swapped_index_and_offset(self, seq_id, start, end):
    length = self.num_tokens(seq_id)
    end = length if end is None else end
    table, size = self.tables[seq_id], self.block_size
    return [
        table[t % size if t % size < len(table) else 0] * size + t // size
        for t in range(start, end)
    ]


def test_parts_so_far_catch_a_shared_slot_and_a_stub():
    with pytest.raises(CheckFailed, match="two tokens of sequence 'a' map to the same slot 0: its"):
        checks.check_parts_so_far(SequenceManager, PoolSharingEverything)
    with pytest.raises(CheckFailed, match="slot 0 belongs to both 'a' and 'b'"):
        checks.check_parts_so_far(SequenceManager, PoolReusingBlocks)
    with pytest.raises(CheckFailed, match="two tokens of sequence 'a' map to the same slot"):
        checks.check_parts_so_far(swapped_index_and_offset, BlockPool)
    with pytest.raises(CheckFailed, match=r"1 block\(s\) for 6 tokens, but blocks of 4 need 2"):
        checks.check_parts_so_far(RoundsDown, BlockPool)

    class StubPool(BlockPool):
        def allocate(self, n=1):
            raise NotImplementedError("FreeListPool.allocate: replace this line with your code")

    with pytest.raises(ExerciseNotDone, match=r"`FreeListPool\.allocate` still has its stub"):
        checks.check_parts_so_far(SequenceManager, functools.partial(StubPool))


def test_parts_so_far_says_the_pool_is_the_librarys(capsys):
    checks.check_parts_so_far(SequenceManager, BlockPool)
    assert (
        "your manager on the library's BlockPool (no pool of yours saved" in capsys.readouterr().out
    )
