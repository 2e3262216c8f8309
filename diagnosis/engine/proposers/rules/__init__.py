"""The rules proposer: deterministic libcst source transforms keyed by rewrite family.

Each transform lives in its own module of this package and registers itself with
`@transform(Family.X)`; the modules are imported when the package is. A transform reads the
whole module source and *proposes* a `Rewrite` (the whole new source, what changed and why it
should help) or returns None when its preconditions do not hold. `RulesProposer` is the
separate step that picks families from the findings, runs the transforms, checks that each
result parses and differs, composes families that target the same kernel, and turns the
results into `Candidate`s with a diff and a rationale that cites the findings.

Transforms keep the module's semantics by construction; each module's docstring states the
preconditions that make that true.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher

from diagnosis.engine.evidence import Family, Finding
from diagnosis.engine.proposers.base import Candidate, ProposalContext, RoundHistory, unified_diff


@dataclass(frozen=True)
class RuleInput:
    """What a transform may read besides the source."""

    findings: tuple[Finding, ...] = ()
    context: ProposalContext = field(default_factory=ProposalContext)
    kernels: frozenset[str] = frozenset()  # kernels the findings name; empty: every kernel

    def wants(self, kernel: str) -> bool:
        return not self.kernels or kernel in self.kernels


@dataclass(frozen=True)
class Rewrite:
    """A transform's proposal: the whole new module and what it did."""

    source: str
    family: Family
    kernels: tuple[str, ...]  # the kernels it changed
    mechanism: str  # what changed, in a sentence or two
    effect: str  # what should get faster and why, honest about the expected size
    transform: str = ""  # the registered transform that wrote it (apply_family fills it in)


Transform = Callable[[str, RuleInput], Rewrite | None]

_REGISTRY: dict[Family, list[Transform]] = {}


def transform(family: Family, first: bool = False, before: str | None = None) -> Callable[[Transform], Transform]:
    """Register a transform for a family (several per family are tried in registration order;
    `first` puts it ahead of those registered before it, `before` ahead of the one of that name)."""

    def register(fn: Transform) -> Transform:
        transforms = _REGISTRY.setdefault(family, [])
        names = [t.__name__ for t in transforms]
        at = 0 if first else names.index(before) if before in names else len(transforms)
        transforms.insert(at, fn)
        return fn

    return register


def transforms_for(family: Family) -> list[Transform]:
    return list(_REGISTRY.get(family, []))


def registered_families() -> list[Family]:
    return list(_REGISTRY)


def apply_family(family: Family, source: str, inp: RuleInput, skip: Collection[str] = ()) -> Rewrite | None:
    """The first transform of `family` (but those named in `skip`) that applies to `source`
    and yields a valid module; where none does, the first that applies once the module is
    written out as the rules read it (`written_out`: launches' `**d` as keywords and their
    `*x.stride()` one argument a dimension, kernels jitted by a call decorated)."""
    from diagnosis.engine.proposers.rules.cst_util import bind_loop_names, drop_orphaned_imports
    from diagnosis.engine.proposers.rules.written_out import written_out

    rw = _first_transform(family, source, inp, skip)
    cases = inp.context.cases
    if rw is None and (written := written_out(source, cases=cases)) is not None:
        rw = _first_transform(family, written, inp, skip)
        # the smallest diff: only the kernels the rewrite changed, and their launches, written out
        narrow = written_out(source, rw.kernels, cases) if rw is not None and rw.kernels else None
        if narrow is not None and narrow != written:
            again = _first_transform(family, narrow, inp, skip)
            rw = again if again is not None and set(again.kernels) == set(rw.kernels) else rw
    if rw is None or rw.source == source:
        return None
    tidy = bind_loop_names(source, drop_orphaned_imports(source, rw.source))
    return replace(rw, source=_unindented_blank_lines(source, tidy))


def _first_transform(family: Family, source: str, inp: RuleInput, skip: Collection[str]) -> Rewrite | None:
    for fn in transforms_for(family):
        if fn.__name__ in skip:
            continue
        rw = fn(source, inp)
        if rw is not None and rw.source != source and _parses(rw.source):
            return replace(rw, transform=fn.__name__)
    return None


