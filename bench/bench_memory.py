"""A long-running engine's memory: 100,000 short requests over 10,000 tenants, sampled as it goes.

Prints a table; writes bench/results/memory.json only with --save. Usage:
    python bench/bench_memory.py [--requests N] [--tenants N] [--every N] [--warmup N] [--save]
The real engine path with the smallest model that exercises it (`TinyLM`, one layer, one head
of 8 dimensions): the radix prefix index, a tier store (a host tier small enough to fill during
warm-up, so the connector saves and loads), every tenant its own salt, requests queued in waves
of `--wave` and served with `run`. Every `--every` requests the garbage is collected and the
process's resident memory (RSS, psutil) and the Python heap tracemalloc traces are sampled, with
the sizes of what the engine keeps (requests, timeline, block sources, radix namespaces).
Growth is measured from the sample at `--warmup` requests to the last; the target is under 5%.
Not a timed benchmark: tracemalloc slows every allocation, so requests/s here are not the
engine's.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc
from functools import partial

import psutil
from measure import pin_threads
from results_file import add_save_flag, save_or_say

from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.radix_cache import RadixCache
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM
from paged_kv.serving.scheduler import SamplingParams
from paged_kv.tiers import HostTier, TieredStore

TINY = ModelConfig(
    hidden_size=8, intermediate_size=8, num_layers=1, num_heads=1, num_kv_heads=1, head_dim=8
)
BLOCK = 4
HOST_BYTES = 256 << 10  # about 1,000 blocks of this model: full long before warm-up ends


def make_engine() -> Engine:
    return Engine(
        TinyLM(TINY, seed=0),
        num_blocks=512,
        block_size=BLOCK,
        max_running=128,
        max_batch_tokens=1024,
        manager_factory=partial(KVCacheManager, prefix_index="radix"),
        store=TieredStore([HostTier(HOST_BYTES)], metrics=None),
    )


def sample(engine: Engine, served: int, began: float, process: psutil.Process) -> dict:
    gc.collect()
    index = engine.manager.prefix_cache
    connector = engine.connector
    assert isinstance(index, RadixCache) and connector is not None
    return {
        "requests": served,
        "seconds": round(time.perf_counter() - began, 1),
        "rss_bytes": process.memory_info().rss,
        "traced_bytes": tracemalloc.get_traced_memory()[0],
        "kept_requests": len(engine.requests),
        "timeline": len(engine.timeline),
        "block_sources": len(connector.block_sources),
        "radix_namespaces": len(index._roots),
    }


def serve(args: argparse.Namespace) -> list[dict]:
    engine = make_engine()
    rng = random.Random(0)
    process = psutil.Process()
    tracemalloc.start()
    began = time.perf_counter()
    samples = [sample(engine, 0, began, process)]
    for i in range(args.requests):
        tenant = rng.randrange(args.tenants)
        prompt = [tenant % 256, tenant // 256 % 256, 1, 2, 3, *rng.choices(range(256), k=3)]
        engine.add_request(prompt, SamplingParams(2), salt=f"tenant {tenant}")
        if (i + 1) % args.wave == 0 or i + 1 == args.requests:
            engine.run()
        if (i + 1) % args.every == 0:
            samples.append(sample(engine, i + 1, began, process))
            print(row(samples[-1]), flush=True)
    tracemalloc.stop()
    stats = engine.stats()
    assert stats.requests == args.requests and not engine.has_unfinished()
    return samples


HEADER = (
    f"{'requests':>9} {'s':>6} {'RSS MiB':>8} {'traced MiB':>10} {'kept req':>8} "
    f"{'timeline':>8} {'sources':>7} {'radix ns':>8}"
)


def row(s: dict) -> str:
    return (
        f"{s['requests']:>9} {s['seconds']:>6} {s['rss_bytes'] / 2**20:>8.1f} "
        f"{s['traced_bytes'] / 2**20:>10.2f} {s['kept_requests']:>8} {s['timeline']:>8} "
        f"{s['block_sources']:>7} {s['radix_namespaces']:>8}"
    )


def growth(samples: list[dict], warmup: int, key: str) -> float:
    """Relative growth of `key` from the first sample at or after `warmup` requests to the last."""
    base = next(s for s in samples if s["requests"] >= warmup)[key]
    return samples[-1][key] / base - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=5_000, help="sample every N requests")
    parser.add_argument("--warmup", type=int, default=20_000, help="growth is measured after")
    parser.add_argument("--wave", type=int, default=32, help="requests queued per run()")
    parser.add_argument("--threads", type=int, default=1)
    add_save_flag(parser, "memory")
    args = parser.parse_args()
    if not 0 < args.warmup <= args.requests - args.every:
        parser.error("--warmup must leave at least one sample after it")
    threads = pin_threads(args.threads)
    print(
        f"{args.requests} requests over {args.tenants} tenants (salts), 8-token prompts, 2 new "
        f"tokens each; waves of {args.wave}; sampled every {args.every}\n"
    )
    print(HEADER)
    samples = serve(args)
    rss = growth(samples, args.warmup, "rss_bytes")
    traced = growth(samples, args.warmup, "traced_bytes")
    print(
        f"\ngrowth after {args.warmup} requests: RSS {rss:+.1%}, traced heap {traced:+.1%} "
        f"(target: under 5%)"
    )
    save_or_say(
        args.save,
        "memory",
        {
            "requests": args.requests,
            "tenants": args.tenants,
            "every": args.every,
            "warmup": args.warmup,
            "wave": args.wave,
            "threads": threads,
            "engine": "TinyLM(hidden 8, 1 layer, 1 head of 8), 512 blocks of 4, radix index, "
            f"a {HOST_BYTES}-byte host tier, default keep_finished and keep_steps",
            "rss_growth_after_warmup": round(rss, 4),
            "traced_growth_after_warmup": round(traced, 4),
            "samples": samples,
        },
    )


if __name__ == "__main__":
    main()
