"""The tiers below the device pool on this machine: what our tier code costs over the raw
store doing the same bytes, and when loading a prefix beats computing it.

Prints two tables; writes bench/results/tiers.json only with --save. Usage:
    python bench/bench_tiers.py [--quick] [--threads N] [--save]
1. Per tier, blocks/s and GB/s for writes and reads of N blocks (new keys each run), against
   the raw store moving the same bytes: host memory vs a plain dict; disk (temporary file,
   fsync, rename, directory fsync) vs a plain file write + fsync per block; Redis (redis-py
   pipelines through our tier: breaker, per-key results, metrics) vs a raw pipelined SET/GET
   of the same blobs. Blocks of the tiny model (8 KiB + 112-byte header) and of Llama-3-8B
   (2 MiB, fp16, 16 tokens). The codec (encode + verify, CRC-32) on its own. Disk reads come
   from the page cache (the files were just written).
2. The tiny model on the CPU: prefill time of a prompt computed vs loaded from each tier (a
   new engine with an empty device pool each time), by prompt length; "saved" is computed
   minus loaded. Every run must give the same tokens.
Runs of one table row take turns (who goes first rotates), at least 5 repeats; medians with
their min-max. Redis runs on 127.0.0.1 in a redis-server this script starts and stops; where
redis-server is not installed, its rows are skipped with the reason.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from measure import MIN_RUNS, pin_threads, spread, take_turns
from results_file import add_save_flag, save_or_say

from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM
from paged_kv.tiers import (
    DiskTier,
    HostTier,
    KeySpace,
    ModelFingerprint,
    RedisServer,
    RedisTier,
    Tier,
    TieredStore,
    decode_blob,
    encode_blob,
    redis_server_path,
)

SHAPES = {  # payload of one block: [layers, (K, V), tokens, KV heads, head dim]
    "tiny fp32 (8 KiB)": ModelFingerprint("TinyLM", "00" * 32, "float32", 2, 2, 16, 16),
    "Llama-3-8B fp16 (2 MiB)": ModelFingerprint("Llama-3-8B", "00" * 32, "float16", 32, 8, 128, 16),
}
BLOCKS = {"tiny fp32 (8 KiB)": 512, "Llama-3-8B fp16 (2 MiB)": 32}


def make_blobs(fp: ModelFingerprint, n: int, run: int) -> list[tuple[str, bytes]]:
    """n blobs of random-looking payloads under fresh keys (new for every run)."""
    space = KeySpace("bench", fp)
    payload = os.urandom(fp.payload_bytes)
    items = []
    for i in range(n):
        block_hash = (run * 1_000_003 + i).to_bytes(32, "little")
        items.append(
            (
                space.key(block_hash),
                encode_blob(
                    payload,
                    dtype=fp.dtype,
                    shape=fp.payload_shape,
                    fingerprint=space.fingerprint_digest,
                    block_hash=block_hash,
                ),
            )
        )
    return items


Pair = dict[str, float]  # {"write": seconds, "read": seconds}


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n


def tier_runner(tier: Tier, fp: ModelFingerprint, n: int, runs: Counter) -> Callable[[], Pair]:
    def once() -> Pair:
        items = make_blobs(fp, n, runs.next())
        keys = [k for k, _ in items]
        began = time.perf_counter()
        ok = tier.put_many(items)
        wrote = time.perf_counter() - began
        began = time.perf_counter()
        blobs = tier.get_many(keys)
        read = time.perf_counter() - began
        assert all(ok) and all(b is not None for b in blobs), f"{tier.name} lost blocks"
        tier.delete(keys)
        return {"write": wrote, "read": read}

    return once


def raw_dict_runner(fp: ModelFingerprint, n: int, runs: Counter) -> Callable[[], Pair]:
    store: dict[str, bytes] = {}

    def once() -> Pair:
        items = make_blobs(fp, n, runs.next())
        began = time.perf_counter()
        for k, b in items:
            store[k] = b
        wrote = time.perf_counter() - began
        began = time.perf_counter()
        got = [store[k] for k, _ in items]
        read = time.perf_counter() - began
        assert len(got) == n
        store.clear()
        return {"write": wrote, "read": read}

    return once


def raw_files_runner(root: Path, fp: ModelFingerprint, n: int, runs: Counter) -> Callable[[], Pair]:
    def once() -> Pair:
        items = make_blobs(fp, n, runs.next())
        folder = root / f"raw-{runs.n}"
        folder.mkdir(parents=True)
        paths = [folder / f"{i}.bin" for i in range(n)]
        began = time.perf_counter()
        for path, (_, blob) in zip(paths, items, strict=True):
            with open(path, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        wrote = time.perf_counter() - began
        began = time.perf_counter()
        got = [p.read_bytes() for p in paths]
        read = time.perf_counter() - began
        assert len(got) == n
        shutil.rmtree(folder)
        return {"write": wrote, "read": read}

    return once


def raw_redis_runner(url: str, fp: ModelFingerprint, n: int, runs: Counter) -> Callable[[], Pair]:
    import redis

    client = redis.Redis.from_url(url)

    def once() -> Pair:
        items = make_blobs(fp, n, runs.next())
        began = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for k, b in items:
            pipe.set(k, b)
        pipe.execute()
        wrote = time.perf_counter() - began
        began = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for k, _ in items:
            pipe.get(k)
        got = pipe.execute()
        read = time.perf_counter() - began
        assert all(g is not None for g in got)
        client.delete(*[k for k, _ in items])
        return {"write": wrote, "read": read}

    return once


def codec_runner(fp: ModelFingerprint, n: int, runs: Counter) -> Callable[[], Pair]:
    space = KeySpace("bench", fp)
    payload = os.urandom(fp.payload_bytes)

    def once() -> Pair:
        hashes = [(runs.next() * 7919 + i).to_bytes(32, "little") for i in range(n)]
        began = time.perf_counter()
        blobs = [
            encode_blob(
                payload,
                dtype=fp.dtype,
                shape=fp.payload_shape,
                fingerprint=space.fingerprint_digest,
                block_hash=h,
            )
            for h in hashes
        ]
        wrote = time.perf_counter() - began
        began = time.perf_counter()
        for h, b in zip(hashes, blobs, strict=True):
            decode_blob(b, fingerprint=space.fingerprint_digest, block_hash=h)
        read = time.perf_counter() - began
        return {"write": wrote, "read": read}

    return once


def throughput_table(repeats: int, quick: bool, redis_url: str | None, root: Path) -> dict:
    print("\n1. blocks/s and GB/s, writes then reads of the same blocks (median, min-max)")
    print(
        f"{'block':<24} {'store':<24} {'write blocks/s':<22} {'GB/s':>6}  "
        f"{'read blocks/s':<22} {'GB/s':>6}"
    )
    results: dict = {}
    for shape, fp in SHAPES.items():
        n = max(4, BLOCKS[shape] // (8 if quick else 1))
        runs = Counter()
        nbytes = n * len(make_blobs(fp, 1, 0)[0][1])
        contenders: dict[str, Callable[[], Pair]] = {
            "codec (encode / verify)": codec_runner(fp, n, runs),
            "host tier": tier_runner(HostTier(4 * nbytes), fp, n, runs),
            "raw dict": raw_dict_runner(fp, n, runs),
            "disk tier": tier_runner(DiskTier(root / f"tier-{len(results)}"), fp, n, runs),
            "raw file + fsync": raw_files_runner(root, fp, n, runs),
        }
        if redis_url is not None:
            contenders["redis tier"] = tier_runner(RedisTier(redis_url), fp, n, runs)
            contenders["raw redis pipeline"] = raw_redis_runner(redis_url, fp, n, runs)
        measured = take_turns(contenders, repeats)
        rows = {}
        for name, pairs in measured.items():
            row = {}
            for op in ("write", "read"):
                rates = spread([n / p[op] for p in pairs])
                gbps = spread([nbytes / p[op] / 1e9 for p in pairs])
                row[op] = {"blocks_per_s": rates, "gb_per_s": gbps}
            rows[name] = row
            w, r = row["write"], row["read"]
            print(
                f"{shape:<24} {name:<24} {_rate(w['blocks_per_s'])} {w['gb_per_s']['median']:>6.2f}"
                f"  {_rate(r['blocks_per_s'])} {r['gb_per_s']['median']:>6.2f}"
            )
        results[shape] = {"blocks": n, "bytes": nbytes, "rows": rows}
    if redis_url is None:
        print("(Redis rows skipped: redis-server is not installed; apt-get install redis-server)")
    return results


def _rate(s: dict) -> str:
    """`median (min–max)` of a rate, 22 characters wide."""
    return f"{s['median']:>8.0f} ({s['min']:.0f}–{s['max']:.0f})".ljust(22)


def prefill_runner(
    model: TinyLM,
    prompt: list[int],
    blocks: int,
    store: TieredStore,
    name: str,
    reference: list[int],
) -> Callable[[], float]:
    """A new engine (empty device pool) on `store` prefills `prompt`; its seconds."""
    length = len(prompt)
    expect = length if name == "computed" else length - (length - 1) // 16 * 16

    def once() -> float:
        engine = Engine(model, num_blocks=blocks, block_size=16, store=store)
        began = time.perf_counter()
        tokens = engine.generate([prompt], 1)[0].token_ids
        seconds = time.perf_counter() - began
        reference.append(tokens[0])
        computed = engine.stats().prefill_tokens_computed
        assert computed == expect, f"{name}: computed {computed}, expected {expect}"
        return seconds

    return once


def prefill_table(repeats: int, quick: bool, redis_url: str | None, root: Path) -> dict:
    print("\n2. the tiny model on the CPU: a prompt computed vs loaded (ms, median, min-max)")
    model = TinyLM(seed=0)
    lengths = [128, 512] if quick else [128, 512, 2048]
    text = "The reading room opens at nine, closes at six, and is quiet all day. "
    header = f"{'prompt':>6} {'source':<12} {'prefill ms':>20} {'saved ms':>9}"
    print(header)
    results = {}
    for length in lengths:
        prompt = list((text * (length // len(text) + 1)).encode())[:length]
        blocks = length // 16 + 4
        makers: dict[str, Callable[[], Tier] | None] = {
            "computed": None,
            "host": lambda: HostTier(1 << 26),
            "disk": lambda length=length: DiskTier(root / f"prefill-{length}"),
        }
        if redis_url is not None:
            makers["redis"] = lambda: RedisTier(redis_url)
        stores = {}
        for name, make in makers.items():
            store = TieredStore([] if make is None else [make()], metrics=True)
            Engine(model, num_blocks=blocks, block_size=16, store=store).generate([prompt], 1)
            assert store.flush()
            stores[name] = store
        reference: list[int] = []
        measured = take_turns(
            {n: prefill_runner(model, prompt, blocks, s, n, reference) for n, s in stores.items()},
            repeats,
        )
        assert len(set(reference)) == 1, "loaded prefixes must give the computed tokens"
        cold = measured["computed"]
        row = {}
        for name, times in measured.items():
            saved = spread([c - t for c, t in zip(cold, times, strict=True)])
            s = spread(times)
            row[name] = {"seconds": s, "saved_seconds": saved}
            print(
                f"{length:>6} {name:<12} {s['median'] * 1e3:>7.1f} ({s['min'] * 1e3:5.1f}–"
                f"{s['max'] * 1e3:<5.1f}) {saved['median'] * 1e3:>9.1f}"
            )
        for store in stores.values():
            store.close()
        results[length] = row
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer blocks")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (pinned)")
    add_save_flag(parser, "tiers")
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    repeats = MIN_RUNS
    root = Path(tempfile.mkdtemp(prefix="paged_kv-bench-tiers-"))
    server = RedisServer().start() if redis_server_path() else None
    try:
        url = None if server is None else server.url
        throughput = throughput_table(repeats, args.quick, url, root)
        prefill = prefill_table(repeats, args.quick, url, root)
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(root, ignore_errors=True)
    save_or_say(
        args.save,
        "tiers",
        {
            "threads": threads,
            "repeats": repeats,
            "redis": "redis-server on 127.0.0.1" if server is not None else "skipped (absent)",
            "throughput": throughput,
            "prefill": {str(k): v for k, v in prefill.items()},
        },
    )


if __name__ == "__main__":
    main()
