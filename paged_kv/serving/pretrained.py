"""The trained TinyLM the course ships: its weights in safetensors, checked before use.

`tools/train_tiny_lm.py` trains a byte-level `TinyLM` on the course's own lecture text and
writes it with `save_tiny_lm`: the weights in fp16, the `ModelConfig` and the training record
in the file's header, and the file's SHA-256 in `<file>.sha256` beside it (`sha256sum -c`
reads it). `load_tiny_lm` trusts nothing it reads, and allocates nothing a file chose before
the file is shown to be that big: the `.sha256` (bounded, any case of hex), the header
(bounded in size, nesting and keys; every config field checked for type and range), every
tensor's name, dtype, shape and byte range against the model the config describes and the
file's real size; then the hash of the bytes it will use; only then does it build the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import struct
from collections.abc import Mapping
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from paged_kv.errors import InvalidArgument, InvalidWeights
from paged_kv.serving.model import ModelConfig, TinyLM, parameter_shapes

TINY_LM_WEIGHTS = Path(__file__).parent / "weights" / "tiny_lm.safetensors"
"""The weights committed with the package (trained by `tools/train_tiny_lm.py`)."""

STORED_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}
"""The dtypes a stored tensor may have, by their names in a safetensors header."""

MAX_HEADER_BYTES = 1 << 20  # the shipped header is 3.5 KB
MAX_HEADER_DEPTH = 3  # {tensor name: {"shape": [dims]}}: objects and arrays three deep
MAX_HEADER_KEYS = 10_000  # the keys of every object in the header together
MAX_HASH_FILE_BYTES = 4096  # "<64 hex digits>  <file name>\n"
MAX_CONFIG_INT = 2**31 - 1
FLOAT_RANGES = {"rms_norm_eps": (0.0, 1.0), "rope_theta": (1.0, 1e12)}
"""Each float field of `ModelConfig`: (exclusive low, inclusive high)."""

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


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
    mode. Raises `InvalidWeights` (its `field` says what was refused) if the file or its
    `.sha256` is missing or malformed, the header breaks a limit or a field has the wrong
    type or range, the tensors do not fit the config or the file's size, or the hash
    differs; nothing is allocated for the model before all of that is checked."""
    path = Path(path)
    recorded = hash_path(path)
    for needed, field in ((path, "file"), (recorded, "sha256")):
        if not needed.is_file():  # links followed: a link to a regular file is fine
            what = "is not a regular file (a folder, FIFO or device?)"
            raise InvalidWeights(
                f"{needed} {what if needed.exists() else 'is missing'}; the trained TinyLM "
                "needs its weights and their .sha256 as files (restore them from the "
                "repository, or run tools/train_tiny_lm.py).",
                field=field,
            )
    expected = _recorded_digest(recorded)
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            head, header = _read_header(f, size, path)
            config = _config_of(header, path)
            _check_layout(header, config, size - len(head), path)
            f.seek(0)
            data = f.read(size)  # the size the header's tensors add up to
    except OSError as err:
        raise InvalidWeights(f"{path} cannot be read ({err}).", field="file") from err
    if len(data) != size or not data.startswith(head):
        raise InvalidWeights(f"{path.name} changed while it was read; load it again.")
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise InvalidWeights(
            f"{path.name} has SHA-256 {digest}, but {recorded.name} records {expected}: "
            "the file was changed or damaged. Restore it, or re-run tools/train_tiny_lm.py.",
            field="sha256",
        )
    try:
        tensors = load_tensors(data)
    except SafetensorError as err:
        raise InvalidWeights(
            f"{path.name} is not a readable safetensors file: {err}.", field="header"
        ) from err
    del data
    model = TinyLM(config)
    model.load_state_dict(tensors)  # each parameter's copy_ casts the stored fp16 to fp32
    return model.eval()


