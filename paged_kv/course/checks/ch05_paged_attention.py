"""Chapter 05 checks: paged decode equals dense attention, the log-sum-exp merge, and
writing K/V by slot mapping."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from paged_kv.attention.storage import write_kv
from paged_kv.attention.testing import dense_attention, random_paged_batch
from paged_kv.course.checks.support import (
    expect,
    passed,
)


def check_paged_decode(fn: Callable[..., torch.Tensor]) -> None:
    """`fn(q, k_cache, v_cache, block_tables, seq_lens)` equals dense attention per sequence."""
    gen = torch.Generator().manual_seed(0)
    for block_size, group in [(4, 1), (1, 2), (16, 4), (8, 2)]:
        q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
            gen, 3, block_size, 2, group, 8
        )
        out = fn(q, k_cache, v_cache, tables, lens)
        expect(
            tuple(out.shape) == tuple(q.shape),
            f"the output should have q's shape {tuple(q.shape)}, got {tuple(out.shape)}.",
        )
        expect(
            not torch.isnan(out).any(),
            "the output has NaN: unused slots of the cache hold NaN here, so read only the "
            "blocks in a sequence's table and only its first seq_len tokens.",
        )
        for b, (k, v) in enumerate(dense):
            want = dense_attention(q[b : b + 1], k, v)[0]
            err = (out[b].double() - want).abs().max().item()
            expect(
                err < 1e-4,
                f"block_size {block_size}, {group} query heads per KV head, sequence {b} of "
                f"length {int(lens[b])}: off by {err:.2e} from dense attention. Check the slot "
                "of token t (table[t // block_size], t % block_size) and that query head h "
                "reads KV head h // group.",
            )
    passed("paged decode")


def check_lse_merge(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """`fn(outs [..., S, D], lses [..., S])` merges per-slice softmax results exactly."""
    gen = torch.Generator().manual_seed(1)
    for trial in range(50):
        n = int(torch.randint(2, 40, (1,), generator=gen))
        scores = torch.randn(n, generator=gen, dtype=torch.float64) * 3
        values = torch.randn(n, 4, generator=gen, dtype=torch.float64)
        cuts = sorted(torch.randint(0, n + 1, (3,), generator=gen).tolist())
        bounds = [0, *cuts, n]
        outs, lses = [], []
        for lo, hi in itertools.pairwise(bounds):
            if lo == hi:  # an empty slice: nothing to add
                outs.append(torch.zeros(4, dtype=torch.float64))
                lses.append(torch.tensor(float("-inf"), dtype=torch.float64))
            else:
                outs.append(torch.softmax(scores[lo:hi], 0) @ values[lo:hi])
                lses.append(torch.logsumexp(scores[lo:hi], 0))
        got = fn(torch.stack(outs), torch.stack(lses))
        want = torch.softmax(scores, 0) @ values
        expect(
            torch.allclose(got, want, atol=1e-9),
            f"trial {trial}: slices {list(itertools.pairwise(bounds))} of {n} scores "
            f"merged to {got.tolist()}, but one softmax over all gives {want.tolist()}. Weight "
            "each slice by exp(its lse - logsumexp of all lses); an empty slice (lse = -inf) "
            "must weigh 0, not NaN.",
        )
    passed("log-sum-exp merge")


def check_write_kv(fn: Callable[..., None]) -> None:
    """`fn(k_cache, v_cache, slots, k, v)` stores row i at flat slot slots[i]; -1 is skipped."""

    gen = torch.Generator().manual_seed(2)
    for trial in range(30):
        blocks, size = (
            int(torch.randint(1, 5, (1,), generator=gen)),
            int(torch.randint(1, 5, (1,), generator=gen)),
        )
        n = int(torch.randint(1, blocks * size + 1, (1,), generator=gen))
        slots = torch.randperm(blocks * size, generator=gen)[:n]
        slots[torch.rand(n, generator=gen) < 0.2] = -1
        k, v = torch.randn(n, 2, 3, generator=gen), torch.randn(n, 2, 3, generator=gen)
        theirs = (torch.zeros(blocks, size, 2, 3), torch.zeros(blocks, size, 2, 3))
        ours = (torch.zeros(blocks, size, 2, 3), torch.zeros(blocks, size, 2, 3))
        fn(theirs[0], theirs[1], slots, k, v)
        write_kv(ours[0], ours[1], slots, k, v)
        expect(
            torch.equal(theirs[0], ours[0]) and torch.equal(theirs[1], ours[1]),
            f"trial {trial}: after writing rows at slots {slots.tolist()} into {blocks} blocks "
            f"of {size}, the caches differ from the expected ones. Slot s is block "
            "s // block_size, offset s % block_size; skip slots of -1.",
        )
    passed("slot-mapping write")
