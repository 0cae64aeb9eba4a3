"""`from_hf`: a Hugging Face Llama-family causal LM served on the paged cache, exactly.

`from_hf` copies a model's weights into `TinyLM` only when TinyLM computes what transformers
computes for that model; anything else is refused with `InvalidArgument` naming the field, its
value and what is served. It works from allow-lists, so that a field or module it has not been
told about is refused, never guessed:

- the model's class is transformers' own causal LM of a family in `FAMILIES` (not a subclass),
  and every module in it is that family's or a plain Linear, Embedding or the SiLU;
- every field its config class declares is one TinyLM reads (`READ`), one that cannot change a
  model's greedy tokens in eval mode (`INERT`), or one of the family's `required` fields, with
  a value TinyLM implements. Keys the config class does not declare are ignored, because
  transformers' code for these families reads none (tests/test_hf.py reads that code);
- the rotary frequencies are fixed once made (`STATIC_ROPE_TYPES`) and turn the whole head.

The model's end-of-sequence ids come along (`TinyLM.eos_token_ids`): a request stops at one
unless its `SamplingParams(ignore_eos=True)`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from paged_kv.errors import InvalidArgument
from paged_kv.serving.model import ModelConfig, TinyLM
from paged_kv.validation import as_int


class Rule(NamedTuple):
    """The values of a config field that TinyLM implements: `served` says which, in words."""

    served: str
    holds: Callable[[Any], bool]


def only(value: object) -> Rule:
    return Rule(repr(value), lambda v: v == value and type(v) is type(value))


def every_layer_full(layer_types: Any) -> bool:
    return isinstance(layer_types, list | tuple) and all(t == "full_attention" for t in layer_types)


SILU = only("silu")
FULL_ATTENTION = Rule("every layer 'full_attention' (no sliding window)", every_layer_full)


@dataclass(frozen=True)
class Family:
    """A transformers model type whose code is Llama's once its config has the `required`
    values. `prefix` names its classes (`LlamaForCausalLM`, `LlamaDecoderLayer`, ...)."""

    model_type: str
    prefix: str
    required: Mapping[str, Rule]
    qkv_bias: bool = False  # q/k/v biases fixed by the family's code, not its config (Qwen2)


FAMILIES = {
    family.model_type: family
    for family in (
        Family(
            "llama",
            "Llama",  # attention_bias puts a bias on o_proj too, which TinyLM has not
            {"hidden_act": SILU, "attention_bias": only(False), "mlp_bias": only(False)},
        ),
        Family("mistral", "Mistral", {"hidden_act": SILU, "sliding_window": only(None)}),
        Family(
            "qwen2",
            "Qwen2",
            {
                "hidden_act": SILU,
                "use_sliding_window": only(False),
                "sliding_window": only(None),
                "layer_types": FULL_ATTENTION,
            },
            qkv_bias=True,
        ),
    )
}
"""The model types `from_hf` serves: transformers' code for each is Llama's given `required`."""

MODULES = ("ForCausalLM", "Model", "DecoderLayer", "Attention", "MLP", "RMSNorm", "RotaryEmbedding")
"""The family's own module classes a served model may hold (besides Linear and Embedding)."""

READ = frozenset(
    {
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_parameters",  # checked by `rotary_check`; its frequencies are copied
        "tie_word_embeddings",
        "eos_token_id",
    }
)
"""Config fields TinyLM takes over."""

INERT = frozenset(
    {
        # transformers' base config: naming, outputs, task heads, the dtype of loading
        "transformers_version",
        "architectures",
        "output_hidden_states",
        "return_dict",
        "dtype",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "id2label",
        "label2id",
        "problem_type",
        # the families' own
        "max_position_embeddings",  # read for rope types computed per length (refused) or
        # to derive a yarn factor, which lands in the frequencies copied
        "initializer_range",  # random initialisation only
        "use_cache",
        "pad_token_id",
        "bos_token_id",
        "attention_dropout",  # dropout is off in eval mode
        "pretraining_tp",  # not read by transformers 5
        "max_window_layers",  # Qwen2: only derives layer_types, which are checked
    }
)
"""Config fields that cannot change a served model's greedy tokens."""

STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
"""Rotary types whose frequencies and scaling are fixed when made, so copying them serves
them; "dynamic" and "longrope" change them with the sequence's length."""


def from_hf(hf_model: Any) -> TinyLM:
    """A `TinyLM` with the weights of a Hugging Face Llama-family causal LM, computing what
    transformers computes for it: LlamaForCausalLM (SmolLM too), MistralForCausalLM and
    Qwen2ForCausalLM without a sliding window, with default, linear, llama3 or yarn rotary
    scaling. Anything else (another family, a sliding window, another activation, biases
    TinyLM has not, a rotary type or a config field it does not know, modules not the
    family's) is refused by `require_servable` with `InvalidArgument` naming what differs.
    The model's EOS ids (its generation config's, else its config's) end requests unless
    `SamplingParams(ignore_eos=True)`."""
    family = require_servable(hf_model)
    config = hf_model.config
    model = TinyLM(
        ModelConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None)
            or config.hidden_size // config.num_attention_heads,
            rms_norm_eps=config.rms_norm_eps,
            attention_bias=family.qkv_bias,
            tie_word_embeddings=bool(config.tie_word_embeddings),
        )
    )
    weights = {key.removeprefix("model."): value for key, value in hf_model.state_dict().items()}
    if model.config.tie_word_embeddings:
        weights.setdefault("lm_head.weight", weights["embed_tokens.weight"])
    model.load_state_dict(weights)  # the same names: the modules were checked to be Llama's
    rotary = hf_model.model.rotary_emb
    model.inv_freq = rotary.inv_freq.detach().float().clone()
    model.attention_scaling = float(rotary.attention_scaling)
    model.eos_token_ids = eos_token_ids(hf_model, config.vocab_size)
    return model.to(device=hf_model.device, dtype=hf_model.dtype).eval()


