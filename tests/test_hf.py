"""from_hf: a Hugging Face Llama-family model, loaded into TinyLM, served by the paged engine,
gives transformers' own logits and greedy tokens, stops at the model's EOS as `generate` does,
and every model it cannot serve exactly is refused by name."""

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from paged_kv import InvalidArgument
from paged_kv.serving import hf as hf_module
from paged_kv.serving.engine import Engine
from paged_kv.serving.hf import FAMILIES, INERT, READ, from_hf, require_servable
from paged_kv.serving.scheduler import SamplingParams

transformers = pytest.importorskip("transformers")
from transformers.models.auto.modeling_auto import (  # noqa: E402 (after the importorskip)
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
)

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
YARN_ROPE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
CASES = {
    "llama-mha": ("LlamaForCausalLM", "LlamaConfig", dict(num_key_value_heads=8)),
    "llama-gqa4": ("LlamaForCausalLM", "LlamaConfig", dict(num_key_value_heads=2)),
    "llama-tied-llama3-rope": (
        "LlamaForCausalLM",
        "LlamaConfig",
        dict(num_key_value_heads=1, tie_word_embeddings=True, rope_scaling=LLAMA3_ROPE),
    ),
    "llama-yarn-rope": ("LlamaForCausalLM", "LlamaConfig", dict(rope_scaling=YARN_ROPE)),
    "qwen2-qkv-bias": ("Qwen2ForCausalLM", "Qwen2Config", dict(num_key_value_heads=2)),
    "mistral-no-window": (
        "MistralForCausalLM",
        "MistralConfig",
        dict(num_key_value_heads=4, head_dim=16, sliding_window=None),
    ),
}


def hf_model(case: str, **changes) -> torch.nn.Module:
    model_cls, config_cls, extra = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**{**SMALL, **extra, **changes})
    return getattr(transformers, model_cls)(config).eval()


def hf_greedy(hf: torch.nn.Module, prompt: list[int], new: int) -> list[int]:
    """`generate`'s greedy tokens for one prompt, stopping where the model's own generation
    config says (its EOS)."""
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),  # 0 is a token here
            max_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


def assert_engine_equals_generate(hf: torch.nn.Module, prompts: list[list[int]], new: int):
    engine = Engine(from_hf(hf), num_blocks=12, block_size=8, max_batch_tokens=64)
    completions = engine.generate(prompts, new)
    assert [c.token_ids for c in completions] == [hf_greedy(hf, p, new) for p in prompts]


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_greedy_tokens_match_transformers(case):
    hf = hf_model(case)
    hf.generation_config.eos_token_id = None  # every prompt runs its 10 tokens
    ours = from_hf(hf)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (5, 21, 40)]
    for prompt in prompts:
        with torch.no_grad():
            expected = hf(torch.tensor([prompt])).logits[0]
        torch.testing.assert_close(ours.forward_dense(prompt), expected, rtol=1e-5, atol=1e-5)
    assert_engine_equals_generate(hf, prompts, 10)


# -- the model's EOS ---------------------------------------------------------------------


def test_the_models_eos_ends_a_request_where_it_ends_generate():
    hf = hf_model("llama-gqa4")
    hf.generation_config.eos_token_id = hf.config.eos_token_id = None
    prompt = list(range(7, 30))
    full = hf_greedy(hf, prompt, 12)
    assert len(full) == 12
    eos = full[3]
    assert eos not in full[:3]
    other = next(t for t in range(300) if t not in full)
    for setting in (eos, [other, eos]):
        hf.generation_config.eos_token_id = setting
        assert hf_greedy(hf, prompt, 12) == full[:4]  # generate stops at the EOS, keeping it
        ours = from_hf(hf)
        assert ours.eos_token_ids == (tuple(setting) if isinstance(setting, list) else (eos,))
        engine = Engine(ours, num_blocks=12, block_size=8)
        assert engine.generate([prompt], 12)[0].token_ids == full[:4]
        assert engine.generate([prompt], 12, ignore_eos=True)[0].token_ids == full
        rid = engine.add_request(prompt, SamplingParams(12, ignore_eos=True))
        engine.run()
        assert engine.completion(rid).token_ids == full
    hf.generation_config.eos_token_id, hf.config.eos_token_id = None, eos  # the fallback
    assert from_hf(hf).eos_token_ids == (eos,)
    hf.generation_config.eos_token_id = -1  # what continuous batching writes for "none"
    assert from_hf(hf).eos_token_ids == ()
    hf.generation_config.eos_token_id = "2"
    with pytest.raises(InvalidArgument, match="eos_token_id"):
        from_hf(hf)


