"""Exercise 3 of chapter 03: the learner's own policy keeps the interface's promises (victims
are evictable blocks, `len` and `in` are exact, nothing evictable means InvalidBlock) and its
memory stays bounded by the cache, not by every block that ever passed through."""

from __future__ import annotations

from paged_kv.course.checks.ch03_eviction.constant_work import no_garbage_after_churn
from paged_kv.course.checks.ch03_eviction.policy_trials import (
    evict_one,
    expect_block,
    policy_name,
    policy_ops,
    require_policy_class,
)
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.replay import Replay, search


@exercise(3, "your own policy")
def check_policy_contract(policy_cls: type, *, seed: int = 2) -> None:
    """`policy_cls()` keeps the interface's promises: victims are evictable blocks, sizes add
    up; and what it remembers does not grow with every block that passed through."""
    require_policy_class(policy_cls, "check_policy_contract")
    name = policy_name(policy_cls)

    def run(ops: list[tuple[str, int]], r: Replay) -> None:
        policy = r.run(f"policy = {name}()", policy_cls)
        candidates: set[int] = set()
        for op, b in ops:
            if op == "touch":
                r.run(f"policy.touch({b})", policy.touch, b)
            elif op == "evictable" and b not in candidates:
                r.run(f"policy.make_evictable({b})", policy.make_evictable, b)
                candidates.add(b)
            elif op == "revive" and b in candidates:
                r.run(f"policy.revive({b})", policy.revive, b)
                candidates.discard(b)
            elif op == "forget":
                r.run(f"policy.forget({b})", policy.forget, b)
                candidates.discard(b)
            elif op == "evict" and candidates:
                victim = evict_one(r, policy)
                expect_block(r, victim)
                if victim not in candidates:
                    r.fail(
                        "victim not evictable",
                        f"`policy.evict()` returned {victim!r}, "
                        f"which is not evictable (the evictable blocks are "
                        f"{sorted(candidates)}): never evict a block in use or unknown",
                    )
                candidates.discard(victim)
            else:
                continue
            size = r.read("len(policy)", len, policy)
            if size != len(candidates):
                r.fail(
                    "len",
                    f"`len(policy)` should be {len(candidates)}, the number of "
                    f"evictable blocks {sorted(candidates)}; got {size}",
                )
            for x in range(10):
                inside = r.read(f"{x} in policy", lambda x=x: x in policy)
                if inside != (x in candidates):
                    r.fail(
                        "in",
                        f"`{x} in policy` should be {x in candidates} (evictable: "
                        f"{sorted(candidates)}), got {inside}"
                        + (" (does `__contains__` return its answer?)" if not inside else ""),
                    )

    search(
        run,
        lambda rng: policy_ops(rng, 10, 80),
        trials=200,
        seed=seed,
        keep=0,
        what="check_policy_contract",
    )
    no_garbage_after_churn(
        policy_cls,
        {},
        what=" (a history of evicted blocks, such as ghosts, must be bounded: trim it to a "
        "fixed size, oldest first).",
    )
    passed("victims evictable, len and `in` exact, on 200 random trials; bounded memory")