def _unindented_blank_lines(before: str, after: str) -> str:
    """`after` with no whitespace on the blank lines the rewrite added. A statement a rule places
    beside a kernel inside a block (a kernel defined under a module-level `if`) would otherwise
    carry its leading blank lines at the block's indentation: trailing whitespace, which ruff
    flags (W293). The module's own lines stay as written."""
    new = after.splitlines(keepends=True)
    if not any(not line.strip() and line.strip("\r\n") for line in new):
        return after
    old = before.splitlines(keepends=True)
    for tag, _, _, j1, j2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            new[j1:j2] = [line if line.strip() else line.lstrip(" \t") for line in new[j1:j2]]
    return "".join(new)


def failed_transforms(history: Sequence[RoundHistory]) -> dict[Family, set[str]]:
    """Family -> the transforms of its rejected proposals ("" where a proposal named none: an
    LLM's, a counterfactual's, or one recorded before transforms were)."""
    out: dict[Family, set[str]] = {}
    for h in history:
        if h.family is not None and h.verdict.rejected:
            out.setdefault(h.family, set()).update(h.transform.split("+") if h.transform else {""})
    return out


def excluded_families(history: Sequence[RoundHistory]) -> set[Family]:
    """Families ruled out on a version: every transform of the family failed there, or one of
    its proposals that named no transform did. A family whose first transform brought no gain
    keeps its others open (an autotune that did not help leaves LAUNCH_CONFIG's split loop)."""
    return {
        fam
        for fam, failed in failed_transforms(history).items()
        if "" in failed or {fn.__name__ for fn in transforms_for(fam)} <= failed
    }


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


@dataclass(frozen=True)
class Composition:
    """Two families applied in this order to the same kernel; `only`, when given, names the
    second family's transforms that may follow the first (the rest may not)."""

    first: Family
    second: Family
    only: tuple[str, ...] = ()
    # the second family answers what the first one's rewrite does (a tile that divides the
    # programs, then the split that gives them back): it needs no finding of its own, only not
    # to be ruled out on this version
    follows: bool = False

    @property
    def name(self) -> str:
        return f"{self.first}+{self.second}"


# Families that compose, each applied in its order to the same kernel.
COMPOSITIONS: tuple[Composition, ...] = (
    Composition(Family.SWIZZLE, Family.LAUNCH_CONFIG),
    Composition(Family.SINGLE_PASS, Family.LAUNCH_CONFIG),
    Composition(Family.PIPELINING, Family.SWIZZLE),
    Composition(Family.FUSION, Family.LAUNCH_CONFIG),
    # a prologue fused into a multi-pass row kernel, then that kernel made single-pass: the
    # other order cannot fuse (the single-pass launch sits under a size guard)
    Composition(Family.FUSION, Family.SINGLE_PASS),
    # a tiled strided walk divides the programs by its tile's width; where each program walks a
    # long loop, splitting that loop over a new grid axis gives the device its programs back
    # (on the kernel as it was, the split sees enough programs and leaves it)
    # (an autotuned kernel has no launch finding: the split still follows the tile)
    Composition(Family.COALESCE, Family.LAUNCH_CONFIG, ("split_carried_scan", "split_long_loop"), follows=True),
)


def apply_composition(
    comp: Composition, source: str, inp: RuleInput, tried: dict[Family, set[str]] | None = None
) -> Rewrite | None:
    """The second family's rewrite of the first's, when both apply and change a kernel in
    common; `tried`: family -> transforms not to use (those rejected before)."""
    tried = tried or {}
    a = apply_family(comp.first, source, inp, tried.get(comp.first, ()))
    if a is None:
        return None
    skip = set(tried.get(comp.second, ()))
    if comp.only:
        skip |= {fn.__name__ for fn in transforms_for(comp.second)} - set(comp.only)
    b = apply_family(comp.second, a.source, inp, skip)
    if b is None or not set(a.kernels) & set(b.kernels):
        return None
    return Rewrite(
        source=b.source,
        family=comp.first,
        kernels=tuple(dict.fromkeys(a.kernels + b.kernels)),
        mechanism=f"{a.mechanism} Then: {b.mechanism}",
        effect=f"{a.effect} {b.effect}",
        transform=f"{a.transform}+{b.transform}",
    )


Chain = tuple[Family, ...] | Composition


def apply_chain(chain: Chain, source: str, inp: RuleInput) -> str | None:
    """The source after each family of `chain` in turn (a composition as the proposer applies
    it); None when one of them does not apply."""
    if isinstance(chain, Composition):
        rw = apply_composition(chain, source, inp)
        return rw.source if rw is not None else None
    text: str | None = source
    for family in chain:
        rw = apply_family(family, text, inp) if text is not None else None
        text = rw.source if rw is not None else None
    return text


