"""from_hf: a Hugging Face Llama-family model, loaded into TinyLM, served by the paged engine,
gives transformers' own logits and greedy tokens."""

import pytest
import torch

from paged_kv import InvalidArgument
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import from_hf

transformers = pytest.importorskip("transformers")

SMALL = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=8,
    max_position_embeddings=256,
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
CASES = {
    "llama-mha": ("LlamaForCausalLM", "LlamaConfig", dict(num_key_value_heads=8)),
    "llama-gqa4": ("LlamaForCausalLM", "LlamaConfig", dict(num_key_value_heads=2)),
    "llama-tied-llama3-rope": (
        "LlamaForCausalLM",
        "LlamaConfig",
        dict(num_key_value_heads=1, tie_word_embeddings=True, rope_scaling=LLAMA3_ROPE),
    ),
    "qwen2-qkv-bias": ("Qwen2ForCausalLM", "Qwen2Config", dict(num_key_value_heads=2)),
}


def hf_model(case: str) -> torch.nn.Module:
    model_cls, config_cls, extra = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**SMALL, **extra)
    return getattr(transformers, model_cls)(config).eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_greedy_tokens_match_transformers(case):
    hf = hf_model(case)
    ours = from_hf(hf)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 300, (n,), generator=gen) for n in (5, 21, 40)]
    for prompt in prompts:
        with torch.no_grad():
            expected = hf(prompt[None]).logits[0]
        torch.testing.assert_close(ours.forward_dense(prompt), expected, rtol=1e-5, atol=1e-5)
    engine = Engine(ours, num_blocks=12, block_size=8, max_batch_tokens=64)
    completions = engine.generate([p.tolist() for p in prompts], 10)
    for prompt, completion in zip(prompts, completions, strict=True):
        with torch.no_grad():
            out = hf.generate(
                prompt[None],
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),  # 0 is a token here
                max_new_tokens=10,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        assert completion.token_ids == out[0, len(prompt) :].tolist()


def test_models_of_another_layout_are_refused_with_the_difference():
    torch.manual_seed(0)
    qwen3 = transformers.Qwen3ForCausalLM(
        transformers.Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8)
    )
    with pytest.raises(InvalidArgument, match="q_norm"):
        from_hf(qwen3)


def test_a_non_silu_mlp_is_refused():
    model_cls, config_cls, extra = CASES["llama-gqa4"]
    config = getattr(transformers, config_cls)(**SMALL, **extra, hidden_act="gelu")
    with pytest.raises(InvalidArgument, match="silu"):
        from_hf(getattr(transformers, model_cls)(config))


def test_without_a_tokenizer_prompts_are_token_ids_and_text_is_none():
    engine = Engine(from_hf(hf_model("llama-gqa4")), num_blocks=8)
    with pytest.raises(InvalidArgument, match="no tokenizer"):
        engine.add_request("hello")
    [completion] = engine.generate([[1, 2, 3]], 2)
    assert completion.text is None and len(completion.token_ids) == 2
