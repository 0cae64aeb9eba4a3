"""Our KVCacheManager against the block managers of real servers, on one serving-like trace.

Usage:
    python bench/bench_peers.py [--nano-vllm PATH] [--vllm PATH] [--runs N] [--quick]
                                [--profile] [--save]

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
  vLLM       vLLM v1's real `BlockPool` and block hashing (`sha256`, `hash_block_tokens` through
             `get_request_block_hasher`), loaded from vLLM's sources given with `--vllm PATH`
             (see `load_vllm`: no CUDA, no `import vllm`), or from an installed vLLM; driven
             as its KVCacheManager and FullAttentionManager drive them (see `vllm_sessions`:
             longest run of cached blocks, `touch`, `get_new_blocks`, `cache_full_blocks`,
             `free_blocks` tail first). Without either, one line says it is skipped.

Each replay starts from a fresh manager; its CPU time (`time.process_time_ns`) covers every
add, append and free together, with the replay loop; the loop alone is timed too, as the floor.
The managers take turns run by run (the first of each run rotates), at least 5 runs each; the
table gives the median ops/s with min–max and the interquartile range, the ratio of ours to
each peer (median of the per-run ratios, and its min–max), and the share of prompt tokens
each manager found in its prefix cache: they must agree (~0.88 here: 512 of 576 tokens hit
once a system prompt is cached). A table by kind of operation follows (appends split by what
they do to the last block), and `--profile` adds a cProfile of one replay per manager, by kind.
JSON goes to bench/results/peers.json only with `--save`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import logging
import pstats
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


# Modules that vllm/v1/core/block_pool.py and kv_cache_utils.py import at their top but that
# the replay never calls: name -> the names they must define. Each stands for something the
# replay has switched off or never reaches (see load_vllm).
_VLLM_STUBS: dict[str, tuple[str, ...]] = {
    "vllm.config": ("VllmConfig",),  # only in annotations of config-time helpers
    "vllm.distributed.kv_events": (  # KV events are off (enable_kv_cache_events=False)
        "AllBlocksCleared",
        "BlockRemoved",
        "BlockStored",
        "KVCacheEvent",
    ),
    "vllm.multimodal.utils": ("get_mm_features_in_window",),  # text only: no mm_features
    "vllm.v1.core.kv_cache_metrics": ("KVCacheMetricsCollector",),  # no metrics collector
    "vllm.v1.kv_cache_interface": (  # KV cache specs: config-time sizing only
        "KVCacheConfig",
        "KVCacheGroupSpec",
        "KVCacheSpec",
        "MambaSpec",
        "UniformTypeKVCacheSpecs",
        "iter_layer_specs",
    ),
    "vllm.v1.kv_cache_spec_registry": ("KVCacheSpecRegistry",),  # config-time lookup
    "vllm.v1.request": ("Request",),  # annotations only: _VllmRequest plays the request
    "vllm.v1.utils": ("tensor_data",),  # hashes prompt embeddings; there are none
}
# Packages whose __init__.py pulls torch-CUDA, transformers, zmq...: registered empty.
_VLLM_PACKAGES = ("vllm", "vllm.v1", "vllm.v1.core", "vllm.utils", "vllm.distributed",
                  "vllm.multimodal")  # fmt: skip


class _NotLoaded:
    """What a stub module exports: usable in annotations, fails loudly if ever called."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a part of vLLM stubbed out by bench_peers.load_vllm was called")


class VllmModules(NamedTuple):
    version: str
    block_pool_cls: type  # vllm.v1.core.block_pool.BlockPool
    kv_cache_utils: types.ModuleType  # vllm.v1.core.kv_cache_utils
    sha256: Callable[[object], bytes]  # vllm.utils.hashing.sha256


