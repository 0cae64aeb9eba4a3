"""The trained TinyLM: loaded only when its file is intact, served exactly as dense decoding
serves it, and writing words of the lectures it was trained on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import subprocess
import sys
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
    with pytest.raises(InvalidWeights, match=re.escape(gone.name)) as refused:
        load_tiny_lm(path)
    assert f"{gone} is missing" in str(refused.value)
    assert refused.value.field == ("file" if which == "weights" else "sha256")


@pytest.mark.parametrize("which", ["weights", "hash"])
@pytest.mark.parametrize("kind", ["a FIFO", "a folder", "a link to /dev/zero"])
def test_a_file_that_is_not_a_regular_file_is_named_as_such(tmp_path, which, kind):
    path = copy_of_the_weights(tmp_path)
    odd = path if which == "weights" else hash_path(path)
    odd.unlink()
    {"a FIFO": os.mkfifo, "a folder": os.mkdir, "a link to /dev/zero": _link_to_zero}[kind](odd)
    with pytest.raises(InvalidWeights) as refused:
        load_tiny_lm(path)
    assert str(refused.value).startswith(f"{odd} is not a regular file"), str(refused.value)
    assert refused.value.field == ("file" if which == "weights" else "sha256")


def _link_to_zero(path):
    path.symlink_to("/dev/zero")


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


# -- hostile files: every field checked, nothing allocated that the file chose ---------------


def shipped_header() -> tuple[dict, bytes]:
    """The shipped file's header (parsed) and the tensor bytes after it."""
    data = TINY_LM_WEIGHTS.read_bytes()
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def hostile(
    tmp_path: Path,
    config: dict | None = None,
    header: dict | None = None,
    raw_header: bytes | None = None,
    tail: bytes = b"",
) -> Path:
    """The shipped weights with `config` fields and `header` entries replaced (or the whole
    header given as `raw_header`), `tail` appended, and a right `.sha256`: so only the checks
    after the hash would catch them."""
    parsed, tensors = shipped_header()
    fields = json.loads(parsed["__metadata__"]["config"]) | (config or {})
    parsed["__metadata__"]["config"] = json.dumps(fields)
    parsed |= header or {}
    text = json.dumps(parsed).encode() if raw_header is None else raw_header
    data = len(text).to_bytes(8, "little") + text + tensors + tail
    return write_with_its_hash(tmp_path / "hostile.safetensors", data)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"hidden_size": 65536}, "embed_tokens.weight"),  # 17 GB of parameters, once
        ({"num_layers": 10**6}, "num_layers"),  # minutes and gigabytes, once
        ({"rms_norm_eps": "abc"}, "rms_norm_eps"),
        ({"rms_norm_eps": math.nan}, "rms_norm_eps"),
        ({"rms_norm_eps": -1}, "rms_norm_eps"),
        ({"rms_norm_eps": math.inf}, "rms_norm_eps"),
        ({"rope_theta": True}, "rope_theta"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
        ({"attention_bias": 0}, "attention_bias"),
        ({"vocab_size": True}, "vocab_size"),
        ({"vocab_size": "256"}, "vocab_size"),
        ({"head_dim": 32.0}, "head_dim"),
        ({"num_heads": 0}, "num_heads"),
        ({"intermediate_size": 2**40}, "intermediate_size"),
        ({"num_kv_heads": 3}, "config"),  # 4 query heads do not group over 3
        ({"sliding_window": 64}, "sliding_window"),  # a field ModelConfig has not
    ],
    ids=repr,
)
def test_every_config_field_is_checked_for_type_and_range(tmp_path, config, field):
    with pytest.raises(InvalidWeights) as refused:
        load_tiny_lm(hostile(tmp_path, config=config))
    assert refused.value.field == field, str(refused.value)
    assert field in str(refused.value)


def tensor_entry(name: str) -> dict:
    return shipped_header()[0][name]


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ({"norm.weight": tensor_entry("norm.weight") | {"dtype": "I64"}}, "norm.weight"),
        ({"norm.weight": tensor_entry("norm.weight") | {"shape": [True] * 128}}, "norm.weight"),
        ({"norm.weight": tensor_entry("norm.weight") | {"shape": "128"}}, "norm.weight"),
        ({"norm.weight": tensor_entry("norm.weight") | {"data_offsets": [0, 256]}}, "norm.weight"),
        ({"norm.weight": tensor_entry("norm.weight") | {"extra": 1}}, "norm.weight"),
        ({"norm.weight": [1, 2]}, "norm.weight"),
        ({"lm_head.weight": tensor_entry("lm_head.weight") | {"shape": [256, 16]}}, "lm_head.weight"),  # noqa: E501
        ({"__metadata__": {"source": "no config"}}, "config"),
        ({"__metadata__": {"config": "[1, 2]"}}, "config"),
    ],
    ids=["dtype", "bool dims", "str shape", "overlap", "extra key", "not an object",
         "shape", "no config", "config not an object"],
)  # fmt: skip
def test_every_tensor_entry_is_checked_before_anything_is_allocated(tmp_path, header, field):
    with pytest.raises(InvalidWeights) as refused:
        load_tiny_lm(hostile(tmp_path, header=header))
    assert field in str(refused.value) and refused.value.field in (field, "embed_tokens.weight")


