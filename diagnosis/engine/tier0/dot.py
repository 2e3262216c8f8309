"""Matrix products: element-wise multiply + tl.sum where tl.dot applies, and fp32 dot precision.

``tl.sum(a[:, :, None] * b[None, :, :], axis=1)`` is a matrix product computed on FMA units
through a BLOCK_M x BLOCK_K x BLOCK_N register tensor; ``tl.dot`` runs it on tensor cores.
So is a product of two operands that each follow a different program axis (one output
element or row per program, GEMM-style). The matrix-VECTOR form
``tl.sum(a * x[None, :], axis=1)`` is the right tool for its job and is left alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diagnosis.engine.escalation import modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.registry import rule
from diagnosis.engine.tier0.source import KernelContext, call_arg, has_kwarg, subscript_axes

# Tensor-core peak over FMA peak is 4-8x on recent GPUs (A100/H100 fp16, tf32); take the low end.
TENSOR_CORE_BOUND = 4.0
_LOW_PRECISION = frozenset({"tl.float16", "tl.bfloat16", "tl.float8e4nv", "tl.float8e5", "tl.float8e4b15"})

SUM_NOT_DOT = register_code(
    "T0-SUM-NOT-DOT",
    Tier.TRIAGE,
    Family.USE_DOT,
    "{kernel} computes a matrix product as {form} reduced by tl.sum: FMA units instead of tensor "
    "cores; tl.dot applies (tensor-core peak is 4-8x the FMA peak, gain halved from 4x)",
    "Multiply and sum instead of tl.dot",
)
DOT_FP32 = register_code(
    "T0-DOT-FP32-PRECISION",
    Tier.TRIAGE,
    Family.DOT_PRECISION,
    "{kernel} calls tl.dot on float32 operands ({why}) without input_precision: Triton's default "
    "(tf32 unless TRITON_F32_DEFAULT says otherwise) decides both speed and accuracy; state the choice",
    "fp32 tl.dot without a precision choice",
)

DOT_IEEE = register_code(
    "T0-DOT-IEEE",
    Tier.TRIAGE,
    Family.DOT_PRECISION,
    "{kernel} calls tl.dot with {spelling}: no tensor-core instruction takes fp32 operands at ieee "
    "precision, so the dot runs as FMA loops; tf32 runs on the tensor cores with fp32 accumulation "
    "(tensor-core peak is 4-8x the FMA peak, gain halved from 4x)",
    "fp32 tl.dot at ieee precision",
)


def _ieee_spelling(ctx: KernelContext, call: ast.Call) -> str | None:
    """How the dot asks for ieee precision, or None when it does not (or cannot be told)."""
    for kw in call.keywords:
        if kw.arg == "allow_tf32" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
            return "allow_tf32=False"
    precision = call_arg(call, 3, "input_precision")
    if isinstance(precision, ast.Constant) and precision.value == "ieee":
        return "input_precision='ieee'"
    if isinstance(precision, ast.Name) and precision.id in ctx.constexprs:
        values = ctx.constexpr_values(precision.id)
        if values and all(v.value == "ieee" for v, _ in values):
            return f"input_precision={precision.id}, which every launch sets to 'ieee'"
    return None


@rule(DOT_IEEE.code)
def dot_ieee(ctx: KernelContext) -> Iterator[Finding]:
    # ieee precision only matters for fp32 operands: fp16/bf16 dots run on tensor cores whatever
    # the flag says (flag_gems' addmm passes allow_tf32=False on fp16 inputs)
    float_inputs = {d for d in ctx.module.input_dtypes() if d.startswith(("float", "bfloat"))}
    for call in ctx.tl_calls("dot"):
        spelling = _ieee_spelling(ctx, call)
        if spelling is None:
            continue
        operands = [a for a in (call_arg(call, 0, "input"), call_arg(call, 1, "other")) if a is not None]
        casts = {_cast(ctx, op, set()) for op in operands}
        if "low" in casts or (float_inputs and "float32" not in float_inputs and "fp32" not in casts):
            continue
        yield Finding(
            DOT_IEEE.code,
            Severity.MEDIUM,
            {"kernel": ctx.name, "spelling": spelling},
            lines=(call.lineno,),
            kernel=ctx.name,
            gain=modest_gain(TENSOR_CORE_BOUND),
        )


def _product(ctx: KernelContext, node: ast.expr) -> ast.BinOp | None:
    """The multiplication a reduction reduces, looking through one local name."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return node
    if isinstance(node, ast.Name):
        defn = ctx.definition(node.id)
        if isinstance(defn, ast.BinOp) and isinstance(defn.op, ast.Mult):
            return defn
    return None


