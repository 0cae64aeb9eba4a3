"""Chapter 06: plausible wrong schedulers and capstone parts, each failing, naming the mistake."""

import pytest

from paged_kv import BlockPool, OutOfBlocks
from paged_kv.attention import reference_decode
from paged_kv.cache.eviction import LRU
from paged_kv.cache.sequence import TokenSequence
from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed, ExerciseNotDone
from paged_kv.serving.scheduler import (
    Preemption,
    RequestStatus,
    ScheduledChunk,
    Scheduler,
)


def test_the_library_scheduler_passes_every_check():
    checks.check_admission(Scheduler)
    checks.check_preemption(Scheduler)
    checks.check_serves_like_dense(Scheduler)
    checks.check_capstone(Scheduler, parts={})


# -- exercise 1: admission ---------------------------------------------------------------------


def _admitting(
    *,
    compare=lambda cost, left: cost > left,
    alone=True,
    cap=True,
    copy=False,
    start_at_zero=False,
    overtake=False,
):
    class Admitting(Scheduler):
        def admit_waiting(self, plan):
            queue = list(self.waiting)
            for request in queue:
                if cap and len(self.running) >= self.max_running:
                    return
                tokens = request.admission_sequence()
                cost = len(tokens) - self.manager.num_prefix_hit_tokens(tokens)
                if compare(cost, plan.budget_left) and (plan.chunks or not alone):
                    if overtake:
                        continue
                    return
                try:
                    seq = TokenSequence(list(tokens.token_ids)) if copy else tokens
                    self.manager.add_sequence(request.request_id, seq)
                except OutOfBlocks:
                    return
                self.waiting.remove(request)
                request.status = RequestStatus.RUNNING
                self.running.append(request)
                hits = self.manager.num_cached_tokens(request.request_id)
                start = 0 if start_at_zero else hits
                plan.chunks.append(ScheduledChunk(request, start, len(tokens) - start, True))

    return Admitting


