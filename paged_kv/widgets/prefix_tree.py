"""The prefix tree: every full block the prefix index has held, as a tree of prefixes.

With chained hashes, block i's hash names the whole prefix up to it, so the registered blocks
form a tree: a block's parent is the block before it in any sequence that holds it. With the
radix index (`prefix_index="radix"`) the tree is the index's own: each node is a run of blocks,
and the blocks of one node are drawn with the node's label. `prefix_tree_frames` replays
operations on a manager and records the tree after each; `render_prefix_tree_html` draws one
frame as an icicle (depth = block index, left to right; a shared prefix spans every request
below it), each block in use, cached or evicted, the blocks new this step outlined.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.radix_cache import RadixCache
from paged_kv.cache.snapshot import PoolSnapshot
from paged_kv.study.operations import Operation
from paged_kv.widgets.theme import (
    INK,
    MUTED,
    OUTLINE_CHANGED,
    card,
    esc,
    esc_text,
    legend,
    swatch,
    text_on,
)

TREE_STYLES = {
    "in_use": {"fill": "#56B4E9", "border": "2px solid #0b4f7a", "label": "in use"},
    "cached": {"fill": "#F0E442", "border": "2px dashed #7a6a00", "label": "cached"},
    "evicted": {"fill": "#ffffff", "border": "1px dashed #6b6b6b", "label": "evicted"},
}


@dataclass(frozen=True)
class TreeNode:
    """One full block of content: where it sits in the tree and what holds it now."""

    key: Hashable  # its hash (hash chain) or its tokens from the root (radix)
    parent: Hashable | None
    depth: int  # its logical block index
    tokens: tuple[int, ...]
    block: int | None  # the physical block holding it (None once evicted)
    state: str  # in_use, cached or evicted
    ref_count: int = 0
    group: str = ""  # the radix node it belongs to ("" for the hash chain)


@dataclass(frozen=True)
class TreeFrame:
    step: int
    what: str
    nodes: tuple[TreeNode, ...]  # in order of first appearance
    new: frozenset[Hashable]
    snapshot: PoolSnapshot  # the pool at this step, for the block-table map beside the tree


def prefix_tree_frames(manager: KVCacheManager, ops: Sequence[Operation]) -> list[TreeFrame]:
    """Apply `ops` to `manager` (it must cache prefixes) and record the tree after each."""
    if manager.prefix_cache is None:
        from paged_kv.errors import InvalidArgument

        raise InvalidArgument("the prefix tree needs a manager with prefix_caching=True.")
    seen: dict[Hashable, TreeNode] = {}
    frames = [_frame(manager, seen, 0, "start")]
    for step, op in enumerate(ops, start=1):
        op.apply(manager)
        frames.append(_frame(manager, seen, step, op.describe()))
    return frames


def _frame(
    manager: KVCacheManager, seen: dict[Hashable, TreeNode], step: int, what: str
) -> TreeFrame:
    index = manager.prefix_cache
    if isinstance(index, RadixCache):
        current = _radix_nodes(manager, index)
    else:
        assert isinstance(index, PrefixCache)  # the manager's two indexes; checked on entry
        current = _hash_nodes(manager, index)
        # blocks no live sequence holds: still indexed (cached) or evicted
        for key, node in seen.items():
            if key not in current and node.state != "evicted":
                found = index.longest_prefix([key]) if isinstance(key, bytes) else []
                if found:
                    state, ref = _state(manager, found[0])
                    current[key] = TreeNode(key, node.parent, node.depth, node.tokens, found[0],
                                            state, ref)  # fmt: skip
    new = frozenset(k for k in current if k not in seen or seen[k].state == "evicted")
    for key, node in current.items():
        seen[key] = node
    for key, node in list(seen.items()):
        if key not in current and node.state != "evicted":
            seen[key] = TreeNode(node.key, node.parent, node.depth, node.tokens, None, "evicted",
                                 0, node.group)  # fmt: skip
    return TreeFrame(step, what, tuple(seen.values()), new, manager.snapshot())


def _state(manager: KVCacheManager, block: int) -> tuple[str, int]:
    ref = manager.pool.ref_count(block)
    return ("in_use" if ref else "cached"), ref


def _hash_nodes(manager: KVCacheManager, index: PrefixCache) -> dict[Hashable, TreeNode]:
    """Registered blocks of the live sequences, and cached ones still indexed."""
    size = manager.block_size
    found: dict[Hashable, TreeNode] = {}
    for seq in manager.sequence_ids:
        tokens = manager.token_ids(seq)
        parent = None
        for i, block in enumerate(manager.block_table(seq)):
            h = index.hash_of(block)
            if h is None:
                break  # unregistered (partial, or a private duplicate): the path ends here
            state, ref = _state(manager, block)
            found[h] = TreeNode(h, parent, i, tuple(tokens[i * size : (i + 1) * size]), block,
                                state, ref)  # fmt: skip
            parent = h
    return found


def _radix_nodes(manager: KVCacheManager, index: RadixCache) -> dict[Hashable, TreeNode]:
    """Every block of the radix tree, keyed by its tokens from the root."""
    size = manager.block_size
    found: dict[Hashable, TreeNode] = {}
    path_of: dict[int, tuple[int, ...]] = {}  # id(node) -> tokens from the root to its end
    for number, (_depth, node) in enumerate(index.nodes()):
        parent_path = path_of.get(id(node.parent), ())
        path, parent_key = parent_path, (parent_path or None)
        for j, block in enumerate(node.blocks):
            chunk = tuple(node.tokens[j * size : (j + 1) * size])
            path = path + chunk
            state, ref = _state(manager, block)
            found[path] = TreeNode(path, parent_key, len(path) // size - 1, chunk, block, state,
                                   ref, f"n{number}")  # fmt: skip
            parent_key = path
        path_of[id(node)] = path
    return found


def render_prefix_tree_html(frame: TreeFrame, *, max_tokens: int = 3) -> str:
    """The tree as an icicle: one column per logical block, a node spanning the requests
    (leaves) below it. Nodes carry data-node (block index), data-state and data-block."""
    children: dict[Hashable | None, list[TreeNode]] = {}
    for node in frame.nodes:
        children.setdefault(node.parent, []).append(node)
    leaves: dict[Hashable, int] = {}

    def count(node: TreeNode) -> int:
        n = sum(count(c) for c in children.get(node.key, [])) or 1
        leaves[node.key] = n
        return n

    roots = children.get(None, [])
    for root in roots:
        count(root)
    cells: list[str] = []

    def place(node: TreeNode, row: int) -> None:
        cells.append(_node_html(node, row, leaves[node.key], node.key in frame.new, max_tokens))
        below = row
        for child in children.get(node.key, []):
            place(child, below)
            below += leaves[child.key]

    row = 0
    for root in roots:
        place(root, row)
        row += leaves[root.key]
    depth = max((n.depth for n in frame.nodes), default=0) + 1
    counts = {s: sum(n.state == s for n in frame.nodes) for s in TREE_STYLES}
    items = [
        (swatch(s["fill"], s["border"]), f"{s['label']}: {counts[k]}")
        for k, s in TREE_STYLES.items()
    ]
    items.append(
        ('<span style="display:inline-block;width:12px;height:12px;margin:2px;'
         f'outline:{OUTLINE_CHANGED}"></span>', "new this step")
    )  # fmt: skip
    if any(n.group for n in frame.nodes):
        items.append(("", "nK = radix node K (its blocks are one edge)"))
    caption = (
        f'<div data-caption style="color:{INK};margin-bottom:4px">'
        f"<b>step {frame.step}</b>: {esc_text(frame.what)}</div>"
    )
    if not frame.nodes:
        tree = f'<div style="color:{MUTED}">no full block cached yet</div>'
    else:
        header = "".join(
            f'<div style="grid-column:{d + 1};grid-row:1;color:{MUTED};font-size:10px">'
            f"block {d}</div>"
            for d in range(depth)
        )
        tree = (
            f'<div style="display:grid;grid-template-columns:repeat({depth},76px);'
            f'grid-auto-rows:minmax(30px,auto);gap:3px">{header}{"".join(cells)}</div>'
        )
    return card(legend(items) + caption + tree, "paged-kv-tree")


def _node_html(node: TreeNode, row: int, span: int, new: bool, max_tokens: int) -> str:
    style = TREE_STYLES[node.state]
    ink = text_on(style["fill"]) if node.state != "evicted" else MUTED
    outline = f"outline:{OUTLINE_CHANGED};outline-offset:1px;" if new else ""
    shown = " ".join(map(str, node.tokens[:max_tokens])) + (
        "…" if len(node.tokens) > max_tokens else ""
    )
    where = "evicted" if node.block is None else f"#{node.block}"
    if node.ref_count > 1:
        where += f" ×{node.ref_count}"
    if node.group:
        where = f"{node.group} {where}"
    strike = "text-decoration:line-through;" if node.state == "evicted" else ""
    return (
        f'<div data-node="{node.depth}" data-state="{node.state}" '
        f'data-block="{"" if node.block is None else node.block}" '
        f'title="{esc("tokens " + " ".join(map(str, node.tokens)))}" '
        f'style="grid-column:{node.depth + 1};grid-row:{row + 2} / span {span};'
        f"background:{style['fill']};color:{ink};border:{style['border']};{outline}"
        "box-sizing:border-box;padding:1px 3px;font-size:10px;overflow:hidden;display:flex;"
        f'flex-direction:column;justify-content:center"><b style="{strike}">{esc(where)}</b>'
        f'<span style="{strike}white-space:nowrap">{esc(shown)}</span></div>'
    )
