"""Every error the package raises, in one hierarchy.

Catch `PagedKVError` for anything from paged_kv; bad arguments are also `ValueError`s.
No operation that raises leaves a structure half-changed.
"""

from __future__ import annotations


class PagedKVError(Exception):
    """Base class of every error raised by paged_kv."""


class InvalidArgument(PagedKVError, ValueError):
    """An argument has the wrong type or value (a size <= 0, an empty prompt, ...)."""


class RequestForgotten(InvalidArgument):
    """The request finished (or was aborted) and the engine has forgotten it: it keeps only the
    last `keep_finished` of those. Read completions when they finish (`generate` returns its
    own), or make the engine with a larger `keep_finished`."""


class OutOfBlocks(PagedKVError):
    """Not enough free blocks for the request; nothing was allocated."""

    def __init__(self, message: str, *, requested: int, available: int) -> None:
        super().__init__(message)
        self.requested = requested
        self.available = available


class UnknownSequence(PagedKVError, ValueError):
    """The sequence id is not (or no longer) managed."""


class DuplicateSequence(PagedKVError, ValueError):
    """A sequence with this id is already managed."""


class CacheBusy(PagedKVError):
    """The operation needs an idle cache (no block in use); free the sequences first."""


class EngineBusy(PagedKVError):
    """Another thread is inside this engine's call. An engine (and its manager) is used from
    one thread at a time: give each thread its own engine, or send the requests to the thread
    that runs it (a queue). Raised before anything changed."""


class InvalidModelOutput(PagedKVError, ValueError):
    """The model (or a sampler) returned what the engine cannot use: logits of the wrong shape
    or dtype, or a token id outside the vocabulary. Raised before anything was recorded; the
    step's requests wait to be retried, so fix the model and step again."""


class InvalidBlock(PagedKVError, ValueError):
    """A block id is foreign to the pool, or the block is already free (double free)."""


class CorruptBlock(PagedKVError, ValueError):
    """A stored KV block failed verification (bad magic, checksum, length, or a foreign
    model fingerprint or block hash); treat it as a miss and recompute the block.

    `reason` names the check that failed ("truncated", "payload checksum", "foreign
    fingerprint", ...), for counting."""

    def __init__(self, message: str, *, reason: str = "corrupt") -> None:
        super().__init__(message)
        self.reason = reason


class InvalidWeights(PagedKVError, ValueError):
    """A weights file does not match its recorded SHA-256, or its tensors do not fit the
    model it describes (a missing, extra or misshapen tensor, a bad header); nothing was
    loaded. Restore the file, or re-create it with the script that wrote it.

    `field` names what was refused ("sha256", "header", a config field such as
    "hidden_size", or a tensor's name), for tests and logs."""

    def __init__(self, message: str, *, field: str = "file") -> None:
        super().__init__(message)
        self.field = field


class MissingExtra(PagedKVError, ImportError):
    """A part of the package needs an optional extra that is not installed; the message
    names it (`pip install 'paged_kv[course]'`). The library's core needs no extra."""
