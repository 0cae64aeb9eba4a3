"""The memory-waste study: where KV memory goes under contiguous reservation and under paging.

The memory-waste study of the PagedAttention paper (Kwon et al., SOSP 2023, Fig. 2): the
same requests run through contiguous reservation (to the maximum length, to a power of two,
to the exact length an oracle knows) and through paged blocks, under one memory budget.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.manager import KVCacheManager
from paged_kv.errors import InvalidArgument, require_positive_int

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
    if scheme == "pow2":
        return min(max_len, next_pow2(request.final_len))
    return request.final_len  # oracle


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
    paged = scheme == "paged"
    capacity = budget_tokens // block_size * block_size if paged else budget_tokens
    for r in requests:
        if r.final_len > max_len or r.prompt_len < 1 or r.output_len < 1:
            raise InvalidArgument(f"{r} does not fit max_len={max_len} or has empty parts.")
        need = r.final_len + block_size if paged else reservation(scheme, r, max_len)
        if need > capacity:
            raise InvalidArgument(
                f"{r} needs {need} slots under {scheme!r} but the budget is {capacity}; "
                "raise budget_tokens."
            )
    manager = (
        KVCacheManager(budget_tokens // block_size, block_size, prefix_caching=False)
        if paged
        else None
    )
    arena = None if paged else _ContiguousArena(budget_tokens)

    waiting: deque[int] = deque(range(len(requests)))
    length: dict[int, int] = {}  # running request -> tokens stored now
    held: dict[int, int] = {}  # running request -> slots it holds
    start_of: dict[int, int] = {}  # contiguous only: where its range starts
    progress: dict[int, int] = {}  # preempted request -> tokens it had (it recomputes them)
    sums = np.zeros(4)
    running_total = max_running = steps = measured = preemptions = 0

    while waiting or length:
        steps += 1
        while waiting:  # admission, first come first served
            i = waiting[0]
            r = requests[i]
            tokens = progress.get(i, r.prompt_len)
            if paged:
                if not manager.can_allocate(tokens + 1):
                    break
                manager.add_sequence(i, [0] * tokens)
                held[i] = blocks_needed(tokens, block_size) * block_size
            else:
                size = reservation(scheme, r, max_len)
                start = arena.allocate(size)
                if start is None:
                    break
                start_of[i], held[i] = start, size
            length[i] = tokens
            progress.pop(i, None)
            waiting.popleft()

        for i in list(length):  # decode: one more token for every running request
            if i not in length:
                continue  # preempted earlier in this step
            if paged:
                while i in length and not manager.can_append(i):
                    victim = next(reversed(length))  # the newest running request
                    progress[victim] = length.pop(victim)
                    del held[victim]
                    manager.free_sequence(victim)
                    waiting.appendleft(victim)
                    preemptions += 1
                if i not in length:
                    continue
                manager.append_tokens(i, [0])
                held[i] = len(manager.block_table(i)) * block_size
            length[i] += 1

        if waiting:  # the server is saturated: account for every slot
            measured += 1
            states = reserved = internal = 0
            for i, n in length.items():
                final = requests[i].final_len
                states += n
                reserved += min(held[i], final) - n
                internal += held[i] - min(held[i], final)
            sums += (states, reserved, internal, capacity - states - reserved - internal)
            running_total += len(length)
            max_running = max(max_running, len(length))

        for i in [i for i, n in length.items() if n >= requests[i].final_len]:
            if paged:
                manager.free_sequence(i)
            else:
                arena.free(start_of.pop(i))
            del length[i], held[i]

    shares = sums / (measured * capacity) if measured else np.zeros(4)
    return WasteReport(
        scheme=scheme,
        token_states=float(shares[0]),
        reserved=float(shares[1]),
        internal_fragmentation=float(shares[2]),
        external_fragmentation=float(shares[3]),
        mean_running=running_total / measured if measured else 0.0,
        max_running=max_running,
        steps=steps,
        preemptions=preemptions,
    )


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
