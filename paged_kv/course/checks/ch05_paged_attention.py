"""Chapter 05 checks: the online softmax, the split-K log-sum-exp merge, paged decode, and
writing K/V by slot mapping, each against the library's reference (`tensor_probes.judge`). A
case is the Python that builds its inputs (the replay)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import torch

from paged_kv.attention.reference import merge_partials, reference_decode
from paged_kv.attention.storage import write_kv
from paged_kv.course.checks import causes, tensor_probes
from paged_kv.course.checks.failures import exercise, expect, passed
from paged_kv.course.checks.tensor_probes import Case, Inputs, fail, judge

_ONLINE, _MERGE = "online_softmax(iter(tiles))", "lse_merge(outs, lses)"
_DECODE = "paged_decode(q, k_cache, v_cache, block_tables, seq_lens)"
_HALVES = ("float16", "bfloat16")
_CAST = "{0}, {1} = {0}.to(torch.{2}), {1}.to(torch.{2})"  # a half-precision case's last line
_ROW = """g = torch.Generator().manual_seed({seed})
scores = torch.randn({n}, generator=g) * 4
values = torch.randn({n}, 3, generator=g)
tiles = [(scores[a:b], values[a:b]) for a, b in {bounds}]"""
_SLICES = """g = torch.Generator().manual_seed({seed})
outs = torch.randn({outs}, generator=g)
lses = torch.randn({shape}, generator=g) * 3"""
_BATCH = """from paged_kv.attention.testing import random_paged_batch
g = torch.Generator().manual_seed({seed})
q, k_cache, v_cache, block_tables, seq_lens, _ = random_paged_batch(g, 3, {size}, 2, {group}, 8)"""


def _code(template: str, *lines: str, **values: Any) -> str:
    return "\n".join([template.format(**values), *lines])


def _tiles(seed: int, cuts: list[int], *lines: str) -> str:
    """A row of random scores (×4) and values 3 wide, cut into tiles at `cuts`; then `lines`."""
    bounds = list(itertools.pairwise([0, *cuts]))
    return _code(_ROW, *lines, seed=seed, n=cuts[-1], bounds=bounds)


def _softmax_cases() -> list[Case]:
    rng, rising = random.Random(3), "scores[:] = torch.tensor([0.0, 1.0, 5.0, 9.0, 30.0, 31.0])"
    cases = [Case("a rising maximum: every tile beats the last", _tiles(0, [2, 4, 6], rising))]
    for i in range(30):
        n = rng.randint(1, 40)
        cuts = sorted({n, *(rng.randrange(1, n) for _ in range(rng.randint(0, 4)) if n > 1)})
        cases.append(Case(f"random row {i}", _tiles(i, cuts)))
    masked = "scores[[0, 1, 3]] = -math.inf"
    hint = "A tile of masked keys adds nothing: while the running maximum is -inf, "
    hint += "exp(-inf - -inf) is NaN and there is nothing to rescale"
    cases.append(
        Case("masked keys (-inf), the first tile all masked", _tiles(41, [2, 3, 5], masked), hint)
    )
    for off in (800, -800):
        shifted = _tiles(42, [3, 7, 9], f"tiles = [(s + {off}, v) for s, v in tiles]")
        hint = "Subtract the running maximum (start it at -inf, not 0) before exp"
        cases.append(Case(f"scores near {off:+}", shifted, hint, causes.OVERFLOW))
    for d in _HALVES:
        half = _tiles(
            40,
            list(range(8, 65, 8)),
            f"tiles = [(s.to(torch.{d}), v.to(torch.{d})) for s, v in tiles]",
        )
        hint = (
            "Compute in float32 (tiles may come in float16 or bfloat16); return float32 out and lse"
        )
        cases.append(Case(f"{d} tiles", half, hint, causes.PRECISION))
    hint = "A row with nothing to attend to gives out = zeros and lse = -inf"
    empty = _tiles(43, [2, 4], "scores[:] = -math.inf")
    return [*cases, Case("a fully masked row (every score -inf)", empty, hint)]


def _softmax_reference(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    scores, values = (torch.cat(part).double() for part in zip(*inputs["tiles"], strict=True))
    lse = torch.logsumexp(scores, 0)
    out = torch.zeros(values.shape[-1]) if lse == -math.inf else torch.softmax(scores, 0) @ values
    return out.float(), lse.float()


def _unrescaled(sum_too: bool, own_max: bool) -> Callable[[Inputs], torch.Tensor]:
    """The output of an online softmax that never rescales its accumulator (nor its sum, if
    `sum_too`; each tile shifted by its own maximum, if `own_max`)."""

    def output(inputs: Inputs) -> torch.Tensor:
        m, total, acc = -math.inf, torch.zeros((), dtype=torch.float64), torch.zeros(())
        for s, v in ((s.double(), v.double()) for s, v in inputs["tiles"]):
            m_new = max(m, s.max().item())
            if m_new != -math.inf:
                w = torch.exp(s - (s.max() if own_max else m_new))
                total = total * (1.0 if sum_too else math.exp(m - m_new)) + w.sum()
                acc, m = acc + w @ v, m_new
        return (acc / total).float()

    return output


_RESCALES = [
    (causes.MISSING_RESCALE, _unrescaled(*m)) for m in [(False, False), (True, False), (True, True)]
]


@exercise(1, "online_softmax")
def check_online_softmax(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`fn(tiles)` walks (scores, values) tiles of one row once and returns
    `(softmax(scores) @ values, logsumexp(scores))` in float32, holding only a running
    maximum, a running sum and a rescaled accumulator (never a tile it has passed)."""
    cases = _softmax_cases()
    for case in cases:
        judge(fn, case, _ONLINE, _softmax_reference, variants=_RESCALES)
    _holds_no_tile(fn)
    rows = f"{len(cases) + 1} rows of tiles (masked, ±800, half precision)"
    passed(f"equals the softmax of the whole row on {rows}, in one pass, no tile kept")


