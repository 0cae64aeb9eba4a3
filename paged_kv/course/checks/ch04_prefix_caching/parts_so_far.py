"""Chapter 04's "your parts so far": the learner's hash, lookup and add inside a
`KVCacheManager` hit exactly what the library's parts hit on multi-tenant traffic."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.course.checks import causes
from paged_kv.course.checks.ch04_prefix_caching.chained_hash import (
    _expect_digests,
    _expect_signature,
    _shown,
)
from paged_kv.course.checks.failures import (
    CheckFailed,
    ExerciseNotDone,
    call,
    exercise,
    expect,
    expect_raises,
    learner_error,
    passed,
)
from paged_kv.errors import InvalidArgument, OutOfBlocks

_HOOKS = ("block_hasher", "prefix_lookup", "allocate_table")


@exercise(None, "your parts so far")
def check_prefix_parts(
    block_hasher: Callable[..., Any],
    prefix_lookup: Callable[..., Any],
    allocate_table: Callable[..., Any],
    *,
    pool: Any = None,
    eviction: Any = "lru",
    seed: int = 0,
) -> None:
    """Your three parts (and your pool and policy class, when given) inside a `KVCacheManager`,
    on multi-tenant traffic with shared system prompts, hit exactly what the library's parts
    hit (under the same eviction policy)."""
    from paged_kv.cache.manager import KVCacheManager
    from paged_kv.course.learner_manager import learner_manager

    _expect_signature(block_hasher)
    sample = call("block_hasher(list(range(10)), 4)", block_hasher, list(range(10)), 4)
    expect(
        isinstance(sample, list | tuple) and len(sample) == 2,
        f"block_hasher(list(range(10)), 4) should return 2 hashes (10 tokens make 2 full "
        f"blocks of 4; a partial block has no hash), got {_shown(sample)}.",
        causes.WRONG_RESULT,
    )
    _expect_digests(list(sample))
    library = [
        what
        for what, mine in (
            ("BlockPool", pool is None),
            (f"{eviction!r} policy", isinstance(eviction, str)),
        )
        if mine
    ]
    if library:
        print(
            f"(with the library's {' and '.join(library)}: your chapter 01 pool and chapter 03 "
            "policy are used here once saved with parts.save)"
        )
    hooks = {
        "block_hasher": _returns_a_list("block_hasher", "a list of bytes hashes", block_hasher),
        "prefix_lookup": _returns_a_list("prefix_lookup", "a list of block ids", prefix_lookup),
        "allocate_table": _returns_a_list("allocate_table", "the block table", allocate_table),
    }
    if pool is not None:
        hooks["pool"] = pool
    rng = random.Random(seed)
    systems = [[rng.randrange(300) for _ in range(rng.randint(8, 20))] for _ in range(3)]
    ours = KVCacheManager(40, 4, eviction=eviction)  # the same policy: the same victims
    theirs = call(
        "learner_manager(40, 4, ...) with your parts",
        learner_manager,
        40,
        4,
        eviction=eviction,
        **hooks,
    )
    live: list[int] = []
    hit_tokens = 0
    for i in range(150):
        prompt = rng.choice(systems) + [rng.randrange(300) for _ in range(rng.randint(1, 12))]
        salt = rng.choice([None, "alice", "bob"])
        if live and (rng.random() < 0.45 or not ours.can_allocate(len(prompt))):
            seq = live.pop(rng.randrange(len(live)))
            ours.free_sequence(seq)
            _run(f"manager.free_sequence({seq})", theirs.free_sequence, seq)
            continue
        try:
            ours.add_sequence(i, prompt, salt=salt)
        except OutOfBlocks:
            expect_raises(
                OutOfBlocks,
                lambda i=i, p=prompt, s=salt: theirs.add_sequence(i, p, salt=s),
                f"request {i}: adding a {len(prompt)}-token prompt that does not fit",
            )
            continue
        _run(
            f"manager.add_sequence({i}, <{len(prompt)} tokens>, salt={salt!r})",
            theirs.add_sequence,
            i,
            prompt,
            salt=salt,
        )
        live.append(i)
        expect(
            theirs.num_cached_tokens(i) == ours.num_cached_tokens(i),
            f"request {i} (salt {salt!r}): with your parts {theirs.num_cached_tokens(i)} prompt "
            f"tokens were prefix hits; the library finds {ours.num_cached_tokens(i)}.",
            causes.WRONG_RESULT,
        )
        hit_tokens += ours.num_cached_tokens(i)
    passed(f"your prefix caching: {hit_tokens:,} prompt tokens hit, as the library's")


def _returns_a_list(name: str, what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, whose answer must be a list (or tuple): anything else is named as that part's."""

    def part(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if not isinstance(out, list | tuple):
            raise CheckFailed(
                f"your {name} returned {_shown(out)}; it must return {what}.", causes.WRONG_RESULT
            )
        return out

    return part


def _run(doing: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call`, except that the manager's refusal of what one of the parts returned is said as
    what it is: that part's wrong answer (the library did nothing wrong)."""
    try:
        return fn(*args, **kwargs)
    except (CheckFailed, ExerciseNotDone):
        raise
    except InvalidArgument as exc:
        if str(exc).startswith(_HOOKS):
            raise CheckFailed(f"{doing}: your {exc}", causes.WRONG_RESULT) from None
        raise learner_error(exc, doing=doing) from None
    except AttributeError as exc:
        if "'mappingproxy'" in str(exc):
            raise CheckFailed(
                f"{doing}: your prefix_lookup tried to change the index ({exc}): the index is "
                "read-only; look hashes up (`h in index`, `index.get(h)`), never change it.",
                causes.MUTATES_ARGUMENT,
            ) from None
        raise learner_error(exc, doing=doing) from None
    except Exception as exc:
        raise learner_error(exc, doing=doing) from None
