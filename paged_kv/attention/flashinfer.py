"""Block tables in FlashInfer's paged-KV format, so the package interoperates with it.

FlashInfer describes a batch of paged sequences by three int32 arrays: `indptr` (where each
sequence's pages start in `indices`), `indices` (the page ids, concatenated) and
`last_page_len` (tokens in each sequence's last page).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from paged_kv.cache.block_table import blocks_needed
from paged_kv.errors import InvalidArgument


def to_flashinfer(
    block_tables: Sequence[Sequence[int]], seq_lens: Sequence[int], block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indptr, indices, last_page_len) for sequences given by block tables and lengths."""
    indptr, indices, last = [0], [], []
    for table, length in zip(block_tables, seq_lens, strict=True):
        pages = blocks_needed(length, block_size)
        if length < 1 or pages > len(table):
            raise InvalidArgument(
                f"a sequence of {length} tokens needs {pages} block(s) of {block_size}; its "
                f"table has {len(table)}."
            )
        indices.extend(table[:pages])
        indptr.append(len(indices))
        last.append(length - (pages - 1) * block_size)
    as_int32 = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
    return as_int32(indptr), as_int32(indices), as_int32(last)
