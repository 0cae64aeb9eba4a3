"""The trained TinyLM: loaded only when its file is intact, served exactly as dense decoding
serves it, and writing words of the lectures it was trained on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from functools import cache
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as save_tensors

from paged_kv import InvalidArgument
from paged_kv.cache.eviction import POLICIES
from paged_kv.errors import InvalidWeights
from paged_kv.serving import ByteTokenizer, Engine, ModelConfig, TinyLM, greedy_dense
from paged_kv.serving.pretrained import (
    TINY_LM_WEIGHTS,
    hash_path,
    load_tiny_lm,
    save_tiny_lm,
)

ROOT = Path(__file__).resolve().parent.parent
NEW_TOKENS = 16
TOKENIZER = ByteTokenizer()


@cache
def trained() -> TinyLM:
    return load_tiny_lm()


@cache
def prompts() -> list[list[int]]:
    from paged_kv.__main__ import QUESTIONS, SYSTEM_PROMPT

    return [TOKENIZER.encode(SYSTEM_PROMPT + q) for q in QUESTIONS[:3]]


@cache
def dense_completions() -> list[list[int]]:
    return [greedy_dense(trained(), p, NEW_TOKENS) for p in prompts()]


def lecture_words() -> set[str]:
    text = " ".join(
        "".join(cell["source"])
        for notebook in sorted((ROOT / "notebooks").glob("*.ipynb"))
        for cell in json.loads(notebook.read_text())["cells"]
        if cell["cell_type"] == "markdown"
    )
    return set(re.findall(r"[a-z]+", text.lower()))


def test_the_shipped_weights_match_their_recorded_hash_and_fit_their_config():
    recorded = hash_path(TINY_LM_WEIGHTS).read_text().split()
    assert recorded == [
        hashlib.sha256(TINY_LM_WEIGHTS.read_bytes()).hexdigest(),
        TINY_LM_WEIGHTS.name,
    ]
    assert TINY_LM_WEIGHTS.stat().st_size <= 5 * 2**20
    model = trained()
    assert not model.training and model.dtype == torch.float32
    assert model.config.vocab_size == 256 and model.config != ModelConfig()


@pytest.mark.parametrize("eviction", sorted(POLICIES))
def test_engine_tokens_equal_dense_decoding_with_the_trained_weights(eviction):
    block_size = 7
    longest = max(-(-(len(p) + NEW_TOKENS) // block_size) for p in prompts())
    engine = Engine(
        trained(),
        num_blocks=longest + 2,
        block_size=block_size,
        eviction=eviction,
        max_batch_tokens=96,
        max_running=4,
    )
    completions = engine.generate(prompts(), NEW_TOKENS)
    assert [c.token_ids for c in completions] == dense_completions()
    stats = engine.stats()
    assert stats.preemptions and stats.prefill_tokens_saved  # it had to work for them


def test_the_trained_model_writes_words_of_its_lectures():
    vocabulary = lecture_words()
    for completion in dense_completions():
        text = TOKENIZER.decode(completion)
        assert "\ufffd" not in text, repr(text)  # whole UTF-8 characters only
        assert all(ch.isprintable() or ch == "\n" for ch in text), repr(text)
        words = re.findall(r"[a-z]{2,}", text.lower())[:-1]  # the last may be cut off
        known = [w for w in words if w in vocabulary]
        assert len(words) >= 2 and len(known) >= 0.8 * len(words), repr(text)


def test_the_demo_prints_the_prompt_and_a_readable_completion(capsys):
    from paged_kv.__main__ import QUESTIONS, main

    main(["--requests", "2", "--new-tokens", "32"])
    out = capsys.readouterr().out
    shown = out.split("completion:", 1)[1].split("\n\n", 1)[0]
    assert QUESTIONS[0] in out.split("completion:", 1)[0]
    words = re.findall(r"[a-z]{2,}", shown.lower())[:-1]  # the last may be cut off
    assert len(words) >= 4 and sum(w in lecture_words() for w in words) >= 0.8 * len(words)


def test_save_and_load_round_trip_through_fp16(tmp_path):
    model = TinyLM(ModelConfig(hidden_size=32, intermediate_size=48, head_dim=8), seed=3)
    path = tmp_path / "m.safetensors"
    digest = save_tiny_lm(model, path, {"source": "a test"})
    assert hash_path(path).read_text() == f"{digest}  m.safetensors\n"
    loaded = load_tiny_lm(path)
    assert loaded.config == model.config
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor.half().float()), name


def test_save_refuses_to_overwrite_the_config_it_writes(tmp_path):
    with pytest.raises(InvalidArgument, match="config"):
        save_tiny_lm(TinyLM(), tmp_path / "m.safetensors", {"config": "{}"})
    assert not list(tmp_path.iterdir())


def copy_of_the_weights(tmp_path: Path) -> Path:
    path = tmp_path / TINY_LM_WEIGHTS.name
    path.write_bytes(TINY_LM_WEIGHTS.read_bytes())
    hash_path(path).write_text(hash_path(TINY_LM_WEIGHTS).read_text())
    return path


def test_a_changed_byte_is_refused_by_the_hash(tmp_path):
    path = copy_of_the_weights(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidWeights, match="SHA-256"):
        load_tiny_lm(path)


@pytest.mark.parametrize("which", ["weights", "hash"])
def test_a_missing_file_is_named(tmp_path, which):
    path = copy_of_the_weights(tmp_path)
    gone = path if which == "weights" else hash_path(path)
    gone.unlink()
    with pytest.raises(InvalidWeights, match=re.escape(gone.name)):
        load_tiny_lm(path)


def write_with_its_hash(path: Path, data: bytes) -> Path:
    """A file whose recorded hash is right, so that only the checks after the hash judge it."""
    path.write_bytes(data)
    hash_path(path).write_text(f"{hashlib.sha256(data).hexdigest()}  {path.name}\n")
    return path


def test_a_misshapen_or_missing_tensor_is_refused_even_with_a_right_hash(tmp_path):
    config = ModelConfig(hidden_size=32, intermediate_size=48, head_dim=8)
    tensors = {k: v.half() for k, v in TinyLM(config).state_dict().items()}
    header = {"config": json.dumps(dataclasses.asdict(config))}
    bad = dict(tensors, **{"lm_head.weight": torch.zeros(256, 16, dtype=torch.float16)})
    path = write_with_its_hash(tmp_path / "a.safetensors", save_tensors(bad, metadata=header))
    with pytest.raises(InvalidWeights, match=r"lm_head\.weight .*\(256, 16\).*\(256, 32\)"):
        load_tiny_lm(path)
    fewer = {k: v for k, v in tensors.items() if k != "norm.weight"}
    path = write_with_its_hash(tmp_path / "b.safetensors", save_tensors(fewer, metadata=header))
    with pytest.raises(InvalidWeights, match=r"missing \['norm\.weight'\]"):
        load_tiny_lm(path)


@pytest.mark.parametrize(
    "data",
    [
        b"\x01",
        (10**9).to_bytes(8, "little") + b"{}",
        save_tensors({"x": torch.zeros(2)}),  # no config in its header
    ],
    ids=["too short", "header past the end", "no config"],
)
def test_a_file_without_a_valid_header_is_refused(tmp_path, data):
    path = write_with_its_hash(tmp_path / "h.safetensors", data)
    with pytest.raises(InvalidWeights):
        load_tiny_lm(path)
