"""Our KVCacheManager against the block managers of real servers, on one serving-like trace.

Usage:
    python bench/bench_peers.py [--nano-vllm PATH] [--runs N] [--quick] [--save]

The trace (seeded, built here): 2,000 requests; each is one of 20 system prompts of 512 tokens,
chosen by a Zipf law (rank r with weight 1/r), followed by a question of 64 tokens of its own;
then 64 tokens are decoded one at a time. At most 32 requests are live: a request is added
when a slot is free; each engine step appends one token to every live request, round robin in
the order they were added, and a request that has its 64 tokens is freed. Block size 16, a
pool of 4,096 blocks (enough: nothing is preempted). The trace is one list of operations
(add / single-token append / free) replayed, unchanged, through:

  ours       paged_kv's `KVCacheManager`, LRU eviction, prefix caching on (SHA-256 block hashes);
  nano-vllm  `BlockManager` of a nano-vllm checkout given with `--nano-vllm PATH`, driven as its
             scheduler drives it (xxhash64 block hashes): a new sequence is `can_allocate` +
             `allocate`, then `hash_blocks` registers its full blocks (`postprocess`); a decoded
             token is appended to the `Sequence`, then `can_append` + `may_append` and
             `hash_blocks` once its key/value are computed; a finished one is `deallocate`d;
  vLLM       vLLM v1's `BlockPool` with its SHA-256 block hashing, driven as its
             `KVCacheManager` does (longest run of cached blocks, `touch`, `get_new_blocks`,
             `cache_full_blocks`, `free_blocks` tail first), when `import vllm` works; otherwise
             one line says it is skipped.

Each replay starts from a fresh manager; its CPU time (`time.process_time_ns`) covers every
add, append and free together, with the replay loop; the loop alone is timed too, as the floor.
The managers take turns run by run (the first of each run rotates), at least 5 runs each; the
table gives the median ops/s with min–max and the interquartile range, the ratio of ours to
each peer (median of the per-run ratios, and its min–max), and the share of prompt tokens
each manager found in its prefix cache: they must agree (~0.88 here: 512 of 576 tokens hit
once a system prompt is cached). JSON goes to bench/results/peers.json only with `--save`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import random
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from measure import MIN_RUNS, pin_threads, spread
from results_file import add_save_flag, save_or_say

from paged_kv import KVCacheManager

ADD, APPEND, FREE = 0, 1, 2
Op = tuple[int, int, list[int] | None]  # (kind, request id, tokens: the prompt or [one token])

BLOCK_SIZE = 16
NUM_BLOCKS = 4096
VOCAB = 32_000


def build_trace(
    num_requests: int = 2000,
    num_prompts: int = 20,
    prompt_len: int = 512,
    question_len: int = 64,
    decode_len: int = 64,
    max_live: int = 32,
    seed: int = 0,
) -> list[Op]:
    """The operations of a served run, in the order an engine would issue them (see above)."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(VOCAB) for _ in range(prompt_len)] for _ in range(num_prompts)]
    weights = [1 / rank for rank in range(1, num_prompts + 1)]  # Zipf, exponent 1
    ops: list[Op] = []
    live: list[list[int]] = []  # [request id, tokens still to decode]
    next_id = 0
    while next_id < num_requests or live:
        while len(live) < max_live and next_id < num_requests:  # admit into free slots
            [system] = rng.choices(prompts, weights)
            question = [rng.randrange(VOCAB) for _ in range(question_len)]
            ops.append((ADD, next_id, system + question))
            live.append([next_id, decode_len])
            next_id += 1
        still = []
        for entry in live:  # one engine step: every live request decodes one token
            ops.append((APPEND, entry[0], [rng.randrange(VOCAB)]))
            entry[1] -= 1
            if entry[1]:
                still.append(entry)
            else:
                ops.append((FREE, entry[0], None))
        live = still
    return ops


# -- the managers ----------------------------------------------------------------------------
# Each manager opens a *session*: a fresh manager and three functions, add(rid, prompt),
# append(rid, [token]) and free(rid), doing what its server does for that operation, plus a
# count of the prompt tokens found in the prefix cache. Every operation thus costs one
# Python call on top of the manager's own work, the same for all; the "replay loop alone"
# row (no-op functions) measures that harness.


class Session(NamedTuple):
    add: Callable[[int, list[int]], object]
    append: Callable[[int, list[int]], object]
    free: Callable[[int], object]
    hit_tokens: Callable[[], int]


