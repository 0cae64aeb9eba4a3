"""The serving engine: requests in, tokens out, many at once over one paged KV cache.

Each step the scheduler plans which tokens to compute, the manager's block tables say where
their K/V live, the model computes them in one batch, and one token is sampled per request.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import torch

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.eviction import PolicySpec
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import (
    EngineBusy,
    InvalidArgument,
    InvalidModelOutput,
    PagedKVError,
    RequestForgotten,
)
from paged_kv.serving.model import DecodeAttention, ForwardBatch, SeqChunk, TinyLM
from paged_kv.serving.one_thread import a_step, not_inside_a_step, one_thread_at_a_time
from paged_kv.serving.scheduler import (
    MAX_SEED,
    Preemption,
    Request,
    RequestStatus,
    SamplingParams,
    SchedulePolicy,
    Scheduler,
    StepPlan,
)
from paged_kv.serving.tokenizer import ByteTokenizer
from paged_kv.validation import as_int, require_int, require_token_ids

if TYPE_CHECKING:
    from paged_kv.cache.hashing import Salt
    from paged_kv.cache.usage import UsageStats
    from paged_kv.tiers.store import TieredStore


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class Completion:
    """A finished request: its prompt, the tokens generated and their text (None when the
    engine has no tokenizer); how many prompt tokens its first admission found cached
    (`num_cached_prompt_tokens`), and how many tokens it computed again after preemptions."""

    request_id: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str | None
    num_cached_prompt_tokens: int
    num_preemptions: int
    num_recomputed_tokens: int


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step, for plots: engine time when it began, the queues and blocks while it ran,
    the tokens it computed and the tokens it generated (one per scheduled request). Slotted:
    an engine keeps the last `keep_steps` of them."""

    step: int
    time_s: float
    running: int
    waiting: int
    prefill_tokens: int
    decode_tokens: int
    generated_tokens: int
    blocks_in_use: int
    blocks_cached: int
    preemptions: int


