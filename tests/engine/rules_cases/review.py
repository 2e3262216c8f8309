"""What a reviewer would not accept in a rewrite, checked on (before, after) module pairs.

A rewrite may not add what its input did not have:
- `ruff` findings (F, E9, B: undefined or unused names, syntax, likely bugs), unused locals
  (F841) among them;
- a statement repeated in one block with nothing between that could change its value
  (`cols = ...` again, a load again with no store between);
- a copy `a = b` of one name into another;
- a local bound once, to a literal (`start = 0`), and read: a constant that never varies.

Each function of `after` is compared with the function of `before` it comes from: the one of
the same name, else the one whose name starts it (`k_single_pass` from `k`), else, for a new
kernel (a fusion's), the sum over every function of `before`.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.proposers.rules.tidy import assigned, writes_memory
from diagnosis.engine.srcmodel.nodes import NodeMemo

RUFF_SELECT = "F,E9,B"


def ruff_codes(paths: list[Path]) -> dict[str, Counter[str]]:
    """Resolved path -> its ruff codes (F, E9, B), one ruff run for all of them."""
    ruff = Path(sys.executable).parent / "ruff"
    files = [str(p.resolve()) for p in paths]
    proc = subprocess.run(
        [str(ruff), "check", "--isolated", "--select", RUFF_SELECT, "--output-format", "json", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    out: dict[str, Counter[str]] = {f: Counter() for f in files}
    for item in json.loads(proc.stdout or "[]"):
        out.setdefault(str(Path(item["filename"]).resolve()), Counter())[item["code"] or "E999"] += 1
    return out


def ruff_problems(before: Counter[str], after: Counter[str]) -> list[str]:
    return [f"ruff {code} x{n - before[code]}" for code, n in sorted(after.items()) if n > before[code]]


# ---------------------------------------------------------------------------------------
# per-function counts


def _functions(tree: cst.Module) -> dict[str, cst.FunctionDef]:
    """Every function by name (the first of a name), nested ones included, in source order. A
    `def` is a statement: only statements and their blocks are read, not the expressions."""
    out: dict[str, cst.FunctionDef] = {}
    todo: list[cst.CSTNode] = [tree]
    while todo:
        n = todo.pop()
        if isinstance(n, cst.FunctionDef):
            out.setdefault(n.name.value, n)
        if not isinstance(n, (cst.SimpleStatementLine, cst.BaseExpression)):
            todo.extend(reversed([c for c in cu.children(n) if not isinstance(c, cst.BaseExpression)]))
    return out


def _blocks(fn: cst.FunctionDef) -> Iterator[list[cst.BaseStatement]]:
    for n in cu.walk(fn.body):
        if isinstance(n, cst.IndentedBlock):
            yield list(n.body)


def repeats(fn: cst.FunctionDef) -> int:
    """Simple statements equal to an earlier one of their block, with nothing between that binds
    a name they read or bind, and no store between where they load."""
    count = 0
    for block in _blocks(fn):
        # each statement's text, bindings and stores, read once per block (not once per pair)
        texts = [
            cu.code(st.with_changes(leading_lines=[])).strip()
            if isinstance(st, cst.SimpleStatementLine)
            else None
            for st in block
        ]
        binds: dict[int, set[str]] = {}
        stores: dict[int, bool] = {}
        for j, st in enumerate(block):
            if texts[j] is None:
                continue
            names = cu.names_in(st)
            loads = any(cu.is_call(n, "tl.load") for n in cu.walk(st))
            for i in range(j - 1, -1, -1):
                if texts[i] == texts[j]:
                    count += 1
                    break
                if i not in binds:
                    binds[i] = assigned(block[i])
                if binds[i] & names:
                    break
                if loads:
                    if i not in stores:
                        stores[i] = writes_memory(block[i])
                    if stores[i]:
                        break
    return count


def copies(fn: cst.FunctionDef) -> int:
    """`a = b` statements, both plain names."""
    return sum(
        1
        for n in cu.walk(fn.body)
        if isinstance(n, cst.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0].target, cst.Name)
        and isinstance(n.value, cst.Name)
        and n.value.value not in ("True", "False", "None")
    )


def constants(fn: cst.FunctionDef) -> int:
    """Locals bound once, to a number literal, and read."""
    bound: Counter[str] = Counter()
    literal: set[str] = set()
    for n in cu.walk(fn.body):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                for name in cu.walk(t.target):
                    if isinstance(name, cst.Name):
                        bound[name.value] += 1
                        if isinstance(t.target, cst.Name) and isinstance(n.value, (cst.Integer, cst.Float)):
                            literal.add(name.value)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            for name in cu.walk(n.target):
                if isinstance(name, cst.Name):
                    bound[name.value] += 1
    params = {p.name.value for p in fn.params.params}
    reads = cu.name_loads(fn.body, {id(n) for n in cu.walk(fn.body) if isinstance(n, cst.AssignTarget)})
    return sum(1 for name in literal if bound[name] == 1 and name not in params and reads[name])


CHECKS = {"repeated statement": repeats, "copy": copies, "constant never varied": constants}


@functools.lru_cache(maxsize=256)
def _functions_of(text: str) -> dict[str, cst.FunctionDef]:
    """The functions of a module text, parsed once per text (a suite module is the `before` of
    every rewrite of it; libcst trees are immutable)."""
    return _functions(cst.parse_module(text))


# a module is the `before` of every rewrite of it, so its functions (the same nodes,
# `_functions_of`) are counted, and printed, once for all of them
_COUNTED = NodeMemo(20_000)
_TEXTS = NodeMemo(20_000)


def _count(fn: cst.FunctionDef, what: str) -> int:
    return _COUNTED.get(fn, lambda: CHECKS[what](fn), what)


def _text(fn: cst.FunctionDef) -> str:
    return _TEXTS.get(fn, lambda: cu.code(fn))


def problems(before: str, after: str) -> list[str]:
    """What `after` adds that `before` did not have (ruff aside: see ruff_codes)."""
    old, new = _functions_of(before), _functions_of(after)
    out = []
    for name, fn in new.items():
        origin = old.get(name) or next(
            (old[o] for o in sorted(old, key=len, reverse=True) if name.startswith(o)), None
        )
        if origin is not None and _text(fn) == _text(origin):  # a function the rewrite left as it was
            continue
        for what in CHECKS:
            allowed = _count(origin, what) if origin is not None else sum(_count(f, what) for f in old.values())
            found = _count(fn, what)
            if found > allowed:
                out.append(f"{name}: {what} x{found - allowed}")
    return out


def added(pairs: list[tuple[str, str, str]], tmp_path: Path) -> dict[str, list[str]]:
    """Row id -> what its output adds, for (id, before, after) pairs."""
    paths: dict[str, tuple[Path, Path]] = {}
    for i, (row_id, before, after) in enumerate(pairs):
        b, a = tmp_path / f"r{i}_before.py", tmp_path / f"r{i}_after.py"
        b.write_text(before)
        a.write_text(after)
        paths[row_id] = (b.resolve(), a.resolve())
    codes = ruff_codes([p for pair in paths.values() for p in pair])
    found = {}
    for row_id, before, after in pairs:
        b, a = paths[row_id]
        got = ruff_problems(codes[str(b)], codes[str(a)]) + problems(before, after)
        if got:
            found[row_id] = got
    return found
