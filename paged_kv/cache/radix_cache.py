"""RadixAttention's prefix index (SGLang): a radix tree of token runs over the pool's blocks.

Where the hash chain names each full block by a SHA-256 of everything before it, the radix
tree stores the tokens themselves. Each edge holds a run of whole blocks (their tokens and
block ids); a node splits where two prompts diverge; a lookup walks down comparing tokens, with
no hashing at all. With `block_size=1` every token is a block, so matching is per token.

Locks. A live sequence *locks* the path of nodes it uses (SGLang's `lock_ref`): a node's lock
counts the sequences whose path runs through it, so locks are exactly the pool's reference
counts of the node's blocks (the tests check it after every step). The path is split where a
request's hits end, so that a lock always covers whole nodes.

Leaf-first eviction. Only a leaf (the last block of a node without children) may be evicted:
evicting a block in the middle would leave everything below it unreachable yet cached. The
pool's policy still decides the order: `LeafFirst` wraps it, and when the policy names a block
that still has a successor, the block is put back and the policy asked again. Because a request
holds its whole path and frees its table last block first, parents are touched whenever their
children are and become evictable after them, so LRU, FIFO and LFU name a leaf anyway (they
order blocks exactly as SGLang's leaf heap does); the guard matters for policies that order by
other signals (S3-FIFO, ARC, W-TinyLFU's admission).

Namespaces. Each (salt, extra keys) has its own root, made when its first block is indexed and
dropped when its last indexed block is forgotten, so that an index that served many tenants
holds nothing for those it no longer caches (a live path never points at a root: a sequence
with no indexed block yet holds none).

Duplicates. A sequence that computed a block whose content another block already holds keeps
its copy private, as with the hash chain; the rest of that sequence is not indexed (its path
stops there), so that a node's children are always held by whoever holds the node.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from paged_kv.cache.eviction import EvictionPolicy
from paged_kv.cache.hashing import namespace_key
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import InvalidBlock
from paged_kv.validation import require_positive_int


class RadixNode:
    """An edge of whole blocks (their tokens and block ids); children by their first block's
    tokens; the lock count of the sequences whose path runs through it."""

    __slots__ = ("blocks", "children", "lock", "parent", "tokens")

    def __init__(
        self, parent: RadixNode | None, tokens: list[int], blocks: list[int], lock: int = 0
    ) -> None:
        self.parent = parent
        self.tokens = tokens
        self.blocks = blocks
        self.children: dict[tuple[int, ...], RadixNode] = {}
        self.lock = lock

    def __repr__(self) -> str:
        children = len(self.children)
        return f"RadixNode({len(self.blocks)} blocks, lock {self.lock}, {children} children)"


class RadixRoot(RadixNode):
    """The root of one namespace's tree: no blocks, and what belongs to the namespace (its
    key, the content key its chains start from, how `format_tree` names it)."""

    __slots__ = ("content_key", "label", "namespace")

    def __init__(self, namespace: bytes, label: str) -> None:
        super().__init__(None, [], [])
        self.namespace = namespace
        self.label = label
        digest = hashlib.sha256(b"paged_kv.radix.v1" + namespace).digest()
        self.content_key = int.from_bytes(digest[:8], "little")


@dataclass
class RadixPath:
    """A live sequence's place in the tree: the deepest node it locks (None: none yet, it
    starts at its namespace's root), how many of its blocks the path covers, and whether it
    stopped at a duplicate (nothing more is indexed)."""

    node: RadixNode | None
    blocks: int
    detached: bool = False


class RadixCache:
    """The radix-tree prefix index, with the manager's prefix-index interface.

    Lookups cost O(prompt tokens) token comparisons and one dict lookup per node, no hashing;
    registering n blocks costs O(n) plus one node; locking and releasing a path cost O(nodes
    on it). Namespaces: one tree per (salt, extra keys), so tenants never share; a
    namespace's root lives while one of its blocks is indexed, no longer.
    """

    name = "radix"

    def __init__(self, block_size: int) -> None:
        self.block_size = require_positive_int("block_size", block_size)
        self._roots: dict[bytes, RadixRoot] = {}  # namespaces with an indexed block
        self._node_of: dict[int, RadixNode] = {}  # indexed block -> its node
        self._key_of: dict[int, int] = {}  # indexed block -> its content key

    def __len__(self) -> int:
        """Number of blocks indexed."""
        return len(self._node_of)

    # -- the prefix-index interface the manager uses --------------------------------------

    def match(self, seq: TokenSequence, max_blocks: int) -> list[int]:
        """Blocks of the longest cached prefix of `seq`, whole blocks, at most `max_blocks`.

        Read-only: pricing a request changes nothing (no split, no lock)."""
        root = self._roots.get(namespace_key(seq.salt, seq.extra_keys))
        if root is None:
            return []
        node: RadixNode = root
        tokens, size = seq.token_ids, self.block_size
        found: list[int] = []
        i = 0
        while i < max_blocks:
            child = node.children.get(tuple(tokens[i * size : (i + 1) * size]))
            if child is None:
                break
            n = self._common_blocks(child, tokens, i, max_blocks)
            found += child.blocks[:n]
            i += n
            if n < len(child.blocks):
                break
            node = child
        return found

    def register_blocks(
        self,
        seq: TokenSequence,
        table: Sequence[int],
        start: int,
        end: int,
        path: RadixPath | None,
    ) -> tuple[list[int], RadixPath]:
        """Index full blocks `start..end-1` of `seq` (held in `table`); lock them for it.

        The first call (no `path` yet) locks the prefix hits at the start of `table`, splitting
        the node where they end. Returns the blocks newly indexed (the caller keeps their
        content) and the sequence's path."""
        if path is None:
            path = self._lock_hits(seq, table)
        if path.detached or path.blocks >= end:
            return [], path
        size, tokens = self.block_size, seq.token_ids
        node, i = path.node or self._root(seq), path.blocks
        if node.children.get(tuple(tokens[i * size : (i + 1) * size])) is not None:
            path.detached = True  # a duplicate: this copy stays private, as with hashes
            return [], path
        blocks = list(table[i:end])
        key = node.content_key if isinstance(node, RadixRoot) else self._key_of[node.blocks[-1]]
        if node.parent is not None and node.lock == 1 and not node.children:
            node.tokens += tokens[i * size : end * size]  # the path's own leaf grows
            node.blocks += blocks
        else:
            child = RadixNode(node, tokens[i * size : end * size], blocks, lock=1)
            node.children[tuple(child.tokens[:size])] = child
            node = path.node = child
        node_of, key_of = self._node_of, self._key_of
        for j, block in enumerate(blocks, start=i):
            node_of[block] = node
            key = key_of[block] = hash((key, *tokens[j * size : (j + 1) * size]))
        path.blocks = end
        return blocks, path

    def share_path(self, path: RadixPath | None) -> RadixPath | None:
        """A fork holds every block of its parent: lock the parent's path once more."""
        if path is None:
            return None
        self._add_lock(path.node, 1)
        return RadixPath(path.node, path.blocks, path.detached)

    def release_path(self, path: RadixPath | None) -> None:
        """A sequence is gone: unlock its path."""
        if path is not None:
            self._add_lock(path.node, -1)

    def forget(self, block_id: int) -> None:
        """The pool evicted `block_id`. A leaf (the only kind `LeafFirst` lets go) shortens its
        node, and a node left empty leaves the tree; anything else cuts the node there and drops
        what hung below it from the index (its blocks stay cached until evicted)."""
        node = self._node_of.get(block_id)
        if node is None:
            return
        blocks, size = node.blocks, self.block_size
        edge_key = tuple(node.tokens[:size])
        if blocks[-1] == block_id and not node.children:  # a leaf: the common case, O(1)
            blocks.pop()
            del node.tokens[-size:]
            self._unindex(block_id)
        else:
            at = blocks.index(block_id)
            for block in blocks[at:]:
                self._unindex(block)
            for child in node.children.values():
                self._drop_subtree(child)
            node.children.clear()
            del blocks[at:], node.tokens[at * size :]
        parent = node.parent
        if not blocks and parent is not None:
            del parent.children[edge_key]
            if isinstance(parent, RadixRoot) and not parent.children:
                del self._roots[parent.namespace]  # the namespace's last block went

    def content_key(self, block_id: int) -> int | None:
        """What eviction policies remember a block's content by: a 64-bit key chained over
        the namespace and every token up to the block's end (not a security boundary)."""
        return self._key_of.get(block_id)

    def guard_policy(self, policy: EvictionPolicy) -> EvictionPolicy:
        """The pool's policy, made to evict leaves only (see `LeafFirst`)."""
        return LeafFirst(policy, self)

    # -- questions leaf-first eviction and the views ask ---------------------------------

    def is_leaf(self, block_id: int) -> bool:
        """Has `block_id` no indexed successor? (An unindexed block counts as a leaf.)"""
        node = self._node_of.get(block_id)
        return node is None or (node.blocks[-1] == block_id and not node.children)

    def lock_of(self, block_id: int) -> int:
        """The lock count of the node that holds `block_id` (0 if it is not indexed)."""
        node = self._node_of.get(block_id)
        return 0 if node is None else node.lock

    def nodes(self) -> Iterator[tuple[int, RadixNode]]:
        """(depth, node) for every node below the roots, depth first (for views; O(n))."""
        stack = [(0, root) for root in reversed(list(self._roots.values()))]
        while stack:
            depth, node = stack.pop()
            if node.parent is not None:
                yield depth, node
            stack += [(depth + 1, c) for c in reversed(list(node.children.values()))]

    def format_tree(self, max_tokens: int = 8) -> str:
        """The trees as indented text, one per namespace: each edge's first tokens, its
        blocks and its lock."""
        lines: list[str] = []

        def draw(node: RadixNode, indent: str) -> None:
            children = list(node.children.values())
            for i, child in enumerate(children):
                last = i == len(children) - 1
                shown = " ".join(map(str, child.tokens[:max_tokens]))
                more = " …" if len(child.tokens) > max_tokens else ""
                lines.append(
                    f"{indent}{'└─' if last else '├─'} [{shown}{more}] "
                    f"({len(child.tokens)} tokens) blocks {child.blocks} lock {child.lock}"
                )
                draw(child, indent + ("   " if last else "│  "))

        for root in self._roots.values():
            lines.append(f"root {root.label}")
            draw(root, "")
        return "\n".join(lines) if lines else "(empty)"

    # -- internals -----------------------------------------------------------------------

    def _root(self, seq: TokenSequence) -> RadixRoot:
        """`seq`'s namespace's root, made if it has none (the caller indexes a block in it)."""
        key = namespace_key(seq.salt, seq.extra_keys)
        root = self._roots.get(key)
        if root is None:
            extra = f", extra keys {seq.extra_keys!r}" if seq.extra_keys else ""
            root = self._roots[key] = RadixRoot(key, f"(salt {seq.salt!r}{extra})")
        return root

    def _lock_hits(self, seq: TokenSequence, table: Sequence[int]) -> RadixPath:
        """Lock the nodes holding the leading blocks of `table` (the prefix hits)."""
        root = self._roots.get(namespace_key(seq.salt, seq.extra_keys))
        if root is None:
            return RadixPath(None, 0)  # nothing of its namespace is indexed: no hits
        node: RadixNode = root
        i, size, tokens = 0, self.block_size, seq.token_ids
        while True:
            child = node.children.get(tuple(tokens[i * size : (i + 1) * size]))
            if child is None or i >= len(table) or child.blocks[0] != table[i]:
                break
            n = 1
            while n < len(child.blocks) and i + n < len(table) and child.blocks[n] == table[i + n]:
                n += 1
            if n < len(child.blocks):
                child = self._split(child, n)
            child.lock += 1
            node, i = child, i + n
        return RadixPath(None if node is root else node, i)

    def _split(self, node: RadixNode, n: int) -> RadixNode:
        """Split `node` after its first `n` blocks; return the new upper node."""
        size = self.block_size
        upper = RadixNode(node.parent, node.tokens[: n * size], node.blocks[:n], node.lock)
        key = tuple(node.tokens[:size])
        parent = node.parent
        assert parent is not None  # only a node below a root holds blocks to split
        parent.children[key] = upper
        del node.tokens[: n * size], node.blocks[:n]
        node.parent = upper
        upper.children[tuple(node.tokens[:size])] = node
        for block in upper.blocks:
            self._node_of[block] = upper
        return upper

    def _common_blocks(
        self, node: RadixNode, tokens: list[int], start: int, max_blocks: int
    ) -> int:
        """How many of `node`'s blocks equal the tokens' blocks from `start` on (the first
        already matched by its key), capped at `max_blocks - start`."""
        size = self.block_size
        n = min(len(node.blocks), max_blocks - start)
        if node.tokens[: n * size] == tokens[start * size : (start + n) * size]:
            return n
        k = 1
        while (
            node.tokens[k * size : (k + 1) * size]
            == tokens[(start + k) * size : (start + k + 1) * size]
        ):
            k += 1
        return k

    def _add_lock(self, node: RadixNode | None, delta: int) -> None:
        while node is not None and node.parent is not None:
            node.lock += delta
            node = node.parent

    def _unindex(self, block_id: int) -> None:
        del self._node_of[block_id], self._key_of[block_id]

    def _drop_subtree(self, node: RadixNode) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            for block in n.blocks:
                self._unindex(block)
            stack += n.children.values()


