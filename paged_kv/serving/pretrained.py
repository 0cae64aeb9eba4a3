"""The trained TinyLM the course ships: its weights in safetensors, checked before use.

`tools/train_tiny_lm.py` trains a byte-level `TinyLM` on the course's own lecture text and
writes it with `save_tiny_lm`: the weights in fp16, the `ModelConfig` and the training record
in the file's header, and the file's SHA-256 in `<file>.sha256` beside it (`sha256sum -c`
reads it). `load_tiny_lm` trusts nothing it reads: the hash, then the header, then every
tensor's name and shape against the model the header describes, before it builds the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from paged_kv.errors import InvalidArgument, InvalidWeights
from paged_kv.serving.model import ModelConfig, TinyLM

TINY_LM_WEIGHTS = Path(__file__).parent / "weights" / "tiny_lm.safetensors"
"""The weights committed with the package (trained by `tools/train_tiny_lm.py`)."""

STORED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def hash_path(weights: Path) -> Path:
    """Where the SHA-256 of `weights` is recorded: `<file>.sha256`, in `sha256sum` format."""
    return weights.with_name(weights.name + ".sha256")


def save_tiny_lm(model: TinyLM, path: Path | str, metadata: Mapping[str, str]) -> str:
    """Write `model`'s weights in fp16 to `path`, its config and `metadata` in the header, and
    the file's SHA-256 beside it; returns that hash."""
    if "config" in metadata:
        raise InvalidArgument("metadata['config'] is written by save_tiny_lm itself.")
    path = Path(path)
    tensors = {
        name: tensor.detach().to(torch.float16).contiguous()
        for name, tensor in model.state_dict().items()
    }
    header = {"config": json.dumps(dataclasses.asdict(model.config)), **metadata}
    data = save_tensors(tensors, metadata=header)
    path.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    hash_path(path).write_text(f"{digest}  {path.name}\n")
    return digest


def load_tiny_lm(path: Path | str = TINY_LM_WEIGHTS) -> TinyLM:
    """The `TinyLM` stored at `path` (by default the course's trained one), in fp32, in eval
    mode. Raises `InvalidWeights` if the file or its `.sha256` is missing, the hash differs,
    or the tensors do not fit the config in the header."""
    path = Path(path)
    recorded = hash_path(path)
    for needed in (path, recorded):
        if not needed.is_file():
            raise InvalidWeights(
                f"{needed} is missing; the trained TinyLM needs its weights and their .sha256 "
                "(restore them from the repository, or run tools/train_tiny_lm.py)."
            )
    data = path.read_bytes()
    expected = next(iter(recorded.read_text().split()), "")
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise InvalidWeights(
            f"{path.name} has SHA-256 {digest}, but {recorded.name} records {expected or '-'}: "
            "the file was changed or damaged. Restore it, or re-run tools/train_tiny_lm.py."
        )
    config = _config_from_header(data, path)
    try:
        tensors = load_tensors(data)
    except SafetensorError as err:
        raise InvalidWeights(f"{path.name} is not a readable safetensors file: {err}.") from err
    model = TinyLM(config)
    _check_tensors(tensors, model.state_dict(), path)
    model.load_state_dict({name: t.float() for name, t in tensors.items()})
    return model.eval()


def _config_from_header(data: bytes, path: Path) -> ModelConfig:
    """The `ModelConfig` recorded in the safetensors header of `data`."""
    if len(data) < 8:
        raise InvalidWeights(f"{path.name} is {len(data)} bytes: too short for a header.")
    (size,) = struct.unpack("<Q", data[:8])
    try:
        if 8 + size > len(data):
            raise ValueError(f"the header claims {size} bytes")
        header = json.loads(data[8 : 8 + size])
        fields = json.loads(header["__metadata__"]["config"])
        return ModelConfig(**fields)
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidWeights(
            f"{path.name} has no valid model config in its header ({err!r}); it was not "
            "written by save_tiny_lm."
        ) from err


def _check_tensors(
    found: Mapping[str, torch.Tensor], wanted: Mapping[str, torch.Tensor], path: Path
) -> None:
    """Every tensor the model needs is there, with its shape and a float dtype; no extra."""
    missing = sorted(set(wanted) - set(found))
    extra = sorted(set(found) - set(wanted))
    if missing or extra:
        raise InvalidWeights(
            f"{path.name} does not fit its config: missing {missing[:4]}, extra {extra[:4]}."
        )
    for name, tensor in wanted.items():
        stored = found[name]
        if stored.shape != tensor.shape or stored.dtype not in STORED_DTYPES:
            raise InvalidWeights(
                f"{path.name}: {name} is {stored.dtype} {tuple(stored.shape)}, the config "
                f"needs a float tensor of shape {tuple(tensor.shape)}."
            )
