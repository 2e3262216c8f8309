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
    a `prune` type, nothing. A stack, not recursion: a recursive generator passes each node up
    through every level above it."""
    stack = [node]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, prune):
            stack.extend(reversed(children(node)))
