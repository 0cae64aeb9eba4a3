"""Chapter 05 checks: the online softmax as a tiled loop, the split-K log-sum-exp merge, paged
decode equal to dense attention, and writing K/V by slot mapping."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator

import torch

from paged_kv.attention.storage import write_kv
from paged_kv.attention.testing import dense_attention, random_paged_batch
from paged_kv.course.checks.failures import CheckFailed, call, exercise, expect, passed


class _Tiles:
    """The tiles of one row, handed out one at a time; remembers whether the function kept
    an earlier tile alive (an online softmax keeps only m, l and the accumulator)."""

    def __init__(self, scores: torch.Tensor, values: torch.Tensor, bounds: list[int]) -> None:
        self.scores, self.values, self.bounds = scores, values, bounds
        self.kept: list[int] = []

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        alive: list[tuple[int, weakref.ref, weakref.ref]] = []
        for i, (lo, hi) in enumerate(itertools.pairwise(self.bounds)):
            for j, s_ref, v_ref in alive:  # tile i - 1 may still be held by the loop variable
                if j < i - 1 and (s_ref() is not None or v_ref() is not None):
                    self.kept.append(j)
            s, v = self.scores[lo:hi].clone(), self.values[lo:hi].clone()
            alive.append((i, weakref.ref(s), weakref.ref(v)))
            yield s, v
            del s, v


def _tile_cases(gen: torch.Generator) -> Iterator[tuple[str, torch.Tensor, torch.Tensor, list]]:
    yield (
        "a rising maximum: every new tile beats the last",
        torch.tensor([0.0, 1.0, 5.0, 9.0, 30.0, 31.0], dtype=torch.float64),
        torch.arange(12, dtype=torch.float64).reshape(6, 2),
        [0, 2, 4, 6],
    )
    yield (
        "large scores (exp(800) overflows: subtract the running maximum)",
        torch.tensor([800.0, 799.0, 801.0, 5.0], dtype=torch.float64),
        torch.arange(8, dtype=torch.float64).reshape(4, 2),
        [0, 1, 3, 4],
    )
    masked = torch.tensor([-float("inf"), -float("inf"), 2.0, -float("inf"), 1.0])
    yield (
        "masked keys (score -inf) and a first tile that is all masked",
        masked.double(),
        torch.arange(10, dtype=torch.float64).reshape(5, 2),
        [0, 2, 3, 5],
    )
    for trial in range(40):
        n = int(torch.randint(1, 40, (1,), generator=gen))
        scores = torch.randn(n, generator=gen, dtype=torch.float64) * 4
        values = torch.randn(n, 3, generator=gen, dtype=torch.float64)
        cuts = sorted(torch.randint(1, n + 1, (3,), generator=gen).tolist())
        bounds = sorted({0, *cuts, n})
        yield f"random trial {trial}", scores, values, bounds


@exercise(1, "online_softmax")
def check_online_softmax(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`fn(tiles)` walks (scores, values) tiles of one row once and returns
    `(softmax(scores) @ values, logsumexp(scores))`, keeping only a running maximum, a running
    sum and a rescaled accumulator."""
    gen = torch.Generator().manual_seed(3)
    for what, scores, values, bounds in _tile_cases(gen):
        tiles = _Tiles(scores, values, bounds)
        tiles_text = [
            (scores[lo:hi].tolist(), values[lo:hi].tolist())
            for lo, hi in itertools.pairwise(bounds)
        ]
        result = call(f"online_softmax(tiles) on {what}: tiles {tiles_text}", fn, iter(tiles))
        expect(
            isinstance(result, tuple) and len(result) == 2,
            f"online_softmax should return (output, lse), got {result!r}.",
        )
        out, lse = (torch.as_tensor(x, dtype=torch.float64) for x in result)
        want = torch.softmax(scores, 0) @ values
        want_lse = torch.logsumexp(scores, 0)
        where = f"{what}: tiles (scores, values) = {tiles_text}"
        expect(
            not torch.isnan(out).any() and not torch.isinf(out).any(),
            f"{where}: your output is {out.tolist()}. exp(-inf - -inf) is NaN: while the running "
            "maximum is still -inf (only masked keys so far) there is nothing to rescale.",
        )
        expect(
            torch.allclose(out, want, atol=1e-9),
            f"{where}: your output is {out.tolist()}, torch.softmax(scores) @ values is "
            f"{want.tolist()}. When a tile raises the running maximum from m to m', multiply "
            "both the running sum and the accumulator by exp(m - m'); divide by the sum once, "
            "at the end.",
        )
        expect(
            torch.allclose(lse, want_lse, atol=1e-9),
            f"{where}: your lse is {lse.item():.6g}, torch.logsumexp(scores) is "
            f"{want_lse.item():.6g}: lse = m + log(l), the running maximum plus the log of the "
            "running sum.",
        )
        if tiles.kept:
            raise CheckFailed(
                f"{where}: your function still held tile {tiles.kept[0]} when it took tile "
                f"{tiles.kept[0] + 2}. An online softmax keeps no tile: only the running "
                "maximum, the running sum and the accumulator, so its memory does not grow "
                "with the row (that is the point: a kernel cannot hold a long row)."
            )
    passed("equals torch.softmax on 43 rows of tiles, one pass, no tile kept")


@exercise(3, "paged_decode")
def check_paged_decode(fn: Callable[..., torch.Tensor]) -> None:
    """`fn(q, k_cache, v_cache, block_tables, seq_lens)` equals dense attention per sequence."""
    gen = torch.Generator().manual_seed(0)
    for block_size, group in [(4, 1), (1, 2), (16, 4), (8, 2)]:
        q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
            gen, 3, block_size, 2, group, 8
        )
        out = call(
            f"your decode on a batch of 3 sequences (lengths {lens.tolist()}), block_size "
            f"{block_size}, {group} query heads per KV head",
            fn,
            q,
            k_cache,
            v_cache,
            tables,
            lens,
        )
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
                "of token t (table[t // block_size], t % block_size), the scale "
                "1/sqrt(head_dim), and that query head h reads KV head h // group.",
            )
    passed("equals dense attention through the tables, NaN never read")


@exercise(2, "lse_merge")
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
        got = call(
            f"lse_merge(outs, lses) for slices {list(itertools.pairwise(bounds))}",
            fn,
            torch.stack(outs),
            torch.stack(lses),
        )
        want = torch.softmax(scores, 0) @ values
        expect(
            torch.allclose(got, want, atol=1e-9),
            f"trial {trial}: slices {list(itertools.pairwise(bounds))} of {n} scores "
            f"merged to {got.tolist()}, but one softmax over all gives {want.tolist()}. Weight "
            "each slice by exp(its lse - logsumexp of all lses); an empty slice (lse = -inf) "
            "must weigh 0, not NaN.",
        )
    passed("merges split-K slices exactly, empty slices included")


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
