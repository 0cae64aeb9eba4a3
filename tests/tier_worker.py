"""An engine in its own process, for the tier tests: serve prompts through the tiers given
on the command line, wait for the background writes, print one line of JSON.

    python tests/tier_worker.py --prompts '[[1, 2, 3], ...]' [--disk DIR] [--redis URL]
        [--host-bytes N] [--new 8] [--salt S] [--seed 0] [--num-blocks 64]
"""

from __future__ import annotations

import argparse
import json

from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM
from paged_kv.tiers import DiskTier, HostTier, RedisTier, TieredStore


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", required=True, help="JSON list of token-id lists")
    parser.add_argument("--disk")
    parser.add_argument("--redis")
    parser.add_argument("--host-bytes", type=int)
    parser.add_argument("--new", type=int, default=8)
    parser.add_argument("--salt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-blocks", type=int, default=64)
    args = parser.parse_args()
    tiers = []
    if args.host_bytes:
        tiers.append(HostTier(args.host_bytes))
    if args.disk:
        tiers.append(DiskTier(args.disk))
    if args.redis:
        tiers.append(RedisTier(args.redis))
    store = TieredStore(tiers)
    engine = Engine(TinyLM(seed=args.seed), num_blocks=args.num_blocks, block_size=16, store=store)
    completions = engine.generate(json.loads(args.prompts), args.new, salt=args.salt)
    flushed = store.flush(30)
    stats = engine.stats()
    snapshot = store.metrics.snapshot()
    store.close()
    print(
        json.dumps(
            {
                "tokens": [c.token_ids for c in completions],
                "computed": stats.prefill_tokens_computed,
                "saved": stats.prefill_tokens_saved,
                "hits": snapshot.hits,
                "prompt_tokens": snapshot.prompt_tokens,
                "flushed": flushed,
                "recovery": next((t.recovery for t in tiers if isinstance(t, DiskTier)), None),
            }
        )
    )


if __name__ == "__main__":
    main()
