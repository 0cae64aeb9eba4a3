"""Chapter 05 checks: the online softmax, the split-K log-sum-exp merge, paged decode, and
writing K/V by slot mapping, each against the library's reference on the inputs
`tensor_probes` names (half precision, scores of ±800, leading dimensions, empty slices,
fully masked rows)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import Any

import torch

from paged_kv.attention.reference import merge_partials, reference_decode
from paged_kv.attention.storage import write_kv
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import exercise, expect, passed
from paged_kv.course.checks.tensor_probes import (
    BlockReads,
    Case,
    Reference,
    build,
    fail,
    is_library,
    judge,
    library_calls,
    tiles_held,
)

Inputs = dict[str, Any]
_HALF = "Compute in float32 (tiles may come in float16 or bfloat16) and return float32 out and lse"
_SHIFT = (
    "The same case shifted to moderate values passes: subtract the running maximum (start it "
    "at -inf, not 0) before exp, so that no exp overflows and the largest term is exp(0) = 1"
)
_SHIFT_LSE = "The same lses shifted to moderate values pass: subtract the largest lse before exp"

# -- exercise 1: the online softmax ------------------------------------------------------------


def _tiles(seed: int, bounds: list[tuple[int, int]], *, offset: int = 0, dtype: str = "",
           masked: str = "", width: int = 3) -> str:  # fmt: skip
    """The code of a row of scores (random, ×4, + `offset`) cut into tiles at `bounds`."""
    cast, plus = (f".to(torch.{dtype})" if dtype else ""), (f" + {offset}" if offset else "")
    n = bounds[-1][1]
    lines = [f"g = torch.Generator().manual_seed({seed})",
             f"scores = torch.randn({n}, generator=g) * 4{plus}",
             f"values = torch.randn({n}, {width}, generator=g)",
             *([f"scores[{masked}] = -math.inf"] if masked else []),
             f"tiles = [(scores[a:b]{cast}, values[a:b]{cast}) for a, b in {bounds}]"]  # fmt: skip
    return "\n".join(lines)


def _bounds(rng: random.Random, n: int) -> list[tuple[int, int]]:
    cuts = sorted({0, n, *(rng.randrange(1, n) for _ in range(rng.randint(0, 4)) if n > 1)})
    return list(itertools.pairwise(cuts))


def _softmax_cases() -> tuple[list[Case], list[Case]]:
    """The plain cases (before the memory probe), then the hard ones."""
    rng = random.Random(3)
    rising = (
        "scores = torch.tensor([0.0, 1.0, 5.0, 9.0, 30.0, 31.0])\n"
        "values = torch.arange(12.0).reshape(6, 2)\n"
        "tiles = [(scores[a:b], values[a:b]) for a, b in [(0, 2), (2, 4), (4, 6)]]"
    )
    plain = [Case("a rising maximum: every tile beats the last", rising)]
    plain += [
        Case(f"random row {i}", _tiles(i, _bounds(rng, rng.randint(1, 40)))) for i in range(30)
    ]
    cut, long = [(0, 3), (3, 7), (7, 9)], [(i, i + 8) for i in range(0, 64, 8)]
    hard = [
        Case("masked keys (-inf), the first tile all masked",
             _tiles(41, [(0, 2), (2, 3), (3, 5)], masked="[0, 1, 3]"),
             "A tile of masked keys adds nothing: while the running maximum is still -inf, "
             "exp(-inf - -inf) is NaN and there is nothing to rescale yet"),
        *(Case(f"scores near {off:+}", _tiles(42, cut, offset=off), twin=_tiles(42, cut),
               twin_cause=causes.OVERFLOW, twin_hint=_SHIFT) for off in (800, -800)),
        *(Case(f"{dtype} tiles", _tiles(40, long, dtype=dtype), _HALF, twin=_tiles(40, long),
               twin_cause=causes.PRECISION, twin_hint=_HALF) for dtype in ("float16", "bfloat16")),
        Case("a fully masked row (every score -inf)", _tiles(43, [(0, 2), (2, 4)], masked=":"),
             "A row with nothing to attend to gives out = zeros (the values' width) and "
             "lse = -inf, so that a merge weighs it 0"),
    ]  # fmt: skip
    return plain, hard


def _softmax_reference(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    tiles = list(inputs["tiles"])
    scores = torch.cat([s for s, _ in tiles]).double()
    values = torch.cat([v for _, v in tiles]).double()
    lse = torch.logsumexp(scores, 0)
    if lse == -math.inf:
        return torch.zeros(values.shape[-1]), lse.float()
    return (torch.softmax(scores, 0) @ values).float(), lse.float()


def _unrescaled(*, sum_too: bool, own_max: bool) -> Reference:
    """The output of an online softmax that never rescales its accumulator (nor its sum, if
    `sum_too`; each tile shifted by its own maximum, if `own_max`)."""

    def output(inputs: Inputs) -> torch.Tensor:
        m, total, acc = -math.inf, torch.zeros((), dtype=torch.float64), torch.zeros(())
        for s, v in inputs["tiles"]:
            s, v = s.double(), v.double()
            m_new = max(m, s.max().item())
            if m_new == -math.inf:
                continue
            w = torch.exp(s - (s.max() if own_max else m_new))
            total = total * (1.0 if sum_too else math.exp(m - m_new)) + w.sum()
            acc, m = acc + w @ v, m_new
        return (acc / total).float()

    return output


_RESCALES = [(causes.MISSING_RESCALE, _unrescaled(sum_too=s, own_max=o)) for s, o in
             [(False, False), (True, False), (True, True)]]  # fmt: skip
_ONLINE = "online_softmax(iter(tiles))"


def _tiles_of(inputs: Inputs) -> tuple[Any, ...]:
    return (iter(inputs["tiles"]),)


@exercise(1, "online_softmax")
def check_online_softmax(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`fn(tiles)` walks (scores, values) tiles of one row once and returns
    `(softmax(scores) @ values, logsumexp(scores))` in float32, holding only a running
    maximum, a running sum and a rescaled accumulator (never a tile it has passed)."""
    plain, hard = _softmax_cases()
    for case in plain:
        judge(fn, case, _ONLINE, _tiles_of, _softmax_reference, variants=_RESCALES)
    _holds_no_tile(fn)
    for case in hard:
        judge(fn, case, _ONLINE, _tiles_of, _softmax_reference, variants=_RESCALES)
    passed(
        f"equals the softmax of the whole row on {len(plain) + len(hard) + 1} rows of tiles "
        "(masked, ±800, half precision), in one pass, no tile kept"
    )


