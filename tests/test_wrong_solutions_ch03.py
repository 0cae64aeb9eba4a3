"""Chapter 03: plausible wrong eviction policies, each failing its check, naming the mistake."""

from collections import OrderedDict, deque

import pytest

from paged_kv.cache.eviction import FIFO, LFU, LRU, AgingLFU, EvictionPolicy
from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed
from paged_kv.course.naive import HeapLFU
from paged_kv.errors import InvalidBlock

MAX_BUCKET = 255


class BucketLFU(EvictionPolicy):
    def __init__(self):
        self.counts = {}
        self.buckets = [OrderedDict() for _ in range(MAX_BUCKET + 1)]
        self.bucket_of = {}
        self.nonempty = 0

    def count(self, block):
        return self.counts.get(block, 0)

    def set_count(self, block, count):
        self.counts[block] = count
        if block in self.bucket_of:
            self._leave(block)
            self._enter(block, count)

    def touch(self, block):
        self.set_count(block, self.count(block) + 1)

    def make_evictable(self, block):
        self.counts.setdefault(block, 0)
        self._enter(block, self.counts[block])

    def revive(self, block):
        self._leave(block)

    def evict(self):
        if not self.nonempty:
            raise InvalidBlock("nothing is evictable")
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = next(iter(self.buckets[lowest]))
        self.forget(block)
        return block

    def forget(self, block):
        if block in self.bucket_of:
            self._leave(block)
        self.counts.pop(block, None)

    def __len__(self):
        return len(self.bucket_of)

    def __contains__(self, block):
        return block in self.bucket_of

    def _enter(self, block, count):
        bucket = min(count, MAX_BUCKET)
        self.buckets[bucket][block] = None
        self.bucket_of[block] = bucket
        self.nonempty |= 1 << bucket

    def _leave(self, block):
        bucket = self.bucket_of.pop(block)
        del self.buckets[bucket][block]
        if not self.buckets[bucket]:
            self.nonempty &= ~(1 << bucket)


