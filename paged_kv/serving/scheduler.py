"""The scheduler: which requests compute which tokens in the next step, within its budgets.

Continuous batching: each step every running request decodes one token, then waiting requests
join while the token budget, the block pool and the running cap allow. When a running request
cannot get a block, the newest running request is preempted: its blocks are freed and it is
recomputed from its tokens when it is admitted again.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

import torch

from paged_kv.cache.manager import KVCacheManager
from paged_kv.errors import InvalidArgument, OutOfBlocks, require_positive_int


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens: greedy when temperature is 0, else seeded random sampling."""

    max_new_tokens: int = 16
    temperature: float = 0.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise InvalidArgument(f"max_new_tokens must be an int, got {self.max_new_tokens!r}.")
        if self.max_new_tokens < 1:
            raise InvalidArgument(
                f"max_new_tokens must be >= 1, got {self.max_new_tokens}; a request that "
                "generates nothing needs no engine."
            )
        if not self.temperature >= 0:
            raise InvalidArgument(f"temperature must be >= 0 (0 is greedy): {self.temperature}.")


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """A prompt and what has been generated for it so far.

    While running, the last output token is *pending*: sampled, but its K/V not yet computed.
    The next step appends it to the cache and computes it, which yields the next token.
    """

    request_id: int
    prompt: list[int]
    params: SamplingParams
    output: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_cached_tokens: int = 0  # prefix-cache hits at its latest admission
    num_preemptions: int = 0
    generator: torch.Generator = field(default_factory=torch.Generator)

    def __post_init__(self) -> None:
        if self.params.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(self.params.seed)

    @property
    def tokens(self) -> list[int]:
        """Prompt plus output: what a (re)admission computes, minus its prefix-cache hits."""
        return self.prompt + self.output

    @property
    def is_done(self) -> bool:
        stop = bool(self.output) and self.output[-1] in self.params.stop_token_ids
        return stop or len(self.output) >= self.params.max_new_tokens


@dataclass(frozen=True)
class Preemption:
    """Request `request_id` lost its blocks at `step`; `num_tokens` will be recomputed."""

    step: int
    request_id: int
    num_tokens: int
    reason: str


@dataclass(frozen=True)
class ScheduledChunk:
    """A request computes `num_tokens` tokens from position `start` on; `admitted` says
    whether this is its (re)admission's prefill rather than a decode."""

    request: Request
    start: int
    num_tokens: int
    admitted: bool


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


class Scheduler:
    """Waiting and running queues over one `KVCacheManager`, stepped by the engine.

    `max_batch_tokens` caps the tokens computed per step (a request bigger than the whole
    budget runs alone in its step); `max_running` caps the requests running at once.
    """

    def __init__(
        self, manager: KVCacheManager, *, max_batch_tokens: int = 512, max_running: int = 32
    ) -> None:
        require_positive_int("max_batch_tokens", max_batch_tokens)
        require_positive_int("max_running", max_running)
        if max_running > max_batch_tokens:
            raise InvalidArgument(
                f"max_running ({max_running}) > max_batch_tokens ({max_batch_tokens}): every "
                "running request decodes a token each step, so raise the budget."
            )
        self.manager = manager
        self.max_batch_tokens = max_batch_tokens
        self.max_running = max_running
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order: the newest is preempted first
        self.step = 0

    def add(self, request: Request) -> None:
        """Queue a new request behind the waiting ones."""
        self.waiting.append(request)

    def schedule(self) -> StepPlan:
        """Plan the next step: decode every running request, then admit waiting ones."""
        plan = StepPlan(self.step, self.max_batch_tokens)
        self.schedule_running(plan)
        self.admit_waiting(plan)
        self.step += 1
        return plan

    def schedule_running(self, plan: StepPlan) -> None:
        """Each running request, oldest first, appends its pending token to the cache.

        When its block is not to be had, the newest running request is preempted (maybe
        itself), so the oldest requests always progress and the engine cannot livelock.
        """
        scheduled = 0
        while scheduled < len(self.running):
            request = self.running[scheduled]
            if self._make_room_for_next_token(request, plan):
                self.manager.append_tokens(request.request_id, request.output[-1:])
                plan.chunks.append(ScheduledChunk(request, len(request.tokens) - 1, 1, False))
                scheduled += 1

    def admit_waiting(self, plan: StepPlan) -> None:
        """Admit waiting requests in arrival order while the step's budgets allow.

        A request costs its tokens minus its prefix-cache hits; admission stops at the first
        request that does not fit (no overtaking, so no request starves).
        """
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting[0]
            cost = len(request.tokens) - self.manager.num_prefix_hit_tokens(request.tokens)
            if cost > plan.budget_left and plan.chunks:
                return
            try:
                self.manager.add_sequence(request.request_id, request.tokens)
            except OutOfBlocks:
                return
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            hits = request.num_cached_tokens = self.manager.num_cached_tokens(request.request_id)
            plan.chunks.append(ScheduledChunk(request, hits, len(request.tokens) - hits, True))

    def preempt(self, request: Request, plan: StepPlan, reason: str) -> None:
        """Free `request`'s blocks and put it first in line, to be recomputed on admission.

        Its full blocks stay in the prefix cache, so a readmission soon after is cheap.
        """
        self.manager.free_sequence(request.request_id)
        self.running.remove(request)
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        plan.preempted.append(
            Preemption(plan.step, request.request_id, len(request.tokens), reason)
        )

    def finish(self, request: Request) -> None:
        """`request` is done: release its blocks (full ones stay cached for others)."""
        self.manager.free_sequence(request.request_id)
        self.running.remove(request)
        request.status = RequestStatus.FINISHED

    def _make_room_for_next_token(self, request: Request, plan: StepPlan) -> bool:
        """Preempt the newest running requests until `request` can append; False if it
        was preempted itself."""
        while not self.manager.can_append(request.request_id, 1):
            victim = self.running[-1]
            self.preempt(
                victim,
                plan,
                f"request {request.request_id} needed a block for its next token and none "
                f"was free or evictable; request {victim.request_id} is the newest running",
            )
            if victim is request:
                return False
        return True