def _holds_no_tile(fn: Callable[..., Any]) -> None:
    """32 tiles of 16 keys (64 wide), made one at a time: the tensor bytes alive when tile 31
    comes out are those alive at tile 8, give or take a few tiles."""
    code = (
        "g = torch.Generator().manual_seed(9)\n"
        "tiles = ((torch.randn(16, generator=g), torch.randn(16, 64, generator=g)) "
        "for _ in range(32))"
    )
    case, held = Case("a row of 32 tiles of 16 keys, 64 values wide", code), []

    def watched(fn: Callable[..., Any], inputs: Inputs) -> Any:
        return fn(tiles_held(inputs["tiles"], 8, 31, held))

    judge(fn, case, _ONLINE, _tiles_of, _softmax_reference, run=watched)
    if len(held) == 2 and held[1] - held[0] > 8 * 16 * 65 * 4:
        fail(causes.KEEPS_TILES, case, _ONLINE, "", grown=held[1] - held[0], early=8, late=31)


# -- exercise 2: the split-K merge -----------------------------------------------------------

_EMPTY = (
    "An empty slice comes as out = 0 and lse = -inf and weighs 0; a row of only empty slices "
    "merges to 0"
)


_WEIGHT = "Weight each slice by exp(its lse - the logsumexp of all the lses)"


