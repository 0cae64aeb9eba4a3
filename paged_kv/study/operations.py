"""Manager operations as data, so a workload can be replayed, stepped and drawn.

An operation is `Add`, `Append`, `Free` or `Fork`; `replay` applies a list to a manager and keeps a
snapshot after every step (the stepper widget and the tests both use it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from paged_kv.cache.manager import KVCacheManager, SeqId
from paged_kv.cache.snapshot import PoolSnapshot


@dataclass(frozen=True)
class Add:
    """Start a sequence with its prompt."""

    seq_id: SeqId
    token_ids: tuple[int, ...]

    def apply(self, manager: KVCacheManager) -> None:
        manager.add_sequence(self.seq_id, self.token_ids)

    def describe(self) -> str:
        return f"add {self.seq_id!r} with a {len(self.token_ids)}-token prompt"


@dataclass(frozen=True)
class Append:
    """Append decoded tokens to a sequence."""

    seq_id: SeqId
    token_ids: tuple[int, ...]

    def apply(self, manager: KVCacheManager) -> None:
        manager.append_tokens(self.seq_id, self.token_ids)

    def describe(self) -> str:
        return f"append {len(self.token_ids)} token(s) to {self.seq_id!r}"


@dataclass(frozen=True)
class Free:
    """Finish a sequence and release its blocks."""

    seq_id: SeqId

    def apply(self, manager: KVCacheManager) -> None:
        manager.free_sequence(self.seq_id)

    def describe(self) -> str:
        return f"free {self.seq_id!r}"


@dataclass(frozen=True)
class Fork:
    """Start `child_id` sharing every block of `parent_id` (parallel sampling, beam search)."""

    parent_id: SeqId
    child_id: SeqId

    def apply(self, manager: KVCacheManager) -> None:
        manager.fork(self.parent_id, self.child_id)

    def describe(self) -> str:
        return f"fork {self.parent_id!r} into {self.child_id!r}"


Operation = Add | Append | Free | Fork


def replay(manager: KVCacheManager, ops: Iterable[Operation]) -> list[PoolSnapshot]:
    """Apply `ops` in order; return the snapshot before any op and after each one."""
    snapshots = [manager.snapshot()]
    for op in ops:
        op.apply(manager)
        snapshots.append(manager.snapshot())
    return snapshots


def decode_workload(
    prompts: Sequence[tuple[SeqId, int]], decode_steps: int, finish_after: dict[SeqId, int]
) -> list[Operation]:
    """A small serving story: add each prompt, decode one token per live sequence per step,
    and free a sequence once it has produced `finish_after[seq_id]` tokens."""
    ops: list[Operation] = [Add(seq_id, tuple(range(length))) for seq_id, length in prompts]
    produced = {seq_id: 0 for seq_id, _ in prompts}
    for _ in range(decode_steps):
        for seq_id in list(produced):
            ops.append(Append(seq_id, (produced[seq_id],)))
            produced[seq_id] += 1
            if produced[seq_id] >= finish_after.get(seq_id, decode_steps):
                ops.append(Free(seq_id))
                del produced[seq_id]
    return ops
