"""The pattern library: accepted rewrites distilled into patterns tier 0 matches.

When a reviewer accepts a proposal, ``distill_pattern`` keeps the mechanism (from the
findings that pointed at it), the changed jit function(s) before and after, the evidence
codes, and a *signature*: the tier-0 codes of the family it fixed plus the structural features
of the kernel that the rewrite removed (three sibling loops, a ``tl.sum`` of a product, an
atomic...). ``match_patterns`` reports ``T0-PATTERN-MATCH`` on a new kernel whose tier-0
findings and structure carry the whole signature, so the cheap tier gets better with history.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnosis.engine.escalation import MECHANISMS, choose_family, modest_gain
from diagnosis.engine.evidence import Family, Finding, Severity, Tier, register_code
from diagnosis.engine.tier0.source import KernelContext, ModuleContext, parse_module, subscript_axes

PATTERN_MATCH = register_code(
    "T0-PATTERN-MATCH",
    Tier.TRIAGE,
    Family.NONE,  # each match carries its pattern's family as family_override
    "{kernel} matches the stored pattern {pattern} ({family}): {mechanism}",
    "Matches a stored pattern",
)

# Calls whose presence says something about a kernel's structure (math functions do not).
_STRUCTURAL_CALLS = frozenset(
    {
        "dot",
        "sum",
        "max",
        "min",
        "reduce",
        "where",
        "atomic_add",
        "atomic_max",
        "atomic_min",
        "atomic_cas",
        "atomic_xchg",
        "multiple_of",
        "max_contiguous",
        "make_block_ptr",
        "advance",
        "static_range",
        "range",
        "trans",
        "cdiv",
        "swizzle2d",
    }
)


@dataclass(frozen=True)
class PatternSpec:
    """One distilled rewrite. ``signature`` items are ``code:<T0 code>`` or AST feature names."""

    family: Family
    mechanism: str
    before: str
    after: str
    evidence_codes: tuple[str, ...]
    signature: frozenset[str]
    name: str = ""
    gain: float | None = None  # measured speedup of the accepted proposal, when known
    source_proposals: tuple[int, ...] = field(default=(), compare=False)

    @property
    def signature_codes(self) -> frozenset[str]:
        return frozenset(s.removeprefix("code:") for s in self.signature if s.startswith("code:"))

    @property
    def signature_features(self) -> frozenset[str]:
        return frozenset(s for s in self.signature if not s.startswith("code:"))

    def signature_json(self) -> dict[str, list[str]]:
        """The signature as the JSON object the Pattern row stores: ``{"codes": [...], "features": [...]}``."""
        return {"codes": sorted(self.signature_codes), "features": sorted(self.signature_features)}

    def to_json(self) -> dict[str, Any]:
        return {
            "family": str(self.family),
            "mechanism": self.mechanism,
            "before": self.before,
            "after": self.after,
            "evidence_codes": list(self.evidence_codes),
            "signature": self.signature_json(),
            "name": self.name,
            "gain": self.gain,
            "source_proposals": list(self.source_proposals),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PatternSpec:
        return cls(
            family=Family(data["family"]),
            mechanism=data["mechanism"],
            before=data["before"],
            after=data["after"],
            evidence_codes=tuple(data.get("evidence_codes", ())),
            signature=_signature(data.get("signature")),
            name=data.get("name", ""),
            gain=data.get("gain"),
            source_proposals=tuple(data.get("source_proposals", ())),
        )


def _signature(data: Any) -> frozenset[str]:
    """Read either stored form: the JSON object of signature_json() or a flat list."""
    if isinstance(data, dict):
        return frozenset([*(f"code:{c}" for c in data.get("codes", ())), *data.get("features", ())])
    return frozenset(data or ())


# ---------------------------------------------------------------------------------------
# features


def kernel_features(kernel: KernelContext) -> frozenset[str]:
    """Normalised structural node kinds of one jit function.

    Examples: ``call:tl.atomic_add``, ``for>=2`` (two or more loops), ``sibling-loops``
    (sequential loops over one range), ``sum-of-product``, ``expand3d``, ``divmod-in-loop``,
    ``decorator:autotune``, ``dot:input_precision``.
    """
    feats: set[str] = set()
    for call in kernel.tl_calls():
        name = kernel.tl_name(call)
        if name in _STRUCTURAL_CALLS:
            feats.add(f"call:tl.{name}")
        if name == "dot" and any(kw.arg in ("input_precision", "allow_tf32") for kw in call.keywords):
            feats.add("dot:input_precision")
        if name == "sum" and call.args:
            arg = call.args[0]
            if isinstance(arg, ast.Name):
                arg = kernel.definition(arg.id) or arg
            if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mult):
                feats.add("sum-of-product")
    fors = [n for n in kernel.walk() if isinstance(n, ast.For)]
    if fors:
        feats.add("for>=1")
    if len(fors) >= 2:
        feats.add("for>=2")
    ranges: dict[tuple[int, str], int] = {}
    for loop in fors:
        parent = kernel.parents.get(loop)
        key = (id(parent), ast.dump(loop.iter))
        ranges[key] = ranges.get(key, 0) + 1
    if any(n >= 2 for n in ranges.values()):
        feats.add("sibling-loops")
    for node in kernel.walk():
        axes = subscript_axes(node)
        if axes is not None and len(axes) == 3:
            feats.add("expand3d")
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.FloorDiv | ast.Mod)
            and kernel.enclosing_loops(node)
        ):
            feats.add("divmod-in-loop")
    if kernel.autotune is not None:
        feats.add("decorator:autotune")
    if kernel.heuristics:
        feats.add("decorator:heuristics")
    return frozenset(feats)


# ---------------------------------------------------------------------------------------
# matching


def match_patterns(
    source: str, findings: Sequence[Finding], patterns: Iterable[PatternSpec]
) -> list[Finding]:
    """``T0-PATTERN-MATCH`` for every stored pattern whose whole signature the new kernel carries.

    An empty signature never matches: a pattern that says nothing about its 'before' would
    match everything.
    """
    patterns = list(patterns)
    if not patterns:
        return []
    try:
        module = parse_module(source)
    except SyntaxError:
        return []
    codes_by_kernel: dict[str, set[str]] = {}
    lines_by_code: dict[tuple[str, str], list[int]] = {}
    for f in findings:
        codes_by_kernel.setdefault(f.kernel, set()).add(f.code)
        lines_by_code.setdefault((f.kernel, f.code), []).extend(f.lines)
    all_codes = {f.code for f in findings}
    features = {name: kernel_features(k) for name, k in module.kernels.items()}

    out: list[Finding] = []
    for pattern in patterns:
        codes, feats = pattern.signature_codes, pattern.signature_features
        if not codes and not feats:
            continue
        if not codes <= all_codes:
            continue
        matched = [
            name
            for name in module.kernels
            if feats <= features[name]
            and (not codes or codes <= codes_by_kernel.get(name, set()) | _module_codes(findings))
        ]
        if not matched:
            continue
        kernel = matched[0]
        lines = sorted({line for code in codes for line in lines_by_code.get((kernel, code), ())})
        out.append(
            Finding(
                PATTERN_MATCH.code,
                Severity.MEDIUM,
                {
                    "kernel": kernel,
                    "pattern": pattern.name or str(pattern.family),
                    "family": str(pattern.family),
                    "mechanism": pattern.mechanism,
                    "signature": sorted(pattern.signature),
                },
                lines=tuple(lines) or (module.kernels[kernel].line,),
                kernel=kernel,
                gain=modest_gain(pattern.gain) if pattern.gain is not None and pattern.gain > 1 else None,
                family_override=pattern.family,
            )
        )
    return out


def _module_codes(findings: Sequence[Finding]) -> set[str]:
    """Codes of findings not tied to one kernel's body (fusion names the consumer kernel)."""
    return {f.code for f in findings if f.info.family is Family.FUSION}