def _recorded_digest(recorded: Path) -> str:
    """The SHA-256 (lower-case hex) that `recorded` holds: `sha256sum`'s `<hex>  <name>`,
    UTF-8, at most `MAX_HASH_FILE_BYTES`; hex of either case, as `sha256sum -c` takes."""
    raw = b""
    try:
        with recorded.open("rb") as f:
            raw = f.read(MAX_HASH_FILE_BYTES + 1)
        words = raw.decode("utf-8").split() if len(raw) <= MAX_HASH_FILE_BYTES else []
    except (OSError, UnicodeDecodeError) as err:
        words = [f"{err}"]
    if not words or not _HEX_DIGEST.fullmatch(words[0]):
        raise InvalidWeights(
            f"{recorded.name} is not a SHA-256 record (UTF-8 text '<64 hex digits>  <file "
            f"name>' as sha256sum writes it, at most {MAX_HASH_FILE_BYTES} bytes); it starts "
            f"{raw[:40]!r}. Restore it, or re-run tools/train_tiny_lm.py.",
            field="sha256",
        )
    return words[0].lower()


def _read_header(f: BinaryIO, size: int, path: Path) -> tuple[bytes, dict[str, Any]]:
    """The bytes up to the end of the safetensors header, and the header parsed."""
    prefix = f.read(8)
    if len(prefix) < 8:
        raise InvalidWeights(
            f"{path.name} is {size} bytes: too short for a header.", field="header"
        )
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise InvalidWeights(
            f"{path.name}'s header claims {length} bytes; the file has {size}, and a header "
            f"at most {MAX_HEADER_BYTES}. It was not written by save_tiny_lm.",
            field="header",
        )
    raw = f.read(length)
    header = _bounded_json(raw, MAX_HEADER_DEPTH, path, "header")
    if not isinstance(header, dict):
        raise InvalidWeights(f"{path.name}'s header is not a JSON object.", field="header")
    return prefix + raw, header


def _bounded_json(raw: bytes, max_depth: int, path: Path, field: str) -> object:
    """`raw` parsed as JSON (UTF-8, no key twice) nested at most `max_depth` deep, with at
    most `MAX_HEADER_KEYS` keys; the depth is counted before the parser runs, so no input can
    exhaust its recursion. Non-finite numbers parse, and the field checks refuse them."""
    keys = 0

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal keys
        keys += len(items)
        found = dict(items)
        if keys > MAX_HEADER_KEYS or len(found) != len(items):
            raise ValueError(f"more than {MAX_HEADER_KEYS} keys, or a key given twice")
        return found

    try:
        text = raw.decode("utf-8")
        brackets = _BRACKET.findall(_JSON_STRING.sub("", text))
        depth = max(accumulate((1 if b in "[{" else -1 for b in brackets), initial=0))
        if depth > max_depth:
            raise ValueError(f"nested {depth} deep, at most {max_depth}")
        return json.loads(text, object_pairs_hook=pairs)  # NaN, Infinity: refused by type
    except ValueError as err:  # also UnicodeDecodeError, json.JSONDecodeError
        raise InvalidWeights(
            f"{path.name}'s {field} is not the JSON save_tiny_lm writes ({err}).", field=field
        ) from err


def _config_of(header: Mapping[str, object], path: Path) -> ModelConfig:
    """The `ModelConfig` in the header's metadata, every field of its declared type and in
    range (ints are ints, not bools or strings; floats finite; bools bools)."""
    metadata = header.get("__metadata__")
    text = metadata.get("config") if isinstance(metadata, dict) else None
    if not isinstance(text, str):
        raise InvalidWeights(
            f"{path.name} has no model config in its header; it was not written by save_tiny_lm.",
            field="config",
        )
    fields = _bounded_json(text.encode(), 1, path, "config")
    declared = {f.name: f.type for f in dataclasses.fields(ModelConfig)}
    if not isinstance(fields, dict) or fields.keys() != declared.keys():
        odd = sorted(set(fields) ^ set(declared)) if isinstance(fields, dict) else ["config"]
        raise InvalidWeights(
            f"{path.name}'s config does not have exactly ModelConfig's fields (unknown or "
            f"missing: {odd[:4]}).",
            field=odd[0],
        )
    values: dict[str, Any] = {
        name: _config_value(name, kind, fields[name], path) for name, kind in declared.items()
    }
    try:
        return ModelConfig(**values)
    except InvalidArgument as err:
        raise InvalidWeights(
            f"{path.name}'s config is inconsistent: {err}", field="config"
        ) from err


