"""Reading a libcst tree's nodes: each node's children once, and every node under one.

Read-only passes walk the tree through these instead of a libcst visitor: `tree.visit(visitor)`
rebuilds (constructs and validates a copy of) every node it passes, even for a visitor that
changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import libcst as cst

T = TypeVar("T")

# libcst's CSTNode.children rebuilds the node (a visit that constructs and validates a copy)
# on every read. A class's `_visit_and_replace_children` visits its fields in one fixed (source)
# order, naming each through `visitor.on_visit_attribute`; only a field it skips when empty (an
# f-string's format_spec of None) can be missing from one node's record. So the order is recorded
# from one rebuild per class, and again from any node whose unrecorded fields hold a node, and a
# node's children are its fields' nodes in that order: the same tuple as libcst's, in a fraction
# of the time (tests/engine/test_srcmodel.py compares the two on every node of the test, suite
# and engine modules). Nodes are immutable, so each node's children are also kept: the entry holds
# the node, so its id is not reused while the entry lives; the whole memo is dropped when it grows
# past _CHILDREN_MAX nodes (a long-lived worker reads many modules).
_CHILDREN: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}
_CHILDREN_MAX = 200_000
_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # class -> (order, unrecorded)


class _FieldOrder(cst.CSTVisitor):
    """Records the fields a node's rebuild visits, in order, without descending into them."""

    def __init__(self) -> None:
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)


# isinstance against CSTNode, an ABC, goes through ABCMeta.__instancecheck__ (several times
# slower than a plain class): the answer is kept per type instead.
_IS_NODE: dict[type, bool] = {}


def _is_node(value: object) -> bool:
    kind = type(value)
    answer = _IS_NODE.get(kind)
    if answer is None:
        answer = _IS_NODE[kind] = issubclass(kind, cst.CSTNode)
    return answer


def _holds_nodes(value: object) -> bool:
    if _is_node(value):
        return True
    return isinstance(value, (tuple, list)) and any(_is_node(v) for v in value)


def fields_in_order(node: cst.CSTNode) -> tuple[str, ...]:
    """The fields of `node` that hold its children, in the order libcst visits (and prints) them."""
    entry = _FIELDS.get(type(node))
    if entry is not None and not any(_holds_nodes(getattr(node, name)) for name in entry[1]):
        return entry[0]
    recorder = _FieldOrder()
    node._visit_and_replace_children(recorder)
    order = tuple(recorder.fields)
    if entry is None or set(entry[0]) <= set(order):
        unrecorded = tuple(f.name for f in dataclasses.fields(node) if f.name not in order)
        _FIELDS[type(node)] = (order, unrecorded)
    return order


def _children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    kids: list[cst.CSTNode] = []
    for name in fields_in_order(node):
        value = getattr(node, name)
        if _is_node(value):
            kids.append(value)
        elif isinstance(value, (tuple, list)):
            kids.extend(v for v in value if _is_node(v))
    return tuple(kids)


class NodeMemo:
    """Answers kept per node, by identity: libcst nodes are immutable, so what a reader computes
    from one stays true of it. Each entry holds its node, so the id is not reused while the
    entry lives; past `most` entries they are all dropped (a long-lived worker reads many
    modules). `children` and `preorder` keep their own dicts of the same kind: they are read
    millions of times a run, where the closure and the tuple key of `get` would show."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._entries: dict[Any, tuple[cst.CSTNode, Any]] = {}

    def get(self, node: cst.CSTNode, compute: Callable[[], T], key: Any = None) -> T:
        """The answer for `node` (and `key`, where one node has several), computed once."""
        index = (id(node), key)
        entry = self._entries.get(index)
        if entry is not None and entry[0] is node:
            return entry[1]
        if len(self._entries) >= self.most:
            self._entries.clear()
        answer = compute()
        self._entries[index] = (node, answer)
        return answer


def children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """`node.children` (the immediate children, in source order), read once per node."""
    entry = _CHILDREN.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    if len(_CHILDREN) >= _CHILDREN_MAX:
        _CHILDREN.clear()
    kids = _children(node)
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
