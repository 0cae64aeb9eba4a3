"""The scheduler: which requests compute which tokens in the next step, within its budgets.

Continuous batching: each step every running request decodes one token, then waiting requests
join while the token budget, the block pool and the running cap allow. When a running request
cannot get a block, the newest running request is preempted: its blocks are freed and it is
recomputed from its tokens when it is admitted again.
"""

from __future__ import annotations

import enum
import math
import numbers
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import InvalidArgument, OutOfBlocks
from paged_kv.validation import as_int, require_int, require_positive_int, require_token_ids

SchedulePolicy = Literal["fcfs", "longest_prefix"]
"""The order waiting requests are admitted in: arrival, or longest cached prefix first."""


MIN_TEMPERATURE = 1e-4
"""The lowest temperature above 0 (greedy) a request takes: there a logit gap of 0.01 already
weighs e^-100, so anything colder is greedy in all but name (pass 0)."""
MAX_SEED = 2**64 - 1
"""The largest seed: what `torch.Generator.manual_seed` takes (negative ones alias these)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens: greedy when temperature is 0, else seeded random sampling.

    A request ends after `max_new_tokens`, or at a token of `stop_token_ids` or of the
    model's EOS ids (`TinyLM.eos_token_ids`) unless `ignore_eos`; the stopping token is
    part of the output. Checked when made: `max_new_tokens` an int >= 1, `temperature` a real
    number that is 0 or finite and at least `MIN_TEMPERATURE`, `seed` None or an int in
    0..`MAX_SEED`, `stop_token_ids` token ids, `ignore_eos` a bool."""

    max_new_tokens: int = 16
    temperature: float = 0.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        require_positive_int("max_new_tokens", self.max_new_tokens)
        t = self.temperature
        if (
            isinstance(t, bool)
            or not isinstance(t, numbers.Real)
            or not (t == 0 or MIN_TEMPERATURE <= t < math.inf)
        ):
            raise InvalidArgument(
                f"temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE}, got "
                f"{t!r}."
            )
        if self.seed is not None and (as_int(self.seed) is None or not 0 <= self.seed <= MAX_SEED):
            raise InvalidArgument(
                f"seed must be None or an int in 0..2**64-1 (torch.Generator's range), got "
                f"{self.seed!r}."
            )
        stops = require_token_ids(self.stop_token_ids, "stop_token_ids")
        object.__setattr__(self, "stop_token_ids", tuple(stops))
        if not isinstance(self.ignore_eos, bool):
            raise InvalidArgument(f"ignore_eos must be True or False, got {self.ignore_eos!r}.")


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


