"""A byte-level tokenizer: token id = one UTF-8 byte, so the vocabulary is 256 and nothing
needs downloading. Enough for the tiny models of the course; real models bring their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_kv.errors import InvalidArgument


class ByteTokenizer:
    """Text <-> UTF-8 bytes. `decode` replaces bytes that do not form valid UTF-8."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of `text`, one token each."""
        if not isinstance(text, str):
            raise InvalidArgument(f"encode takes a str, got {type(text).__name__}.")
        return list(text.encode("utf-8"))

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of these bytes (invalid sequences become U+FFFD)."""
        if any(not 0 <= t < 256 for t in token_ids):
            raise InvalidArgument("byte tokens must lie in 0..255.")
        return bytes(token_ids).decode("utf-8", errors="replace")