def chain_name(chain: Chain) -> str:
    return chain.name if isinstance(chain, Composition) else "+".join(map(str, chain))


def _rank(findings: Sequence[Finding]) -> tuple[int, float]:
    return (
        max(f.severity.rank for f in findings),
        max((f.gain or 1.0) for f in findings),
    )


class RulesProposer:
    """Deterministic proposer: no LLM, no device; `propose` is a pure function of its inputs."""

    name = "rules"

    def __init__(self, max_candidates: int | None = 2) -> None:
        # None: take the limit from ProposalContext.max_candidates
        self.max_candidates = max_candidates

    def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
        limit = self.max_candidates if self.max_candidates is not None else context.max_candidates
        by_family: dict[Family, list[Finding]] = {}
        for f in findings:
            fam = _family(f)
            if fam in _REGISTRY:
                by_family.setdefault(fam, []).append(f)
        skip = excluded_families(context.history)
        tried = failed_transforms(context.history)
        # the family of the first finding leads (the round loop puts its hypothesis first),
        # then by severity and estimated gain
        lead = next((fam for f in findings if (fam := _family(f)) in by_family), None)
        families = sorted(
            (fam for fam in by_family if fam not in skip),
            key=lambda fam: (fam == lead, *_rank(by_family[fam])),
            reverse=True,
        )
        rewrites: list[tuple[list[Family], Rewrite, list[Finding]]] = []
        for comp in COMPOSITIONS:
            if comp.first in families and (comp.second in families or (comp.follows and comp.second not in skip)):
                fs = by_family[comp.first] + by_family.get(comp.second, [])
                composed = apply_composition(comp, source, RuleInput(tuple(fs), context, _kernels(fs)), tried)
                if composed is not None:
                    rewrites.append(([comp.first, comp.second], composed, fs))
        for fam in families:
            fs = by_family[fam]
            rw = apply_family(fam, source, RuleInput(tuple(fs), context, _kernels(fs)), tried.get(fam, ()))
            if rw is not None:
                rewrites.append(([fam], rw, fs))

        out: list[Candidate] = []
        seen: set[str] = {source}
        for fams, rw, fs in rewrites:
            if len(out) >= limit:
                break
            if rw.source in seen:
                continue
            seen.add(rw.source)
            out.append(
                Candidate(
                    source=rw.source,
                    diff=unified_diff(source, rw.source),
                    # the family the findings rank highest (a composition's second may have none)
                    family=min((f for f in fams if f in families), key=families.index),
                    rationale=_rationale(fams, rw, fs),
                    findings_addressed=tuple(dict.fromkeys(f.code for f in fs)),
                    proposer=self.name,
                    mechanism=rw.mechanism,
                    expected=rw.effect,
                    transform=rw.transform,
                )
            )
        return out

    def excluded_families(self, history: Sequence[RoundHistory]) -> set[Family]:
        return excluded_families(history)


def _family(f: Finding) -> Family | None:
    """The finding's family; None for a code nobody registered (and no override)."""
    try:
        return f.family
    except KeyError:
        return f.family_override


def _kernels(findings: Sequence[Finding]) -> frozenset[str]:
    names = {f.kernel for f in findings}
    if "" in names:  # a finding about the whole module: any kernel
        return frozenset()
    return frozenset(names)


def _rationale(families: list[Family], rw: Rewrite, findings: Sequence[Finding]) -> str:
    cited = []
    for f in findings[:6]:
        where = f" (line {', '.join(map(str, f.lines))})" if f.lines else ""
        cited.append(f"{f.code}{where}: {f.message}")
    head = " + ".join(str(f) for f in families)
    return (
        f"[{head}] Findings: " + "; ".join(cited) + f". Change: {rw.mechanism} Expected effect: {rw.effect}"
    )


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name != "cst_util":
            importlib.import_module(f"{__name__}.{info.name}")


_discover()

__all__ = [
    "COMPOSITIONS",
    "Chain",
    "Composition",
    "RuleInput",
    "Rewrite",
    "RulesProposer",
    "Transform",
    "apply_chain",
    "apply_composition",
    "apply_family",
    "excluded_families",
    "chain_name",
    "failed_transforms",
    "registered_families",
    "transform",
    "transforms_for",
]