def _config_value(name: str, kind: object, value: object, path: Path) -> int | float | bool:
    """`value` if it is what config field `name` of type `kind` takes, else `InvalidWeights`."""
    if kind == "bool":
        if type(value) is bool:
            return value
        wanted = "true or false"
    elif kind == "int":
        if type(value) is int and 1 <= value <= MAX_CONFIG_INT:
            return value
        wanted = f"an int in 1..{MAX_CONFIG_INT}"
    else:
        low, high = FLOAT_RANGES[name]
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is not None and math.isfinite(number) and low < number <= high:
            return float(number)
        wanted = f"a finite number in ({low:g}, {high:g}]"
    raise InvalidWeights(
        f"{path.name}: config field {name!r} must be {wanted}, got {value!r:.40}; the file was "
        "not written by save_tiny_lm.",
        field=name,
    )


def _check_layout(
    header: Mapping[str, object], config: ModelConfig, data_size: int, path: Path
) -> None:
    """Every tensor the config's model needs is in the header, with its shape, a float dtype
    and a byte range that size and dtype fill exactly; no extra one; the ranges tile the
    `data_size` bytes after the header with no gap or overlap."""
    entries = {name: entry for name, entry in header.items() if name != "__metadata__"}
    if config.num_layers > len(entries):  # bounds the work of listing the config's tensors
        raise InvalidWeights(
            f"{path.name}: the config's num_layers={config.num_layers} needs more tensors "
            f"than the {len(entries)} the header lists.",
            field="num_layers",
        )
    wanted = parameter_shapes(config)
    missing = sorted(set(wanted) - set(entries))
    extra = sorted(set(entries) - set(wanted))
    if missing or extra:
        raise InvalidWeights(
            f"{path.name} does not fit its config: missing {missing[:4]}, extra {extra[:4]}.",
            field=(missing + extra)[0],
        )
    spans = []
    for name, shape in wanted.items():
        dtype, stored, (begin, end) = _tensor_entry(name, entries[name], path)
        if stored != shape:
            raise InvalidWeights(
                f"{path.name}: {name} is {dtype} {stored}, the config needs a float tensor "
                f"of shape {shape}.",
                field=name,
            )
        if end - begin != math.prod(shape) * STORED_DTYPES[dtype].itemsize:
            raise InvalidWeights(
                f"{path.name}: {name} ({dtype} {shape}) spans {end - begin} bytes.", field=name
            )
        spans.append((begin, end, name))
    position, previous = 0, "the header"
    for begin, end, name in sorted(spans):
        if begin != position:
            raise InvalidWeights(
                f"{path.name}: {name}'s bytes begin at {begin}, {previous} ends at {position} "
                "(a gap or an overlap).",
                field=name,
            )
        position, previous = end, name
    if position != data_size:
        raise InvalidWeights(
            f"{path.name}'s tensors fill {position} bytes after the header; the file has "
            f"{data_size} there.",
            field="file size",
        )


def _tensor_entry(
    name: str, entry: object, path: Path
) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """(dtype, shape, data offsets) of a header entry that is exactly a float tensor's."""
    if isinstance(entry, dict) and entry.keys() == {"dtype", "shape", "data_offsets"}:
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if (
            isinstance(dtype, str)
            and dtype in STORED_DTYPES
            and _naturals(shape)
            and _naturals(offsets)
            and len(offsets) == 2
            and offsets[0] <= offsets[1]
        ):
            return dtype, tuple(shape), (offsets[0], offsets[1])
    raise InvalidWeights(
        f"{path.name}: the header's entry for {name} is not a float tensor (dtype one of "
        f"{sorted(STORED_DTYPES)}, shape and data_offsets lists of ints): {entry!r:.80}.",
        field=name,
    )


def _naturals(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)