def _holds_no_tile(fn: Callable[..., Any]) -> None:
    """32 tiles of 16 keys (64 wide), made one at a time: the tensor bytes alive when tile 31
    comes out are those alive at tile 1 (a tile and the running state), within half a tile,
    so that even one earlier tile held back shows."""
    held: list[int] = []

    def counted(tiles: Iterator[Any]) -> Iterator[Any]:
        for i, tile in enumerate(tiles):
            if i in (1, 31):
                held.append(tensor_probes.live_tensor_bytes())
            yield tile

    tile = "(torch.randn(16, generator=g), torch.randn(16, 64, generator=g))"
    code = f"g = torch.Generator().manual_seed(9)\ntiles = ({tile} for _ in range(32))"
    case = Case("a row of 32 tiles of 16 keys, 64 values wide", code)
    judge(
        fn, case, _ONLINE, _softmax_reference, watch=lambda x: {**x, "tiles": counted(x["tiles"])}
    )
    if len(held) == 2 and held[1] - held[0] > 16 * 65 * 4 // 2:
        fail(causes.KEEPS_TILES, case, _ONLINE, "", grown=held[1] - held[0], early=1, late=31)


def _slices(seed: int, shape: tuple[int, ...], *lines: str) -> str:
    return _code(_SLICES, *lines, seed=seed, shape=shape, outs=(*shape, 4))


def _merge_cases() -> list[Case]:
    rng, hint = random.Random(1), "Weight each slice by exp(its lse - the logsumexp of the lses)"
    cases = [Case(f"random row {i}", _slices(i, (rng.randint(1, 6),)), hint) for i in range(20)]
    hint = "The slices are the last dimension of lses, the ones before are batch"
    cases.append(
        Case("leading dimensions: outs [2, 3, 5, 4], lses [2, 3, 5]", _slices(20, (2, 3, 5)), hint)
    )
    hint = "An empty slice (out 0, lse -inf) weighs 0; a row of only empty slices merges to 0"
    for what, seed, shape, at in [
        ("empty slices (lse -inf, out 0)", 21, (6,), "[1, 4]"),
        ("a row of only empty slices, in a batch of 3", 22, (3, 4), "1"),
    ]:
        cases.append(
            Case(what, _slices(seed, shape, f"lses[{at}] = -math.inf", f"outs[{at}] = 0"), hint)
        )
    hint = "Subtract the largest lse before exp"
    for off in (800, -800):
        near = _slices(23, (5,), f"lses = lses + {off}")
        cases.append(Case(f"lses near {off:+}", near, hint, causes.OVERFLOW))
    for d in _HALVES:
        half = _slices(24, (2, 5), _CAST.format("outs", "lses", d))
        cases.append(Case(f"{d} inputs", half, "Return outs' dtype"))
    return cases


def _merged(x: Inputs, dim: int | None = None) -> torch.Tensor:
    """The library's merge (with `dim`: the slices weighed along that dimension instead)."""
    outs, lses = x["outs"].double(), x["lses"].double()
    if dim is None:
        return merge_partials(outs, lses).to(x["outs"].dtype)
    return (torch.softmax(lses, dim).nan_to_num(0.0)[..., None] * outs).sum(-2).to(x["outs"].dtype)