def test_the_tensors_must_fill_the_file_exactly(tmp_path):
    with pytest.raises(InvalidWeights, match="the file has") as refused:
        load_tiny_lm(hostile(tmp_path, tail=b"\0" * 64))
    assert refused.value.field == "file size"


@pytest.mark.parametrize(
    "raw_header",
    [
        b"[" * 100_000 + b"]" * 100_000,  # a RecursionError in json, unchecked
        json.dumps({"a": {"b": {"c": {"d": 1}}}}).encode(),
        json.dumps({f"k{i}": i for i in range(20_000)}).encode(),
        b'{"__metadata__": {}, "__metadata__": {}}',
        b'{"x": "\xff"}',
        b"[]",
        b" " * (2 << 20),
    ],
    ids=["deep", "four deep", "too many keys", "a key twice", "not UTF-8", "a list", "2 MiB"],
)
def test_the_header_is_parsed_within_limits(tmp_path, raw_header):
    with pytest.raises(InvalidWeights) as refused:
        load_tiny_lm(hostile(tmp_path, raw_header=raw_header))
    assert refused.value.field == "header", str(refused.value)


def test_a_header_depth_counts_no_bracket_inside_a_string(tmp_path):
    metadata = shipped_header()[0]["__metadata__"]
    deep_text = {"__metadata__": metadata | {"source": "[[[[{{{{ not nesting }}}}]]]]"}}
    assert load_tiny_lm(hostile(tmp_path, header=deep_text)).config == trained().config


@pytest.mark.parametrize(
    "record",
    [
        b"\xff\xfe" * 10,
        b"",
        b"abc  tiny_lm.safetensors\n",
        b"g" * 64 + b"  tiny_lm.safetensors\n",
        b"0" * 64 + b" " * 5000,
    ],
    ids=["not UTF-8", "empty", "short", "not hex", "too long"],
)
def test_a_malformed_hash_record_is_invalid_weights(tmp_path, record):
    path = copy_of_the_weights(tmp_path)
    hash_path(path).write_bytes(record)
    with pytest.raises(InvalidWeights) as refused:
        load_tiny_lm(path)
    assert refused.value.field == "sha256"


def test_an_upper_case_hash_record_is_accepted_as_sha256sum_accepts_it(tmp_path):
    path = copy_of_the_weights(tmp_path)
    digest, name = hash_path(path).read_text().split()
    hash_path(path).write_text(f"{digest.upper()}  {name}\n")
    assert load_tiny_lm(path).config == trained().config


PEAK_PROBE = """
import json, resource, sys, tracemalloc
from paged_kv.errors import InvalidWeights
from paged_kv.serving.pretrained import load_tiny_lm

def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

out = {}
for path in sys.argv[1:]:
    before = peak_rss()
    tracemalloc.start()
    try:
        load_tiny_lm(path)
        field = None
    except InvalidWeights as err:
        field = err.field
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out[path] = {"field": field, "traced": traced, "rss": peak_rss() - before}
print(json.dumps(out))
"""


def test_a_hostile_header_costs_less_than_twice_the_file(tmp_path):
    """The two headers that cost 17 GB and 3 GB: refused with the memory they take measured
    in a fresh process (the traced Python peak, and the growth of the peak RSS, which counts
    torch's allocations too) below twice the file's size."""
    files = []
    for name, config in (("wide", {"hidden_size": 65536}), ("deep", {"num_layers": 10**6})):
        folder = tmp_path / name
        folder.mkdir()
        files.append(hostile(folder, config=config))
    warm_up = copy_of_the_weights(tmp_path)  # the code paths run once before measuring
    hash_path(warm_up).write_text("0" * 64)
    run = subprocess.run(
        [sys.executable, "-c", PEAK_PROBE, str(warm_up), *map(str, files)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    measured = json.loads(run.stdout)
    for path in files:
        cost, size = measured[str(path)], path.stat().st_size
        assert cost["field"] in ("embed_tokens.weight", "num_layers"), cost
        assert cost["traced"] < 2 * size and cost["rss"] < 2 * size, (path.parent.name, cost)