# -- refusals, by name -------------------------------------------------------------------


REFUSED = {
    "a sliding window": ("mistral-no-window", dict(sliding_window=16), "sliding_window = 16"),
    "qwen2 sliding layers": (
        "qwen2-qkv-bias",
        dict(use_sliding_window=True, sliding_window=16, max_window_layers=0),
        "use_sliding_window = True",
    ),
    "gelu": ("llama-gqa4", dict(hidden_act="gelu"), "hidden_act = 'gelu'"),
    "an o_proj bias": ("llama-gqa4", dict(attention_bias=True), "attention_bias = True"),
    "mlp biases": ("llama-gqa4", dict(mlp_bias=True), "mlp_bias = True"),
    "dynamic rope": (
        "llama-gqa4",
        dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
        "rope_parameters = .*dynamic",
    ),
    "longrope": (
        "llama-gqa4",
        dict(
            rope_scaling={
                "rope_type": "longrope",
                "short_factor": [1.0] * 4,
                "long_factor": [2.0] * 4,
                "original_max_position_embeddings": 64,
            },
            num_key_value_heads=8,
            hidden_size=64,
            num_attention_heads=8,
        ),
        "rope_parameters = .*longrope",
    ),
    "partial rotary": (
        "llama-gqa4",
        dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}),
        "partial_rotary_factor 0.5",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_config_feature_tinylm_lacks_is_refused_by_name(case):
    base, changes, message = REFUSED[case]
    with pytest.raises(InvalidArgument, match=message):
        from_hf(hf_model(base, **changes))


def test_qwen2_layer_types_with_a_window_are_refused_by_name():
    hf = hf_model("qwen2-qkv-bias")
    hf.config.layer_types = ["full_attention", "sliding_attention"]
    with pytest.raises(InvalidArgument, match=r"config\.layer_types = "):
        from_hf(hf)


def test_a_config_field_from_hf_does_not_know_is_refused(monkeypatch):
    monkeypatch.setattr(hf_module, "INERT", INERT - {"initializer_range"})  # as if new
    with pytest.raises(InvalidArgument, match=r"config\.initializer_range = 0\.02 is a field"):
        from_hf(hf_model("llama-gqa4"))


def test_other_families_are_refused_with_the_fields_they_add():
    torch.manual_seed(0)
    qwen3 = transformers.Qwen3ForCausalLM(
        transformers.Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8)
    )
    with pytest.raises(InvalidArgument, match=r"config\.model_type = 'qwen3'.*use_sliding_window"):
        from_hf(qwen3)
    with pytest.raises(InvalidArgument, match="takes a transformers causal LM"):
        from_hf(nn.Linear(2, 2))


def test_subclasses_and_foreign_modules_are_refused():
    class Tweaked(transformers.LlamaForCausalLM):
        pass

    config = hf_model("llama-gqa4").config
    with pytest.raises(InvalidArgument, match="own LlamaForCausalLM"):
        from_hf(Tweaked(config))

    class QuantizedLinear(nn.Linear):
        pass

    hf = hf_model("llama-gqa4")
    hf.model.layers[1].self_attn.q_proj = QuantizedLinear(64, 64, bias=False)
    with pytest.raises(InvalidArgument, match=r"model.layers.1.self_attn.q_proj is a .*Quantized"):
        from_hf(hf)


def test_the_families_code_reads_only_fields_from_hf_classifies():
    """transformers' modeling code of each served family reads no config field (nor an
    undeclared key, by getattr) that from_hf neither reads, knows to be inert nor requires."""
    for model_type, family in FAMILIES.items():
        source = Path(hf_module.modeling_module(model_type).__file__).read_text()
        read = set(re.findall(r"\bconfig\.(\w+)", source))
        read |= set(re.findall(r"getattr\((?:self\.)?config, \"(\w+)\"", source))
        known = READ | INERT | set(family.required) | {"_attn_implementation"}
        assert read - known == set(), model_type