def _merge_case(what: str, seed: int, shape: tuple[int, ...], *extra: str, hint: str = "",
                twin_cause: str = "") -> Case:  # fmt: skip
    """outs [*shape, 4] and lses [*shape] at random, then the `extra` lines; with a
    `twin_cause`, the twin is the case without the first extra line."""
    lines = [f"g = torch.Generator().manual_seed({seed})",
             f"outs = torch.randn({(*shape, 4)}, generator=g)",
             f"lses = torch.randn({shape}, generator=g) * 3"]  # fmt: skip
    twin = "\n".join(lines + list(extra[1:])) if twin_cause else None
    return Case(what, "\n".join(lines + list(extra)), hint, twin, twin_cause or causes.WRONG_RESULT,
                _SHIFT_LSE)  # fmt: skip


def _merge_cases() -> list[Case]:
    rng = random.Random(1)
    return [
        *(_merge_case(f"random row {i}", i, (rng.randint(1, 6),), hint=_WEIGHT) for i in range(20)),
        _merge_case("leading dimensions: outs [2, 3, 5, 4], lses [2, 3, 5]", 20, (2, 3, 5),
                    hint="The slices are the last dimension of lses, the ones before are batch"),
        _merge_case("empty slices (lse -inf, out 0)", 21, (6,), "lses[[1, 4]] = -math.inf",
                    "outs[[1, 4]] = 0", hint=_EMPTY),
        _merge_case("a row of only empty slices, in a batch of 3", 22, (3, 4),
                    "lses[1] = -math.inf", "outs[1] = 0", hint=_EMPTY),
        *(_merge_case(f"lses near {off:+}", 23, (5,), f"lses = lses + {off}",
                      twin_cause=causes.OVERFLOW) for off in (800, -800)),
        *(_merge_case(f"{dtype} inputs", 24, (2, 5),
                      f"outs, lses = outs.to(torch.{dtype}), lses.to(torch.{dtype})",
                      hint="Return outs' dtype") for dtype in ("float16", "bfloat16")),
    ]  # fmt: skip


def _merge_reference(inputs: Inputs) -> torch.Tensor:
    return merge_partials(inputs["outs"].double(), inputs["lses"].double()).to(inputs["outs"].dtype)


def _softmax_over(dim: int) -> Reference:
    def output(x: Inputs) -> torch.Tensor:
        w = torch.softmax(x["lses"].double(), dim).nan_to_num(0.0)
        return (w[..., None] * x["outs"].double()).sum(-2).to(x["outs"].dtype)

    return output


