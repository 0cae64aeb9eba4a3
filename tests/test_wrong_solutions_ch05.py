"""Chapter 05: plausible wrong online softmaxes, merges and paged decodes, each failing its
check with a message naming the mistake."""

import math

import pytest
import torch

from paged_kv.attention import paged_decode as library_decode
from paged_kv.attention.reference import merge_partials
from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed


def online_softmax(tiles):
    m = total = acc = None
    for scores, values in tiles:
        tile_max = scores.max()
        m_new = tile_max if m is None else torch.maximum(m, tile_max)
        if torch.isinf(m_new) and m_new < 0:
            continue
        weights = torch.exp(scores - m_new)
        if acc is None:
            total, acc = weights.sum(), weights @ values
        else:
            rescale = torch.exp(m - m_new)
            total, acc = total * rescale + weights.sum(), acc * rescale + weights @ values
        m = m_new
    return acc / total, m + torch.log(total)


def decode_with(softmax):
    def paged_decode(q, k_cache, v_cache, block_tables, seq_lens):
        batch, q_heads, dim = q.shape
        block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
        group = q_heads // kv_heads
        out = torch.empty_like(q)
        for b in range(batch):
            length = int(seq_lens[b])
            blocks = block_tables[b, : -(-length // block_size)].tolist()
            for h in range(q_heads):
                query = q[b, h].float() / math.sqrt(dim)
                tiles = [
                    (
                        k_cache[block, : min(block_size, length - i * block_size), h // group]
                        .float()
                        .matmul(query),
                        v_cache[block, : min(block_size, length - i * block_size), h // group],
                    )
                    for i, block in enumerate(blocks)
                ]
                out[b, h] = softmax(iter(tiles))[0]
        return out

    return paged_decode


def test_the_solution_and_the_library_pass():
    checks.check_online_softmax(online_softmax)
    checks.check_lse_merge(merge_partials)
    checks.check_paged_decode(decode_with(online_softmax))
    checks.check_paged_decode(library_decode)


# -- exercise 1: the online softmax ------------------------------------------------------------


def forgets_to_rescale_the_accumulator(tiles):
    m = total = acc = None
    for scores, values in tiles:
        m_new = scores.max() if m is None else torch.maximum(m, scores.max())
        if torch.isinf(m_new) and m_new < 0:
            continue
        w = torch.exp(scores - m_new)
        if acc is None:
            total, acc = w.sum(), w @ values
        else:
            total, acc = total * torch.exp(m - m_new) + w.sum(), acc + w @ values
        m = m_new
    return acc / total, m + torch.log(total)


def each_tile_its_own_maximum(tiles):
    total = acc = None
    for scores, values in tiles:
        w = torch.exp(scores - scores.max())
        total = w.sum() if total is None else total + w.sum()
        acc = w @ values if acc is None else acc + w @ values
    return acc / total, torch.log(total)


def no_maximum_at_all(tiles):
    total = acc = 0
    for scores, values in tiles:
        w = torch.exp(scores)
        total, acc = total + w.sum(), acc + w @ values
    return acc / total, torch.log(total)


def keeps_every_tile(tiles):
    kept = list(tiles)
    scores = torch.cat([s for s, _ in kept])
    values = torch.cat([v for _, v in kept])
    return torch.softmax(scores, 0) @ values, torch.logsumexp(scores, 0)


def nan_on_a_masked_tile(tiles):
    m = torch.tensor(float("-inf"), dtype=torch.float64)
    total = torch.tensor(0.0, dtype=torch.float64)
    acc = 0
    for scores, values in tiles:
        m_new = torch.maximum(m, scores.max())
        rescale = torch.exp(m - m_new)
        w = torch.exp(scores - m_new)
        total, acc, m = total * rescale + w.sum(), acc * rescale + w @ values, m_new
    return acc / total, m + torch.log(total)


def lse_without_the_maximum(tiles):
    out, lse = online_softmax(tiles)
    return out, lse - lse.floor() + 0.5


def normalises_each_tile(tiles):
    m = total = acc = None
    for scores, values in tiles:
        if torch.isinf(scores.max()) and scores.max() < 0:
            continue
        m_new = scores.max() if m is None else torch.maximum(m, scores.max())
        w = torch.exp(scores - m_new)
        tile_out = (w @ values) / w.sum()
        if acc is None:
            total, acc = w.sum(), tile_out
        else:
            total = total * torch.exp(m - m_new) + w.sum()
            acc = (acc + tile_out) / 2
        m = m_new
    return acc, m + torch.log(total)


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (forgets_to_rescale_the_accumulator, "multiply both the running sum and the accumulator"),
        (each_tile_its_own_maximum, "multiply both the running sum and the accumulator"),
        (no_maximum_at_all, "exp\\(800\\) overflows|NaN|running maximum"),
        (keeps_every_tile, "still held tile 0"),
        (nan_on_a_masked_tile, "exp\\(-inf - -inf\\) is NaN"),
        (lse_without_the_maximum, "lse = m \\+ log\\(l\\)"),
        (normalises_each_tile, "divide by the sum once, at the end"),
    ],
)
def test_a_wrong_online_softmax_fails_naming_its_mistake(fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_online_softmax(fn)
    assert str(failure.value).startswith("Exercise 1 (online_softmax)")


# -- exercise 2: the split-K merge -------------------------------------------------------------


def mean_of_slices(outs, lses):
    return outs.mean(dim=-2)


def unnormalised_exp(outs, lses):
    return (torch.exp(lses).nan_to_num(0.0)[..., None] * outs).sum(dim=-2)


def weights_proportional_to_lse(outs, lses):
    finite = lses.nan_to_num(0.0, neginf=0.0)
    return (finite / finite.sum(-1, keepdim=True))[..., None].mul(outs).sum(-2)


def softmax_with_nan_for_empty_slices(outs, lses):
    weights = torch.exp(lses - lses.max(-1, keepdim=True).values)
    weights = weights / weights.sum(-1, keepdim=True)
    weights[torch.isinf(lses)] = float("nan")
    return (weights[..., None] * outs).sum(dim=-2)


def plain_sum(outs, lses):
    return outs.sum(dim=-2)


@pytest.mark.parametrize(
    "fn",
    [
        mean_of_slices,
        unnormalised_exp,
        weights_proportional_to_lse,
        softmax_with_nan_for_empty_slices,
        plain_sum,
    ],
)
def test_a_wrong_merge_fails_naming_its_mistake(fn):
    with pytest.raises(CheckFailed, match="Weight each slice by exp") as failure:
        checks.check_lse_merge(fn)
    assert str(failure.value).startswith("Exercise 2 (lse_merge)")


# -- exercise 3: paged decode ------------------------------------------------------------------


def ignores_the_table(q, k_cache, v_cache, tables, lens):
    flat = torch.arange(k_cache.shape[0])[None].expand(q.shape[0], -1)
    return library_decode(q, k_cache, v_cache, flat, lens)


def reads_whole_blocks(q, k_cache, v_cache, tables, lens):
    size = k_cache.shape[1]
    return library_decode(q, k_cache, v_cache, tables, (lens + size - 1) // size * size)


def wrong_kv_head(q, k_cache, v_cache, tables, lens):
    kv_heads = k_cache.shape[2]
    order = torch.arange(q.shape[1]).reshape(-1, kv_heads).T.reshape(-1)  # h % kv_heads
    return library_decode(q[:, order], k_cache, v_cache, tables, lens)[:, order.argsort()]


def no_scale(q, k_cache, v_cache, tables, lens):
    return library_decode(q * math.sqrt(q.shape[-1]), k_cache, v_cache, tables, lens)


def one_token_short(q, k_cache, v_cache, tables, lens):
    return library_decode(q, k_cache, v_cache, tables, (lens - 1).clamp(min=1))


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (ignores_the_table, "NaN|table\\[t // block_size\\]"),
        (reads_whole_blocks, "the output has NaN"),
        (wrong_kv_head, "query head h reads KV head h // group"),
        (no_scale, "1/sqrt\\(head_dim\\)"),
        (one_token_short, "off by"),
    ],
)
def test_a_wrong_paged_decode_fails_naming_its_mistake(fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_paged_decode(fn)
    assert str(failure.value).startswith("Exercise 3 (paged_decode)")
