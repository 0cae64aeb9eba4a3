"""The model: paged forward passes equal the cache-free dense forward, chunk by chunk."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import InvalidArgument, KVCacheManager
from paged_kv.serving.model import (
    ForwardBatch,
    ModelConfig,
    SeqChunk,
    TinyLM,
    greedy_dense,
    parameter_shapes,
)
from paged_kv.serving.tokenizer import ByteTokenizer

GQA = ModelConfig(num_heads=4, num_kv_heads=1, head_dim=8, hidden_size=32, num_layers=3)


def chunk(manager: KVCacheManager, seq: int, start: int) -> SeqChunk:
    tokens = manager.token_ids(seq)
    return SeqChunk(
        tokens[start:], start, manager.slot_mapping(seq, start), manager.block_table(seq)
    )


@pytest.mark.parametrize("config", [ModelConfig(), GQA], ids=["default", "gqa4"])
@pytest.mark.parametrize("block_size", [1, 5, 16])
def test_prefill_then_decode_steps_match_dense_logits(config, block_size):
    model = TinyLM(config, seed=1)
    kv = model.kv_storage(num_blocks=64, block_size=block_size)
    manager = KVCacheManager(64, block_size, prefix_caching=False)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (7, 19, 1)]
    for seq, prompt in enumerate(prompts):
        manager.add_sequence(seq, prompt)
    logits = model(ForwardBatch.build([chunk(manager, s, 0) for s in range(3)]), kv)
    for seq in range(3):  # one mixed step of prefills, then decode steps
        dense = model.forward_dense(manager.token_ids(seq))
        torch.testing.assert_close(logits[seq], dense[-1], rtol=1e-5, atol=1e-5)
    for _ in range(4):
        for seq in range(3):
            manager.append_tokens(seq, [int(torch.randint(0, 256, (1,), generator=gen))])
        batch = ForwardBatch.build([chunk(manager, s, manager.num_tokens(s) - 1) for s in range(3)])
        assert batch.prefill_spans == [] and len(batch.decode_rows) == 3
        logits = model(batch, kv)
        for seq in range(3):
            dense = model.forward_dense(manager.token_ids(seq))[-1]
            torch.testing.assert_close(logits[seq], dense, rtol=1e-5, atol=1e-5)


def test_a_prefix_hit_prefill_computes_only_the_new_tokens_and_matches_dense():
    model = TinyLM(seed=2)
    kv = model.kv_storage(num_blocks=32, block_size=4)
    manager = KVCacheManager(32, 4)
    shared = list(range(40, 53))
    manager.add_sequence("a", [*shared, 1, 2])
    model(ForwardBatch.build([chunk(manager, "a", 0)]), kv)
    manager.add_sequence("b", [*shared, 9, 9, 9])
    start = manager.num_cached_tokens("b")
    assert start == 12
    logits = model(ForwardBatch.build([chunk(manager, "b", start)]), kv)
    torch.testing.assert_close(
        logits[0], model.forward_dense([*shared, 9, 9, 9])[-1], rtol=1e-5, atol=1e-5
    )


def test_same_seed_same_weights_and_the_global_rng_is_untouched():
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    a, b = TinyLM(seed=5), TinyLM(seed=5)
    assert torch.rand(1) == expected
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(TinyLM(seed=6).lm_head.weight, a.lm_head.weight)


def test_tied_embeddings_share_one_tensor():
    model = TinyLM(ModelConfig(tie_word_embeddings=True))
    assert model.lm_head.weight is model.embed_tokens.weight


def test_greedy_dense_appends_the_argmax_each_step():
    model = TinyLM(seed=3)
    prompt = [1, 2, 3]
    out = greedy_dense(model, prompt, 3)
    for i, token in enumerate(out):
        assert token == int(model.forward_dense(prompt + out[:i])[-1].argmax())


@pytest.mark.parametrize(
    "kwargs",
    [dict(num_heads=4, num_kv_heads=3), dict(head_dim=7), dict(hidden_size=0), dict(num_layers=-1)],
)
def test_bad_configs_are_refused(kwargs):
    with pytest.raises(InvalidArgument):
        ModelConfig(**kwargs)


def test_a_batch_needs_tokens_for_every_sequence():
    with pytest.raises(InvalidArgument, match="at least one token"):
        ForwardBatch.build([SeqChunk([], 0, [], [0])])


@settings(max_examples=60, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips_any_text(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert all(0 <= t < 256 for t in ids)
    assert tok.decode(ids) == text


def test_byte_tokenizer_rejects_non_bytes():
    with pytest.raises(InvalidArgument):
        ByteTokenizer().decode([300])
    with pytest.raises(InvalidArgument):
        ByteTokenizer().encode(b"bytes")  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    layers=st.integers(1, 3),
    kv_heads=st.integers(1, 2),
    group=st.integers(1, 3),
    head_dim=st.sampled_from([2, 4]),
    hidden=st.integers(1, 9),
    intermediate=st.integers(1, 9),
    vocab=st.integers(1, 9),
    bias=st.booleans(),
    tie=st.booleans(),
)
def test_parameter_shapes_are_the_state_dicts_without_building_the_model(
    layers, kv_heads, group, head_dim, hidden, intermediate, vocab, bias, tie
):
    config = ModelConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
        num_layers=layers, num_heads=kv_heads * group, num_kv_heads=kv_heads,
        head_dim=head_dim, attention_bias=bias, tie_word_embeddings=tie,
    )  # fmt: skip
    built = {name: tuple(t.shape) for name, t in TinyLM(config).state_dict().items()}
    assert parameter_shapes(config) == built
