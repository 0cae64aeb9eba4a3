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
    Request,
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
        (_admitting(overtake=True), "request 3 was admitted past request 2"),
        (_admitting(alone=False), "must still run, alone in an empty step"),
        (_admitting(cap=False), "only 2 requests may run at once"),
        (_admitting(copy=True), "admit the request's own sequence"),
        (_admitting(start_at_zero=True), "start the chunk at request.num_cached_tokens"),
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


class BudgetOfAdmittedChunksOnly(Scheduler):
    """Prices against the budget minus the chunks it admitted, forgetting the decodes."""

    def admit_waiting(self, plan):
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting[0]
            tokens = request.admission_sequence()
            cost = len(tokens) - self.manager.num_prefix_hit_tokens(tokens)
            admitted = sum(c.num_tokens for c in plan.chunks if c.admitted)
            if cost > plan.token_budget - admitted and plan.chunks:
                return
            try:
                self.manager.add_sequence(request.request_id, tokens)
            except OutOfBlocks:
                return
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            hits = request.num_cached_tokens
            plan.chunks.append(ScheduledChunk(request, hits, len(tokens) - hits, True))


class EmptyMeansNoAdmission(BudgetOfAdmittedChunksOnly):
    """...and calls a step holding only decodes empty."""

    def admit_waiting(self, plan):
        decodes = plan.chunks
        plan.chunks = []
        try:
            super().admit_waiting(plan)
        finally:
            plan.chunks = decodes + plan.chunks


def _admitting_like_the_library(*, order="add, pop, status", catch=OutOfBlocks, keep_going=False):
    """The library's admission with one change: the order of the admission's steps, the
    exception caught around add_sequence, or going on past a request that gets no blocks."""

    class Admitting(Scheduler):
        def admit_waiting(self, plan):
            queue = list(self.waiting)
            for request in queue:
                if len(self.running) >= self.max_running:
                    return
                tokens = request.admission_sequence()
                cost = len(tokens) - self.manager.num_prefix_hit_tokens(tokens)
                if cost > plan.budget_left and plan.chunks and order != "add, check, free":
                    return
                if order == "status, add, pop":
                    request.status = RequestStatus.RUNNING
                if order == "pop, add, status":
                    self.waiting.remove(request)
                if order == "add, check, free":
                    try:
                        self.manager.add_sequence(request.request_id, tokens)
                    except OutOfBlocks:
                        return
                    if len(tokens) - request.num_cached_tokens > plan.budget_left and plan.chunks:
                        self.manager.free_sequence(request.request_id)
                        return
                else:
                    try:
                        self.manager.add_sequence(request.request_id, tokens)
                    except catch:
                        if keep_going:
                            continue
                        return
                if order != "pop, add, status":
                    self.waiting.remove(request)
                request.status = RequestStatus.RUNNING
                self.running.append(request)
                hits = request.num_cached_tokens
                plan.chunks.append(ScheduledChunk(request, hits, len(tokens) - hits, True))

    return Admitting


class AdmittedFalse(Scheduler):
    def admit_waiting(self, plan):
        n = len(plan.chunks)
        super().admit_waiting(plan)
        plan.chunks[n:] = [
            ScheduledChunk(c.request, c.start, c.num_tokens, False) for c in plan.chunks[n:]
        ]