class WindowLFU(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()
        self.window, self.recent, self.life, self.lives = window, deque(), {}, 0

    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        super().touch(block)
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.set_count(old, self.count(old) - 1)

    def forget(self, block):
        super().forget(block)
        self.life.pop(block, None)


def test_the_solution_and_the_library_pass():
    checks.check_lfu(BucketLFU)
    checks.check_lfu(LFU)
    checks.check_aging(WindowLFU)
    checks.check_aging(AgingLFU)
    for policy in (BucketLFU, WindowLFU, LRU, FIFO, LFU):
        checks.check_policy_contract(policy)


# -- exercise 1: BucketLFU ---------------------------------------------------------------------


class MostRecentFirst(BucketLFU):
    def evict(self):
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = next(reversed(self.buckets[lowest]))
        self.forget(block)
        return block


class MinOverTheCandidates(BucketLFU):
    """min() with a C key function: no Python line per block, but a scan all the same."""

    def evict(self):
        block = min(self.bucket_of, key=self.bucket_of.get)
        self.forget(block)
        return block


class CountSurvivesEviction(BucketLFU):
    def evict(self):
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = next(iter(self.buckets[lowest]))
        self._leave(block)
        return block


class ReviveKeepsTheCandidate(BucketLFU):
    def revive(self, block):
        pass


class NoCap(BucketLFU):
    def _enter(self, block, count):
        self.buckets[count][block] = None
        self.bucket_of[block] = count
        self.nonempty |= 1 << count


class ListBuckets(BucketLFU):
    """Buckets as lists: `remove` searches the bucket, which grows with the cache."""

    def __init__(self):
        super().__init__()
        self.buckets = [[] for _ in range(MAX_BUCKET + 1)]

    def evict(self):
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = self.buckets[lowest][0]
        self.forget(block)
        return block

    def _enter(self, block, count):
        bucket = min(count, MAX_BUCKET)
        self.buckets[bucket].append(block)
        self.bucket_of[block] = bucket
        self.nonempty |= 1 << bucket

    def _leave(self, block):
        bucket = self.bucket_of.pop(block)
        self.buckets[bucket].remove(block)
        if not self.buckets[bucket]:
            self.nonempty &= ~(1 << bucket)


class CountResetOnRevive(BucketLFU):
    def revive(self, block):
        self._leave(block)
        self.counts[block] = 0


class TopBucketOneShort(BucketLFU):
    """Counts 254 and 255 share a bucket: the top bucket is MAX_BUCKET - 1."""

    def _enter(self, block, count):
        super()._enter(block, min(count, MAX_BUCKET - 1))

    def _leave(self, block):
        super()._leave(block)


class EvictNothingReturnsNone(BucketLFU):
    def evict(self):
        if not self.nonempty:
            return None
        return super().evict()


class EvictSwallowsErrors(BucketLFU):
    def evict(self):
        try:
            return super().evict()
        except Exception:
            return None


class ReviveIgnoresStrangers(BucketLFU):
    def revive(self, block):
        if block in self.bucket_of:
            self._leave(block)


class SetCountMovesOnlyToAnotherBucket(BucketLFU):
    def set_count(self, block, count):
        self.counts[block] = count
        if block in self.bucket_of and self.bucket_of[block] != min(count, MAX_BUCKET):
            self._leave(block)
            self._enter(block, count)


class MakeEvictableTwiceMovesIt(BucketLFU):
    def make_evictable(self, block):
        if block in self.bucket_of:
            self._leave(block)
        super().make_evictable(block)


class ContainsForgetsToReturn(BucketLFU):
    def __contains__(self, block):
        block in self.bucket_of  # noqa: B015


class ScansTheBuckets(BucketLFU):
    """Walks up the 256 buckets to the lowest non-empty one: constant, but not the bitmask."""

    def evict(self):
        if not self.nonempty:
            raise InvalidBlock("nothing is evictable")
        block = next(iter(next(b for b in self.buckets if b)))
        self.forget(block)
        return block


class LenSumsTheBuckets(BucketLFU):
    def __len__(self):
        return sum(len(bucket) for bucket in self.buckets)


class ContainsScansTheBuckets(BucketLFU):
    def __contains__(self, block):
        return any(block in bucket for bucket in self.buckets)


class MaskNeverCleared(BucketLFU):
    def _leave(self, block):
        bucket = self.bucket_of.pop(block)
        del self.buckets[bucket][block]


class MakeEvictableCountsATouch(BucketLFU):
    def make_evictable(self, block):
        if block not in self.counts:
            self.counts[block] = 1
        super().make_evictable(block)


class SetCountIsAStub(BucketLFU):
    """touch written without set_count, which is left a stub."""

    def set_count(self, block, count):
        raise NotImplementedError("BucketLFU.set_count: replace this line with your code")

    def touch(self, block):
        self.counts[block] = self.count(block) + 1
        if block in self.bucket_of:
            self._leave(block)
            self._enter(block, self.counts[block])


@pytest.mark.parametrize(
    ("policy", "mistake"),
    [
        (TopBucketOneShort, r"the top bucket is MAX_BUCKET itself"),
        (EvictNothingReturnsNone, r"`policy.evict\(\)` should raise InvalidBlock .* returned None"),
        (EvictSwallowsErrors, r"`policy.evict\(\)` should raise InvalidBlock .* returned None"),
        (ReviveIgnoresStrangers, r"`policy.revive\(9\)` should raise KeyError or InvalidBlock"),
        (SetCountMovesOnlyToAnotherBucket, r"its bucket does not change"),
        (MakeEvictableTwiceMovesIt, r"already evictable changes nothing"),
        (ContainsForgetsToReturn, r"in policy` should be True .*return its answer"),
        (ScansTheBuckets, r"walks the buckets up to the lowest non-empty one"),
        (LenSumsTheBuckets, r"`len\(policy\)` ran .* in `LenSumsTheBuckets.__len__`"),
        (ContainsScansTheBuckets, r"in policy` ran .* in `ContainsScansTheBuckets.__contains__`"),
        (MaskNeverCleared, r"raised StopIteration while blocks are evictable: the bucket your"),
        (MakeEvictableCountsATouch, r"should be 0, got 1 .*make_evictable .*not .*touch"),
    ],
)
def test_a_wrong_lfu_that_used_to_pass_fails_naming_its_mistake(policy, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_lfu(policy)
    assert str(failure.value).startswith("Exercise 1 (BucketLFU)")


def test_set_count_is_checked_in_exercise_1():
    with pytest.raises(checks.ExerciseNotDone, match=r"BucketLFU\.set_count"):
        checks.check_lfu(SetCountIsAStub)


def test_passing_an_instance_or_a_non_policy_says_so():
    with pytest.raises(CheckFailed, match=r"takes the class, not an instance: pass `BucketLFU`"):
        checks.check_lfu(BucketLFU())

    class NotAPolicy:
        pass

    for check in (checks.check_lfu, checks.check_aging, checks.check_policy_contract):
        with pytest.raises(CheckFailed, match=r"`NotAPolicy` has no `touch`"):
            check(NotAPolicy)
    with pytest.raises(CheckFailed, match=r"takes your policy's class .*not 'lru'"):
        checks.check_policy_contract("lru")
    with pytest.raises(CheckFailed, match=r"did you pass BucketLFU instead of WindowLFU"):
        checks.check_aging(BucketLFU)


@pytest.mark.parametrize(
    ("policy", "mistake"),
    [
        (MostRecentFirst, "least recently touched"),
        (HeapLFU, "garbage is piling up"),
        (MinOverTheCandidates, r"iteration on `self.bucket_of`"),
        (CountSurvivesEviction, r"its count starts again: policy.count\(2\) should be 1"),
        (ReviveKeepsTheCandidate, "nothing is evictable"),
        (NoCap, "raised IndexError"),
        (ListBuckets, r"\.remove\(\) on `self.buckets"),
        (CountResetOnRevive, "a revived block keeps its count"),
    ],
)
def test_a_wrong_lfu_fails_naming_its_mistake(policy, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_lfu(policy)
    assert str(failure.value).startswith("Exercise 1 (BucketLFU)")


def test_a_wrong_victim_in_a_random_trial_comes_with_its_counts():
    class EvictsTheSecondLowest(BucketLFU):
        def evict(self):
            ordered = sorted(self.bucket_of, key=lambda b: self.bucket_of[b])
            block = ordered[1] if len(ordered) > 3 else ordered[0]
            self.forget(block)
            return block

    with pytest.raises(CheckFailed, match="the evictable blocks' counts were") as failure:
        checks.check_lfu(EvictsTheSecondLowest)
    assert "random trial" in str(failure.value) and "seed=0" in str(failure.value)


# -- exercise 2: WindowLFU ---------------------------------------------------------------------


class NotAging(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()


class IgnoresLives(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()
        self.window, self.recent = window, deque()

    def touch(self, block):
        super().touch(block)
        self.recent.append(block)
        if len(self.recent) > self.window:
            old = self.recent.popleft()
            if self.count(old) > 0:
                self.set_count(old, self.count(old) - 1)


class WindowOneShort(WindowLFU):
    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        BucketLFU.touch(self, block)
        self.recent.append((block, self.life[block]))
        if len(self.recent) >= self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.set_count(old, self.count(old) - 1)


class CountsTheWindowEachTime(WindowLFU):
    """Counts recomputed from the window with deque.count: right, but a scan in C."""

    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.set_count(old, self.recent.count((old, life)))
        self.set_count(block, self.recent.count((block, self.life[block])))


class ForgetKeepsTheLife(WindowLFU):
    def forget(self, block):
        BucketLFU.forget(self, block)


class HalvesPeriodically(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()
        self.window, self.touches = window, 0

    def touch(self, block):
        super().touch(block)
        self.touches += 1
        if self.touches % self.window == 0:
            for b in list(self.counts):
                self.set_count(b, self.counts[b] // 2)


class DropsTheLeavingTouchFirst(WindowLFU):
    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.set_count(old, self.count(old) - 1)
        BucketLFU.touch(self, block)


class LivesNeverDeleted(WindowLFU):
    """forget marks the life ended (None) instead of deleting it."""

    def touch(self, block):
        life = self.life.get(block)
        if life is None:
            self.lives += 1
            life = self.life[block] = self.lives
        BucketLFU.touch(self, block)
        self.recent.append((block, life))
        if len(self.recent) > self.window:
            old, old_life = self.recent.popleft()
            if self.life.get(old) == old_life and old in self.counts:
                self.set_count(old, self.count(old) - 1)

    def forget(self, block):
        BucketLFU.forget(self, block)
        self.life[block] = None


class GenerationCounterPerBlock(WindowLFU):
    """A life number per block, bumped on forget and never deleted."""

    def touch(self, block):
        self.life.setdefault(block, 0)
        BucketLFU.touch(self, block)
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life and old in self.counts:
                self.set_count(old, self.count(old) - 1)

    def forget(self, block):
        BucketLFU.forget(self, block)
        self.life[block] = self.life.get(block, 0) + 1


class AgesTheCountDictDirectly(WindowLFU):
    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        BucketLFU.touch(self, block)
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.counts[old] -= 1


class WindowOverAnEvictThatSkipsForget(WindowLFU):
    """BucketLFU.evict that stops tracking its victim without calling forget."""

    def evict(self):
        if not self.nonempty:
            raise InvalidBlock("nothing is evictable")
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = next(iter(self.buckets[lowest]))
        self._leave(block)
        self.counts.pop(block, None)
        return block


@pytest.mark.parametrize(
    ("policy", "mistake"),
    [
        (DropsTheLeavingTouchFirst, r"count the new touch before removing the one that leaves"),
        (LivesNeverDeleted, r"`self.life` grew by 20,000 entries"),
        (GenerationCounterPerBlock, r"`self.life` grew by 20,000 entries"),
        (AgesTheCountDictDirectly, r"stayed in its old bucket \(change counts with set_count"),
        (WindowOverAnEvictThatSkipsForget, r"Your evict\(\) never calls forget\(victim\)"),
    ],
)
def test_a_wrong_aging_that_used_to_pass_or_misled_fails_naming_its_mistake(policy, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_aging(policy)
    assert str(failure.value).startswith("Exercise 2 (WindowLFU)")


@pytest.mark.parametrize(
    ("policy", "mistake"),
    [
        (NotAging, "window=2"),
        (IgnoresLives, "new life in the cache"),
        (WindowOneShort, "only the last two count"),
        (CountsTheWindowEachTime, r"\.count\(\) on `self.recent`"),
        (ForgetKeepsTheLife, r"only block 7's touch since it came back counts"),
        (HalvesPeriodically, r"policy.count\(7\) should be 1"),
    ],
)
def test_a_wrong_aging_fails_naming_its_mistake(policy, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_aging(policy)
    assert str(failure.value).startswith("Exercise 2 (WindowLFU)")


# -- exercise 3: the policy contract -----------------------------------------------------------


class RevivedStaysEvictable(LRU):
    def revive(self, block_id):
        pass


class LenCountsEveryTrackedBlock(LRU):
    def __init__(self):
        super().__init__()
        self.tracked = set()

    def touch(self, block_id):
        self.tracked.add(block_id)
        super().touch(block_id)

    def __len__(self):
        return len(self.tracked)


class ForgetKeepsTheCandidate(LRU):
    def forget(self, block_id):
        pass


class EvictKeepsTheVictim(LRU):
    def evict(self):
        return next(iter(self._order))


class EverythingIsIn(LRU):
    def __contains__(self, block_id):
        return True


class EvictsNothing(LRU):
    def evict(self):
        super().evict()


class EvictReturnsAList(LRU):
    def evict(self):
        return [super().evict()]


class EvictReturnsATuple(LRU):
    def evict(self):
        return super().evict(), "why"


class GhostsNeverTrimmed(BucketLFU):
    """Remembers the count of every evicted block, for ever."""

    def __init__(self):
        super().__init__()
        self.ghosts = {}

    def touch(self, block):
        if block not in self.counts and block in self.ghosts:
            self.counts[block] = self.ghosts.pop(block)
        super().touch(block)

    def evict(self):
        if self.nonempty:
            lowest = (self.nonempty & -self.nonempty).bit_length() - 1
            victim = next(iter(self.buckets[lowest]))
            self.ghosts[victim] = self.count(victim)
        return super().evict()


@pytest.mark.parametrize(
    ("policy", "mistake"),
    [
        (RevivedStaysEvictable, "not evictable|len"),
        (LenCountsEveryTrackedBlock, r"`len\(policy\)` should be"),
        (ForgetKeepsTheCandidate, r"`len\(policy\)` should be|not evictable"),
        (EvictKeepsTheVictim, r"`len\(policy\)` should be|not evictable"),
        (EverythingIsIn, r"in policy` should be False"),
        (EvictsNothing, "returned None, not a block id"),
        (EvictReturnsAList, r"returned \[\d+\], not a block id"),
        (EvictReturnsATuple, r"returned \(\d+, 'why'\), not a block id"),
        (GhostsNeverTrimmed, r"`self.ghosts` grew by .* ghosts, must be bounded"),
    ],
)
def test_a_policy_breaking_the_contract_fails_naming_how(policy, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_policy_contract(policy)
    assert str(failure.value).startswith("Exercise 3 (your own policy)")
