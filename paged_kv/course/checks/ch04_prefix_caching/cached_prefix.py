"""Exercise 2 of chapter 04: the longest cached prefix is the leading run of hashes the index
holds, never covering the prompt's last token. The index is read-only and counts what is
asked of it: a lookup stops at the first miss and never scans the index; the caller's list of
hashes is left as it was."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from paged_kv.cache.hashing import block_hashes
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.harness import Mismatch, Trial, fail_with, search


class ReadOnlyIndex(Mapping):
    """The index as `cached_prefix` gets it: read-only (a change is refused, and remembered
    even if the learner's code catches the refusal), counting the hashes looked up and the
    entries read by iterating over it."""

    def __init__(self, data: dict[bytes, int]) -> None:
        self._data = dict(data)
        self.lookups = 0
        self.scanned = 0
        self.changed: str | None = None

    def __getitem__(self, key: bytes) -> int:
        self.lookups += 1
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return key in self._data

    def get(self, key: bytes, default: Any = None) -> Any:
        self.lookups += 1
        return self._data.get(key, default)

    def __iter__(self) -> Iterator[bytes]:
        for key in self._data:
            self.scanned += 1
            yield key

    def __len__(self) -> int:
        return len(self._data)

    def copy(self) -> dict[bytes, int]:
        self.scanned += len(self._data)
        return dict(self._data)

    def __repr__(self) -> str:
        return f"<read-only index of {len(self._data)} hashes>"

    def _refuse(self, name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            self.changed = self.changed or name
            raise TypeError(f"the index is read-only: index.{name}(...) would change it")

        return refuse

    def __getattr__(self, name: str) -> Any:
        if name in ("pop", "popitem", "setdefault", "update", "clear"):
            return self._refuse(name)
        raise AttributeError(name)

    def __setitem__(self, key: bytes, value: int) -> None:
        self._refuse("__setitem__")(key, value)

    def __delitem__(self, key: bytes) -> None:
        self._refuse("__delitem__")(key)


@exercise(2, "cached_prefix")
def check_cached_prefix(fn: Callable[..., list[int]], *, seed: int = 0) -> None:
    """`fn(index, hashes, num_prompt_tokens, block_size)`: the blocks of the longest run of
    `hashes` *from the start* that `index` (hash -> block id, read-only) holds, never
    covering the prompt's last token."""

    def run(ops: list[Any], r: Trial) -> None:
        size, cached, holes, prompt = ops
        index: dict[bytes, int] = {}
        r.note("from types import MappingProxyType")
        r.note("from paged_kv.cache.hashing import block_hashes")
        r.note("index = {}")
        block = 0
        for tokens in cached:
            ids = list(range(block, block + len(tokens) // size))
            block += len(ids)
            for b, digest in zip(ids, block_hashes(tokens, size), strict=True):
                index.setdefault(digest, b)
            r.note(f"index.update(zip(block_hashes({tokens}, {size}), {ids}))")
        if holes:  # evicted blocks leave holes in the chains
            gone = sorted(set(holes))
            for digest in [d for d, b in index.items() if b in gone]:
                del index[digest]
            r.note(f"for h in [h for h, b in index.items() if b in {gone}]: del index[h]")
        hashes = block_hashes(prompt, size)
        want = _reference_prefix(index, hashes, len(prompt), size)
        r.note(f"hashes = block_hashes({prompt}, {size})")
        r.note("index = MappingProxyType(index)  # read-only, as the check passes it")
        given, counted = list(hashes), ReadOnlyIndex(index)
        line = f"cached_prefix(index, hashes, {len(prompt)}, {size})"
        try:
            got = r.run(line, fn, counted, given, len(prompt), size)
        except Mismatch:
            _expect_untouched(r, counted)
            raise
        _expect_untouched(r, counted)
        if given != hashes:
            fail_with(
                causes.MUTATES_ARGUMENT,
                "changed the hashes",
                f"`{line}` changed the list of hashes it was given ({len(hashes)} hashes before "
                f"the call, {len(given)} after): the manager uses them next, to index the new "
                "blocks; read a slice (hashes[:limit]), never change the list",
            )
        got = list(got) if isinstance(got, list | tuple) else got
        if got != want:
            fail_with(
                causes.WRONG_RESULT,
                _prefix_cause(got, want, index, hashes, len(prompt), size),
                f"the hits should be blocks {want}, got {got!r}"
                + _prefix_cause(got, want, index, hashes, len(prompt), size, long=True),
            )
        if counted.scanned:
            fail_with(
                causes.WORK_GROWS,
                "scanned the index",
                f"`{line}` iterated over the index ({counted.scanned} entries read for "
                f"{len(hashes)} hashes): the index holds every cached block of the server, "
                "so a scan costs more as the cache fills. Look each hash up directly "
                "(`h in index`, `index.get(h)`): that costs the same whatever the index holds",
            )
        if counted.lookups > 3 * (len(want) + 1):
            fail_with(
                causes.WORK_GROWS,
                "looked past the first miss",
                f"`{line}` looked up {counted.lookups} hashes to find {len(want)} hit(s): "
                "stop at the first miss (nothing after it can be a hit) and look up none "
                f"past the limit, (num_prompt_tokens - 1) // block_size = "
                f"{(len(prompt) - 1) // size}; the work must grow with the hits, not with the "
                "prompt",
            )

    def make(rng: random.Random) -> list[Any]:
        size = rng.randint(1, 4)
        common = [rng.randrange(3) for _ in range(rng.randint(0, 4 * size))]
        cached = [
            common + [rng.randrange(3) for _ in range(rng.randint(0, 3 * size))]
            for _ in range(rng.randint(1, 3))
        ]
        total = sum(len(t) // size for t in cached)
        holes = [rng.randrange(max(total, 1)) for _ in range(rng.choice([0, 0, 1, 2]))]
        prompt = common + [rng.randrange(3) for _ in range(rng.randint(1, 3 * size))]
        if rng.random() < 0.3:
            prompt = rng.choice(cached)[: rng.randint(1, 5 * size)] or [0]
        return [size, cached, holes, prompt]

    search(run, make, trials=400, seed=seed, what="check_cached_prefix", keep=4)
    passed(
        "the leading run of hits up to the first miss, never the last token, on 400 random trials"
    )


def _expect_untouched(r: Trial, index: ReadOnlyIndex) -> None:
    if index.changed:
        name = index.changed.strip("_")
        how = {"setitem": "index[h] = ...", "delitem": "del index[h]"}.get(
            name, f"index.{name}(...)"
        )
        fail_with(
            causes.MUTATES_ARGUMENT,
            "changed the index",
            f"the index is read-only: look hashes up (`h in index`, `index[h]`, "
            f"`index.get(h)`), never change it (your code called {how}; in the manager the "
            "index is the cache's own, shared by every sequence)",
        )


def _reference_prefix(index: dict, hashes: list, n: int, size: int) -> list[int]:
    blocks = []
    for digest in hashes[: (n - 1) // size]:
        if digest not in index:
            break
        blocks.append(index[digest])
    return blocks


def _prefix_cause(
    got: Any, want: list[int], index: dict, hashes: list, n: int, size: int, long: bool = False
) -> str:
    cap = (n - 1) // size
    every = [index[d] for d in hashes if d in index]
    if isinstance(got, list) and got and all(isinstance(b, bytes) for b in got):
        why = "return the block ids the index maps the hashes to, not the hashes"
    elif isinstance(got, list) and len(got) > cap and len(got) * size >= n:
        why = (
            f"the last prompt token is never a hit (its logits must be computed): at most "
            f"(num_prompt_tokens - 1) // block_size = {cap} blocks"
        )
    elif isinstance(got, list) and 0 in want and got == want[: want.index(0)]:
        why = (
            "block id 0 is a valid block id, but your code stopped at it: test for a miss "
            "with `h not in index` or `index.get(h) is None`, never by truthiness (`if not b`)"
        )
    elif isinstance(got, list) and want and got == want[:-1]:
        k = len(got)
        why = (
            f"your hits stop one block short: prompt block {k} (tokens {k * size} to "
            f"{(k + 1) * size - 1}) is cached and does not hold the last prompt token "
            f"({n - 1}), so it is a hit too; the limit is (num_prompt_tokens - 1) // "
            f"block_size = {cap} blocks, not one fewer"
        )
    elif isinstance(got, list) and got == every[: len(got)] and got != want[: len(got)]:
        why = "a hit is a run of hashes from the start; stop at the first hash the index lacks"
    else:
        why = "the hits are the longest run of hashes from the start that the index holds"
    return f" ({why})" if long else why