def test_without_a_tokenizer_prompts_are_token_ids_and_text_is_none():
    engine = Engine(from_hf(hf_model("llama-gqa4")), num_blocks=8)
    with pytest.raises(InvalidArgument, match="no tokenizer"):
        engine.add_request("hello")
    [completion] = engine.generate([[1, 2, 3]], 2, ignore_eos=True)
    assert completion.text is None and len(completion.token_ids) == 2


# -- every Llama-family architecture transformers ships ----------------------------------


def llama_family() -> list[str]:
    """The installed transformers' Llama-family causal LMs: the registered causal-LM classes
    (`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`) that transformers' modular sources derive from
    `LlamaForCausalLM`, directly or through another such class (`class
    MistralForCausalLM(LlamaForCausalLM)`, `class Qwen3ForCausalLM(Qwen2ForCausalLM)`...), and
    whose config is text only (no sub-configs: no vision or audio tower)."""
    models = Path(transformers.__file__).parent / "models"
    parent = {}
    for modular in models.glob("*/modular_*.py"):
        text = modular.read_text()
        parent.update(re.findall(r"^class (\w+ForCausalLM)\((\w+ForCausalLM)\b", text, re.M))
    family = {"LlamaForCausalLM"}
    while grown := {child for child, p in parent.items() if p in family} - family:
        family |= grown
    registered = family & set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    return sorted(
        name
        for name in registered
        if not getattr(getattr(transformers, name).config_class, "sub_configs", None)
    )


TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
UNBUILDABLE_DEFAULTS = {  # what transformers needs to build these (their defaults leave it
    # None), or, for Gemma3n, to share KV across 4 layers instead of 35
    "CohereCompassForCausalLM": dict(
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    ),
    "Dots1ForCausalLM": dict(n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1),
    "Gemma3nForCausalLM": dict(
        layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2
    ),
    "Lfm2MoeForCausalLM": dict(layer_types=["conv", "full_attention"] * 2),
    "Qwen4ExpForCausalLM": dict(
        indexer_n_heads=2,
        indexer_kv_heads=1,
        indexer_head_dim=16,
        indexer_budget=64,
        indexer_compress_ratio=4,
    ),
}


def tiny_config(model_cls: type) -> object:
    """The class's default config made small: the sizes in `TINY`, per-layer lists (layer
    types...) cut to the first layers, special ids moved into the smaller vocabulary, what
    transformers needs to build it (`UNBUILDABLE_DEFAULTS`); every other default kept."""
    default = model_cls.config_class()
    values = default.to_dict()
    changes = {key: value for key, value in TINY.items() if key in values}
    for key, value in values.items():
        if isinstance(value, list) and len(value) == default.num_hidden_layers:
            changes[key] = value[: TINY["num_hidden_layers"]]
    top = TINY["vocab_size"] - 1
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = values.get(key)
        if isinstance(value, int) and value > top:
            changes[key] = top
        elif isinstance(value, list):
            changes[key] = [min(v, top) for v in value]
    changes.update(UNBUILDABLE_DEFAULTS.get(model_cls.__name__, {}))
    return model_cls.config_class(**changes)


@pytest.mark.parametrize("name", llama_family())
def test_every_llama_family_architecture_is_served_exactly_or_refused_by_name(name):
    model_cls = getattr(transformers, name)
    config = tiny_config(model_cls)
    with torch.device("meta"):  # its classes and config, without weights
        skeleton = model_cls(config)
    try:
        require_servable(skeleton)
    except InvalidArgument as refusal:
        assert name not in ("LlamaForCausalLM", "Qwen2ForCausalLM"), "served by default"
        named = re.search(r"config\.(\w+) = ", str(refusal))
        assert named is not None and hasattr(config, named.group(1)), str(refusal)
        return
    torch.manual_seed(0)
    hf = model_cls(config).eval()
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 128, (n,), generator=gen).tolist() for n in (3, 17)]
    assert_engine_equals_generate(hf, prompts, 8)