@pytest.mark.parametrize(
    ("scheduler", "mistake"),
    [
        (BudgetOfAdmittedChunksOnly, "the step computes 11 tokens with a budget of 10"),
        (EmptyMeansNoAdmission, r"the step computes 13 tokens .* test `plan.chunks`"),
        (_admitting_like_the_library(order="status, add, pop"), "status is RequestStatus.RUNNING"),
        (_admitting_like_the_library(order="pop, add, status"), "left `waiting` though"),
        (_admitting_like_the_library(order="add, check, free"), "check the budget \\*before\\*"),
        (_admitting_like_the_library(catch=Exception), "catch only OutOfBlocks"),
        (_admitting_like_the_library(keep_going=True), "stop admitting at the first OutOfBlocks"),
        (AdmittedFalse, "admitted=True marks a"),
    ],
)
def test_an_admission_that_breaks_a_rule_is_named(scheduler, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_admission(scheduler)
    assert str(failure.value).startswith("Exercise 1 (admission)")


def test_a_step_over_its_budget_in_a_workload_is_named_with_its_replay():
    class OverBudgetInWorkloads(Scheduler):
        """Right in the fixed scenarios (plans of 10 tokens), 3 tokens over in the workloads."""

        def admit_waiting(self, plan):
            if plan.token_budget > 10:
                plan.token_budget += 3
            try:
                super().admit_waiting(plan)
            finally:
                if plan.token_budget > 13:
                    plan.token_budget -= 3

    with pytest.raises(CheckFailed, match=r"tokens .* with a budget of") as failure:
        checks.check_admission(OverBudgetInWorkloads)
    assert "from paged_kv.serving.scheduler import SamplingParams" in str(failure.value)


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
        (_preempting(record_len=lambda r: len(r.sequence)), r"Preemption\(5, 1, 10, 'a test'\)"),
        (_preempting(drop_pending=True), "lost its generated tokens"),
    ],
)
def test_a_wrong_preemption_fails_naming_its_mistake(scheduler, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_preemption(scheduler)
    assert str(failure.value).startswith("Exercise 2 (preemption)")


class PreemptsTheOldest(Scheduler):
    def preempt(self, request, plan, reason):
        super().preempt(self.running[0], plan, reason)


class PopsTheNewest(Scheduler):
    def preempt(self, request, plan, reason):
        self.manager.free_sequence(request.request_id)
        self.running.pop()
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        plan.preempted.append(Preemption(plan.step, request.request_id, request.num_tokens, reason))


class SwallowsFreeErrors(Scheduler):
    def preempt(self, request, plan, reason):
        try:
            self.manager.free_sequence(request.request_id)
        except Exception:  # the mistake under test
            return self._go_on(request, plan, reason)
        return self._go_on(request, plan, reason)

    def _go_on(self, request, plan, reason):
        self.running.remove(request)
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        plan.preempted.append(Preemption(plan.step, request.request_id, request.num_tokens, reason))


class StartsItAfresh(Scheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        n = request.num_preemptions
        request.__init__(request.request_id, request.prompt, request.params)
        request.num_preemptions = n


class QueuesACopy(Scheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        copy = Request(request.request_id, request.prompt, request.params)
        copy.num_preemptions = request.num_preemptions
        self.waiting[0] = copy


class ReAdds(Scheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        self.manager.add_sequence(request.request_id, request.admission_sequence())
        self.manager.free_sequence(request.request_id)


@pytest.mark.parametrize(
    ("scheduler", "mistake"),
    [
        (PreemptsTheOldest, "freed request 0's sequence, not the victim's"),
        (PopsTheNewest, "you removed request 2, the last of `running`"),
        (SwallowsFreeErrors, "your preempt returned without it"),
        (StartsItAfresh, "lost its generated tokens"),
        (QueuesACopy, "you queued a new Request for request 1"),
        (ReAdds, "preempt called manager.add_sequence"),
        (
            _preempting(record_len=lambda r: r.num_tokens - r.num_cached_tokens),
            "prefix hits included",
        ),
    ],
)
def test_a_preemption_that_breaks_a_rule_is_named(scheduler, mistake):
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


@pytest.mark.parametrize(
    ("scheduler", "cause"),
    [
        (NeverFrees, "The cause is in your preempt \\(exercise 2\\): preempt must free"),
        (_admitting_like_the_library(order="pop, add, status"), "in your admit_waiting"),
        (QueuesACopy, "you queued a new Request"),
    ],
)
def test_serving_that_fails_names_the_method_at_fault(scheduler, cause):
    with pytest.raises(CheckFailed, match=cause) as failure:
        checks.check_serves_like_dense(scheduler)
    assert "from paged_kv.serving.engine import Engine" in str(failure.value)


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
