"""DOT_PRECISION: an fp32 `tl.dot` that asks for ieee precision is given tf32.

Matches each `tl.dot` of a wanted kernel whose precision is ieee, spelled in any of these ways:

- `input_precision="ieee"` (keyword, or the fourth positional argument);
- `allow_tf32=False` (the older spelling, deprecated in Triton 3);
- `input_precision=P` where `P` is a constexpr parameter of the kernel that every launch binds
  to "ieee": a string literal, a local or a module-level name bound once to one, or the
  parameter's default when a launch does not pass it.

The literal becomes `"tf32"` where it is written (the dot's keyword, each launch's argument, or
the parameter's default); `allow_tf32=False` becomes `input_precision="tf32"`. A name bound to
"ieee" is not edited (something else may read it); the launch argument that passes it is.
A precision chosen per autotune config, or any value that cannot be resolved to "ieee", is
left alone, as is a dot without a stated precision (Triton's default is already tf32).

Not correct by construction: tf32 rounds each fp32 operand to a 10-bit mantissa before the
tensor-core product (accumulation stays fp32), about 1e-3 relative error per product. The
verification gate's fp32-with-dot tolerance (runner/compare.py) is sized for exactly
that; a module whose own tolerance is tighter fails the gate and keeps its ieee dot. Why it
is faster: no tensor-core instruction takes fp32 operands at ieee precision, so Triton lowers
such a dot to FMA loops (the TritonGPUAccelerateMatmul pass leaves it a plain tt.dot; tier 3's
T3-DOT-NO-MMA says so), and the H200's tf32 tensor-core peak is ~7x its fp32 FMA peak.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, transform
from diagnosis.engine.proposers.rules import cst_util as cu

IEEE = "ieee"
TF32 = "tf32"
PRECISION_POSITION = 3  # tl.dot(input, other, acc, input_precision, ...)


def _string(node: cst.CSTNode | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _tf32_like(node: cst.SimpleString) -> cst.SimpleString:
    """A "tf32" literal in the quotes of `node`."""
    quote = node.quote
    return cst.SimpleString(f"{node.prefix}{quote}{TF32}{quote}")


def _resolve(node: cst.BaseExpression, bindings: cu.Bindings | None, strings: dict[str, str]) -> str | None:
    """A string literal, or a local or module-level name bound once to one (`strings`)."""
    s = _string(node)
    if s is not None or not isinstance(node, cst.Name):
        return s
    if bindings is not None and node.value in bindings.by_name:
        b = bindings.single(node.value)
        return _string(b.value) if b is not None else None
    return strings.get(node.value)


def _param_edits(
    kernel: cu.Kernel, param: str, launches: list[cu.Launch], strings: dict[str, str]
) -> list[tuple[cst.CSTNode, Any]] | None:
    """Edits that make every launch bind constexpr `param` to "tf32"; None unless every launch
    binds it to "ieee" (and there is at least one launch)."""
    mine = [lc for lc in launches if lc.kernel == kernel.name]
    if not mine or any(lc.has_star_args for lc in mine):
        return None
    edits: list[tuple[cst.CSTNode, Any]] = []
    default = kernel.defaults.get(param)
    for lc in mine:
        value = lc.bound(kernel).get(param)
        if value is None:  # the parameter's default applies
            if _string(default) != IEEE:
                return None
            assert isinstance(default, cst.SimpleString)
            edits.append((default, _tf32_like(default)))
        elif _resolve(value, cu.Bindings(lc.reading_scope), strings) == IEEE:
            edits.append((value, _tf32_like(value) if isinstance(value, cst.SimpleString) else cu.expr(f'"{TF32}"')))
        else:
            return None
    # one default edited once, however many launches rely on it
    unique: dict[int, tuple[cst.CSTNode, Any]] = {id(old): (old, new) for old, new in edits}
    return list(unique.values())


def _dot_edits(
    kernel: cu.Kernel, dot: cst.Call, launches: list[cu.Launch], strings: dict[str, str]
) -> list[tuple[cst.CSTNode, Any]] | None:
    for i, a in enumerate(dot.args):
        key = a.keyword.value if a.keyword is not None else None
        if key == "allow_tf32" and isinstance(a.value, cst.Name) and a.value.value == "False":
            return [(a, a.with_changes(keyword=cst.Name("input_precision"), value=cu.expr(f'"{TF32}"')))]
        if key == "input_precision" or (key is None and a.star == "" and i == PRECISION_POSITION):
            if _string(a.value) == IEEE:
                assert isinstance(a.value, cst.SimpleString)
                return [(a.value, _tf32_like(a.value))]
            if isinstance(a.value, cst.Name) and a.value.value in kernel.constexprs:
                return _param_edits(kernel, a.value.value, launches, strings)
            return None
    return None


@transform(Family.DOT_PRECISION)
def tf32_for_ieee_dots(source: str, inp: RuleInput) -> Rewrite | None:
    tree = cu.parse(source)
    if tree is None:
        return None
    strings = cu.module_constants(tree, _string)
    kernels = cu.find_kernels(tree)
    launches = cu.find_launches(tree, kernels)
    edits: dict[int, tuple[cst.CSTNode, Any]] = {}
    changed: dict[str, int] = {}
    for k in kernels.values():
        if not inp.wants(k.name):
            continue
        for dot in k.calls("tl.dot"):
            found = _dot_edits(k, dot, launches, strings)
            if found:
                changed[k.name] = changed.get(k.name, 0) + 1
                for old, new in found:
                    edits[id(old)] = (old, new)
    if not edits:
        return None
    new_tree = cu.replace(tree, list(edits.values()))
    # a local that held "ieee" for a launch argument now replaced is read by nothing
    replaced = {old.value for old, _ in edits.values() if isinstance(old, cst.Name)}
    new_tree = cu.remove_dead_locals(new_tree, set(kernels), replaced)
    what = ", ".join(f"{name} ({n} dot{'s' if n > 1 else ''})" for name, n in changed.items())
    return Rewrite(
        source=cu.emit(new_tree, tree),
        family=Family.DOT_PRECISION,
        kernels=tuple(changed),
        mechanism=f"input precision ieee -> tf32 for the fp32 tl.dot of {what}.",
        effect=(
            "an ieee fp32 dot has no tensor-core instruction and runs as FMA loops; tf32 runs on the "
            "tensor cores (~7x the FMA peak on an H200) with fp32 accumulation and ~1e-3 relative "
            "error per product, which the gate's fp32-dot tolerance admits. Large for a compute-bound "
            "dot; nothing when the kernel is memory-bound."
        ),
    )
