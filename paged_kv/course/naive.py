"""The designs a beginner writes first, which the chapters measure and then improve on. They
work on small inputs; each one's docstring names the cost that makes it a foil."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from functools import partial

import torch
import torch.nn.functional as F

from paged_kv.cache.block_ids import check_block_id
from paged_kv.cache.eviction import EvictionPolicy
from paged_kv.errors import InvalidArgument, InvalidBlock, OutOfBlocks
from paged_kv.serving.model import TinyLM
from paged_kv.validation import require_positive_int

FREE, USED = False, True


class ScanBlockPool:
    """A block pool that finds free blocks by scanning a list of flags: every `allocate` walks
    the whole pool, O(pool size) however few blocks it hands out. `paged_kv.BlockPool`'s core
    interface."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.num_blocks = require_positive_int("num_blocks", num_blocks)
        self.block_size = block_size
        self.used = [FREE] * num_blocks

    @property
    def num_free(self) -> int:
        return self.used.count(FREE)

    def ref_count(self, block_id: int) -> int:
        return int(self.used[check_block_id(block_id, self.num_blocks)])

    def allocate(self, n: int = 1) -> list[int]:
        free = [i for i, used in enumerate(self.used) if used is FREE]
        if len(free) < n:
            raise OutOfBlocks(
                f"asked for {n} blocks, {len(free)} free", requested=n, available=len(free)
            )
        for i in free[:n]:
            self.used[i] = USED
        return free[:n]

    def release(self, block_ids: Iterable[int]) -> list[int]:
        ids = list(block_ids)  # a block twice in one call is not caught: a flag has no count
        for i in ids:
            if not 0 <= i < self.num_blocks or self.used[i] is FREE:
                raise InvalidBlock(f"block {i} is not in use")
        for i in ids:
            self.used[i] = FREE
        return ids


class HeapLFU(EvictionPolicy):
    """LFU with a heap of (count, tick, key) entries and lazy deletion: every touch pushes a
    new entry and leaves the old one as garbage until it surfaces at `evict`, so the heap grows
    with every access, not with the cached keys, and each operation costs O(log heap size)."""

    name = "heap-lfu"

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Hashable]] = []
        self.counts: dict[Hashable, int] = {}
        self.evictable: dict[Hashable, int] = {}  # key -> the tick of its live heap entry
        self.tick = 0

    def __len__(self) -> int:
        return len(self.evictable)

    def __contains__(self, key: object) -> bool:
        return key in self.evictable

    def touch(self, key: Hashable) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1
        if key in self.evictable:
            self._push(key)

    def make_evictable(self, key: Hashable) -> None:
        self.counts.setdefault(key, 0)
        self._push(key)

    def revive(self, key: Hashable) -> None:
        del self.evictable[key]  # its heap entries become garbage

    def forget(self, key: Hashable) -> None:
        self.evictable.pop(key, None)
        self.counts.pop(key, None)

    def evict(self) -> Hashable:
        while self.heap:
            _count, tick, key = heapq.heappop(self.heap)
            if self.evictable.get(key) == tick:  # the live entry, not garbage
                del self.evictable[key], self.counts[key]
                return key
        raise self._nothing_to_evict()

    def _push(self, key: Hashable) -> None:
        self.tick += 1
        self.evictable[key] = self.tick
        heapq.heappush(self.heap, (self.counts[key], self.tick, key))


class LengthKeyedPrefixCache:
    """A "prefix cache" keyed by the prompt's length, as the seed post builds it: a prompt is
    handed the blocks of any other prompt of its length, another prompt's KV. Wrong, not slow."""

    def __init__(self) -> None:
        self.blocks_by_length: dict[int, list[int]] = {}

    def lookup(self, token_ids: list[int]) -> list[int] | None:
        return self.blocks_by_length.get(len(token_ids))

    def insert(self, token_ids: list[int], block_ids: list[int]) -> None:
        self.blocks_by_length[len(token_ids)] = list(block_ids)


def generate_contiguous(
    model: TinyLM, prompt: Sequence[int], max_new_tokens: int, reserve: int | None = None
) -> list[int]:
    """Greedy decoding of one request with a contiguous KV cache, as servers did before paging:
    K/V of `reserve` tokens (default: prompt + new tokens) are allocated up front, used or not,
    and no other request can use what it leaves empty."""
    config, n = model.config, len(prompt)
    reserve = n + max_new_tokens if reserve is None else reserve
    if reserve < n + max_new_tokens:
        raise InvalidArgument(f"reserve ({reserve}) < prompt + new tokens ({n + max_new_tokens}).")
    shape = (config.num_layers, reserve, config.num_kv_heads, config.head_dim)
    keys = torch.zeros(shape, dtype=model.dtype, device=model.device)
    values = torch.zeros_like(keys)

    def attend(layer: int, start: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        end = start + len(q)
        keys[layer, start:end], values[layer, start:end] = k, v
        q, k, v = (x.transpose(0, 1)[None] for x in (q, keys[layer, :end], values[layer, :end]))
        # the prompt attends causally to itself, a decoded token to every token before it
        out = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0, enable_gqa=True)
        return out[0].transpose(0, 1)

    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            start = len(tokens) - 1 if len(tokens) > n else 0
            ids = torch.tensor(tokens[start:], device=model.device)
            positions = torch.arange(start, len(tokens), device=model.device)
            hidden = model.run_layers(
                ids, positions, lambda layer, s=start: partial(attend, layer, s)
            )
            tokens.append(int(model.lm_head(model.norm(hidden[-1])).argmax()))
    return tokens[n:]