def _sum_calls(ctx: KernelContext) -> Iterator[tuple[ast.Call, ast.expr]]:
    for node in ctx.walk():
        if not isinstance(node, ast.Call):
            continue
        if ctx.tl_name(node) == "sum" and node.args:
            yield node, node.args[0]
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "sum":
            base = node.func.value
            if ctx.module.canonical(base) is None or isinstance(base, ast.Name):
                yield node, base


def _classify(ctx: KernelContext, prod: ast.BinOp) -> str | None:
    left, right = subscript_axes(prod.left), subscript_axes(prod.right)
    if left and right and len(left) == len(right) == 3 and left.index("new") != right.index("new"):
        return "a 3-D broadcast product"
    dl, dr = ctx.deps(prod.left), ctx.deps(prod.right)
    if dl.loaded and dr.loaded and dl.pids and dr.pids and not (dl.pids & dr.pids):
        return "a product of operands that follow different program axes"
    return None


@rule(SUM_NOT_DOT.code)
def sum_not_dot(ctx: KernelContext) -> Iterator[Finding]:
    for call, arg in _sum_calls(ctx):
        prod = _product(ctx, arg)
        if prod is None:
            continue
        form = _classify(ctx, prod)
        if form is None:
            continue
        lines = (call.lineno,) if prod.lineno == call.lineno else (call.lineno, prod.lineno)
        yield Finding(
            SUM_NOT_DOT.code,
            Severity.HIGH if form.startswith("a 3-D") else Severity.MEDIUM,
            {"kernel": ctx.name, "form": form},
            lines=lines,
            kernel=ctx.name,
            gain=modest_gain(TENSOR_CORE_BOUND),
        )


def _cast(ctx: KernelContext, node: ast.AST, seen: set[str]) -> str | None:
    """'low' or 'fp32' when the operand is visibly cast, following local names."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            target = None
            if isinstance(sub.func, ast.Attribute) and sub.func.attr == "to" and sub.args:
                target = ctx.module.canonical(sub.args[0])
            elif ctx.tl_name(sub) == "cast" and len(sub.args) >= 2:
                target = ctx.module.canonical(sub.args[1])
            if target in _LOW_PRECISION:
                return "low"
            if target == "tl.float32":
                return "fp32"
        if isinstance(sub, ast.Name) and sub.id not in seen:
            seen.add(sub.id)
            for _, expr in ctx.defs.get(sub.id, ()):
                found = _cast(ctx, expr, seen)
                if found:
                    return found
    return None


@rule(DOT_FP32.code)
def dot_fp32_precision(ctx: KernelContext) -> Iterator[Finding]:
    float_inputs = {d for d in ctx.module.input_dtypes() if d.startswith(("float", "bfloat"))}
    for call in ctx.tl_calls("dot"):
        if has_kwarg(call, "input_precision", "allow_tf32") or len(call.args) >= 4:
            continue
        operands = [a for a in (call_arg(call, 0, "input"), call_arg(call, 1, "other")) if a is not None]
        casts = {_cast(ctx, op, set()) for op in operands}
        if "low" in casts:
            continue
        if "fp32" in casts:
            why = "cast with .to(tl.float32)"
        elif float_inputs == {"float32"}:
            why = "get_inputs builds float32 tensors"
        else:
            continue
        yield Finding(
            DOT_FP32.code,
            Severity.LOW,
            {"kernel": ctx.name, "why": why},
            lines=(call.lineno,),
            kernel=ctx.name,
        )