def load_vllm(path: str) -> VllmModules:
    """vLLM v1's `BlockPool`, its block-hash helpers and `sha256`, from the sources at `path`.

    `path` is an unpacked vLLM (a checkout or a wheel's files: the folder holding `vllm/`).
    `import vllm` would run vllm/__init__.py and with it CUDA torch, transformers and the
    engine; the block pool needs none of them. So, as for nano-vllm, the packages on the way
    (`vllm`, `vllm.v1`, `vllm.v1.core`, `vllm.utils`, `vllm.distributed`, `vllm.multimodal`)
    are registered as empty modules whose `__path__` is the matching folder, and Python's
    import system runs these real files, unchanged: v1/core/block_pool.py (BlockPool,
    BlockHashToBlockMap), v1/core/kv_cache_utils.py (KVCacheBlock, FreeKVCacheBlockQueue,
    hash_block_tokens, get_request_block_hasher, init_none_hash), utils/hashing.py (sha256:
    pickle + SHA-256), utils/math_utils.py and envs.py (standard library only).

    Stubbed, because those two files import them at the top but nothing the replay calls uses
    them (each stub's names fail loudly if called; see `_VLLM_STUBS`):
      - vllm.logger: `init_logger` is `logging.getLogger` (the real one reconfigures logging);
      - vllm.distributed.kv_events: KV events are off (zmq and msgspec are not needed);
      - vllm.config, vllm.v1.kv_cache_interface, vllm.v1.kv_cache_spec_registry: config
        classes and KV-cache specs, used by the startup sizing helpers of kv_cache_utils;
      - vllm.v1.request: `Request` appears in annotations; `_VllmRequest` has the fields the
        hasher and `cache_full_blocks` read (the real one imports the sampling stack);
      - vllm.multimodal.utils, vllm.v1.utils (`tensor_data`): multimodal and prompt-embedding
        hashing, for requests that have neither here;
      - vllm.v1.core.kv_cache_metrics: no metrics collector is passed;
      - cbor2, only if it is not installed: utils/hashing.py imports it for `sha256_cbor`,
        and the replay uses `sha256` (pickle).
    Nothing of vLLM is copied into this repository.
    """
    root = Path(path).expanduser().resolve()
    if root.name == "vllm" and (root / "v1" / "core" / "block_pool.py").is_file():
        root = root.parent  # the package folder itself was given
    package = root / "vllm"
    if not (package / "v1" / "core" / "block_pool.py").is_file():
        sys.exit(f"--vllm {path}: no vllm/v1/core/block_pool.py under it")
    if "vllm" in sys.modules and not hasattr(sys.modules["vllm"], "__bench_stub__"):
        sys.exit("--vllm: another vLLM is imported already; run without it")
    for name in _VLLM_PACKAGES:
        stub = types.ModuleType(name, f"{name} without its __init__ (see load_vllm)")
        stub.__path__ = [str(package.joinpath(*name.split(".")[1:]))]
        stub.__bench_stub__ = True
        sys.modules[name] = stub
    stubs = {name: dict.fromkeys(names, _NotLoaded) for name, names in _VLLM_STUBS.items()}
    stubs["vllm.logger"] = {"init_logger": logging.getLogger}
    stubs["vllm.distributed.kv_events"]["MEDIUM_GPU"] = "GPU"  # a default argument's value
    try:
        import cbor2  # noqa: F401
    except ImportError:
        stubs["cbor2"] = {}
    for name, attributes in stubs.items():
        stub = types.ModuleType(name, f"stub of {name} (see load_vllm)")
        stub.__dict__.update(attributes)
        sys.modules[name] = stub
    version = importlib.import_module("vllm._version").__version__
    block_pool = importlib.import_module("vllm.v1.core.block_pool")
    kv_cache_utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    hashing = importlib.import_module("vllm.utils.hashing")
    return VllmModules(version, block_pool.BlockPool, kv_cache_utils, hashing.sha256)


def import_installed_vllm() -> tuple[VllmModules | None, str]:
    """The same pieces from an installed vLLM, or None and why it is skipped."""
    try:
        import vllm
        from vllm.utils.hashing import sha256
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.core.block_pool import BlockPool
    except ImportError as error:
        return None, f"vLLM: no --vllm PATH given and no importable vLLM ({error}): skipped"
    except Exception as error:  # a broken install (CUDA libraries, torch version)
        return None, f"vLLM failed to import ({type(error).__name__}: {error}): skipped"
    return VllmModules(vllm.__version__, BlockPool, kv_cache_utils, sha256), ""


class _VllmRequest:
    """The fields of vLLM's `Request` that its block hasher and `cache_full_blocks` read, for a
    text-only request without LoRA, salt or prompt embeddings. As in `Request`, the hasher
    runs at creation and after every appended token (`append_output_token_ids`), and
    `block_hashes` only grows."""

    __slots__ = ("_hasher", "all_token_ids", "block_hashes", "request_id")
    mm_features = ()
    lora_request = None
    cache_salt = None
    prompt_embeds = None

    def __init__(self, request_id: int, token_ids: list[int], hasher: Callable) -> None:
        self.request_id = str(request_id)
        self.all_token_ids = list(token_ids)
        self.block_hashes: list = []
        self._hasher = hasher
        self.block_hashes.extend(hasher(self))

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    def append_output_token_ids(self, token: int) -> None:
        self.all_token_ids.append(token)
        self.block_hashes.extend(self._hasher(self))