# ---------------------------------------------------------------------------------------
# distilling


def distill_pattern(
    before_source: str,
    after_source: str,
    findings: Sequence[Finding],
    *,
    name: str = "",
    gain: float | None = None,
    source_proposals: tuple[int, ...] = (),
) -> PatternSpec:
    """Turn an accepted rewrite into a PatternSpec.

    The family is the one the findings point to (highest severity*gain); the mechanism text
    is the family's mechanism followed by what those findings said; before/after are the jit
    functions the diff touches (difflib over the lines), falling back to the changed
    top-level definitions when no jit function changed (a wrapper-only rewrite). The
    signature holds the family's tier-0 codes that the 'after' no longer triggers, and the
    structural features of the changed kernels that the rewrite removed.
    """
    family = choose_family(findings) or Family.NONE
    relevant = [f for f in findings if f.family is family] or list(findings)
    messages: list[str] = []
    for f in relevant:
        if f.message not in messages:
            messages.append(f.message)
    lead = MECHANISMS.get(family, "")
    mechanism = "; ".join(filter(None, [lead, *messages]))

    before_mod = parse_module(before_source)
    after_mod = parse_module(after_source)
    changed_before, changed_after = _changed_lines(before_source, after_source)
    names = [n for n, k in before_mod.kernels.items() if _span(k.node) & changed_before]
    names += [n for n, k in after_mod.kernels.items() if _span(k.node) & changed_after and n not in names]
    if names:
        before = _segments(
            before_source, [before_mod.kernels[n].node for n in names if n in before_mod.kernels]
        )
        after = _segments(after_source, [after_mod.kernels[n].node for n in names if n in after_mod.kernels])
    else:
        before = _segments(before_source, _changed_toplevel(before_mod, changed_before))
        after = _segments(after_source, _changed_toplevel(after_mod, changed_after))

    feats_before: frozenset[str] = frozenset()
    feats_after: frozenset[str] = frozenset()
    for n in names:
        if n in before_mod.kernels:
            feats_before |= kernel_features(before_mod.kernels[n])
        if n in after_mod.kernels:
            feats_after |= kernel_features(after_mod.kernels[n])
    codes = {
        f.code
        for f in relevant
        if f.tier is Tier.TRIAGE and f.code != PATTERN_MATCH.code and f.family is family
    }
    # Keep what the rewrite fixed: a code the 'after' still triggers does not characterise the
    # 'before' (a launch-config rewrite that keeps a fixed block still has no autotune).
    from diagnosis.engine.tier0 import run_tier0  # here: tier0 imports this module lazily too

    remaining = {f.code for f in run_tier0(after_source).findings}
    codes = (codes - remaining) or codes
    signature = frozenset({f"code:{c}" for c in codes} | (feats_before - feats_after))
    evidence = tuple(dict.fromkeys(f.code for f in findings))
    return PatternSpec(
        family=family,
        mechanism=mechanism,
        before=before,
        after=after,
        evidence_codes=evidence,
        signature=signature,
        name=name,
        gain=gain,
        source_proposals=source_proposals,
    )