class LeafFirst(EvictionPolicy):
    """Any eviction policy, made to evict only leaves of a `RadixCache`.

    Every call goes to `inner`; when `inner.evict()` names a block with an indexed successor,
    that block is put back (a touch and `make_evictable`: it re-enters as if just hit and
    released) and `inner` is asked again. `deferred` counts how often that happened: never for
    LRU, FIFO and LFU under the manager (they name leaves anyway). Anything else the inner
    policy has (`count`, `buckets`, ...) is reached through this wrapper.
    """

    def __init__(self, inner: EvictionPolicy, index: RadixCache) -> None:
        self.inner = inner
        self.index = index
        self.name = inner.name
        self.deferred = 0

    def touch(self, block_id: int) -> None:
        self.inner.touch(block_id)

    def make_evictable(self, block_id: int) -> None:
        self.inner.make_evictable(block_id)

    def revive(self, block_id: int) -> None:
        self.inner.revive(block_id)

    def forget(self, block_id: int) -> None:
        self.inner.forget(block_id)

    def evict(self) -> int:
        inner, is_leaf = self.inner, self.index.is_leaf
        aside: list[int] = []
        try:
            while True:
                try:
                    block_id = inner.evict()
                except InvalidBlock:
                    if not aside:
                        raise
                    return aside.pop(0)  # only inner blocks left (not reached under the manager)
                if is_leaf(block_id):
                    return block_id
                aside.append(block_id)
        finally:
            self.deferred += len(aside)
            for block_id in aside:  # back in line, as if just released
                inner.touch(block_id)
                inner.make_evictable(block_id)

    def __len__(self) -> int:
        return len(self.inner)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.inner

    def __getattr__(self, name: str) -> object:
        if name == "inner":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def blocks_on_path(path: RadixPath) -> list[int]:
    """The blocks a path covers, root first (for tests and views)."""
    nodes = []
    node: RadixNode | None = path.node
    while node is not None and node.parent is not None:
        nodes.append(node)
        node = node.parent
    return [b for n in reversed(nodes) for b in n.blocks]