@pytest.mark.parametrize(
    ("scheduler", "mistake"),
    [
        (_admitting(compare=lambda cost, left: cost >= left), "exactly the 6 tokens left"),
        (_admitting(overtake=True), "request 3 must wait behind it"),
        (_admitting(alone=False), "must still run, alone in an empty step"),
        (_admitting(cap=False), "only 2 requests may run at once"),
        (_admitting(copy=True), "admit the request's own sequence"),
        (_admitting(start_at_zero=True), "A chunk starts at request.num_cached_tokens"),
    ],
)
def test_a_wrong_admission_fails_naming_its_mistake(scheduler, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_admission(scheduler)
    assert str(failure.value).startswith("Exercise 1 (admission)")


def test_a_wrong_step_in_a_random_workload_comes_with_its_replay():
    class LastOneWaits(Scheduler):
        """Never admits the last of 6 requests while anything runs: seen only in a workload."""

        def admit_waiting(self, plan):
            if self.running and [r.request_id for r in self.waiting] == [5]:
                return
            super().admit_waiting(plan)

    with pytest.raises(CheckFailed, match="the library's scheduler computes") as failure:
        checks.check_admission(LastOneWaits)
    assert "engine, prompts = workload(LastOneWaits, seed=" in str(failure.value)


# -- exercise 2: preemption --------------------------------------------------------------------


def _preempting(
    *, free=True, front=True, count=True, status=True, record_len=None, drop_pending=False
):
    class Preempting(Scheduler):
        def preempt(self, request, plan, reason):
            if free:
                self.manager.free_sequence(request.request_id)
            self.running.remove(request)
            if status:
                request.status = RequestStatus.WAITING
            if count:
                request.num_preemptions += 1
            if drop_pending:
                request.take_pending()
            (self.waiting.appendleft if front else self.waiting.append)(request)
            n = request.num_tokens if record_len is None else record_len(request)
            plan.preempted.append(Preemption(plan.step, request.request_id, n, reason))

    return Preempting


@pytest.mark.parametrize(
    ("scheduler", "mistake"),
    [
        (_preempting(front=False), "appendleft"),
        (_preempting(free=False), "free the victim's sequence"),
        (_preempting(count=False), "num_preemptions"),
        (_preempting(status=False), "WAITING"),
        (_preempting(record_len=lambda r: len(r.sequence)), r"Preemption\(5, 2, 10, 'a test'\)"),
        (_preempting(drop_pending=True), "keep the request's tokens and its pending token"),
    ],
)
def test_a_wrong_preemption_fails_naming_its_mistake(scheduler, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_preemption(scheduler)
    assert str(failure.value).startswith("Exercise 2 (preemption)")


# -- exercise 3: both together -----------------------------------------------------------------


class SkipsThePrefill(Scheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [
            ScheduledChunk(c.request, c.request.num_tokens - 1, 1, c.admitted) for c in plan.chunks
        ]


class StartsOneLate(Scheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [
            ScheduledChunk(c.request, c.start + 1, c.num_tokens - 1, True)
            if c.admitted and c.num_tokens > 1
            else c
            for c in plan.chunks
        ]


class MissesTheLastToken(Scheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [
            ScheduledChunk(c.request, c.start, c.num_tokens - 1, True)
            if c.admitted and c.num_tokens > 1
            else c
            for c in plan.chunks
        ]


class StartsAtZeroButCountsTheHits(Scheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [
            ScheduledChunk(c.request, 0, c.num_tokens, True) if c.admitted else c
            for c in plan.chunks
        ]


class NeverFrees(Scheduler):
    def preempt(self, request, plan, reason):
        self.running.remove(request)
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        plan.preempted.append(Preemption(plan.step, request.request_id, request.num_tokens, reason))


@pytest.mark.parametrize(
    ("scheduler", "mistake"),
    [
        (SkipsThePrefill, "cache-free greedy decoding"),
        (StartsOneLate, "cache-free greedy decoding"),
        (MissesTheLastToken, "cache-free greedy decoding"),
        (NeverFrees, "the library raised InvalidArgument: this sequence is live"),
        (StartsAtZeroButCountsTheHits, "cache-free greedy decoding"),
    ],
)
def test_serving_with_a_wrong_scheduler_fails_naming_its_mistake(scheduler, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_serves_like_dense(scheduler)
    assert str(failure.value).startswith("Exercise 3 (both together)")


# -- the capstone ------------------------------------------------------------------------------


def attention_on_the_first_block(q, k_cache, v_cache, block_tables, seq_lens):
    return reference_decode(q, k_cache, v_cache, block_tables, seq_lens.clamp(max=4))


def lookup_of_any_cached_hash(index, hashes, num_prompt_tokens, block_size):
    cap = (num_prompt_tokens - 1) // block_size
    return [index[h] for h in hashes[:cap] if h in index][1:]


def table_without_sharing(pool, hits, num_blocks):
    return hits + pool.allocate(num_blocks - len(hits))


class PoolFreeingSharedBlocks(BlockPool):
    def release(self, block_ids):
        ids = list(dict.fromkeys(block_ids))
        for b in ids:
            while self.ref_count(b) > 1:
                super().release([b])
        return super().release(ids)


class EvictsTheNewest(LRU):
    """Evicts a block that is in use (the most recently touched, evictable or not)."""

    def __init__(self):
        super().__init__()
        self.last = None

    def touch(self, block_id):
        self.last = block_id
        super().touch(block_id)

    def evict(self):
        victim = self.last if self.last is not None else super().evict()
        self._order.pop(victim, None)
        return victim


@pytest.mark.parametrize(
    ("parts", "mistake"),
    [
        ({"attention": attention_on_the_first_block}, "library's attention instead of your paged"),
        (
            {"prefix_lookup": lookup_of_any_cached_hash},
            "your prefix lookup.*prefix_lookup returned",
        ),
        ({"allocate_table": table_without_sharing}, "your all-or-nothing add .*is at fault"),
        ({"pool": PoolFreeingSharedBlocks}, "your block pool .*is at fault|your block pool"),
        ({"eviction": EvictsTheNewest}, "your eviction policy is at fault"),
    ],
)
def test_the_capstone_names_the_part_at_fault(parts, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_capstone(Scheduler, parts=parts)
    assert str(failure.value).startswith("Capstone")


def test_the_capstone_names_a_wrong_scheduler_and_a_stub_part():
    with pytest.raises(CheckFailed, match="your scheduler is the cause"):
        checks.check_capstone(SkipsThePrefill, parts={"attention": reference_decode})

    def stub(q, k_cache, v_cache, block_tables, seq_lens):
        raise NotImplementedError("paged_decode: replace this line with your code")

    with pytest.raises(ExerciseNotDone, match="not done yet"):
        checks.check_capstone(Scheduler, parts={"attention": stub})