def require_servable(hf_model: Any) -> Family:
    """The family of `hf_model` if TinyLM computes exactly what transformers computes for it;
    else `InvalidArgument` naming the config field (`config.<field> = <value>`), module or
    class that differs and what is served. Reads the model's classes and config only."""
    family, config = family_of(hf_model)
    name = type(hf_model).__name__
    for field in declared_fields(config):
        value = getattr(config, field, None)
        rule = family.required.get(field)
        if rule is not None:
            if not rule.holds(value):
                raise InvalidArgument(
                    f"from_hf cannot serve this {name}: config.{field} = {value!r}, and TinyLM "
                    f"implements {field} = {rule.served} only."
                )
        elif field not in READ and field not in INERT:
            raise InvalidArgument(
                f"from_hf cannot serve this {name}: config.{field} = {value!r} is a field "
                "from_hf does not know (a newer transformers?); it serves the fields it "
                f"implements only: {sorted(READ | set(family.required))}."
            )
    rotary_check(config, name)
    modules_check(hf_model, family)
    return family


def family_of(hf_model: Any) -> tuple[Family, Any]:
    """The served family of `hf_model`, whose class must be that family's own causal LM."""
    config = getattr(hf_model, "config", None)
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if config is None:
        raise InvalidArgument(
            f"from_hf takes a transformers causal LM (e.g. LlamaForCausalLM), got "
            f"{type(hf_model).__name__}."
        )
    if family is None:
        from transformers import LlamaConfig

        extra = sorted(set(declared_fields(config)) - set(declared_fields(LlamaConfig())))
        raise InvalidArgument(
            f"from_hf cannot serve this {type(hf_model).__name__}: config.model_type = "
            f"{model_type!r}, and from_hf serves model_type {', '.join(FAMILIES)} only "
            "(transformers' code for them is Llama's)"
            + (f"; its config has fields Llama's has not: {extra}." if extra else ".")
        )
    causal_lm = getattr(modeling_module(family.model_type), family.prefix + "ForCausalLM")
    if type(hf_model) is not causal_lm:
        raise InvalidArgument(
            f"from_hf serves transformers' own {causal_lm.__name__} for model_type "
            f"{model_type!r}, not {type(hf_model).__module__}.{type(hf_model).__qualname__}."
        )
    return family, config


def modeling_module(model_type: str) -> Any:
    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")


def declared_fields(config: Any) -> list[str]:
    """The fields `config`'s class declares (transformers 5 configs are dataclasses)."""
    if not dataclasses.is_dataclass(config):
        raise InvalidArgument(
            f"from_hf reads transformers 5 configs (dataclasses); a {type(config).__name__} is "
            "not one: upgrade transformers (`pip install -e '.[hf]'`)."
        )
    return [field.name for field in dataclasses.fields(config)]


def rotary_check(config: Any, name: str) -> None:
    """Refuse rotary embeddings whose frequencies move with the length, or that turn part of
    each head only: TinyLM copies the frequencies once and turns the whole head."""
    rope = config.rope_parameters
    rope_type = rope.get("rope_type") if isinstance(rope, dict) else None
    if rope_type not in STATIC_ROPE_TYPES:
        raise InvalidArgument(
            f"from_hf cannot serve this {name}: config.rope_parameters = {rope!r}; TinyLM "
            f"implements rope_type {', '.join(STATIC_ROPE_TYPES)} only."
        )
    factor = rope.get("partial_rotary_factor", 1.0)
    if factor != 1.0:
        raise InvalidArgument(
            f"from_hf cannot serve this {name}: config.rope_parameters = {rope!r} has "
            f"partial_rotary_factor {factor!r}; TinyLM turns the whole head (1.0) only."
        )


def modules_check(hf_model: nn.Module, family: Family) -> None:
    """Every module is the family's own or a plain Linear, Embedding or SiLU: no quantized or
    wrapped layers, whose weights TinyLM would misread."""
    from transformers.activations import ACT2FN

    modeling = modeling_module(family.model_type)
    known = {getattr(modeling, family.prefix + suffix) for suffix in MODULES}
    known |= {nn.Linear, nn.Embedding, nn.ModuleList, type(ACT2FN["silu"])}
    for path, module in hf_model.named_modules():
        if type(module) not in known:
            raise InvalidArgument(
                f"from_hf cannot serve this {type(hf_model).__name__}: its module "
                f"{path or '(root)'} is a {type(module).__module__}.{type(module).__qualname__}, "
                f"and TinyLM implements {family.prefix}'s own modules, nn.Linear and "
                "nn.Embedding only."
            )


def eos_token_ids(hf_model: Any, vocab_size: int) -> tuple[int, ...]:
    """The model's EOS ids: its generation config's `eos_token_id` (an int or a list), else its
    config's. Ids outside the vocabulary can never be sampled, so none is kept (transformers'
    continuous batching writes -1 for "no EOS")."""
    generation = getattr(hf_model, "generation_config", None)
    eos = getattr(generation, "eos_token_id", None)
    if eos is None:
        eos = getattr(hf_model.config, "eos_token_id", None)
    if eos is None:
        return ()
    values = eos.tolist() if isinstance(eos, torch.Tensor) else eos
    ids = [as_int(v) for v in (values if isinstance(values, list | tuple) else [values])]
    if any(i is None for i in ids):
        raise InvalidArgument(
            f"the model's eos_token_id is {eos!r}; from_hf takes an int or a list of ints."
        )
    return tuple(dict.fromkeys(i for i in ids if i is not None and 0 <= i < vocab_size))
