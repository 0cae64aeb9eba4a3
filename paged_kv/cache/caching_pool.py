"""Cached blocks and eviction over a reference-counted pool: the layer chapters 03-04 add.

The pool below (`RefCountedPool`: the library's `RefCountPool`, or chapter 01's pool of a
learner) counts references and keeps the free list. This layer remembers which blocks keep
their content after their last release (cached), lets an eviction policy choose among them,
tells `on_evict`, and counts evictions by reason. `BlockPool` is this layer over the library's
pool; a learner's pool is wrapped the same way.

How the two share a block. A block whose content is kept holds exactly one reference in the
pool below, owned by this layer: its holders are counted here (`_holders`), and 0 holders means
cached. Eviction hands that one reference over: to the allocation that wanted a block (so the
evicted block comes back in use without a call below), or back to the pool below (a reset).
Every other block is counted by the pool below alone.

Failures. The policy and the pool below may be someone else's code (a learner's, or any
`EvictionPolicy`), and any call into them may raise, `KeyboardInterrupt` included. Each call of
this layer is all or nothing all the same: what it changed before the failing call is undone
(`except BaseException`, then the error goes on), so no block is left counted twice or held by
nobody. Two things cannot be taken back through those interfaces: a block evicted before the
failure has lost its content (it is free, and counted as an eviction), and a policy's record of
use (`touch`, `revive`): a block put back among the candidates joins them as if just released.

The policy is trusted for its choice, never for the pool's bookkeeping. This layer counts its
cached blocks itself (`_num_cached`), refuses a victim that is not one of them (`InvalidBlock`,
nothing evicted), and undoes its own state first, then tells the policy in a guard that goes
on past the policy's failures. When the policy could not be told (it raised while a call was
undone, or `evict` failed or named no candidate), its candidates may no longer be the cached
blocks: the pool marks it stale and, at the start of its next call that uses the policy, makes
them agree again through the interface (`_resync_policy`: O(blocks), after such a fault only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from paged_kv.cache.block_ids import check_block_id, check_block_ids, check_drops
from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.errors import InvalidArgument, InvalidBlock, OutOfBlocks
from paged_kv.validation import require_int, require_positive_int

UNKEPT = -1
"""`_holders` of a block whose content is not kept: the pool below counts its references."""


class RefCountedPool(Protocol):
    """What the caching layer asks of the pool below: chapter 01's pool has all of it.

    `allocate` is all or nothing; `share` and `release` check their whole batch first and
    raise `InvalidBlock` changing nothing; `release` returns the blocks that reached 0."""

    num_blocks: int
    block_size: int

    @property
    def num_free(self) -> int: ...

    def allocate(self, n: int) -> list[int]: ...

    def share(self, block_ids: list[int]) -> object: ...

    def release(self, block_ids: list[int]) -> list[int]: ...

    def ref_count(self, block_id: int) -> int: ...


class CachingPool:
    """A `RefCountedPool` whose blocks can keep their content after their last release.

    A block is free (no reference, nothing kept), in use (ref >= 1), or cached (no reference,
    content kept after `keep_content`). `allocate` takes free blocks first and evicts cached
    ones, chosen by the eviction policy, only when no free block is left. All or nothing.

    Pages belong to the pool below; this layer shows none (`BlockPool` shows its own).
    """

    blocks_per_page: int | None = None

    def __init__(
        self,
        base: RefCountedPool,
        *,
        eviction: PolicySpec = "lru",
        on_evict: Callable[[int], None] | None = None,
    ) -> None:
        self.base = base
        self.num_blocks = base.num_blocks
        self.block_size = base.block_size
        self.policy = make_policy(eviction)
        self.on_evict = on_evict
        self.evictions: dict[str, int] = {"allocation": 0, "reset": 0}
        self._holders = [UNKEPT] * base.num_blocks  # kept blocks' holders (0: cached)
        self._num_cached = 0  # blocks whose holders are 0: counted here, not asked of the policy
        self._policy_stale = False  # may the policy's candidates differ from the cached blocks?

    # -- sizes ---------------------------------------------------------------------------

    @property
    def num_pages(self) -> int:
        """Number of pages (0 when pages are off)."""
        return self.num_blocks // self.blocks_per_page if self.blocks_per_page else 0

    @property
    def num_free(self) -> int:
        """Blocks holding nothing, ready to allocate."""
        return self.base.num_free

    @property
    def num_cached(self) -> int:
        """Blocks with no reference that keep their content until evicted."""
        return self._num_cached

    @property
    def num_in_use(self) -> int:
        """Blocks with at least one reference."""
        return self.num_blocks - self.base.num_free - self._num_cached

    @property
    def num_available(self) -> int:
        """Blocks an allocation can get: free ones, then cached ones by eviction."""
        return self.base.num_free + self._num_cached

    # -- allocation ----------------------------------------------------------------------

    def allocate(self, n: int = 1) -> list[int]:
        """Take `n` blocks at ref count 1, free ones first, then evicting cached ones.

        If fewer than `n` are available, raise `OutOfBlocks` and change nothing.
        """
        if type(n) is not int or n < 0:
            n = require_int("allocate's n", n)
        free = self.base.num_free
        if n <= free:
            return self.base.allocate(n)
        if n - free > self._num_cached:  # more than free and cached blocks together
            raise OutOfBlocks(
                f"asked for {n} blocks but only {self.num_available} of {self.num_blocks} are "
                "free or evictable; release blocks (finish or preempt a sequence) or use a "
                "bigger pool.",
                requested=n,
                available=self.num_available,
            )
        if self._policy_stale:
            self._resync_policy()
        evicted: list[int] = []  # their references below are the new holder's
        try:
            for _ in range(n - free):
                self._evict("allocation", evicted)
            ids = self.base.allocate(free) if free else []
        except BaseException:  # the evicted blocks' content is gone: free them, hold none
            if evicted:
                self.base.release(evicted)
            raise
        ids += evicted
        return ids

    def keep_content(self, block_ids: Iterable[int]) -> None:
        """Mark in-use blocks as worth keeping: released, they become cached, not free."""
        ids = check_block_ids(block_ids, self.num_blocks)
        for block_id in ids:
            if self.ref_count(block_id) == 0:
                raise InvalidBlock(
                    f"block {block_id} has no reference; only blocks in use can be kept."
                )
        self.keep_content_unchecked(ids)

    def keep_content_unchecked(self, block_ids: Iterable[int]) -> None:
        """`keep_content` for blocks the caller holds (the manager's own tables): no checks."""
        if self._policy_stale:
            self._resync_policy()
        holders, touch, base = self._holders, self.policy.touch, self.base
        kept = []
        try:
            for block_id in block_ids:
                if holders[block_id] == UNKEPT:
                    refs = base.ref_count(block_id)
                    if refs > 1:  # this layer's one reference below stands for all its holders
                        base.release([block_id] * (refs - 1))
                    holders[block_id] = refs
                    kept.append(block_id)
                    touch(block_id)
        except BaseException:  # all or nothing: the pool below counts them again
            for block_id in reversed(kept):
                refs, holders[block_id] = holders[block_id], UNKEPT
                if refs > 1:
                    base.share([block_id] * (refs - 1))
            self._tell_policy(self.policy.forget, reversed(kept))  # untracked before a touch
            raise

    def share(self, block_ids: Iterable[int]) -> None:
        """Add one reference to each block: in use, or cached (a hit that revives it)."""
        ids = check_block_ids(block_ids, self.num_blocks)
        for block_id in ids:
            if self.state(block_id) is BlockState.FREE:
                raise InvalidBlock(
                    f"block {block_id} is free, so it cannot be shared; allocate it first."
                )
        self.share_unchecked(ids)

    def share_unchecked(self, block_ids: Iterable[int], *, undoing: bool = False) -> None:
        """`share` for blocks known to hold content (a table's, or the hits the prefix index
        names): ids this pool handed out, so they are not checked again.

        `undoing=True` when it takes back a release of the caller's failed call: the policy
        is told in a guard (see `_tell_policy`), so only the pool below can make it fail."""
        policy, holders = self.policy, self._holders
        if undoing:
            revive, touch = self._guarded(policy.revive), self._guarded(policy.touch)
        else:
            if self._policy_stale:
                self._resync_policy()
            revive, touch = policy.revive, policy.touch
        unkept, counted = [], []
        try:
            for block_id in block_ids:
                if holders[block_id] == UNKEPT:
                    unkept.append(block_id)
                else:
                    if not holders[block_id]:
                        revive(block_id)
                        self._num_cached -= 1
                    holders[block_id] += 1
                    counted.append(block_id)
                    touch(block_id)
            if unkept:
                self.base.share(unkept)
        except BaseException:  # all or nothing: each holder counted here is dropped again
            evictable = []
            for block_id in reversed(counted):
                holders[block_id] -= 1
                if not holders[block_id]:
                    evictable.append(block_id)
            self._num_cached += len(evictable)
            self._tell_policy(policy.make_evictable, evictable)
            raise

    def release(self, block_ids: Iterable[int]) -> list[int]:
        """Drop one reference per id; return the blocks that lost their last reference.

        Those become cached if their content is kept, free otherwise. Validates everything
        first: a double free or foreign id raises `InvalidBlock` and releases nothing.
        """
        ids = check_block_ids(block_ids, self.num_blocks)
        if max(map(self._holders.__getitem__, ids), default=UNKEPT) == UNKEPT:
            return self.base.release(ids)  # nothing kept: the pool below checks and counts all
        check_drops(ids, self.ref_count)
        if len(set(ids)) == len(ids):
            return self.release_unchecked(ids)
        # a block named twice: one at a time, so the answer lists each block where it lost
        # its last reference
        return [b for block_id in ids for b in self.release_unchecked([block_id])]

    def release_unchecked(self, block_ids: Iterable[int], *, undoing: bool = False) -> list[int]:
        """`release` for references the caller is known to hold, each block once (a block
        table the manager built from this pool's ids): this layer checks nothing.

        `undoing=True` when it takes back a share or an allocation of the caller's failed
        call: the policy is told in a guard, so only the pool below can make it fail."""
        ids = block_ids if type(block_ids) is list else list(block_ids)
        policy, holders = self.policy, self._holders
        if undoing:
            make_evictable = self._guarded(policy.make_evictable)
        else:
            if self._policy_stale:
                self._resync_policy()
            make_evictable = policy.make_evictable
        unkept, cached, dropped = [], [], []
        try:
            for block_id in ids:
                if holders[block_id] == UNKEPT:
                    unkept.append(block_id)
                elif holders[block_id] == 1:
                    make_evictable(block_id)
                    holders[block_id] = 0
                    cached.append(block_id)
                else:
                    holders[block_id] -= 1
                    dropped.append(block_id)
            freed = self.base.release(unkept) if unkept else unkept
        except BaseException:  # all or nothing: the holders dropped here are counted again
            for block_id in cached:
                holders[block_id] = 1
            for block_id in dropped:
                holders[block_id] += 1
            self._tell_policy(policy.revive, cached)
            raise
        self._num_cached += len(cached)
        if not (freed and cached):
            return freed or cached
        if ids.index(freed[-1]) < ids.index(cached[0]):
            return freed + cached  # a table released last block first: the common case
        position = {block_id: i for i, block_id in enumerate(ids)}
        return sorted(freed + cached, key=position.__getitem__)

    def discard(self, block_ids: Iterable[int]) -> None:
        """Drop the content of these cached blocks now (they become free, whoever indexed them
        is told), without counting an eviction: for blocks whose K/V a failed step never
        wrote. Each must be cached (no reference, content kept), else `InvalidBlock`, nothing
        changed."""
        ids = list(dict.fromkeys(check_block_ids(block_ids, self.num_blocks)))
        for block_id in ids:
            if self._holders[block_id] != 0:
                raise InvalidBlock(
                    f"block {block_id} is {self.state(block_id).value}; only cached blocks can "
                    "be discarded (free the sequences that hold it first)."
                )
        if self._policy_stale:
            self._resync_policy()
        forgotten: list[int] = []
        try:
            for block_id in ids:
                forgotten.append(block_id)  # before the call: a failing forget may have begun
                self.policy.forget(block_id)
            if ids:
                self.base.release(ids)  # the one reference below each kept block stood for it
        except BaseException:  # all or nothing: the forgotten ones are candidates again
            self._tell_policy(self._put_back, forgotten)
            raise
        self._num_cached -= len(ids)
        for block_id in ids:
            self._holders[block_id] = UNKEPT
            if self.on_evict is not None:
                self.on_evict(block_id)

    def evict_all_cached(self) -> int:
        """Drop every cached block's content (they become free); return how many."""
        count = self._num_cached
        if self._policy_stale:
            self._resync_policy()
        evicted: list[int] = []
        try:
            for _ in range(count):
                self._evict("reset", evicted)
        finally:  # after a failure too: the blocks evicted so far are free, held by none
            if evicted:
                self.base.release(evicted)
        return count

    def _evict(self, reason: str, evicted: list[int]) -> None:
        """The policy's victim forgets its content and joins `evicted`; whoever indexed it is
        told (the block has no holder then). Its one reference below stays, for the caller to
        hand on. A victim that is not a cached block is refused, nothing evicted: O(1)."""
        try:
            block_id = self.policy.evict()
        except BaseException:  # what it took from its candidates, the pool cannot tell
            self._policy_stale = True
            raise
        holders = self._holders
        if type(block_id) is not int or not 0 <= block_id < self.num_blocks or holders[block_id]:
            self._policy_stale = True  # it may have dropped a candidate it did not name
            raise self._not_a_candidate(block_id)
        evicted.append(block_id)
        self.evictions[reason] += 1
        try:
            if self.on_evict is not None:
                self.on_evict(block_id)  # while the block reads as unreferenced
        finally:  # evicted even if the index failed: the caller frees it below
            holders[block_id] = UNKEPT
            self._num_cached -= 1

    def _not_a_candidate(self, victim: object) -> InvalidBlock:
        """The error for an `evict()` that returned something other than a cached block."""
        if type(victim) is not int or not 0 <= victim < self.num_blocks:
            what = f"no block id of this pool (ids are ints 0..{self.num_blocks - 1})"
        else:
            what = f"block {victim}, which is {self.state(victim).value.replace('_', ' ')}"
        return InvalidBlock(
            f"The eviction policy {self.policy.name!r} ({type(self.policy).__name__}) evict() "
            f"returned {victim!r}: {what}. evict() must return one of its candidates, a block "
            "made evictable and neither revived, evicted nor forgotten since; nothing was "
            "evicted."
        )

    def _put_back(self, block_id: int) -> None:
        """A block taken from the policy's candidates by a call that failed: a candidate
        again, as if just released (the policy has no undo)."""
        self.policy.touch(block_id)
        self.policy.make_evictable(block_id)

    def _guarded(self, call: Callable[[int], object]) -> Callable[[int], None]:
        """`call`, for a call being undone: a failure of it (any `BaseException`: the error
        being undone is the one to raise) marks the policy stale and goes on."""

        def guarded(block_id: int) -> None:
            try:
                call(block_id)
            except BaseException:
                self._policy_stale = True

        return guarded

    def _tell_policy(self, call: Callable[[int], object], block_ids: Iterable[int]) -> None:
        """Undoing: `call` for each block, in a guard that goes on past the policy's failures."""
        guarded = self._guarded(call)
        for block_id in block_ids:
            guarded(block_id)

    def _resync_policy(self) -> None:
        """Make the stale policy's candidates the cached blocks again, through its interface:
        a cached block it lacks is touched and made evictable (as if just released), a
        candidate in use is revived, one whose content is gone is forgotten. O(blocks). If
        the policy raises, it stays stale and the error goes on, before the caller changed
        anything."""
        policy = self.policy
        for block_id, held in enumerate(self._holders):
            if (block_id in policy) == (held == 0):
                continue
            if held == 0:
                self._put_back(block_id)
            elif held == UNKEPT:
                policy.forget(block_id)
            else:
                policy.revive(block_id)
        self._policy_stale = False

    # -- queries -------------------------------------------------------------------------

    def ref_count(self, block_id: int) -> int:
        """How many holders reference `block_id`."""
        held = self._holders[check_block_id(block_id, self.num_blocks)]
        return self.base.ref_count(block_id) if held == UNKEPT else held

    def count_unreferenced(self, block_ids: Iterable[int]) -> int:
        """How many of these blocks have no reference (cached ones, for a prefix hit)."""
        return list(map(self.ref_count, check_block_ids(block_ids, self.num_blocks))).count(0)

    def is_shared(self, block_id: int) -> bool:
        """Does more than one holder reference `block_id`? (Appending to it must copy it.)"""
        return self.ref_count(block_id) > 1

    def state(self, block_id: int) -> BlockState:
        """The block's state."""
        held = self._holders[check_block_id(block_id, self.num_blocks)]
        if held == UNKEPT:
            return BlockState.IN_USE if self.base.ref_count(block_id) else BlockState.FREE
        return BlockState.IN_USE if held else BlockState.CACHED

    def page_of(self, block_id: int) -> int:
        """The page that holds `block_id` (pages must be on)."""
        per_page = self.blocks_per_page
        if not per_page:
            raise InvalidArgument("this pool has no pages; create it with blocks_per_page=...")
        return check_block_id(block_id, self.num_blocks) // per_page

    def free_pages(self) -> list[int]:
        """Pages whose blocks are all free: memory that could be given back. O(pages)."""
        return []

    def releasable_bytes(self, bytes_per_block: int) -> int:
        """Bytes held by entirely free pages, for blocks of `bytes_per_block` bytes each."""
        require_positive_int("bytes_per_block", bytes_per_block)
        return len(self.free_pages()) * (self.blocks_per_page or 0) * bytes_per_block

    def snapshot(self) -> PoolSnapshot:
        """Freeze every block's state and ref count (the manager adds owners and tables)."""
        per_page = self.blocks_per_page
        blocks = tuple(
            BlockInfo(
                block_id=b,
                state=self.state(b),
                ref_count=self.ref_count(b),
                page=b // per_page if per_page else None,
            )
            for b in range(self.num_blocks)
        )
        return PoolSnapshot(self.block_size, per_page, blocks)

    def __repr__(self) -> str:
        return (
            f"CachingPool({self.num_free}/{self.num_blocks} free, {self.num_cached} cached, "
            f"over {type(self.base).__name__})"
        )