@dataclass
class EngineStats:
    """What a run cost and saved. Prefill tokens are computed or saved by prefix-cache hits;
    recomputed ones (after a preemption) are counted among the computed."""

    requests: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    prefill_tokens_computed: int = 0
    prefill_tokens_saved: int = 0
    recomputed_tokens: int = 0
    generated_tokens: int = 0
    elapsed_s: float = 0.0
    peak_running: int = 0
    peak_blocks_in_use: int = 0
    evictions: int = 0
    num_preemptions: int = 0
    preemptions: list[Preemption] = field(default_factory=list)  # the last `keep_steps`

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of engine steps."""
        return self.generated_tokens / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def hit_rate(self) -> float:
        """Share of prefill tokens that came from the prefix cache instead of being computed."""
        total = self.prefill_tokens_computed + self.prefill_tokens_saved
        return self.prefill_tokens_saved / total if total else 0.0

    def summary(self) -> dict[str, float | int]:
        """The headline figures, one row each."""
        return {
            "requests": self.requests,
            "steps": self.steps,
            "generated tokens": self.generated_tokens,
            "prefill tokens computed": self.prefill_tokens_computed,
            "prefill tokens saved (prefix hits)": self.prefill_tokens_saved,
            "prefix hit rate": round(self.hit_rate, 3),
            "preemptions": self.num_preemptions,
            "tokens recomputed after preemption": self.recomputed_tokens,
            "evictions": self.evictions,
            "peak running requests": self.peak_running,
            "peak blocks in use": self.peak_blocks_in_use,
            "tokens/s": round(self.tokens_per_s, 1),
        }


class Engine:
    """A paged KV cache serving `model`: `generate` for whole batches, `add_request` and
    `step` to drive it yourself. A model with a 256-token vocabulary gets the byte tokenizer
    unless told otherwise; pass a Hugging Face tokenizer for a Hugging Face model.

    Each part can be your own (the course's capstone runs on the learner's parts):
    `scheduler=` a `Scheduler` subclass; `eviction=` an `EvictionPolicy` class or instance;
    `attention=` a decode function with `paged_decode`'s signature, `fn(q, k_cache, v_cache,
    block_tables, seq_lens) -> out`, used for every decode (prefills keep `paged_prefill`);
    `manager_factory=` what builds the manager, called as `manager_factory(num_blocks,
    block_size, eviction=..., prefix_caching=...)`, e.g. `functools.partial(KVCacheManager,
    prefix_index="radix")` for SGLang's radix tree, or the course's
    `functools.partial(learner_manager, pool=YourPool, block_hasher=..., prefix_lookup=...,
    allocate_table=...)` (`paged_kv.course.learner_manager`) for your own parts.
    `schedule="longest_prefix"` admits waiting requests longest cached prefix first
    (`Scheduler(policy=...)`).

    Failures: a request that could never be served is refused by `add_request`/`generate`
    before anything is queued. A step that raises (the model, attention, sampling, a tier)
    changes nothing but the cache's contents: its requests go back to waiting with all their
    tokens, to be retried by the next step, and no block it was to write stays in the prefix
    cache. `abort` drops a request for good; a failed `generate` aborts its own requests.
    A fault in your parts (any exception, `KeyboardInterrupt` included) is handled the same
    wherever it lands; the one exception: when releasing a finished request fails, the step's
    tokens stand and the next step releases it first.

    Memory stays flat however long it runs: `requests` holds the waiting and running requests
    and the last `keep_finished` (default 1000) finished or aborted ones, oldest forgotten
    first; `completion` of a forgotten one raises `RequestForgotten` (`generate` returns all of
    its own, however many). `timeline` keeps the last `keep_steps` (default 1000) steps, and
    the tier connector (with `store=`) the block sources of the last `keep_finished +
    max_running` requests admitted. `stats()` counts everything since the engine was made,
    and lists the preemptions of the last `keep_steps` steps (`num_preemptions` counts all).

    A model output the engine cannot use (logits not shaped [scheduled requests, vocab_size]
    or not floating, a sampled id outside the vocabulary) is `InvalidModelOutput`, a failed
    step like any other.

    One thread at a time: `add_request`, `generate`, `run`, `step` and `abort` called from a
    second thread while another is inside one of them raise `EngineBusy`, changing nothing;
    so do `step`, `run`, `generate` and `abort` of a running request called back from inside
    a step (by the model, attention or a policy); `add_request` works there.
    Use one engine per thread, or send requests to the thread that runs the engine.
    """

    def __init__(
        self,
        model: TinyLM,
        *,
        num_blocks: int,
        block_size: int = 16,
        eviction: PolicySpec = "lru",
        prefix_caching: bool = True,
        max_batch_tokens: int = 512,
        max_running: int = 32,
        scheduler: type[Scheduler] = Scheduler,
        tokenizer: Tokenizer | None = None,
        store: TieredStore | None = None,
        attention: DecodeAttention | None = None,
        manager_factory: Callable[..., KVCacheManager] = KVCacheManager,
        schedule: SchedulePolicy = "fcfs",
        keep_finished: int = 1000,
        keep_steps: int = 1000,
    ) -> None:
        if not isinstance(model, TinyLM):
            hint = (
                " A Hugging Face model is served through `paged_kv.serving.from_hf(hf_model)`."
                if type(model).__module__.startswith("transformers")
                else ""
            )
            raise InvalidArgument(
                f"Engine serves a paged_kv TinyLM (load_tiny_lm(), TinyLM(config) or "
                f"from_hf(hf_model)), got {type(model).__name__}.{hint}"
            )
        self.keep_finished = require_int("keep_finished", keep_finished)
        self.keep_steps = require_int("keep_steps", keep_steps)
        self.model = model
        self.manager = manager_factory(
            num_blocks, block_size, eviction=eviction, prefix_caching=prefix_caching
        )
        self.attention = attention
        self.kv = model.kv_storage(num_blocks, block_size)
        self.store, self.connector = store, None
        if store is not None:  # chapter 07: load prefix blocks from lower tiers, save full ones
            from paged_kv.tiers.connector import KVConnector, fingerprint_model

            fingerprint = fingerprint_model(model, block_size)
            self.connector = KVConnector(
                store,
                self.manager,
                self.kv,
                fingerprint,
                keep_sources=max(1, self.keep_finished + max_running),
            )
        options: dict[str, Any] = {}  # only what differs, so that your Scheduler needs no more
        if self.connector is not None:
            options["loader"] = self.connector
        if schedule != "fcfs":
            options["policy"] = schedule
        self.scheduler = scheduler(
            self.manager, max_batch_tokens=max_batch_tokens, max_running=max_running, **options
        )
        byte_level = model.config.vocab_size == ByteTokenizer.vocab_size
        self.tokenizer = tokenizer or (ByteTokenizer() if byte_level else None)
        self.requests: dict[int, Request] = {}  # live ones and the last keep_finished done
        self.timeline: deque[StepRecord] = deque(maxlen=self.keep_steps)
        self._preemptions: deque[Preemption] = deque(maxlen=self.keep_steps)
        self._done: OrderedDict[int, None] = OrderedDict()  # done or aborted, oldest first
        self._stats = EngineStats()
        self._next_id = 0
        self._one_thread = threading.RLock()  # held by the thread inside a call
        self._inside_step = False  # set by `a_step`: run, step and generate refuse to nest

    # -- requests in ---------------------------------------------------------------------

    @one_thread_at_a_time
    def add_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        *,
        salt: Salt = None,
    ) -> int:
        """Queue a request; return its id. A request that could never be served is refused
        here with `InvalidArgument`, before it touches any queue: a prompt that is not a str
        (valid text: no lone surrogates) or a sequence of token ids in the vocabulary,
        `params` not `SamplingParams`, a salt that is not None, bytes or UTF-8 text. `salt`
        (e.g. the tenant) keeps its prefix blocks from being shared with requests of another
        salt."""
        if params is None:
            params = SamplingParams()
        elif not isinstance(params, SamplingParams):
            raise InvalidArgument(
                f"params must be SamplingParams, got {type(params).__name__}; e.g. "
                "SamplingParams(max_new_tokens=32, temperature=0.7, seed=0)."
            )
        request = self._new_request(prompt, params, salt=salt)
        self._enqueue(request)
        return request.request_id

    @one_thread_at_a_time
    @not_inside_a_step
    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        max_new_tokens: int = 16,
        *,
        temperature: float = 0.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] = (),
        ignore_eos: bool = False,
        progress: bool = False,
        salt: Salt = None,
    ) -> list[Completion]:
        """Serve `prompts` together and return their completions in order.

        Greedy by default; with a temperature, request i samples with seed `seed + i`, so
        results do not depend on how the requests were batched. A request ends at one of
        `stop_token_ids` or, unless `ignore_eos`, of the model's EOS ids. Every prompt is checked
        before any is queued (a str is one prompt). All or nothing: if a step raises, these
        requests are aborted before the error reaches the caller.
        """
        if isinstance(prompts, str):
            prompts = [prompts]
        elif not isinstance(prompts, Sequence):
            raise InvalidArgument(
                f"prompts must be a list of prompts (str or token ids), got "
                f"{type(prompts).__name__}."
            )
        if seed is not None and as_int(seed) is not None and seed + len(prompts) - 1 > MAX_SEED:
            raise InvalidArgument(
                f"seed {seed} + {len(prompts) - 1} (one seed per prompt) exceeds 2**64-1; "
                "pick a smaller seed."
            )
        stops = tuple(require_token_ids(stop_token_ids, "stop_token_ids"))
        requests = [
            self._new_request(
                prompt,
                SamplingParams(
                    max_new_tokens,
                    temperature,
                    None if seed is None else seed + i,
                    stops,
                    ignore_eos,
                ),
                request_id=self._next_id + i,
                salt=salt,
            )
            for i, prompt in enumerate(prompts)
        ]
        for request in requests:
            self._enqueue(request)
        try:
            self.run(progress=progress)
        except BaseException:  # all or nothing: none of these stays queued
            for request in requests:
                if request.status in (RequestStatus.WAITING, RequestStatus.RUNNING):
                    self.scheduler.abort(request)
                    self._retire(request)
            raise
        return [self._completion(r) for r in requests]  # forgotten or not

    # -- stepping ------------------------------------------------------------------------

    def has_unfinished(self) -> bool:
        return bool(self.scheduler.waiting or self.scheduler.running)

    @one_thread_at_a_time
    @not_inside_a_step
    def run(self, progress: bool = False) -> None:
        """Step until every request has finished; `progress` shows a bar of generated tokens."""
        bar = None
        if progress:
            from tqdm.auto import tqdm

            remaining = self.scheduler.waiting, self.scheduler.running
            total = sum(r.params.max_new_tokens - r.num_output_tokens for q in remaining for r in q)
            bar = tqdm(total=total, unit="tok", desc="generating")
        while self.has_unfinished():
            plan = self.step()
            if bar is not None:
                bar.update(len(plan.chunks))
                bar.set_postfix(running=len(self.scheduler.running), refresh=False)
        if bar is not None:
            bar.close()

    @one_thread_at_a_time
    @a_step
    def step(self) -> StepPlan:
        """Schedule, compute one batch, sample one token per scheduled request; return the plan.

        All or nothing: if anything in the step raises (the model, attention, sampling, a
        tier), the error reaches the caller and the step's requests go back to waiting with
        every token they had, to be retried by the next step (`abort` drops one for good);
        no block the step was to write stays visible to prefix lookups (`Scheduler.abandon`).
        """
        began = time.perf_counter()
        plan = self.scheduler.schedule()
        if not plan.chunks and not self.has_unfinished():
            return plan  # it released requests that had finished (their release had failed)
        try:
            if not plan.chunks:
                raise PagedKVError(
                    f"step {plan.step} scheduled nothing with {len(self.scheduler.waiting)} "
                    "request(s) waiting: the scheduler cannot make progress (a custom "
                    "scheduler's bug?)."
                )
            self.kv.copy_blocks(self.manager.pop_block_copies())
            if self.connector is not None:
                self.connector.load_admitted(plan.chunks)  # loaded prefix blocks, before reading
            batch = self._forward_batch(plan)
            if self.attention is None:
                logits = self.model(batch, self.kv)
            else:
                logits = self.model(batch, self.kv, decode=self.attention)
            if self.connector is not None:
                self.connector.save_computed(plan.chunks)  # blocks that became full this step
            self._check_logits(plan, logits)
            tokens = self._sample_batch(plan, logits)
            self._check_tokens(tokens)
            usage = self.manager.stats()  # asks the policy: before anything is recorded
        except BaseException:
            self.scheduler.abandon(plan)
            self._count_preemptions(plan)  # those stand
            raise
        for chunk, token in zip(plan.chunks, tokens, strict=True):  # checked: same length
            chunk.request.record_sample(token)
        self._record(plan, usage)  # after the tokens, so that an interrupt here loses none
        done = [chunk.request for chunk in plan.chunks if chunk.request.is_done]
        for request in done:
            self._done[request.request_id] = None
        for request in done:  # a release that fails is made again by the next step
            self.scheduler.finish(request)
        self._forget_done()
        self._stats.elapsed_s += time.perf_counter() - began
        return plan

    @one_thread_at_a_time
    def abort(self, request_id: int) -> None:
        """Drop a waiting or running request for good (e.g. one whose steps keep failing):
        its blocks are released and it is never scheduled again."""
        request = self._request(request_id)
        if request.status in (RequestStatus.FINISHED, RequestStatus.ABORTED):
            raise InvalidArgument(f"request {request_id} is {request.status.value} already.")
        if self._inside_step and request.status is RequestStatus.RUNNING:
            raise EngineBusy(
                f"abort({request_id}) was called from inside a step that is computing it; "
                "abort it after the step returns."
            )
        self.scheduler.abort(request)
        self._retire(request)

    def completion(self, request_id: int) -> Completion:
        """The result of a finished request; `RequestForgotten` once it is older than the
        last `keep_finished` finished ones."""
        return self._completion(self._request(request_id))

    def _completion(self, request: Request) -> Completion:
        request_id = request.request_id
        if request.status is RequestStatus.ABORTED:
            raise InvalidArgument(f"request {request_id} was aborted; it has no completion.")
        if request.status is not RequestStatus.FINISHED:
            raise InvalidArgument(f"request {request_id} has not finished; step the engine on.")
        return Completion(
            request_id,
            request.prompt,
            request.output,
            None if self.tokenizer is None else self.tokenizer.decode(request.output),
            request.num_prompt_hits,
            request.num_preemptions,
            request.num_recomputed_tokens,
        )

    def metrics_text(self) -> str:
        """The Prometheus exposition of the prefix-cache and tier metrics (with store=)."""
        metrics = None if self.store is None else self.store.metrics
        if metrics is None:
            raise InvalidArgument(
                "this engine keeps no metrics: pass store=TieredStore([...]) (metrics on)."
            )
        from paged_kv.tiers.metrics import TierMetrics  # its store made it, so it imports

        if not isinstance(metrics, TierMetrics):
            raise InvalidArgument(
                "this engine's store reports to your own Recorder, which has no Prometheus "
                "exposition; pass metrics=True (a TierMetrics) to the store."
            )
        return metrics.exposition()

    def stats(self) -> EngineStats:
        """Counters since the engine was made, with the cache's evictions so far."""
        return replace(
            self._stats,
            evictions=self.manager.stats().evictions,
            preemptions=list(self._preemptions),
        )

    # -- internals -----------------------------------------------------------------------

    def _request(self, request_id: int) -> Request:
        try:
            request = self.requests.get(request_id)
        except TypeError:  # unhashable
            request = None
        if request is not None:
            return request
        if isinstance(request_id, int) and 0 <= request_id < self._next_id:
            raise RequestForgotten(
                f"request {request_id} is done and forgotten: this engine keeps the last "
                f"{self.keep_finished} finished or aborted requests (keep_finished=). Read a "
                "completion when its request finishes, or keep more."
            )
        raise InvalidArgument(f"no request {request_id!r}; ids come from add_request.")

    def _retire(self, request: Request) -> None:
        """`request` was aborted: keep it among the last `keep_finished` done ones."""
        self._done[request.request_id] = None
        self._forget_done()

    def _forget_done(self) -> None:
        """Forget the oldest finished or aborted requests beyond the last `keep_finished` (one
        whose release failed is forgotten after the next step finishes it)."""
        while len(self._done) > self.keep_finished:
            oldest = self.requests[next(iter(self._done))]
            if oldest.status not in (RequestStatus.FINISHED, RequestStatus.ABORTED):
                break  # its release failed; the next step finishes it
            self._done.popitem(last=False)
            del self.requests[oldest.request_id]

    def _new_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams,
        request_id: int | None = None,
        salt: Salt = None,
    ) -> Request:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidArgument(
                    "this engine has no tokenizer: pass token ids, or tokenizer=."
                )
            if not prompt.isascii():
                try:
                    prompt.encode("utf-8")
                except UnicodeEncodeError as error:
                    raise InvalidArgument(
                        f"the prompt is not valid text: {error.reason} at position "
                        f"{error.start}; remove or replace the lone surrogate."
                    ) from None
            tokens: Iterable[int] = self.tokenizer.encode(prompt)
        elif isinstance(prompt, Iterable):  # a list, tuple, array or tensor of token ids
            tokens = prompt
        else:
            raise InvalidArgument(
                f"a prompt is a str or a sequence of token ids, got {type(prompt).__name__}; "
                "generate takes a list of prompts, e.g. [[1, 2, 3]] or ['hello']."
            )
        seq = TokenSequence(tokens, salt=salt, vocab_size=self.model.config.vocab_size)
        if not seq.token_ids:
            raise InvalidArgument("the prompt is empty; give at least one token.")
        capacity = self.manager.pool.num_blocks
        need = blocks_needed(len(seq) + params.max_new_tokens, self.manager.block_size)
        if need > capacity:
            raise InvalidArgument(
                f"{len(seq)} prompt tokens + {params.max_new_tokens} new ones need {need} blocks "
                f"but the whole cache has {capacity}; shorten the request or add blocks."
            )
        request_id = self._next_id if request_id is None else request_id
        return Request(request_id, seq, params, self.model.eos_token_ids)

    def _enqueue(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self._next_id = max(self._next_id, request.request_id + 1)
        self.scheduler.add(request)
        self._stats.requests += 1
        self._stats.prompt_tokens += request.num_prompt_tokens

    def _forward_batch(self, plan: StepPlan) -> ForwardBatch:
        chunks = []
        for chunk in plan.chunks:
            seq = chunk.request.request_id
            chunks.append(
                SeqChunk(
                    chunk.request.sequence.token_ids[chunk.start : chunk.start + chunk.num_tokens],
                    chunk.start,
                    self.manager.slot_mapping(seq, chunk.start, chunk.start + chunk.num_tokens),
                    self.manager.block_table(seq),
                )
            )
        return ForwardBatch.build(chunks, self.model.device)

    def _check_logits(self, plan: StepPlan, logits: object) -> None:
        """`InvalidModelOutput` unless `logits` is a floating tensor of one row of vocabulary
        scores per scheduled request."""
        expected = (len(plan.chunks), self.model.config.vocab_size)
        if not isinstance(logits, torch.Tensor):
            raise InvalidModelOutput(
                f"the model returned {type(logits).__name__}; expected a tensor of logits of "
                f"shape {expected} (one row per scheduled request, one column per token id)."
            )
        if tuple(logits.shape) != expected or not logits.is_floating_point():
            raise InvalidModelOutput(
                f"the model returned logits of shape {tuple(logits.shape)} and dtype "
                f"{logits.dtype}; expected shape {expected} (one row per scheduled request, "
                "one column per token id) and a floating dtype."
            )

    def _check_tokens(self, tokens: list[int]) -> None:
        """`InvalidModelOutput` unless every sampled token is an int in the vocabulary."""
        vocab = self.model.config.vocab_size
        for token in tokens:
            if type(token) is not int or not 0 <= token < vocab:
                raise InvalidModelOutput(
                    f"sampling returned token {token!r}; token ids are ints in 0..{vocab - 1}."
                )

    def _sample_batch(self, plan: StepPlan, logits: torch.Tensor) -> list[int]:
        """One token per chunk: the batch's argmax for greedy requests, a draw for the others.
        If a draw fails, every generator is put back as it was, so a retry draws the same."""
        tokens = logits.argmax(dim=-1).tolist()  # one call for the whole batch
        drawn = [(i, c.request) for i, c in enumerate(plan.chunks) if c.request.params.temperature]
        states = [request.generator.get_state() for _, request in drawn]
        try:
            for i, request in drawn:
                tokens[i] = self._sample(logits[i], request)
        except BaseException:
            for (_, request), state in zip(drawn, states, strict=True):
                request.generator.set_state(state)
            raise
        return tokens

    @staticmethod
    def _sample(logits: torch.Tensor, request: Request) -> int:
        """Draw from softmax(logits / T) with the request's own generator (T > 0; greedy
        requests take the batch's argmax). The largest logit is subtracted first, so no
        accepted temperature overflows: the best token's weight is exactly 1 before
        normalising."""
        row = logits.float().cpu()
        probs = torch.softmax((row - row.max()) / request.params.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=request.generator))

    def _count_preemptions(self, plan: StepPlan) -> None:
        self._stats.num_preemptions += len(plan.preempted)
        self._preemptions.extend(plan.preempted)

    def _record(self, plan: StepPlan, usage: UsageStats) -> None:
        """Count what `plan` computed and note the queues and blocks while it ran."""
        s = self._stats
        s.steps += 1
        self._count_preemptions(plan)
        prefill = decode = 0
        for chunk in plan.chunks:
            if chunk.admitted:
                prefill += chunk.num_tokens
                s.prefill_tokens_saved += chunk.start
                s.recomputed_tokens += chunk.request.count_admission(chunk.start, chunk.num_tokens)
            else:
                decode += 1
        s.prefill_tokens_computed += prefill
        s.generated_tokens += len(plan.chunks)
        s.peak_running = max(s.peak_running, len(self.scheduler.running))
        s.peak_blocks_in_use = max(s.peak_blocks_in_use, usage.num_in_use_blocks)
        self.timeline.append(
            StepRecord(
                plan.step,
                s.elapsed_s,
                len(self.scheduler.running),
                len(self.scheduler.waiting),
                prefill,
                decode,
                len(plan.chunks),
                usage.num_in_use_blocks,
                usage.num_cached_blocks,
                len(plan.preempted),
            )
        )
