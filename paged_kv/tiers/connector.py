"""Between an engine's KV storage and a `TieredStore`: which blocks to load, which to save.

At admission the scheduler asks `loadable_tokens`: after the device prefix hits, how many more
leading prompt blocks can really be loaded? The connector fetches and verifies them then (so
the price is what will be loaded, not what a lookup promised) and holds them until the engine
calls `load_admitted`, which copies them into the blocks the manager allocated, before the
step's forward pass. After the forward pass `save_computed` hands every block that became
full in that step to the store. Keys are the `TokenSequence`'s own chained block hashes.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

from paged_kv.attention.storage import KVStorage
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import InvalidArgument, PagedKVError
from paged_kv.tiers.codec import DTYPES, ModelFingerprint
from paged_kv.tiers.store import LoadedBlock, TieredStore
from paged_kv.validation import require_positive_int


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 (hex) of every parameter and buffer: name, dtype, shape and raw bytes."""
    digest = hashlib.sha256(b"paged_kv.weights.v1")
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise InvalidArgument(
            f"KV caches in {dtype} cannot be stored; use one of {sorted(DTYPES)}."
        )
    return name


def fingerprint_model(
    model: Any,
    block_size: int,
    *,
    model_id: str | None = None,
    digest: str | None = None,
) -> ModelFingerprint:
    """The fingerprint of `model`'s K/V blocks of `block_size` tokens. The weights digest is
    computed from the weights unless given (for a big model, pass a known revision hash)."""
    c = model.config
    return ModelFingerprint(
        model_id=model_id or type(model).__name__,
        weights_digest=digest or weights_digest(model),
        dtype=dtype_name(model.dtype),
        num_layers=c.num_layers,
        num_kv_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        block_size=require_positive_int("block_size", block_size),
    )


