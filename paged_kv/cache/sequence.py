"""A sequence's tokens and the chained hashes of its full blocks, each hash computed once.

A serving request owns its `TokenSequence` from arrival to completion, across preemptions;
while the sequence is live in a `KVCacheManager`, the manager alone appends to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from paged_kv.cache.hashing import (
    BlockHash,
    BlockHashChain,
    ExtraKey,
    Salt,
    check_extra_keys,
    check_salt,
)
from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int, require_token_ids


class TokenSequence:
    """Token ids with the tenant's salt and extra keys, and the hashes of its full blocks.

    `full_block_hashes(block_size)` extends the hash chain only over blocks that filled since
    the last call, so pricing a request, admitting it and readmitting it hash each block once.
    `num_cached_tokens` is set by the manager: the prefix hits of the latest admission.
    """

    def __init__(
        self,
        token_ids: Iterable[object],
        *,
        salt: Salt = None,
        extra_keys: Sequence[ExtraKey] = (),
        vocab_size: int | None = None,
    ) -> None:
        self.token_ids: list[int] = require_token_ids(token_ids, "the tokens", vocab_size)
        self.salt = check_salt(salt)
        self.extra_keys = check_extra_keys(extra_keys)
        self.num_cached_tokens = 0
        self._hashes: list[BlockHash] = []
        self._chain: BlockHashChain | None = None  # hashes _hashes at its block size
        self._live = False  # in a manager now: only the manager may append

    def __len__(self) -> int:
        return len(self.token_ids)

    def append(self, token_ids: Iterable[object]) -> None:
        """Add tokens while the sequence is not in a manager (a request readmitted later)."""
        if self._live:
            raise InvalidArgument(
                "this sequence is live in a KVCacheManager; append through "
                "manager.append_tokens so its blocks grow with it."
            )
        self.token_ids.extend(require_token_ids(token_ids, "the appended tokens"))

    def full_block_hashes(self, block_size: int) -> list[BlockHash]:
        """Chained hashes of every full block (read-only: the sequence keeps the list)."""
        chain = self._chain
        if chain is None or block_size != chain.block_size:
            require_positive_int("block_size", block_size)
            self._hashes, self._chain = [], None
            chain = None
        done, full = len(self._hashes), len(self.token_ids) // block_size
        if done < full:
            if chain is None:  # the first full block: salt and extra keys encoded now, once
                chain = self._chain = BlockHashChain(
                    block_size, salt=self.salt, extra_keys=self.extra_keys
                )
            self._hashes += chain.hashes(
                self.token_ids[done * block_size : full * block_size],
                self._hashes[-1] if done else None,
            )
        return self._hashes

    def copy(self) -> TokenSequence:
        """An independent sequence with the same tokens, keys and hashes (for a fork)."""
        twin = TokenSequence.__new__(TokenSequence)
        twin.token_ids, twin._chain = list(self.token_ids), self._chain
        twin.salt, twin.extra_keys = self.salt, self.extra_keys
        twin.num_cached_tokens, twin._hashes = self.num_cached_tokens, list(self._hashes)
        twin._live = False
        return twin

    def __repr__(self) -> str:
        return f"TokenSequence({len(self.token_ids)} tokens)"
