"""Reading a libcst tree's nodes: each node's children once, and every node under one.

Read-only passes walk the tree through these instead of a libcst visitor: `tree.visit(visitor)`
rebuilds (constructs and validates a copy of) every node it passes, even for a visitor that
changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

# libcst's CSTNode.children rebuilds the node (a visit that constructs and validates a copy)
# on every read; nodes are immutable, so each node's children are read once and kept. The
# entry holds the node, so its id is not reused while the entry lives; the whole memo is
# dropped when it grows past _CHILDREN_MAX nodes (a long-lived worker reads many modules).
_CHILDREN: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}
_CHILDREN_MAX = 200_000


def children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """`node.children` (the immediate children, in source order), read once per node."""
    entry = _CHILDREN.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    if len(_CHILDREN) >= _CHILDREN_MAX:
        _CHILDREN.clear()
    kids = tuple(node.children)
    _CHILDREN[id(node)] = (node, kids)
    return kids


def walk(node: cst.CSTNode, prune: type | tuple[type, ...] = ()) -> Iterator[cst.CSTNode]:
    """Every node under `node` (itself included), depth first, in source order; below a node of
    a `prune` type, nothing."""
    if not prune:
        return iter(preorder(node))
    return _walk_pruned(node, prune)


# The rules walk the same kernels and launch functions over and over (every family, every
# finding): a node's whole preorder is listed once and kept, beside its children. Entries are
# dropped all at once when they hold more than _PREORDER_MAX nodes in all.
_PREORDER: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}
_PREORDER_MAX = 500_000
_preorder_held = 0


def preorder(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """Every node under `node` (itself included), depth first, in source order, listed once."""
    global _preorder_held
    entry = _PREORDER.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    out: list[cst.CSTNode] = []
    stack = [node]
    while stack:  # a stack, not recursion: deep expressions would pass each node up every level
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(children(n)))
    nodes = tuple(out)
    if _preorder_held + len(nodes) > _PREORDER_MAX:
        _PREORDER.clear()
        _preorder_held = 0
    _PREORDER[id(node)] = (node, nodes)
    _preorder_held += len(nodes)
    return nodes


def _walk_pruned(node: cst.CSTNode, prune: type | tuple[type, ...]) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, prune):
            stack.extend(reversed(children(node)))