def vllm_sessions(vllm: VllmModules) -> Callable[[], Session]:
    """Sessions on vLLM v1's real `BlockPool`, each operation as vLLM v1 performs it for a
    full-attention layer (one KV-cache group, block size = hash block size, no EAGLE, no KV
    connector, KV events and metrics off).

    add: `Request(...)` hashes the prompt's full blocks (`get_request_block_hasher` with
      `sha256`, chained from NONE_HASH); `KVCacheManager.get_computed_blocks` ->
      `FullAttentionManager.find_longest_cache_hit`: the longest run of
      `BlockPool.get_cached_block` hits among the first (num_tokens - 1) // block_size hashes
      (the last token is always computed); `allocate_slots`: blocks needed = cdiv(num_tokens,
      block_size) - hits + hits that are eviction candidates (ref 0), refused if more than
      `get_num_free_blocks`; `touch` the hits, `get_new_blocks` for the rest, then
      `cache_blocks` -> `cache_full_blocks` for the full blocks after the hits.
    append: `Request.append_output_token_ids` (the hasher returns early unless a block just
      filled); `allocate_slots` for one token: `get_new_blocks(1)` when the token starts a
      block; `cache_blocks` -> `cache_full_blocks` only when a hashed block became full.
    free: `free_blocks` of the request's blocks in reverse (tail evicted first).

    The Python glue between those calls in vLLM's KVCacheManager, coordinator and scheduler
    (KVCacheBlocks objects, per-group loops, token counters) is not replayed, only the work
    on the pool and the hashes: if anything, vLLM's figure is flattered.
    """
    utils = vllm.kv_cache_utils
    utils.init_none_hash(vllm.sha256)  # NONE_HASH, the first block's parent
    hasher = utils.get_request_block_hasher(BLOCK_SIZE, vllm.sha256)
    group = [0]  # the KV-cache group ids of a single full-attention group

    def session() -> Session:
        # Block 0 is vLLM's null block: one more block leaves 4,096 to allocate.
        pool = vllm.block_pool_cls(NUM_BLOCKS + 1, True, hash_block_size=BLOCK_SIZE)
        get_cached, free_count = pool.get_cached_block, pool.get_num_free_blocks
        state: dict[int, list] = {}  # request id -> [request, blocks, blocks cached]
        hits = [0]

        def cache(st: list) -> None:  # SingleTypeKVCacheManager.cache_blocks
            request, blocks, num_cached = st
            num_full = min(request.num_tokens, len(request.block_hashes) * BLOCK_SIZE)
            num_full //= BLOCK_SIZE
            if num_cached < num_full:
                pool.cache_full_blocks(
                    request=request, blocks=blocks, num_cached_blocks=num_cached,
                    num_full_blocks=num_full, block_size=BLOCK_SIZE, kv_cache_group_id=0,
                )  # fmt: skip
                st[2] = num_full

        def add_op(rid: int, prompt: list[int]) -> None:
            request = _VllmRequest(rid, prompt, hasher)
            found = []  # find_longest_cache_hit, max length num_tokens - 1
            for block_hash in request.block_hashes[: (len(prompt) - 1) // BLOCK_SIZE]:
                cached = get_cached(block_hash, group)
                if not cached:
                    break
                found.append(cached[0])
            need = -(-len(prompt) // BLOCK_SIZE) - len(found)  # allocate_slots
            revived = sum(1 for b in found if b.ref_cnt == 0)
            if need + revived > free_count():
                raise RuntimeError("vLLM ran out of blocks: the trace must fit")
            pool.touch(found)
            blocks = found + pool.get_new_blocks(need)
            st = state[rid] = [request, blocks, len(found)]
            cache(st)
            hits[0] += len(found) * BLOCK_SIZE

        def append_op(rid: int, tokens: list[int]) -> None:
            st = state[rid]
            request, blocks = st[0], st[1]
            request.append_output_token_ids(tokens[0])
            need = -(-request.num_tokens // BLOCK_SIZE) - len(blocks)  # allocate_slots
            if need > 0:
                if need > free_count():
                    raise RuntimeError("vLLM ran out of blocks: the trace must fit")
                blocks.extend(pool.get_new_blocks(need))
            cache(st)

        def free_op(rid: int) -> None:
            pool.free_blocks(reversed(state.pop(rid)[1]))  # the tail is evicted first

        return Session(add_op, append_op, free_op, lambda: hits[0])

    return session


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


# Operation kinds of the by-kind table: appends are split by what they do to the last block.
KINDS = ("add", "append in a block", "append, new block", "append fills block", "free")


def op_kinds(ops: list[Op]) -> list[int]:
    """Each operation's index in KINDS (a single-token append that starts a block needs a new
    one; one that completes a block registers it for prefix caching)."""
    lengths: dict[int, int] = {}
    kinds = []
    for kind, rid, tokens in ops:
        if kind == ADD:
            lengths[rid] = len(tokens)
            kinds.append(0)
        elif kind == FREE:
            kinds.append(4)
        else:
            lengths[rid] += 1
            position = lengths[rid] % BLOCK_SIZE
            kinds.append(2 if position == 1 else 3 if position == 0 else 1)
    return kinds


def replay_by_kind(
    open_session: Callable[[], Session], ops: list[Op], kinds: list[int]
) -> list[int]:
    """Wall ns spent in each of KINDS (a clock read around each operation)."""
    s = open_session()
    spent = [0] * len(KINDS)
    clock = time.perf_counter_ns
    gc.collect()
    for (kind, rid, tokens), k in zip(ops, kinds, strict=True):
        start = clock()
        if kind == APPEND:
            s.append(rid, tokens)
        elif kind == ADD:
            s.add(rid, tokens)
        else:
            s.free(rid)
        spent[k] += clock() - start
    return spent


def profile_by_kind(open_session: Callable[[], Session], ops: list[Op], top: int = 12) -> None:
    """cProfile one replay, adds, appends and frees apart: the functions with the most own
    time per operation, with their calls per operation. The profiler's cost per call inflates
    the times of small functions; the call counts are exact."""
    s = open_session()
    fns = {ADD: s.add, APPEND: s.append}
    profiles = {kind: cProfile.Profile() for kind in (ADD, APPEND, FREE)}
    for kind, rid, tokens in ops:
        profile = profiles[kind]
        if kind == FREE:
            profile.enable()
            s.free(rid)
            profile.disable()
        else:
            profile.enable()
            fns[kind](rid, tokens)
            profile.disable()
    for kind, label in ((ADD, "add"), (APPEND, "append"), (FREE, "free")):
        n = sum(1 for op in ops if op[0] == kind)
        rows = sorted(
            (
                (own, total, calls, f"{Path(file).name}:{line}({fn})")
                for (file, line, fn), (_, calls, own, total, _) in pstats.Stats(
                    profiles[kind]
                ).stats.items()  # type: ignore[attr-defined]
                if fn != "<method 'disable' of '_lsprof.Profiler' objects>"
            ),
            reverse=True,
        )
        print(f"  {label} ({n:,} ops): calls/op, own µs/op, cumulative µs/op")
        for own, total, calls, where in rows[:top]:
            print(f"    {calls / n:8.2f} {own / n * 1e6:9.2f} {total / n * 1e6:9.2f}  {where}")


def fmt_us(s: dict) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nano-vllm", metavar="PATH", help="a nano-vllm checkout to compare")
    parser.add_argument(
        "--vllm", metavar="PATH", help="vLLM's sources (the folder holding vllm/) to compare"
    )
    parser.add_argument("--runs", type=int, default=7, help=f"runs per manager (>= {MIN_RUNS})")
    parser.add_argument("--quick", action="store_true", help="200 requests (smoke run)")
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile one replay per manager, by kind"
    )
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
    if args.vllm:
        vllm = load_vllm(args.vllm)
    else:
        vllm, why = import_installed_vllm()
        if vllm is None:
            print(why)
    if vllm is not None:
        sessions[f"vLLM {vllm.version} BlockPool"] = vllm_sessions(vllm)
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
    kinds = op_kinds(ops)
    kind_counts = [kinds.count(k) for k in range(len(KINDS))]
    by_kind: dict[str, list[list[int]]] = {n: [] for n in names}
    for r in range(MIN_RUNS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            by_kind[name].append(replay_by_kind(sessions[name], ops, kinds))
    per_kind = {
        name: {
            kind: spread([run[k] / 1e3 / kind_counts[k] for run in by_kind[name]])
            for k, kind in enumerate(KINDS)
        }
        for name in names
    }
    shown = [n for n in names if n != FLOOR]
    print(
        f"\nBy kind of operation ({MIN_RUNS} more runs in turn, a wall clock read around each"
        " operation): µs per operation, median (min–max), and ms of the replay (median × count)"
    )
    print(f"{'kind':<19} {'count':>7}" + "".join(f" {n[:30]:>30}" for n in shown))
    for k, kind in enumerate(KINDS):
        cells = []
        for name in shown:
            v = per_kind[name][kind]
            ms = v["median"] * kind_counts[k] / 1e3
            cells.append(f"{v['median']:.2f} ({v['min']:.1f}–{v['max']:.1f}) {ms:4.0f} ms")
        print(f"{kind:<19} {kind_counts[k]:>7,}" + "".join(f" {c:>30}" for c in cells))
    floor = max(per_kind[FLOOR][kind]["median"] for kind in KINDS)
    print(f"(the replay loop alone, clock reads included: at most {floor:.2f} µs per operation)")

    if args.profile:
        print("\ncProfile of one replay per manager, by operation (--profile):")
        for name in names:
            if name != FLOOR:
                print(f"{name}:")
                profile_by_kind(sessions[name], ops)

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
            "operations_by_kind": dict(zip(KINDS, kind_counts, strict=True)),
            "us_per_operation_by_kind": per_kind,
        },
    )


if __name__ == "__main__":
    main()