def _changed_lines(before: str, after: str) -> tuple[set[int], set[int]]:
    """1-based lines each side's diff touches; an insertion marks the lines around it."""
    a, b = before.splitlines(), after.splitlines()
    changed_a: set[int] = set()
    changed_b: set[int] = set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        changed_a |= set(range(i1 + 1, i2 + 1)) if i2 > i1 else {i1, i1 + 1}
        changed_b |= set(range(j1 + 1, j2 + 1)) if j2 > j1 else {j1, j1 + 1}
    return changed_a, changed_b


def _span(node: ast.AST) -> set[int]:
    start = min([getattr(node, "lineno", 0), *(d.lineno for d in getattr(node, "decorator_list", []))])
    return set(range(start, (getattr(node, "end_lineno", None) or start) + 1))


def _segments(source: str, nodes: Iterable[ast.AST]) -> str:
    lines = source.splitlines()
    parts = []
    for node in nodes:
        span = sorted(_span(node))
        parts.append("\n".join(lines[span[0] - 1 : span[-1]]))
    return "\n\n\n".join(parts) + ("\n" if parts else "")


def _changed_toplevel(module: ModuleContext, changed: set[int]) -> list[ast.stmt]:
    return [
        stmt
        for stmt in module.tree.body
        if isinstance(stmt, ast.FunctionDef | ast.ClassDef | ast.Assign) and _span(stmt) & changed
    ]