@exercise(2, "lse_merge")
def check_lse_merge(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """`fn(outs [..., S, D], lses [..., S])` merges S slices' softmax results exactly, as
    `paged_kv.attention.reference.merge_partials` does."""
    for case in _merge_cases():
        dims = range(tensor_probes.build(case.code)["lses"].dim() - 1)
        wrong_dims = [(causes.WRONG_DIM, partial(_merged, dim=d)) for d in dims]
        judge(fn, case, _MERGE, _merged, variants=wrong_dims)
    passed("merges split-K slices: leading dimensions, empty slices, ±800, half precision")


def _batch(seed: int, *lines: str, size: int = 4, group: int = 2) -> str:
    return _code(_BATCH, *lines, seed=seed, size=size, group=group)


def _decode_cases() -> list[Case]:
    cut = "read only the blocks in a sequence's table, and only its first seq_len tokens"
    hint = "Token t of a sequence sits at (table[t // block_size], t % block_size); scale the "
    hint += f"scores by 1/sqrt(head_dim). Unused slots of the cache hold NaN here: {cut}"
    sizes = enumerate([(4, 1), (1, 2), (16, 4), (8, 2)])
    what = "block_size {}, GQA group {}"
    cases = [Case(what.format(*s), _batch(i, size=s[0], group=s[1]), hint) for i, s in sizes]
    hint = "A sequence with no tokens attends to nothing: its output is 0"
    cases.append(Case("a sequence of length 0", _batch(5, "seq_lens[1] = 0"), hint))
    for d in _HALVES:
        half = _batch(6, f"q = q.to(torch.{d})", _CAST.format("k_cache", "v_cache", d))
        cases.append(
            Case(f"{d} q and caches", half, "Return q's dtype (compute in float32 inside)")
        )
    twos = _batch(7, "k_cache, v_cache = k_cache.nan_to_num(2.0), v_cache.nan_to_num(2.0)")
    hint = "Here a read past seq_len changes the result, whatever nan_to_num hid where the slots "
    hint += f"hold NaN: {cut}"
    return [*cases, Case("unused slots holding 2.0 (not NaN)", twos, hint)]


def _decode_reference(x: Inputs, **kw: Any) -> torch.Tensor:
    q, k, v = (x[n].float() for n in ("q", "k_cache", "v_cache"))
    return reference_decode(q, k, v, x["block_tables"], x["seq_lens"], **kw).to(x["q"].dtype)


def _kv_head_modulo(x: Inputs) -> torch.Tensor:
    """Query head h reading KV head h % num_kv_heads (instead of h // group)."""
    order = torch.arange(x["q"].shape[1]).reshape(-1, x["k_cache"].shape[2]).T.reshape(-1)
    return _decode_reference({**x, "q": x["q"][:, order]})[:, order.argsort()]


_DECODE_MISTAKES = [
    (causes.MISSING_SCALE, lambda x: _decode_reference(x, scale=1.0)),
    (causes.WRONG_KV_HEAD, _kv_head_modulo),
]


@exercise(3, "paged_decode")
def check_paged_decode(fn: Callable[..., torch.Tensor]) -> None:
    """`fn(q, k_cache, v_cache, block_tables, seq_lens)` equals attention over each sequence's
    first seq_len tokens, read one block at a time through its table, in q's dtype."""
    cases = _decode_cases()
    if not getattr(fn, "__module__", "").startswith("paged_kv."):  # (the library's: a kernel)
        _reads_blocks_itself(fn, cases.pop(0))
    for case in cases:
        judge(fn, case, _DECODE, _decode_reference, variants=_DECODE_MISTAKES)
    passed("equals attention through the tables, block by block: length 0, half precision")


def _reads_blocks_itself(fn: Callable[..., Any], case: Case) -> None:
    """The learner's own code reads the cache, at most one block at a time."""
    reads = tensor_probes.BlockReads

    def watched(x: Inputs) -> Inputs:
        reads.largest, reads.library = 0, ""
        return {**x, **{n: x[n].as_subclass(reads) for n in ("k_cache", "v_cache")}}

    judge(fn, case, _DECODE, _decode_reference, variants=_DECODE_MISTAKES, watch=watched)
    if reads.library:
        fail(causes.CALLS_LIBRARY, case, _DECODE, "", name=reads.library)
    block = math.prod(tensor_probes.build(case.code)["k_cache"].shape[1:])
    if reads.largest > block:
        fail(causes.NOT_PAGED, case, _DECODE, "", numel=reads.largest, block=block)


def check_write_kv(fn: Callable[..., None]) -> None:
    """The library's `write_kv(k_cache, v_cache, slots, k, v)`, checked like an exercise: row i
    goes to flat slot slots[i], and a slot of -1 is skipped."""
    gen = torch.Generator().manual_seed(2)
    for trial in range(30):
        blocks, size = (int(torch.randint(1, 5, (1,), generator=gen)) for _ in range(2))
        n = int(torch.randint(1, blocks * size + 1, (1,), generator=gen))
        slots = torch.randperm(blocks * size, generator=gen)[:n]
        slots[torch.rand(n, generator=gen) < 0.2] = -1
        k, v = torch.randn(n, 2, 3, generator=gen), torch.randn(n, 2, 3, generator=gen)
        (k1, v1), (k2, v2) = ((torch.zeros(blocks, size, 2, 3) for _ in "kv") for _ in "12")
        fn(k1, v1, slots, k, v)
        write_kv(k2, v2, slots, k, v)
        where = f"at slots {slots.tolist()} into {blocks} blocks of {size}"
        expect(
            torch.equal(k1, k2) and torch.equal(v1, v2),
            f"trial {trial}: after writing rows {where}, the caches differ from the expected "
            "ones. Slot s is block s // block_size, offset s % block_size; skip slots of -1.",
            causes.WRONG_RESULT,
        )
    passed("slot-mapping write")