class KVConnector:
    """Moves full blocks between `kv` (the engine's KV storage) and `store`.

    `staging_blocks` bounds the verified blocks kept between pricing a request and
    admitting it (a request that waits is not fetched again). `block_sources` (request id ->
    where each of its blocks came from, for `BlockSourcesView`) keeps the last `keep_sources`
    requests admitted, so a long-running engine's memory stays flat (`Engine` passes its
    `keep_finished + max_running`).
    """

    def __init__(
        self,
        store: TieredStore,
        manager: KVCacheManager,
        kv: KVStorage,
        fingerprint: ModelFingerprint,
        *,
        staging_blocks: int = 256,
        keep_sources: int = 1024,
    ) -> None:
        if not isinstance(store, TieredStore):
            raise InvalidArgument(
                f"store= takes a TieredStore, got {type(store).__name__}; e.g. "
                "TieredStore([HostTier(1 << 30), DiskTier('kv-cache/')])."
            )
        if fingerprint.block_size != manager.block_size:
            raise InvalidArgument(
                f"the fingerprint's block size {fingerprint.block_size} differs from the "
                f"manager's {manager.block_size}; make the fingerprint for this engine."
            )
        self.store = store
        self.manager = manager
        self.kv = kv
        self.fingerprint = fingerprint
        self.space = store.key_space(fingerprint)
        self.block_size = manager.block_size
        self.staging_blocks = require_positive_int("staging_blocks", staging_blocks)
        self.keep_sources = require_positive_int("keep_sources", keep_sources)
        self._staged: OrderedDict[bytes, LoadedBlock] = OrderedDict()
        self._pending: dict[int, tuple[int, list[LoadedBlock]]] = {}
        self.block_sources: OrderedDict[Any, list[str]] = OrderedDict()  # request -> sources

    # -- the scheduler's question ----------------------------------------------------------

    def loadable_tokens(self, sequence: TokenSequence, device_hit_tokens: int) -> int:
        """Prompt tokens after the device hits whose K/V the tiers hold, verified, in whole
        blocks, never the last token. The blocks stay staged until `load_admitted`."""
        bs = self.block_size
        start = device_hit_tokens // bs
        end = (len(sequence) - 1) // bs  # the last token is always computed
        self._pending.pop(id(sequence), None)
        if start >= end or not self.store.tiers:
            return 0
        hashes = sequence.full_block_hashes(bs)[start:end]
        run: list[LoadedBlock] = []
        for h in hashes:
            block = self._staged.get(h)
            if block is None:
                break
            run.append(block)
        if len(run) < len(hashes):
            more = self.store.load_run(self.space, hashes[len(run) :])
            for block in more:
                self._stage(block)
            run += more
        if run:
            self._pending[id(sequence)] = (start, run)
        return len(run) * bs

    # -- the engine's two calls per step ---------------------------------------------------

    def load_admitted(self, chunks: Sequence[Any]) -> None:
        """Copy the staged blocks of this step's admitted requests into their blocks (before
        the forward pass) and count where every admitted prompt token came from."""
        bs = self.block_size
        for chunk in chunks:
            if not chunk.admitted:
                continue
            request = chunk.request
            start, run = self._pending.pop(id(request.sequence), (chunk.start // bs, []))
            loaded = len(run) * bs
            device = chunk.start - loaded
            if run and device != start * bs:
                raise PagedKVError(
                    f"request {request.request_id} was priced with {start * bs} device hits "
                    f"and {loaded} loaded tokens but starts at {chunk.start}; admit it with "
                    "add_sequence(..., num_loaded_tokens=) right after pricing it."
                )
            if run:
                table = self.manager.block_table(request.request_id)
                self.write_blocks(table[start : start + len(run)], run)
                for block in run:
                    self._staged.pop(block.block_hash, None)
            sources = {"device": device, "computed": chunk.num_tokens}
            for block in run:
                sources[block.tier] = sources.get(block.tier, 0) + bs
            if self.store.metrics is not None:
                self.store.metrics.admitted(sources)
            computed_blocks = -(-(device + loaded + chunk.num_tokens) // bs) - start - len(run)
            self._note_sources(
                request.request_id,
                ["device"] * start + [b.tier for b in run] + ["computed"] * computed_blocks,
            )
        self._pending.clear()

    def save_computed(self, chunks: Sequence[Any]) -> None:
        """Hand the store every block whose last token was computed in this step."""
        if not self.store.tiers:
            return  # nowhere to save: skip reading the blocks
        bs = self.block_size
        hashes: list[bytes] = []
        block_ids: list[int] = []
        for chunk in chunks:
            first, end = chunk.start // bs, (chunk.start + chunk.num_tokens) // bs
            if end <= first:
                continue
            request = chunk.request
            hashes += request.sequence.full_block_hashes(bs)[first:end]
            block_ids += self.manager.block_table(request.request_id)[first:end]
        if hashes:
            self.store.save(self.space, hashes, self.read_blocks(block_ids))

    # -- K/V bytes ---------------------------------------------------------------------------

    def read_blocks(self, block_ids: Sequence[int]) -> list[memoryview]:
        """Each block's payload, [layers, (K, V), tokens, KV heads, head dim], as raw bytes."""
        kv = self.kv
        index = torch.as_tensor(list(block_ids), dtype=torch.long, device=kv.k[0].device)
        k = torch.stack([layer.index_select(0, index) for layer in kv.k], dim=1)
        v = torch.stack([layer.index_select(0, index) for layer in kv.v], dim=1)
        payload = torch.stack((k, v), dim=2).cpu().contiguous()
        raw = payload.view(torch.uint8).reshape(len(block_ids), -1).numpy()
        return [raw[i].data for i in range(len(block_ids))]

    def write_blocks(self, block_ids: Sequence[int], blocks: Sequence[LoadedBlock]) -> None:
        """Copy verified payloads into the KV storage's blocks `block_ids`."""
        kv = self.kv
        device, dtype = kv.k[0].device, kv.k[0].dtype
        shape = (len(blocks), *self.fingerprint.payload_shape)
        buffer = bytearray(b"".join(b.payload for b in blocks))
        data = torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).view(shape).to(device)
        index = torch.as_tensor(list(block_ids), dtype=torch.long, device=device)
        for layer in range(len(kv.k)):
            kv.k[layer].index_copy_(0, index, data[:, layer, 0])
            kv.v[layer].index_copy_(0, index, data[:, layer, 1])

    def _note_sources(self, request_id: Any, sources: list[str]) -> None:
        """Record where `request_id`'s blocks came from, forgetting the oldest record beyond
        the last `keep_sources` (a readmitted request's record is its newest)."""
        records = self.block_sources
        records[request_id] = sources
        records.move_to_end(request_id)
        while len(records) > self.keep_sources:
            records.popitem(last=False)

    def _stage(self, block: LoadedBlock) -> None:
        self._staged[block.block_hash] = block
        self._staged.move_to_end(block.block_hash)
        while len(self._staged) > self.staging_blocks:
            self._staged.popitem(last=False)