def loop_only_session() -> Session:
    def nothing(*_args: object) -> None:
        return None

    return Session(nothing, nothing, nothing, lambda: 0)


def ours_session() -> Session:
    manager = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, eviction="lru", prefix_caching=True)
    add, append, free = manager.add_sequence, manager.append_tokens, manager.free_sequence

    def add_op(rid: int, prompt: list[int]) -> None:
        add(rid, prompt)

    def append_op(rid: int, tokens: list[int]) -> None:
        append(rid, tokens)

    def free_op(rid: int) -> None:
        free(rid)

    return Session(add_op, append_op, free_op, lambda: manager.hit_rates().hit_tokens)


def load_nano_vllm(path: str) -> tuple[type, type]:
    """nano-vllm's `BlockManager` and `Sequence`, imported from the checkout at `path`.

    `import nanovllm` would run nanovllm/__init__.py, which imports its LLM engine and with it
    torch, transformers, flash-attn and triton. The block manager needs none of them:
    engine/block_manager.py imports xxhash, numpy and nanovllm.engine.sequence, which imports
    nanovllm.sampling_params (a dataclass). So `path` goes on sys.path and the two packages,
    `nanovllm` and `nanovllm.engine`, are registered as empty modules whose `__path__` is the
    checkout's folder: Python's import system then finds and runs the three real files
    (sampling_params.py, engine/sequence.py, engine/block_manager.py) unchanged, and never
    runs the packages' __init__.py. Those two __init__ files are all that is stubbed; nothing
    of nano-vllm is copied here.
    """
    root = Path(path).expanduser().resolve()
    if root.name == "nanovllm" and (root / "engine" / "block_manager.py").is_file():
        root = root.parent  # the package folder itself was given
    package = root / "nanovllm"
    if not (package / "engine" / "block_manager.py").is_file():
        sys.exit(f"--nano-vllm {path}: no nanovllm/engine/block_manager.py under it")
    sys.path.insert(0, str(root))
    for name, folder in (("nanovllm", package), ("nanovllm.engine", package / "engine")):
        if name not in sys.modules:
            stub = types.ModuleType(name, f"{name} without its __init__ (see load_nano_vllm)")
            stub.__path__ = [str(folder)]
            sys.modules[name] = stub
    block_manager = importlib.import_module("nanovllm.engine.block_manager")
    sequence = importlib.import_module("nanovllm.engine.sequence")
    return block_manager.BlockManager, sequence.Sequence


def nano_vllm_sessions(block_manager_cls: type, sequence_cls: type) -> Callable[[], Session]:
    """Sessions on nano-vllm's BlockManager, each operation as its Scheduler does it."""
    sequence_cls.block_size = BLOCK_SIZE  # nano-vllm's engine sets it from its config

    def session() -> Session:
        manager = block_manager_cls(NUM_BLOCKS, BLOCK_SIZE)
        seqs = {}
        hits = [0]

        def add_op(rid: int, prompt: list[int]) -> None:
            seq = sequence_cls(prompt)  # LLMEngine.add_request
            num_cached_blocks = manager.can_allocate(seq)  # schedule(): prefill
            if num_cached_blocks == -1:
                raise RuntimeError("nano-vllm ran out of blocks: the trace must fit")
            manager.allocate(seq, num_cached_blocks)
            hits[0] += seq.num_cached_tokens
            seq.num_scheduled_tokens = seq.num_tokens - seq.num_cached_tokens
            manager.hash_blocks(seq)  # postprocess(): register the prompt's full blocks
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            seqs[rid] = seq

        def append_op(rid: int, tokens: list[int]) -> None:
            seq = seqs[rid]
            seq.append_token(tokens[0])  # postprocess(): the sampled token joins the sequence
            if not manager.can_append(seq):  # schedule(): decode
                raise RuntimeError("nano-vllm ran out of blocks: the trace must fit")
            seq.num_scheduled_tokens = 1
            seq.is_prefill = False
            manager.may_append(seq)  # a new block if this token starts one
            manager.hash_blocks(seq)  # postprocess(): register a block this token filled
            seq.num_cached_tokens += 1
            seq.num_scheduled_tokens = 0

        def free_op(rid: int) -> None:
            manager.deallocate(seqs.pop(rid))  # postprocess(): the request finished

        return Session(add_op, append_op, free_op, lambda: hits[0])

    return session


