"""The memory-waste study: where KV memory goes under contiguous reservation and under paging.

The memory-waste study of the PagedAttention paper (Kwon et al., SOSP 2023, Fig. 2): the
same requests run through contiguous reservation (to the maximum length, to a power of two,
to the exact length an oracle knows) and through paged blocks, under one memory budget.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.manager import KVCacheManager
from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int

Scheme = Literal["max", "pow2", "oracle", "paged"]
SCHEMES: tuple[Scheme, ...] = ("max", "pow2", "oracle", "paged")

# Share of KV memory holding real token states, as reported in Fig. 2 of the paper
# (Orca with three reservation rules, and vLLM).
PAPER_TOKEN_STATE_SHARE: dict[Scheme, float] = {
    "max": 0.204,
    "pow2": 0.268,
    "oracle": 0.382,
    "paged": 0.963,
}


@dataclass(frozen=True)
class Request:
    """A request of `prompt_len` input tokens that will generate `output_len` tokens."""

    prompt_len: int
    output_len: int

    @property
    def final_len(self) -> int:
        return self.prompt_len + self.output_len


@dataclass(frozen=True)
class LengthProfile:
    """Lognormal input/output lengths with the given means (labelled synthetic, seeded)."""

    name: str
    mean_input: float
    mean_output: float
    sigma: float = 1.0


# Means from the paper's Table/Fig. 11 descriptions of the two datasets; shapes are ours.
PROFILES: dict[str, LengthProfile] = {
    "sharegpt": LengthProfile("ShareGPT-like (synthetic)", 161, 338),
    "alpaca": LengthProfile("Alpaca-like (synthetic)", 19, 58, sigma=0.8),
}


def synthetic_requests(
    profile: str, num_requests: int, *, seed: int = 0, max_len: int = 2048
) -> list[Request]:
    """Draw `num_requests` seeded requests whose lengths follow `PROFILES[profile]`.

    Lengths are lognormal with the profile's means, at least 1, and prompt + output never
    exceeds `max_len` (the output is cut to fit).
    """
    if profile not in PROFILES:
        raise InvalidArgument(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}.")
    require_positive_int("num_requests", num_requests)
    require_positive_int("max_len", max_len)
    p = PROFILES[profile]
    rng = np.random.default_rng(seed)

    def lognormal(mean: float) -> np.ndarray:
        mu = np.log(mean) - p.sigma**2 / 2  # so that E[X] = mean
        return np.maximum(1, np.rint(rng.lognormal(mu, p.sigma, num_requests))).astype(int)

    prompts = np.minimum(lognormal(p.mean_input), max_len - 1)
    outputs = np.minimum(lognormal(p.mean_output), max_len - prompts)
    return [Request(int(i), int(o)) for i, o in zip(prompts, outputs, strict=True)]


@dataclass(frozen=True)
class WasteReport:
    """Where the KV memory went, averaged over the steps when requests were waiting.

    The four shares add up to 1: token states (K/V of tokens that exist), reserved (slots
    held for tokens still to come), internal fragmentation (held slots no token will ever
    use), and external fragmentation & other free memory (free, yet the next request does
    not fit).
    """

    scheme: Scheme
    token_states: float
    reserved: float
    internal_fragmentation: float
    external_fragmentation: float
    mean_running: float
    max_running: int
    steps: int
    preemptions: int


def next_pow2(n: int) -> int:
    """Smallest power of two >= n."""
    return 1 << (n - 1).bit_length()


class _ContiguousArena:
    """First-fit allocation of contiguous token ranges in [0, capacity)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._starts: list[int] = []  # sorted starts of allocated ranges
        self._sizes: dict[int, int] = {}

    def allocate(self, size: int) -> int | None:
        """Start of a free range of `size` slots, or None when no gap is large enough."""
        prev_end = 0
        for i, start in enumerate(self._starts):
            if start - prev_end >= size:
                return self._take(i, prev_end, size)
            prev_end = start + self._sizes[start]
        if self.capacity - prev_end >= size:
            return self._take(len(self._starts), prev_end, size)
        return None

    def free(self, start: int) -> None:
        self._starts.pop(bisect.bisect_left(self._starts, start))
        del self._sizes[start]

    def _take(self, index: int, start: int, size: int) -> int:
        self._starts.insert(index, start)
        self._sizes[start] = size
        return start


def reservation(scheme: Scheme, request: Request, max_len: int) -> int:
    """Slots a contiguous scheme reserves for `request` when it is admitted."""
    if scheme == "max":
        return max_len
    if scheme == "pow2":  # Orca (Pow2): the prompt, plus the output rounded up to a power of two
        return min(max_len, request.prompt_len + next_pow2(request.output_len))
    return request.final_len  # oracle


