"""Chapter 01: plausible wrong pools, each failing its check with a message naming the mistake.

`FreeListPool` is the solution notebook's pool; every wrong one changes one method the way a
learner might. The messages must name the mistake, and a stub must read "not done yet".
"""

import re
from collections import Counter

import pytest

from paged_kv import BlockPool, InvalidArgument, InvalidBlock, OutOfBlocks
from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed, ExerciseNotDone


class FreeListPool:
    def __init__(self, num_blocks, block_size=16, *, blocks_per_page=None):
        self.num_blocks, self.block_size, self.blocks_per_page = (
            num_blocks,
            block_size,
            blocks_per_page,
        )
        if blocks_per_page is not None and num_blocks % blocks_per_page:
            raise InvalidArgument("pages must tile the pool")
        self.ref = [0] * num_blocks
        self.free_ids = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self):
        return len(self.free_ids)

    def ref_count(self, block_id):
        if not 0 <= block_id < self.num_blocks:
            raise InvalidBlock(f"block {block_id} is not in this pool")
        return self.ref[block_id]

    def allocate(self, n=1):
        if n > len(self.free_ids):
            free = len(self.free_ids)
            raise OutOfBlocks("short", requested=n, available=free)
        ids = [self.free_ids.pop() for _ in range(n)]
        for b in ids:
            self.ref[b] = 1
        return ids

    def share(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("not in use")
        for b in block_ids:
            self.ref[b] += 1

    def release(self, block_ids):
        for b, times in Counter(block_ids).items():
            if not 0 <= b < self.num_blocks or times > self.ref[b]:
                raise InvalidBlock("bad release")
        freed = []
        for b in block_ids:
            self.ref[b] -= 1
            if not self.ref[b]:
                self.free_ids.append(b)
                freed.append(b)
        return freed

    def free_pages(self):
        per = self.blocks_per_page
        if per is None:
            return []
        return [
            p for p in range(self.num_blocks // per) if not any(self.ref[p * per : (p + 1) * per])
        ]


def test_the_solution_and_the_library_pass():
    for pool in (FreeListPool, BlockPool):
        checks.check_allocate(pool)
        checks.check_constant_time_allocate(pool)
        checks.check_release(pool)
        checks.check_constant_time_release(pool)
        checks.check_free_pages(pool)


# -- exercise 1: allocate ----------------------------------------------------------------------


class TakesBeforeChecking(FreeListPool):
    def allocate(self, n=1):
        ids = [self.free_ids.pop() for _ in range(min(n, len(self.free_ids)))]
        for b in ids:
            self.ref[b] = 1
        if len(ids) < n:
            raise OutOfBlocks("short", requested=n, available=len(ids))
        return ids


class WrongAvailable(FreeListPool):
    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_blocks)
        return super().allocate(n)


class OffByOneRefusal(FreeListPool):
    def allocate(self, n=1):
        if n and n >= self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        return super().allocate(n)


class ForgetsTheRefCount(FreeListPool):
    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        return [self.free_ids.pop() for _ in range(n)]


class HandsOutTheSameBlock(FreeListPool):
    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        block = self.free_ids.pop()
        self.ref[block] = 1
        return [block] * n if n else []


class MinAndRemove(FreeListPool):
    """Linear, but in C: min() and list.remove."""

    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        ids = []
        for _ in range(n):
            b = min(self.free_ids)
            self.free_ids.remove(b)
            self.ref[b] = 1
            ids.append(b)
        return ids


class PopsTheFront(FreeListPool):
    """list.pop(0) shifts every other free id: O(free blocks), in C."""

    def __init__(self, num_blocks, block_size=16, *, blocks_per_page=None):
        super().__init__(num_blocks, block_size, blocks_per_page=blocks_per_page)
        self.free_ids.reverse()

    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        ids = [self.free_ids.pop(0) for _ in range(n)]
        for b in ids:
            self.ref[b] = 1
        return ids

    def release(self, block_ids):
        freed = super().release(block_ids)
        return freed


class ScansInPython(FreeListPool):
    def allocate(self, n=1):
        free = [b for b in range(self.num_blocks) if self.ref[b] == 0]
        if n > len(free):
            raise OutOfBlocks("short", requested=n, available=len(free))
        for b in free[:n]:
            self.ref[b] = 1
            self.free_ids.remove(b)
        return free[:n]


class BuildsASetEachCall(FreeListPool):
    """C work the counters cannot see (a set built from a range): the timing backstop."""

    def __init__(self, num_blocks, block_size=16, *, blocks_per_page=None):
        super().__init__(num_blocks, block_size, blocks_per_page=blocks_per_page)
        self.used = set()

    @property
    def num_free(self):
        return self.num_blocks - len(self.used)

    def allocate(self, n=1):
        free = set(range(self.num_blocks)).difference(self.used)
        if n > len(free):
            raise OutOfBlocks("short", requested=n, available=len(free))
        ids = [free.pop() for _ in range(n)]
        for b in ids:
            self.ref[b] = 1
            self.used.add(b)
        return ids

    def release(self, block_ids):
        freed = super().release(block_ids)
        self.used.difference_update(freed)
        return freed


class StubAllocate(FreeListPool):
    def allocate(self, n=1):
        raise NotImplementedError("FreeListPool.allocate: replace this line with your code")


@pytest.mark.parametrize(
    ("pool", "check", "mistake"),
    [
        (TakesBeforeChecking, checks.check_allocate, "must change nothing"),
        (WrongAvailable, checks.check_allocate, r"it should say requested=6, available=5"),
        (OffByOneRefusal, checks.check_allocate, r"allocate\(5\)` raised OutOfBlocks"),
        (ForgetsTheRefCount, checks.check_allocate, "reference counts of blocks"),
        (HandsOutTheSameBlock, checks.check_allocate, "the same block twice"),
        (MinAndRemove, checks.check_constant_time_allocate, r"iteration on `self.free_ids`"),
        (PopsTheFront, checks.check_constant_time_allocate, r"\.pop\(i\) on `self.free_ids`"),
        (ScansInPython, checks.check_constant_time_allocate, "it scans the pool"),
        (BuildsASetEachCall, checks.check_constant_time_allocate, "longer in a 200,000-block"),
    ],
)
def test_a_wrong_allocate_fails_naming_its_mistake(pool, check, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        check(pool)
    assert str(failure.value).startswith("Exercise 1 (allocate)")
    assert "..." not in str(failure.value)


def test_a_stub_is_not_done_yet():
    with pytest.raises(ExerciseNotDone, match=r"Exercise 1 \(allocate\) is not done yet"):
        checks.check_allocate(StubAllocate)
    with pytest.raises(ExerciseNotDone, match=r"`FreeListPool\.allocate` still has its stub"):
        checks.check_release(StubAllocate)


class LosesTheLastBlock(FreeListPool):
    """Forgets to put the pool's last block back: only a random trial reaches it."""

    def release(self, block_ids):
        freed = super().release(block_ids)
        if self.num_blocks - 1 in freed:
            self.free_ids.remove(self.num_blocks - 1)
        return freed


def test_a_failing_random_trial_prints_a_complete_replay():
    with pytest.raises(CheckFailed, match="num_free should be") as failure:
        checks.check_release(LosesTheLastBlock)
    message = str(failure.value)
    assert "seed=0" in message and "pool = LosesTheLastBlock(" in message
    assert "..." not in message and "…" not in message
    lines = [line.strip() for line in message.splitlines() if line.startswith("    ")]
    assert lines[0].startswith("pool = ") and len(lines) <= 12  # shrunk


# -- exercise 2: share and release -------------------------------------------------------------


class AcceptsDoubleFrees(FreeListPool):
    def release(self, block_ids):
        freed = []
        for b in block_ids:
            if self.ref[b]:
                self.ref[b] -= 1
                if not self.ref[b]:
                    self.free_ids.append(b)
                    freed.append(b)
        return freed


class FreesWithReferencesLeft(FreeListPool):
    def release(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("bad")
        freed = []
        for b in dict.fromkeys(block_ids):
            self.ref[b] = 0
            self.free_ids.append(b)
            freed.append(b)
        return freed


class AcceptsNegativeIds(FreeListPool):
    def release(self, block_ids):
        for b, times in Counter(block_ids).items():
            if b >= self.num_blocks or times > self.ref[b]:
                raise InvalidBlock("bad")
        return FreeListPool.release(self, [b % self.num_blocks for b in block_ids])


class ValidatesAsItGoes(FreeListPool):
    def release(self, block_ids):
        freed = []
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("bad")
            self.ref[b] -= 1
            if not self.ref[b]:
                self.free_ids.append(b)
                freed.append(b)
        return freed


class SearchesTheFreeList(FreeListPool):
    """A double free detected with `in` on the free list: O(free blocks), in C."""

    def release(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks or b in self.free_ids:
                raise InvalidBlock("bad")
        return super().release(block_ids)


class InsertsAtTheFront(FreeListPool):
    def release(self, block_ids):
        for b, times in Counter(block_ids).items():
            if not 0 <= b < self.num_blocks or times > self.ref[b]:
                raise InvalidBlock("bad release")
        freed = []
        for b in block_ids:
            self.ref[b] -= 1
            if not self.ref[b]:
                self.free_ids.insert(0, b)
                freed.append(b)
        return freed


class SharesFreeBlocks(FreeListPool):
    def share(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks:
                raise InvalidBlock("foreign")
        for b in block_ids:
            self.ref[b] += 1


class SharesHalfABatch(FreeListPool):
    def share(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("not in use")
            self.ref[b] += 1


class ReturnsNothing(FreeListPool):
    def release(self, block_ids):
        super().release(block_ids)


@pytest.mark.parametrize(
    ("pool", "check", "mistake"),
    [
        (AcceptsDoubleFrees, checks.check_release, r"should raise InvalidBlock"),
        (FreesWithReferencesLeft, checks.check_release, "whose references remain"),
        (AcceptsNegativeIds, checks.check_release, r"-1\]\)` should raise InvalidBlock"),
        (ValidatesAsItGoes, checks.check_release, "changes nothing, not even for the first id"),
        (SearchesTheFreeList, checks.check_constant_time_release, r"`in` on `self.free_ids`"),
        (InsertsAtTheFront, checks.check_constant_time_release, r"\.insert\(\) on"),
        (SharesFreeBlocks, checks.check_release, r"share\(\[1, 0\]\)` should raise InvalidBlock"),
        (SharesHalfABatch, checks.check_release, "a refused share changes nothing|sharing free"),
        (ReturnsNothing, checks.check_release, "should return the blocks that lost"),
    ],
)
def test_a_wrong_share_or_release_fails_naming_its_mistake(pool, check, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        check(pool)
    assert str(failure.value).startswith("Exercise 2 (share and release)")


# -- exercise 3: free pages --------------------------------------------------------------------


class EveryPageFree(FreeListPool):
    def free_pages(self):
        return list(range(self.num_blocks // self.blocks_per_page))


class DropsThePartialLastPage(FreeListPool):
    def __init__(self, num_blocks, block_size=16, *, blocks_per_page=None):
        self.num_blocks, self.block_size, self.blocks_per_page = (
            num_blocks,
            block_size,
            blocks_per_page,
        )
        self.ref = [0] * num_blocks
        self.free_ids = list(range(num_blocks - 1, -1, -1))


class AnyFreeBlock(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        return [p for p in range(self.num_blocks // per) if 0 in self.ref[p * per : (p + 1) * per]]


class PagesAsASet(FreeListPool):
    def free_pages(self):
        return set(super().free_pages())


class MissesEachPagesLastBlock(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        if per is None:
            return []
        pages = range(self.num_blocks // per)
        return [p for p in pages if not any(self.ref[p * per : (p + 1) * per - 1])]


class NoPagesMeansTypeError(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        return [
            p for p in range(self.num_blocks // per) if not any(self.ref[p * per : (p + 1) * per])
        ]


@pytest.mark.parametrize(
    ("pool", "mistake"),
    [
        (EveryPageFree, "is in use, so its page 0 is not free"),
        (DropsThePartialLastPage, "dropping the last partial page"),
        (AnyFreeBlock, "is in use, so its page 0 is not free"),
        (PagesAsASet, "increasing order"),
        (MissesEachPagesLastBlock, "every one of its blocks|is in use"),
        (NoPagesMeansTypeError, "raised TypeError"),
    ],
)
def test_wrong_free_pages_fail_naming_their_mistake(pool, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_free_pages(pool)
    assert str(failure.value).startswith("Exercise 3 (free_pages)")


# -- a learner walkthrough's wrong answers that used to pass, or failed with the wrong cause ---


class CountsTheFreeBlocks(FreeListPool):
    @property
    def num_free(self):
        return sum(1 for r in self.ref if r == 0)


class CountsTheFreeBlocksInC(FreeListPool):
    @property
    def num_free(self):
        return self.ref.count(0)  # a scan of every block, hidden in C


class TakesThenRaisesWithNoneLeft(FreeListPool):
    def allocate(self, n=1):
        ids = []
        for _ in range(n):
            if not self.free_ids:
                raise OutOfBlocks("short", requested=n, available=0)
            ids.append(self.free_ids.pop())
        for b in ids:
            self.ref[b] = 1
        return ids


class CatchesThePopError(FreeListPool):
    def allocate(self, n=1):
        try:
            ids = [self.free_ids.pop() for _ in range(n)]
        except IndexError:
            raise OutOfBlocks("short", requested=n, available=len(self.free_ids)) from None
        for b in ids:
            self.ref[b] = 1
        return ids


class RefCountUnchecked(FreeListPool):
    def ref_count(self, block_id):
        return self.ref[block_id]


class RefCountZeroOnError(FreeListPool):
    def ref_count(self, block_id):
        try:
            return self.ref[block_id]
        except Exception:
            return 0


class ReleaseSortsTheIds(FreeListPool):
    def release(self, block_ids):
        block_ids.sort()
        return super().release(block_ids)


class ShareSortsTheIds(FreeListPool):
    def share(self, block_ids):
        block_ids.sort()
        super().share(block_ids)


class ReleaseClearsTheIds(FreeListPool):
    def release(self, block_ids):
        freed = super().release(block_ids)
        block_ids.clear()
        return freed


class ForgetsTheFreeList(FreeListPool):
    def release(self, block_ids):
        freed = super().release(block_ids)
        for b in freed:
            self.free_ids.remove(b)
        return freed


class ShareTakesNegativeIds(FreeListPool):
    def share(self, block_ids):
        for b in block_ids:
            if b >= self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("not in use")
        for b in block_ids:
            self.ref[b] += 1


class PagesBackwards(FreeListPool):
    def free_pages(self):
        return super().free_pages()[::-1]


class SearchesTheFreeListPerBlock(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        if per is None:
            return []
        pages = range(self.num_blocks // per)
        return [p for p in pages if all(b in self.free_ids for b in range(p * per, (p + 1) * per))]


@pytest.mark.parametrize(
    ("pool", "check", "mistake"),
    [
        (
            CountsTheFreeBlocks,
            checks.check_constant_time_allocate,
            r"pool\.num_free.*must not count",
        ),
        (
            CountsTheFreeBlocksInC,
            checks.check_constant_time_allocate,
            r"pool\.num_free.*by \.count\(\) on `self\.ref`.*must not count",
        ),
        (TakesThenRaisesWithNoneLeft, checks.check_allocate, "took blocks first.*all or nothing"),
        (CatchesThePopError, checks.check_allocate, "took blocks first.*all or nothing"),
        (
            RefCountUnchecked,
            checks.check_release,
            r"ref_count\(-1\)` should raise InvalidBlock \(-1 is not a block id",
        ),
        (RefCountZeroOnError, checks.check_release, r"ref_count\(-1\)` should raise InvalidBlock"),
        (
            ReleaseSortsTheIds,
            checks.check_release,
            r"release\(\[.*changed the list of ids it was given",
        ),
        (
            ShareSortsTheIds,
            checks.check_release,
            r"share\(\[.*changed the list of ids it was given",
        ),
        (
            ReleaseClearsTheIds,
            checks.check_release,
            r"release\(\[.*changed the list of ids it was given",
        ),
        (ForgetsTheFreeList, checks.check_release, "free again: back on the free list"),
        (
            ShareTakesNegativeIds,
            checks.check_release,
            r"share\(\[.*-1\]\)` should raise InvalidBlock \(-1 is not a block id: ids are 0\.\.",
        ),
        (ForgetsTheFreeList, checks.check_free_pages, "a released block goes back on the free"),
        (PagesBackwards, checks.check_free_pages, r"\(in increasing order\), got \[1, 0\]"),
        (
            SearchesTheFreeListPerBlock,
            checks.check_free_pages,
            r"`in` on `self\.free_ids`.*search a list for each block",
        ),
    ],
)
def test_a_walkthrough_mistake_is_named(pool, check, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        check(pool)
    first = str(failure.value).splitlines()[0]
    assert re.search(mistake, first), first  # the cause is on the message's first line
    assert "Traceback" not in str(failure.value)


def test_exercise_2_blames_a_scanning_allocate_on_exercise_1():
    with pytest.raises(CheckFailed, match=r"fills its pools with your allocate \(exercise 1"):
        checks.check_constant_time_release(MinAndRemove)
