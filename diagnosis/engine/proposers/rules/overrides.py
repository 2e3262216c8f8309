"""A confirmed counterfactual, written into the source: the rewrite tier 3 already compiled.

Tier 3 tests a hypothesis by recompiling the kernel with a compile-job override (launch options
`num_warps` / `num_stages`, `divisibility` of named arguments) and diffing the IR; when the
expected effect shows (spills gone, async copies appearing, wider loads), its CG_COUNTERFACTUAL
finding says so. `counterfactual_candidates` turns each confirmed one into a candidate:

* launch options: `apply_override` sets the keyword at every launch of the kernel
  (`num_warps=16`, replacing a literal or a module constant there, or added). Launch options
  do not change what a kernel computes, so the rewrite is correct by construction; a kernel
  launched through `@triton.autotune` (its configs carry the options), or a launch that passes
  `*args` / `**kwargs`, is left alone.
* divisibility: what the override assumed must become true in the source, which is the HINTS
  (or MASKING) family's work: its transforms read the finding the counterfactual tested
  (CG_VECTORIZATION_BLOCKED and its blocking arguments).

Each candidate's rationale cites the counterfactual's effect and its figures before and after.
Not registered as a family transform: it acts only on tier-3 evidence, so the rules' outputs
for source-only findings are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst

from diagnosis.engine.evidence import Family, Finding
from diagnosis.engine.proposers.base import Candidate, ProposalContext, unified_diff
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, apply_family
from diagnosis.engine.proposers.rules import cst_util as cu

CONFIRMED_CODE = "CG_COUNTERFACTUAL"  # diagnosis.engine.counterfactual.CONFIRMED
LAUNCH_OPTIONS = ("num_warps", "num_stages")
# families whose transforms write a divisibility override into the source
DIVISIBILITY_FAMILIES = (Family.HINTS, Family.MASKING)


def apply_override(source: str, kernel: str, overrides: Mapping[str, object]) -> Rewrite | None:
    """`source` with the launch options of `overrides` set at every launch of `kernel`; None
    when there is none to set or some launch cannot take them (see the module docstring)."""
    options = {k: overrides[k] for k in LAUNCH_OPTIONS if isinstance(overrides.get(k), int)}
    if not options:
        return None
    tree = cu.parse(source)
    if tree is None:
        return None
    kernels = cu.find_kernels(tree)
    if kernel not in kernels or kernels[kernel].autotuned:
        return None
    launches = [lc for lc in cu.find_launches(tree, {kernel}) if lc.kernel == kernel]
    if not launches or any(lc.has_star_args for lc in launches):
        return None
    edits: list[tuple[cst.CSTNode, object]] = []
    was: list[str] = []
    for launch in launches:
        keywords = launch.keywords
        added = []
        for name, value in options.items():
            old = keywords.get(name)
            if old is None:
                added.append(cu.keyword_arg(name, cst.Integer(str(value))))
                was.append(f"{name} unset")
            elif cu.int_literal(old.value) != value:
                edits.append((old.value, cst.Integer(str(value))))
                was.append(f"{name}={cu.code(old.value)}")
        if added:
            edits.append((launch.call, _Append(added)))
    if not edits:
        return None  # every launch says so already
    new = tree.visit(_Edit(edits))
    said = ", ".join(f"{k}={v}" for k, v in options.items())
    plural = "es" if len(launches) > 1 else ""
    return Rewrite(
        source=new.code,
        family=Family.LAUNCH_CONFIG,
        kernels=(kernel,),
        mechanism=f"{said} at the launch{plural} of {kernel} (was: {', '.join(dict.fromkeys(was))}).",
        effect="",
    )


class _Append:
    """Marker edit: append these keyword arguments to the call."""

    def __init__(self, args: list[cst.Arg]) -> None:
        self.args = args


class _Edit(cst.CSTTransformer):
    def __init__(self, edits: Sequence[tuple[cst.CSTNode, object]]) -> None:
        self.edits = {id(node): new for node, new in edits}

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> object:
        new = self.edits.get(id(original_node))
        if new is None:
            return updated_node
        if isinstance(new, _Append):
            assert isinstance(original_node, cst.Call) and isinstance(updated_node, cst.Call)
            return cu.drop_args(original_node, updated_node, set(), new.args)
        return new


def counterfactual_candidates(
    source: str, findings: Sequence[Finding], context: ProposalContext, family: Family | None = None
) -> list[Candidate]:
    """A candidate per confirmed counterfactual in `findings` (of `family`, when given) whose
    override can be written into `source`; the counterfactual's evidence is its rationale."""
    out: list[Candidate] = []
    seen = {source}
    for cf in findings:
        if cf.code != CONFIRMED_CODE or (family is not None and cf.family is not family):
            continue
        overrides = cf.args.get("overrides") or {}
        rw = apply_override(source, cf.kernel, overrides)
        if rw is None and overrides.get("divisibility") and cf.family in DIVISIBILITY_FAMILIES:
            tested = tuple(f for f in findings if f.code == cf.args.get("tests") and f.kernel == cf.kernel)
            rw = apply_family(cf.family, source, RuleInput((*tested, cf), context, frozenset({cf.kernel})))
        if rw is None or rw.source in seen:
            continue
        seen.add(rw.source)
        effect = str(cf.args.get("effect", ""))
        expected = (
            f"The recompile with {cf.args.get('hypothesis', overrides)} showed it before any run: {effect}. "
            "The IR shows the mechanism; only the timed gate says what it is worth."
        )
        tested_code = str(cf.args.get("tests") or "")
        out.append(
            Candidate(
                source=rw.source,
                diff=unified_diff(source, rw.source),
                family=cf.family,
                rationale=(
                    f"[{cf.family}] Findings: {cf.code}: {cf.message}"
                    + (f" (testing {tested_code})" if tested_code else "")
                    + f". Change: {rw.mechanism} Expected effect: {expected}"
                ),
                findings_addressed=tuple(dict.fromkeys(c for c in (cf.code, tested_code) if c)),
                proposer="rules",
                mechanism=rw.mechanism,
                expected=expected,
            )
        )
    return out


__all__ = ["apply_override", "counterfactual_candidates"]
