"""Token id 0 is a token like any other: in prompts, appends, hashes, the engine and the byte
tokenizer (it is the NUL byte). A falsy-value check (`if token:`, `0 < t`) anywhere would
drop or refuse it."""

from functools import cache

import numpy as np
import torch

from paged_kv import KVCacheManager
from paged_kv.cache import block_hashes
from paged_kv.serving import ByteTokenizer, Engine, SamplingParams, TinyLM, greedy_dense


@cache
def model() -> TinyLM:
    return TinyLM(seed=0)


class ZeroLovingLM(TinyLM):
    """TinyLM whose logits always favour token 0, so the engine generates zeros."""

    def forward(self, batch, kv):
        logits = super().forward(batch, kv).clone()
        logits[:, 0] = logits.max() + 100.0
        return logits


@cache
def zero_model() -> ZeroLovingLM:
    return ZeroLovingLM(seed=0)


def test_the_manager_stores_hashes_and_finds_zeros():
    m = KVCacheManager(16, 4)
    assert m.add_sequence("a", [0] * 9) == m.block_table("a")
    assert m.num_tokens("a") == 9 and m.token_ids("a") == [0] * 9
    assert m.append_tokens("a", [0, 0, 0]) == []  # fills the third block
    assert m.token_ids("a") == [0] * 12 and m.num_tokens("a") == 12
    assert len(m.append_tokens("a", [0])) == 1  # the 13th token needs a fourth block
    assert m.token_ids("a") == [0] * 13
    assert m.num_prefix_hit_tokens([0] * 13) == 12  # all three full blocks of zeros hit
    assert m.num_prefix_hit_tokens([1] * 13) == 0
    m.add_sequence("b", [0] * 13)
    assert m.num_cached_tokens("b") == 12
    assert m.block_table("b")[:3] == m.block_table("a")[:3]
    assert m.stats().num_tokens == 26


def test_zero_as_a_numpy_or_torch_integer_is_a_token_too():
    m = KVCacheManager(16, 4)
    m.add_sequence("np", np.zeros(5, dtype=np.int64))
    m.add_sequence("torch", torch.tensor([0, 0, 0, 0, 7]))
    m.add_sequence("mixed", [np.int32(0), 0, torch.tensor(0), 0, 1])
    assert [m.token_ids(s)[:4] for s in m.sequence_ids] == [[0] * 4] * 3
    assert m.num_cached_tokens("torch") == 4 and m.num_cached_tokens("mixed") == 4
    m.append_tokens("np", [np.int64(0), torch.tensor(0)])
    assert m.token_ids("np") == [0] * 7


def test_zero_blocks_hash_differently_from_other_blocks_and_from_nothing():
    zeros = block_hashes([0] * 8, 4)
    assert len(zeros) == 2 and zeros[0] != zeros[1]
    assert zeros != block_hashes([1] * 8, 4)
    assert block_hashes([0, 0, 0, 5], 4) != block_hashes([0, 0, 5, 0], 4)


def test_the_byte_tokenizer_round_trips_the_nul_byte():
    tok = ByteTokenizer()
    assert tok.encode("\x00") == [0]
    assert tok.encode("a\x00b") == [97, 0, 98]
    assert tok.decode([0]) == "\x00"
    assert tok.decode([104, 0, 105]) == "h\x00i"


def test_prompts_with_token_zero_are_served_like_any_other():
    prompts = [[0], [0, 0, 5], [7, 0, 0, 0, 0, 0, 0, 0, 0, 3]]
    engine = Engine(model(), num_blocks=30, block_size=4)
    arrays = [np.array([0, 0, 5]), torch.tensor([0])]
    out = engine.generate([*prompts, "a\x00b", *arrays], 6)
    assert [c.prompt_ids for c in out] == [*prompts, [97, 0, 98], [0, 0, 5], [0]]
    for completion in out:
        assert completion.token_ids == greedy_dense(model(), completion.prompt_ids, 6)


def test_generated_zeros_are_appended_stopped_on_and_decoded():
    engine = Engine(zero_model(), num_blocks=20, block_size=4)
    rid = engine.add_request([0, 0, 0], SamplingParams(6))
    engine.step()
    engine.step()  # the first zero is now appended to the cache
    assert engine.manager.token_ids(rid) == [0, 0, 0, 0]
    engine.run()
    completion = engine.completion(rid)
    assert completion.token_ids == [0] * 6
    assert completion.text == "\x00" * 6
    [stopped] = engine.generate([[9, 9]], 6, stop_token_ids=[0])
    assert stopped.token_ids == [0]  # 0 is a stop token like any other
    sampled = engine.generate([[9, 9]], 4, temperature=1.0, seed=3)
    assert sampled[0].token_ids == [0] * 4
    assert torch.equal(torch.tensor(sampled[0].token_ids), torch.zeros(4, dtype=torch.long))