@exercise(2, "lse_merge")
def check_lse_merge(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """`fn(outs [..., S, D], lses [..., S])` merges S slices' softmax results exactly, as
    `paged_kv.attention.reference.merge_partials` does."""
    for case in _merge_cases():
        dims = build(case.code)["lses"].dim()
        wrong_dims = [(causes.WRONG_DIM, _softmax_over(d)) for d in range(dims - 1)]
        judge(fn, case, "lse_merge(outs, lses)", lambda x: (x["outs"], x["lses"]),
              _merge_reference, variants=wrong_dims)  # fmt: skip
    passed("merges split-K slices: leading dimensions, empty slices, ±800, half precision")


# -- exercise 3: paged decode ------------------------------------------------------------------

_NAN = (
    "Unused slots of the cache hold NaN here: read only the blocks in a sequence's table, and "
    "only its first seq_len tokens"
)
_DECODE = "paged_decode(q, k_cache, v_cache, block_tables, seq_lens)"


def _batch(seed: int, block_size: int, group: int, *extra: str) -> str:
    return "\n".join(["from paged_kv.attention.testing import random_paged_batch",
                      f"g = torch.Generator().manual_seed({seed})",
                      "q, k_cache, v_cache, block_tables, seq_lens, _ = random_paged_batch(g, 3, "
                      f"{block_size}, 2, {group}, 8)", *extra])  # fmt: skip


def _decode_cases() -> list[Case]:
    hint = (
        "Token t of a sequence sits at (table[t // block_size], t % block_size); scale the "
        "scores by 1/sqrt(head_dim)"
    )
    return [
        *(Case(f"block_size {bs}, GQA group {g}", _batch(s, bs, g), f"{hint}. {_NAN}")
          for s, (bs, g) in enumerate([(4, 1), (1, 2), (16, 4), (8, 2)])),
        Case("a sequence of length 0", _batch(5, 4, 2, "seq_lens[1] = 0"),
             "A sequence with no tokens attends to nothing: its output is 0"),
        *(Case(f"{dtype} q and caches", _batch(6, 4, 2, f"q, k_cache, v_cache = q.to(torch."
               f"{dtype}), k_cache.to(torch.{dtype}), v_cache.to(torch.{dtype})"),
               "The output has q's dtype (compute in float32, return q.dtype)")
          for dtype in ("float16", "bfloat16")),
    ]  # fmt: skip


def _decode_args(x: Inputs) -> tuple[Any, ...]:
    return x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["seq_lens"]


def _decode_reference(x: Inputs, **kw: Any) -> torch.Tensor:
    q, k, v, tables, lens = _decode_args(x)
    return reference_decode(q.float(), k.float(), v.float(), tables, lens, **kw).to(q.dtype)


def _kv_head_modulo(x: Inputs) -> torch.Tensor:
    """Query head h reading KV head h % num_kv_heads (instead of h // group)."""
    q, kv_heads = x["q"], x["k_cache"].shape[2]
    order = torch.arange(q.shape[1]).reshape(-1, kv_heads).T.reshape(-1)
    out = _decode_reference({**x, "q": q[:, order]})
    return out[:, order.argsort()]


_DECODE_MISTAKES = [
    (causes.MISSING_SCALE, lambda x: _decode_reference(x, scale=1.0)),
    (causes.WRONG_KV_HEAD, _kv_head_modulo),
]


@exercise(3, "paged_decode")
def check_paged_decode(fn: Callable[..., torch.Tensor]) -> None:
    """`fn(q, k_cache, v_cache, block_tables, seq_lens)` equals attention over each sequence's
    first seq_len tokens, read one block at a time through its table, in q's dtype."""
    first, *rest = _decode_cases()
    if not is_library(fn):
        _reads_blocks_itself(fn, first)
    for case in [first, *rest]:
        judge(fn, case, _DECODE, _decode_args, _decode_reference, variants=_DECODE_MISTAKES)
    passed("equals attention through the tables, block by block: length 0, half precision")


def _reads_blocks_itself(fn: Callable[..., Any], case: Case) -> None:
    """The learner's own code reads the cache, at most one block at a time."""
    called: list[str] = []

    def watched(fn: Callable[..., Any], x: Inputs) -> Any:
        k, v = x["k_cache"].as_subclass(BlockReads), x["v_cache"].as_subclass(BlockReads)
        BlockReads.largest = 0
        with library_calls(called):
            return fn(x["q"], k, v, x["block_tables"], x["seq_lens"])

    judge(fn, case, _DECODE, _decode_args, _decode_reference, variants=_DECODE_MISTAKES,
          run=watched)  # fmt: skip
    if called:
        fail(causes.CALLS_LIBRARY, case, _DECODE, "", name=called[0])
    k = build(case.code)["k_cache"]
    block = k.shape[1] * k.shape[2] * k.shape[3]
    if BlockReads.largest > block:
        fail(causes.NOT_PAGED, case, _DECODE, "", numel=BlockReads.largest, block=block)


# -- writing K/V by slot mapping (the library's, checked like an exercise) --------------------


def check_write_kv(fn: Callable[..., None]) -> None:
    """`fn(k_cache, v_cache, slots, k, v)` stores row i at flat slot slots[i]; -1 is skipped."""
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
        expect(
            torch.equal(k1, k2) and torch.equal(v1, v2),
            f"trial {trial}: after writing rows at slots {slots.tolist()} into {blocks} blocks "
            f"of {size}, the caches differ from the expected ones. Slot s is block "
            "s // block_size, offset s % block_size; skip slots of -1.",
            causes.WRONG_RESULT,
        )
    passed("slot-mapping write")