@dataclass(slots=True)
class _Running:
    """A running request: the tokens it stores now and the KV slots it holds for them.

    `held` >= `tokens` always; the gap is reserved (up to `final_len`) or wasted beyond it.
    """

    index: int
    final_len: int
    tokens: int
    held: int
    start: int = -1  # contiguous schemes only: where its range starts in the arena


class _Memory(Protocol):
    """How a scheme stores KV: admit a request, grow it by one token, release it.

    The memory keeps each `_Running.held` (slots held) up to date.
    """

    capacity: int  # usable KV slots

    def admit(self, index: int, request: Request, tokens: int) -> _Running | None:
        """Start `request` with `tokens` stored, or None when it does not fit now."""
        ...

    def grow(self, run: _Running) -> bool:
        """Store one more token of `run`, or return False when a block is missing."""
        ...

    def release(self, run: _Running) -> None:
        """Give back every slot `run` holds."""
        ...


class _ContiguousMemory:
    """Contiguous reservation: a request takes its whole `reservation` at once, first fit.

    Growing never needs memory (the slots were reserved); releasing leaves a gap.
    """

    def __init__(self, scheme: Scheme, capacity: int, max_len: int) -> None:
        self.capacity = capacity
        self._scheme: Scheme = scheme
        self._max_len = max_len
        self._arena = _ContiguousArena(capacity)

    def admit(self, index: int, request: Request, tokens: int) -> _Running | None:
        size = reservation(self._scheme, request, self._max_len)
        start = self._arena.allocate(size)
        if start is None:
            return None
        return _Running(index, request.final_len, tokens, held=size, start=start)

    def grow(self, run: _Running) -> bool:
        run.tokens += 1
        return True

    def release(self, run: _Running) -> None:
        self._arena.free(run.start)