class Request:
    """A prompt and what has been generated for it so far.

    `sequence` holds the prompt and the output tokens the cache has (one copy: the manager
    adopts it while the request runs). The latest sampled token is *pending* until the next
    step appends it to the cache and computes it, which yields the next token.
    """

    def __init__(
        self,
        request_id: int,
        prompt: Sequence[int] | TokenSequence,
        params: SamplingParams,
        eos_token_ids: Sequence[int] = (),
    ) -> None:
        self.request_id = request_id
        self.sequence = prompt if isinstance(prompt, TokenSequence) else TokenSequence(prompt)
        self.params = params
        eos = () if params.ignore_eos else tuple(eos_token_ids)
        self.stop_token_ids = frozenset(params.stop_token_ids + eos)
        """What ends it: its params' stop ids and, unless they ignore it, the model's EOS."""
        self.num_prompt_tokens = len(self.sequence)
        self.pending_token: int | None = None
        self.status = RequestStatus.WAITING
        self.num_preemptions = 0
        self.num_prompt_hits = 0  # tokens its first admission did not compute: prefix hits
        self.num_recomputed_tokens = 0  # tokens its readmissions after preemptions computed
        self._admitted = False
        self.arrival: int | None = None  # its place in arrival order, set by the scheduler
        self.times_overtaken = 0  # later arrivals admitted while it waited (longest_prefix)
        self.generator = torch.Generator()
        if params.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(params.seed)

    @property
    def prompt(self) -> list[int]:
        return self.sequence.token_ids[: self.num_prompt_tokens]

    @property
    def output(self) -> list[int]:
        """Generated tokens so far, the pending one included (a copy)."""
        pending = [] if self.pending_token is None else [self.pending_token]
        return self.sequence.token_ids[self.num_prompt_tokens :] + pending

    @property
    def num_output_tokens(self) -> int:
        return len(self.sequence) - self.num_prompt_tokens + (self.pending_token is not None)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output: what a (re)admission computes, minus its prefix-cache hits."""
        return len(self.sequence) + (self.pending_token is not None)

    @property
    def num_cached_tokens(self) -> int:
        """Prefix-cache hits at its latest admission."""
        return self.sequence.num_cached_tokens

    def count_admission(self, num_hit_tokens: int, num_computed_tokens: int) -> int:
        """An admission of this request was computed: `num_hit_tokens` came from the prefix
        cache (or a lower tier), `num_computed_tokens` were computed. The first admission's
        hits are its prompt hits; what a readmission after a preemption computes is counted as
        recomputed, and returned (0 otherwise)."""
        if not self._admitted:
            self._admitted, self.num_prompt_hits = True, num_hit_tokens
        recomputed = num_computed_tokens if self.num_preemptions else 0
        self.num_recomputed_tokens += recomputed
        return recomputed

    @property
    def is_done(self) -> bool:
        stop = self.pending_token is not None and self.pending_token in self.stop_token_ids
        return stop or self.num_output_tokens >= self.params.max_new_tokens

    def record_sample(self, token: int) -> None:
        """The engine sampled `token`: it is pending until the next step appends it."""
        self.pending_token = token

    def take_pending(self) -> list[int]:
        """The pending token, to append to the cache this step (then it is pending no more)."""
        token, self.pending_token = self.pending_token, None
        return [] if token is None else [token]

    def admission_sequence(self) -> TokenSequence:
        """The tokens an admission computes, prompt + output, as the sequence the manager
        adopts; a pending token (left by a preemption) joins it here."""
        self.sequence.append(self.take_pending())
        return self.sequence

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id}, {self.num_prompt_tokens} prompt tokens, "
            f"{self.num_output_tokens} generated, {self.status.value})"
        )


@dataclass(frozen=True)
class Preemption:
    """Request `request_id` lost its blocks at `step` holding `num_tokens` tokens; on
    readmission those still in the prefix cache are hits, only the rest is recomputed."""

    step: int
    request_id: int
    num_tokens: int
    reason: str


@dataclass(frozen=True)
class ScheduledChunk:
    """A request computes `num_tokens` tokens from position `start` on; `admitted` says
    whether this is its (re)admission's prefill rather than a decode, and
    `num_loaded_tokens` how many tokens before `start` a lower tier loads this step."""

    request: Request
    start: int
    num_tokens: int
    admitted: bool
    num_loaded_tokens: int = 0


@dataclass
class StepPlan:
    """What one step computes, and who was preempted to make room."""

    step: int
    token_budget: int
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def budget_left(self) -> int:
        return self.token_budget - self.num_tokens

    def describe(self) -> str:
        """One line: `id:n` per request computing n tokens (`*` marks a prefill), then who
        was preempted."""
        work = " ".join(
            f"{c.request.request_id}:{c.num_tokens}{'*' if c.admitted else ''}" for c in self.chunks
        )
        preempted = ", ".join(str(p.request_id) for p in self.preempted)
        return work + (f"; preempted {preempted}" if preempted else "")


class KVLoader(Protocol):
    """Lower tiers below the device pool (chapter 07): after `device_hit_tokens` prefix hits,
    how many more leading tokens of `sequence` can really be loaded (whole blocks)?"""

    def loadable_tokens(self, sequence: TokenSequence, device_hit_tokens: int) -> int: ...


class Scheduler:
    """Waiting and running queues over one `KVCacheManager`, stepped by the engine.

    `max_batch_tokens` caps the tokens computed per step (a request bigger than the whole
    budget runs alone in its step); `max_running` caps the requests running at once.
    `policy="longest_prefix"` admits the waiting requests with the longest cached prefix first
    (SGLang's cache-aware scheduling), each passed by at most `max_overtaken` later arrivals;
    `"fcfs"` (the default) admits them in arrival order.
    """

    def __init__(
        self,
        manager: KVCacheManager,
        *,
        max_batch_tokens: int = 512,
        max_running: int = 32,
        loader: KVLoader | None = None,
        policy: SchedulePolicy = "fcfs",
        max_overtaken: int = 8,
    ) -> None:
        require_positive_int("max_batch_tokens", max_batch_tokens)
        require_positive_int("max_running", max_running)
        if policy not in ("fcfs", "longest_prefix"):
            raise InvalidArgument(
                f"policy must be 'fcfs' (arrival order) or 'longest_prefix' (SGLang's "
                f"cache-aware order), got {policy!r}."
            )
        self.policy: SchedulePolicy = policy
        self.max_overtaken = require_int("max_overtaken", max_overtaken)
        self._arrivals = 0
        if max_running > max_batch_tokens:
            raise InvalidArgument(
                f"max_running ({max_running}) > max_batch_tokens ({max_batch_tokens}): every "
                "running request decodes a token each step, so raise the budget."
            )
        self.manager = manager
        self.loader = loader  # prices and admits blocks loadable from lower tiers
        self.max_batch_tokens = max_batch_tokens
        self.max_running = max_running
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order: the newest is preempted first
        self.step = 0

    def add(self, request: Request) -> None:
        """Queue a new request behind the waiting ones."""
        request.arrival, self._arrivals = self._arrivals, self._arrivals + 1
        self.waiting.append(request)

    def schedule(self) -> StepPlan:
        """Plan the next step: decode every running request, then admit waiting ones.

        A running request that is done already (its release failed in the last step) is
        finished first. One with no token to append (an interrupt cut the last step short
        after its forward pass, before its token was recorded) goes back to the front of
        `waiting`, to be readmitted and compute that token again."""
        for request in [r for r in self.running if r.is_done]:
            self.finish(request)
        unsampled = [r for r in self.running if r.pending_token is None]
        for request in unsampled:
            self.manager.free_sequence(request.request_id)
            self.running.remove(request)
            request.status = RequestStatus.WAITING
        self.waiting.extendleft(reversed(unsampled))
        plan = StepPlan(self.step, self.max_batch_tokens)
        self.step += 1
        try:
            self.schedule_running(plan)
            if self.policy == "longest_prefix":
                self.order_waiting()
            self.admit_waiting(plan)
            if self.policy == "longest_prefix":
                self._count_overtakes(plan)
        except BaseException:  # a failed lookup or tier call: planned so far is undone
            self.abandon(plan)
            raise
        return plan

    def abandon(self, plan: StepPlan) -> None:
        """The step of `plan` failed, so none of the K/V it was to write can be trusted.

        Each scheduled request goes back to the front of `waiting`, in plan order, keeping
        every token (a pending token appended this step stays in its sequence, and its
        readmission computes it); its blocks are freed, and those the step was to write leave
        the prefix cache instead of staying cached (`discard_unwritten`), blocks loaded from a
        lower tier this step included. Blocks written by earlier steps stay cached, so the
        readmission hits them. Preemptions stand.
        """
        size, manager = self.manager.block_size, self.manager
        unwritten: list[tuple[int, int]] = []  # (position in the table, block)
        for chunk in plan.chunks:
            request = chunk.request
            table = manager.block_table(request.request_id)
            first = (chunk.start - chunk.num_loaded_tokens) // size
            end = blocks_needed(chunk.start + chunk.num_tokens, size)
            unwritten += [(i, table[i]) for i in range(first, end)]
            manager.free_sequence(request.request_id)
            self.running.remove(request)
            request.status = RequestStatus.WAITING
        manager.discard_unwritten(block for _, block in sorted(unwritten, reverse=True))
        self.waiting.extendleft(reversed([chunk.request for chunk in plan.chunks]))

    def order_waiting(self) -> None:
        """Reorder `waiting` longest cached prefix first (SGLang's LPM), within a bound.

        Preempted requests stay first, as under FCFS. The others are placed, as far as this
        step could admit, by prefix-cache hits (ties: arrival order), except that no request
        may be passed by more than `max_overtaken` later arrivals in all: a request whose
        allowance is spent is a wall that later arrivals cannot be placed ahead of. Costs one
        prefix lookup per waiting request, and O(waiting x free running slots).
        """
        if len(self.waiting) < 2:
            return
        first = [r for r in self.waiting if r.num_preemptions]
        rest = sorted((r for r in self.waiting if not r.num_preemptions), key=_arrival)
        hits = {r.request_id: self.manager.num_prefix_hit_tokens(r.sequence) for r in rest}
        slack = {r.request_id: self.max_overtaken - r.times_overtaken for r in rest}
        placed = []
        for _ in range(min(len(rest), max(0, self.max_running - len(self.running)))):
            best = 0
            for i, r in enumerate(rest):
                if (hits[r.request_id], -i) > (hits[rest[best].request_id], -best):
                    best = i
                if slack[r.request_id] <= 0:
                    break  # nobody who arrived after r may go before it
            for r in rest[:best]:  # they arrived earlier and now stand behind it
                slack[r.request_id] -= 1
            placed.append(rest.pop(best))
        self.waiting = deque(first + placed + rest)

    def _count_overtakes(self, plan: StepPlan) -> None:
        """Count, for each request still waiting, the later arrivals admitted this step
        (readmissions of preempted requests do not count: FCFS puts them first too)."""
        admitted = sorted(
            _arrival(c.request) for c in plan.chunks if c.admitted and not c.request.num_preemptions
        )
        if admitted:
            for request in self.waiting:
                request.times_overtaken += len(admitted) - bisect_right(admitted, _arrival(request))

    def schedule_running(self, plan: StepPlan) -> None:
        """Each running request, oldest first, appends its pending token to the cache.

        When its block is not to be had, the newest running request is preempted (maybe
        itself), so the oldest requests always progress and the engine cannot livelock.
        """
        scheduled = 0
        while scheduled < len(self.running):
            request = self.running[scheduled]
            if self._append_next_token(request, plan):
                plan.chunks.append(ScheduledChunk(request, len(request.sequence) - 1, 1, False))
                scheduled += 1

    def admit_waiting(self, plan: StepPlan) -> None:
        """Admit waiting requests in arrival order while the step's budgets allow.

        A request costs its tokens minus its prefix-cache hits (and minus the blocks its
        `loader`, chapter 07's tiered store, can really load); admission stops at the first
        request that does not fit (no overtaking, so no request starves).
        """
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting[0]
            tokens = request.admission_sequence()
            hits = self.manager.num_prefix_hit_tokens(tokens)
            loaded = 0 if self.loader is None else self.loader.loadable_tokens(tokens, hits)
            cost = len(tokens) - hits - loaded
            if cost > plan.budget_left and plan.chunks:
                return
            try:
                self.manager.add_sequence(request.request_id, tokens, num_loaded_tokens=loaded)
            except OutOfBlocks:
                return
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            hits = request.num_cached_tokens
            plan.chunks.append(ScheduledChunk(request, hits, len(tokens) - hits, True, loaded))

    def preempt(self, request: Request, plan: StepPlan, reason: str) -> None:
        """Free `request`'s blocks and put it first in line, to be recomputed on admission.

        Its full blocks stay in the prefix cache, so a readmission soon after is cheap.
        """
        self.manager.free_sequence(request.request_id)
        self.running.remove(request)
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        plan.preempted.append(Preemption(plan.step, request.request_id, request.num_tokens, reason))

    def finish(self, request: Request) -> None:
        """`request` is done: release its blocks (full ones stay cached for others). All or
        nothing: if the release fails, `request` stays running, to be finished by `schedule`."""
        self.manager.free_sequence(request.request_id)
        self.running.remove(request)
        request.status = RequestStatus.FINISHED

    def abort(self, request: Request) -> None:
        """Drop `request` for good, waiting or running: its blocks are released (full ones
        its steps wrote stay cached for others) and it is never scheduled again."""
        if request.status is RequestStatus.RUNNING:
            self.manager.free_sequence(request.request_id)
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        request.status = RequestStatus.ABORTED

    def _append_next_token(self, request: Request, plan: StepPlan) -> bool:
        """Append `request`'s pending token, preempting the newest running requests until it
        fits (the append is all or nothing); False if `request` was preempted itself."""
        while True:
            try:
                token = request.pending_token
                assert token is not None  # only a request with a token to append gets here
                self.manager.append_tokens(request.request_id, [token])
            except OutOfBlocks:
                victim = self.running[-1]
                self.preempt(
                    victim,
                    plan,
                    f"request {request.request_id} needed a block for its next token and none "
                    f"was free or evictable; request {victim.request_id} is the newest running",
                )
                if victim is request:
                    return False
            else:
                request.take_pending()
                return True


def _arrival(request: Request) -> int:
    """Arrival order (a request queued without `Scheduler.add` counts as arriving first)."""
    return -1 if request.arrival is None else request.arrival