class _VllmRequest:
    """What vLLM's `BlockPool.cache_full_blocks` reads of a `Request` (KV events off)."""

    __slots__ = ("all_token_ids", "block_hashes", "lora_request", "request_id")

    def __init__(self, request_id: int, token_ids: list[int]) -> None:
        self.request_id = str(request_id)
        self.all_token_ids = list(token_ids)
        self.block_hashes: list = []
        self.lora_request = None


def vllm_sessions() -> tuple[Callable[[], Session] | None, str]:
    """Sessions on vLLM v1's BlockPool, or None and why it is skipped.

    Written against vLLM's API since request-side block hashing (v0.10.2 on, through the
    `hash_block_size` argument of 2026): an older BlockPool is reported and skipped, not
    guessed at. No vLLM was installed where this was written: this path has run only against
    a stand-in with the signatures and semantics of vLLM's BlockPool (main of 2026 and v0.11),
    not against vLLM itself.
    """
    try:
        import vllm
    except ImportError:
        return None, "vLLM is not installed: its BlockPool is skipped"
    except Exception as error:  # a broken install (CUDA libraries, torch version)
        return None, f"vLLM failed to import ({type(error).__name__}: {error}): skipped"
    version = getattr(vllm, "__version__", "?")
    try:
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.core.block_pool import BlockPool

        try:
            from vllm.utils.hashing import sha256
        except ImportError:
            from vllm.utils import sha256
    except ImportError as error:
        return None, f"vLLM {version}: no v1 BlockPool ({error}): skipped"
    cache_params = inspect.signature(BlockPool.cache_full_blocks).parameters
    wanted = {"request", "blocks", "num_cached_blocks", "num_full_blocks", "block_size"}
    if not wanted <= set(cache_params) or "block_hashes" in cache_params:
        return None, f"vLLM {version}: BlockPool API older than this driver (v0.10.2+): skipped"
    group = {"kv_cache_group_id": 0} if "kv_cache_group_id" in cache_params else {}
    init_params = inspect.signature(BlockPool.__init__).parameters
    pool_kwargs = {"hash_block_size": BLOCK_SIZE} if "hash_block_size" in init_params else {}
    touch_takes_groups = "tuple" in str(inspect.signature(BlockPool.touch).parameters["blocks"])
    if hasattr(kv_cache_utils, "init_none_hash"):
        kv_cache_utils.init_none_hash(sha256)  # the seed of the first block's parent hash
    hash_block_tokens = kv_cache_utils.hash_block_tokens

    def chain(request: _VllmRequest) -> None:
        """Hash the request's full blocks not hashed yet, as vLLM's request block hasher."""
        hashes, tokens = request.block_hashes, request.all_token_ids
        for i in range(len(hashes), len(tokens) // BLOCK_SIZE):
            parent = hashes[-1] if hashes else None
            parent = getattr(parent, "hash_value", parent)  # NamedTuple hashes before v0.11
            block = tokens[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE]
            hashes.append(hash_block_tokens(sha256, parent, block, None))

    def session() -> Session:
        # vLLM keeps block 0 as its null block: one more block gives it 4,096 usable ones.
        pool = BlockPool(NUM_BLOCKS + 1, True, **pool_kwargs)
        state: dict[int, list] = {}  # request id -> [request, blocks, blocks cached]
        hits = [0]

        def add_op(rid: int, prompt: list[int]) -> None:
            request = _VllmRequest(rid, prompt)
            chain(request)  # at request creation
            found = []  # find_longest_cache_hit; the last prompt token is always computed
            for block_hash in request.block_hashes[: (len(prompt) - 1) // BLOCK_SIZE]:
                cached = pool.get_cached_block(block_hash, [0])
                if cached is None:
                    break
                found.append(cached[0])
            need = -(-len(prompt) // BLOCK_SIZE) - len(found)  # allocate_slots
            revived = sum(1 for b in found if b.ref_cnt == 0)
            if need + revived > pool.get_num_free_blocks():
                raise RuntimeError("vLLM ran out of blocks: the trace must fit")
            pool.touch((found,) if touch_takes_groups else found)
            blocks = found + pool.get_new_blocks(need)
            full = len(prompt) // BLOCK_SIZE
            pool.cache_full_blocks(
                request=request, blocks=blocks, num_cached_blocks=len(found),
                num_full_blocks=full, block_size=BLOCK_SIZE, **group,
            )  # fmt: skip
            state[rid] = [request, blocks, full]
            hits[0] += len(found) * BLOCK_SIZE

        def append_op(rid: int, tokens: list[int]) -> None:
            st = state[rid]
            request, blocks = st[0], st[1]
            request.all_token_ids.append(tokens[0])  # append_output_token_ids
            num_tokens = len(request.all_token_ids)
            if num_tokens % BLOCK_SIZE == 0:
                chain(request)  # ... which hashes a block the token completed
            if num_tokens > len(blocks) * BLOCK_SIZE:  # allocate_slots for one token
                if pool.get_num_free_blocks() < 1:
                    raise RuntimeError("vLLM ran out of blocks: the trace must fit")
                blocks.extend(pool.get_new_blocks(1))
            full = num_tokens // BLOCK_SIZE
            if full > st[2]:
                pool.cache_full_blocks(
                    request=request, blocks=blocks, num_cached_blocks=st[2],
                    num_full_blocks=full, block_size=BLOCK_SIZE, **group,
                )  # fmt: skip
                st[2] = full

        def free_op(rid: int) -> None:
            pool.free_blocks(reversed(state.pop(rid)[1]))  # the tail is evicted first

        return Session(add_op, append_op, free_op, lambda: hits[0])

    return session, f"vLLM {version}"


def replay(open_session: Callable[[], Session], ops: list[Op]) -> tuple[int, int]:
    """CPU ns of replaying `ops` on a fresh session, and the prompt tokens that hit."""
    add, append, free, hit_tokens = open_session()
    gc.collect()
    start = time.process_time_ns()
    for kind, rid, tokens in ops:
        if kind == APPEND:
            append(rid, tokens)
        elif kind == ADD:
            add(rid, tokens)
        else:
            free(rid)
    elapsed = time.process_time_ns() - start
    return elapsed, hit_tokens()


def replay_by_kind(open_session: Callable[[], Session], ops: list[Op]) -> list[int]:
    """Wall ns spent in adds, appends and frees (a clock read around each operation)."""
    s = open_session()
    spent = [0, 0, 0]
    clock = time.perf_counter_ns
    gc.collect()
    for kind, rid, tokens in ops:
        start = clock()
        if kind == APPEND:
            s.append(rid, tokens)
        elif kind == ADD:
            s.add(rid, tokens)
        else:
            s.free(rid)
        spent[kind] += clock() - start
    return spent


def fmt_us(s: dict) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nano-vllm", metavar="PATH", help="a nano-vllm checkout to compare")
    parser.add_argument("--runs", type=int, default=7, help=f"runs per manager (>= {MIN_RUNS})")
    parser.add_argument("--quick", action="store_true", help="200 requests (smoke run)")
    add_save_flag(parser, "peers")
    args = parser.parse_args()
    if args.runs < MIN_RUNS:
        parser.error(f"--runs must be at least {MIN_RUNS}")
    threads = pin_threads(1)  # the managers do not use torch; pinned as in every bench

    num_requests = 200 if args.quick else 2000
    ops = build_trace(num_requests)
    counts = [sum(1 for op in ops if op[0] == k) for k in (ADD, APPEND, FREE)]
    prompt_tokens = sum(len(t) for k, _, t in ops if k == ADD)
    print(
        f"trace: {num_requests:,} requests = one of 20 system prompts of 512 tokens (Zipf, "
        f"s=1) + a 64-token question, then 64 tokens decoded one at a time; at most 32 live; "
        f"block {BLOCK_SIZE}, pool {NUM_BLOCKS:,} blocks"
    )
    print(
        f"operations: {counts[ADD]:,} adds + {counts[APPEND]:,} single-token appends + "
        f"{counts[FREE]:,} frees = {len(ops):,}; {prompt_tokens:,} prompt tokens"
    )

    OURS, FLOOR = "paged_kv KVCacheManager", "replay loop alone"
    sessions: dict[str, Callable[[], Session]] = {OURS: ours_session}
    if args.nano_vllm:
        sessions["nano-vllm BlockManager"] = nano_vllm_sessions(*load_nano_vllm(args.nano_vllm))
    else:
        print("nano-vllm: no --nano-vllm PATH given: skipped")
    vllm, note = vllm_sessions()
    if vllm is None:
        print(note)
    else:
        sessions[f"{note} BlockPool"] = vllm
    sessions[FLOOR] = loop_only_session

    warm = ops[: len(ops) // 20]
    for name in list(sessions):
        try:
            replay(sessions[name], warm)  # warm up; tries a peer's API before any timing
        except Exception as error:
            if name == OURS:
                raise
            print(f"{name}: failed on the trace ({type(error).__name__}: {error}): skipped")
            del sessions[name]

    names = list(sessions)
    cpu_ns: dict[str, list[int]] = {n: [] for n in names}
    hits: dict[str, set[int]] = {n: set() for n in names}
    for r in range(args.runs):  # take turns; who goes first rotates
        for name in names[r % len(names) :] + names[: r % len(names)]:
            elapsed, hit_tokens = replay(sessions[name], ops)
            cpu_ns[name].append(elapsed)
            hits[name].add(hit_tokens)
    for name, seen in hits.items():  # a deterministic replay hits the same tokens every run
        assert len(seen) == 1, f"{name}: hit tokens vary between runs: {seen}"

    ops_per_s = {n: [len(ops) / (t / 1e9) for t in cpu_ns[n]] for n in names}
    width = max(len(n) for n in names)
    print(
        f"\n{args.runs} runs each, CPU time (process_time) of the whole replay, in turn\n"
        f"{'manager':{width}} {'ops/s median':>12} {'(min–max)':>23} {'IQR':>23} {'µs/op':>6}"
        f" {'prompt hit':>10}"
    )
    rows = []
    for name in names:
        s = spread(ops_per_s[name])
        hit = None if name == FLOOR else next(iter(hits[name])) / prompt_tokens
        rows.append({"manager": name, "ops_per_s": s, "prompt_hit_fraction": hit,
                     "cpu_s": [t / 1e9 for t in cpu_ns[name]]})  # fmt: skip
        print(
            f"{name:{width}} {s['median']:>12,.0f} ({s['min']:>10,.0f}–{s['max']:>10,.0f})"
            f" ({s['q1']:>10,.0f}–{s['q3']:>10,.0f}) {1e6 / s['median']:>6.2f}"
            + (f" {hit:>10.4f}" if hit is not None else "")
        )
    ratios = {}
    for name in names:
        if name in (OURS, FLOOR):
            continue
        per_run = [a / b for a, b in zip(ops_per_s[OURS], ops_per_s[name], strict=True)]  # same run
        ratios[name] = s = spread(per_run)
        of_medians = spread(ops_per_s[OURS])["median"] / spread(ops_per_s[name])["median"]
        print(
            f"ours / {name}: {s['median']:.2f}× (per-run ratios {s['min']:.2f}–{s['max']:.2f};"
            f" ratio of medians {of_medians:.2f}×)"
        )
    fractions = [r["prompt_hit_fraction"] for r in rows if r["prompt_hit_fraction"] is not None]
    if max(fractions) - min(fractions) > 0.005:
        print(f"WARNING: the managers' prefix-hit fractions disagree: {fractions}")

    # Where the time goes: a clock read around every operation (its cost is in the floor row).
    by_kind: dict[str, list[list[int]]] = {n: [] for n in names}
    for r in range(MIN_RUNS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            by_kind[name].append(replay_by_kind(sessions[name], ops))
    print(f"\nµs per operation by kind, median ({MIN_RUNS} more runs, wall clock per operation)")
    print(f"{'manager':{width}} {'add':>22} {'append':>18} {'free':>20}")
    per_kind = {}
    for name in names:
        per_kind[name] = {
            kind: spread([run[k] / 1e3 / counts[k] for run in by_kind[name]])
            for k, kind in enumerate(("add", "append", "free"))
        }
        cells = [fmt_us(v) for v in per_kind[name].values()]
        print(f"{name:{width}} {cells[0]:>22} {cells[1]:>18} {cells[2]:>20}")

    save_or_say(
        args.save,
        "peers",
        {
            "trace": {
                "requests": num_requests,
                "system_prompts": 20,
                "system_prompt_tokens": 512,
                "zipf_exponent": 1.0,
                "question_tokens": 64,
                "decoded_tokens": 64,
                "max_live": 32,
                "block_size": BLOCK_SIZE,
                "num_blocks": NUM_BLOCKS,
                "seed": 0,
                "operations": dict(zip(("add", "append", "free"), counts, strict=True)),
                "prompt_tokens": prompt_tokens,
            },
            "unit": "operations per CPU second (process_time), whole replay, fresh manager",
            "runs": args.runs,
            "torch_threads": threads,
            "quick": args.quick,
            "rows": rows,
            "ours_over_peer_per_run_ratio": ratios,
            "us_per_operation_by_kind": per_kind,
        },
    )


if __name__ == "__main__":
    main()