class _PagedMemory:
    """Paged blocks on a real `KVCacheManager`: a request holds only the blocks it fills.

    Without prefix caching or forks, a request's table has `blocks_needed(tokens)` blocks.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.capacity = num_blocks * block_size
        self._block_size = block_size
        self._manager = KVCacheManager(num_blocks, block_size, prefix_caching=False)

    def admit(self, index: int, request: Request, tokens: int) -> _Running | None:
        if not self._manager.can_allocate(tokens + 1):  # room for the token it decodes next
            return None
        self._manager.add_sequence(index, [0] * tokens)
        return _Running(index, request.final_len, tokens, held=self._slots(tokens))

    def grow(self, run: _Running) -> bool:
        if not self._manager.can_append(run.index):
            return False
        self._manager.append_tokens(run.index, [0])
        run.tokens += 1
        run.held = self._slots(run.tokens)
        return True

    def release(self, run: _Running) -> None:
        self._manager.free_sequence(run.index)

    def _slots(self, tokens: int) -> int:
        """Slots in the whole blocks that hold `tokens` tokens."""
        return blocks_needed(tokens, self._block_size) * self._block_size


def _memory_for(
    scheme: Scheme, requests: Sequence[Request], budget_tokens: int, max_len: int, block_size: int
) -> _Memory:
    """The scheme's memory for `budget_tokens`, once every request is known to fit in it alone.

    Paged memory rounds the budget down to whole blocks and needs one spare block per request.
    """
    if scheme == "paged":
        num_blocks = budget_tokens // block_size
        _check_requests(requests, scheme, num_blocks * block_size, max_len, block_size)
        return _PagedMemory(num_blocks, block_size)
    _check_requests(requests, scheme, budget_tokens, max_len, block_size)
    return _ContiguousMemory(scheme, budget_tokens, max_len)


def _check_requests(
    requests: Sequence[Request], scheme: Scheme, capacity: int, max_len: int, block_size: int
) -> None:
    """Raise `InvalidArgument` for a request that is malformed or could never be admitted.

    A request needs its reservation (contiguous) or its final length plus one block (paged).
    """
    for r in requests:
        if r.final_len > max_len or r.prompt_len < 1 or r.output_len < 1:
            raise InvalidArgument(f"{r} does not fit max_len={max_len} or has empty parts.")
        need = r.final_len + block_size if scheme == "paged" else reservation(scheme, r, max_len)
        if need > capacity:
            raise InvalidArgument(
                f"{r} needs {need} slots under {scheme!r} but the budget is {capacity}; "
                "raise budget_tokens."
            )


class _Server:
    """First come, first served over one memory; preempted requests wait at the front.

    `running` is in admission order, so its last entry is the newest request.
    """

    def __init__(self, requests: Sequence[Request], memory: _Memory) -> None:
        self.requests = requests
        self.memory = memory
        self.waiting: deque[int] = deque(range(len(requests)))
        self.running: dict[int, _Running] = {}
        self.recompute: dict[int, int] = {}  # preempted request -> tokens it had
        self.preemptions = 0

    def admit(self) -> None:
        """Admit waiting requests in order while the head one fits."""
        while self.waiting:
            index = self.waiting[0]
            request = self.requests[index]
            tokens = self.recompute.get(index, request.prompt_len)
            run = self.memory.admit(index, request, tokens)
            if run is None:
                return
            self.running[index] = run
            self.recompute.pop(index, None)
            self.waiting.popleft()

    def decode(self) -> None:
        """Every running request stores one more token; a missing block preempts the newest."""
        for run in list(self.running.values()):
            while run.index in self.running:  # False once it was preempted itself
                if self.memory.grow(run):
                    break
                self._preempt_newest()

    def finish(self) -> None:
        """Requests that stored their last token leave and give their memory back."""
        for run in [r for r in self.running.values() if r.tokens >= r.final_len]:
            self.memory.release(run)
            del self.running[run.index]

    def _preempt_newest(self) -> None:
        """Free the newest running request; it waits at the front and will recompute."""
        index, run = self.running.popitem()
        self.memory.release(run)
        self.recompute[index] = run.tokens
        self.waiting.appendleft(index)
        self.preemptions += 1


class _Shares:
    """Slots summed over the saturated steps: token states, reserved, internal, the rest."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.sums = np.zeros(4)
        self.measured = self.running_total = self.max_running = 0

    def add(self, running: Collection[_Running]) -> None:
        """Account for every slot at one step, with `running` requests holding memory."""
        states = reserved = internal = 0
        for run in running:
            usable = min(run.held, run.final_len)  # slots beyond its final length stay empty
            states += run.tokens
            reserved += usable - run.tokens
            internal += run.held - usable
        self.sums += (states, reserved, internal, self.capacity - states - reserved - internal)
        self.measured += 1
        self.running_total += len(running)
        self.max_running = max(self.max_running, len(running))

    def report(self, scheme: Scheme, steps: int, preemptions: int) -> WasteReport:
        """The averaged shares as a `WasteReport` (all zero if no step was saturated)."""
        shares = self.sums / (self.measured * self.capacity) if self.measured else np.zeros(4)
        return WasteReport(
            scheme=scheme,
            token_states=float(shares[0]),
            reserved=float(shares[1]),
            internal_fragmentation=float(shares[2]),
            external_fragmentation=float(shares[3]),
            mean_running=self.running_total / self.measured if self.measured else 0.0,
            max_running=self.max_running,
            steps=steps,
            preemptions=preemptions,
        )


def simulate_memory_waste(
    requests: Sequence[Request],
    scheme: Scheme,
    *,
    budget_tokens: int,
    max_len: int = 2048,
    block_size: int = 16,
) -> WasteReport:
    """Serve `requests` (all queued at step 0, first come first served) under one scheme.

    Each step admits waiting requests in order while the head one fits, then every running
    request stores one more token; a request leaves after `output_len` steps. Paged requests
    run on a real `KVCacheManager`; when a block is missing, the newest request is preempted
    and queued again at the front (it will recompute its tokens).
    """
    if scheme not in SCHEMES:
        raise InvalidArgument(f"unknown scheme {scheme!r}; choose one of {SCHEMES}.")
    require_positive_int("budget_tokens", budget_tokens)
    memory = _memory_for(scheme, requests, budget_tokens, max_len, block_size)
    server = _Server(requests, memory)
    shares = _Shares(memory.capacity)
    steps = 0
    while server.waiting or server.running:
        steps += 1
        server.admit()
        server.decode()
        if server.waiting:  # the server is saturated: account for every slot
            shares.add(server.running.values())
        server.finish()
    return shares.report(scheme, steps, server.preemptions)


def memory_waste_study(
    requests: Sequence[Request],
    *,
    budget_tokens: int,
    max_len: int = 2048,
    block_size: int = 16,
) -> list[WasteReport]:
    """Run every scheme on the same requests and budget."""
    return [
        simulate_memory_waste(
            requests, s, budget_tokens=budget_tokens, max_len=max_len, block_size=block_size
        )
        for s in SCHEMES
    ]
