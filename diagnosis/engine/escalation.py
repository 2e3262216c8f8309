"""When to climb to the next tier, and which rewrite family the evidence points to.

DESIGN.md: a round starts at the lowest tier and climbs only while the evidence so far fails
one of three tests: it (1) localizes the dominant hotspot, (2) narrows the next change to one
rewrite family, (3) explains why that rewrite should help. The tests accumulate across
tiers (tier 0 may narrow while tier 1 localizes and explains). A round whose deepest evidence
still explains nothing is *inconclusive*, never turned into a guess.

The score and gain helpers live here because every tier scores its own findings the same
way, and the decision must agree with how the tiers scored them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from diagnosis.engine.evidence import Family, Finding, Severity, Tier, TierResult

# The mechanism behind each family: why the rewrite helps. A family is "known" to the
# explains test only when it has one; Family.NONE points to no rewrite and has none.
MECHANISMS: dict[Family, str] = {
    Family.LAUNCH_CONFIG: "more work and more bytes in flight per program, fewer idle SMs and lanes",
    Family.HINTS: "divisibility/contiguity the compiler can prove turns scalar accesses into vector ones",
    Family.SINGLE_PASS: "a row held in registers is read from memory once instead of once per pass",
    Family.BLOCK_REDUCTION: "an in-block reduction replaces contended atomics on one address",
    Family.USE_DOT: "tl.dot runs on tensor cores; a broadcast multiply and tl.sum runs on FMA units",
    Family.COALESCE: "adjacent lanes touching adjacent addresses use every byte of each memory sector",
    Family.INDEX_MATH: "integer division by a runtime value costs tens of instructions per element",
    Family.FUSION: "an intermediate kept on chip is neither written to nor read back from memory",
    Family.DOT_PRECISION: "the fp32 dot's input precision decides between tensor cores (tf32) and FMA",
    Family.MASKING: "accesses stay in bounds; a mask the compiler can drop allows vector accesses",
    Family.INT64_OFFSETS: "offsets beyond 2^31 elements wrap in int32 and address the wrong memory",
    Family.SWIZZLE: "grouped program order reuses operand tiles from L2 instead of memory",
    Family.PIPELINING: "asynchronous copies overlap the next tile's loads with the current tile's math",
    Family.HOIST: "loop-invariant work is done once instead of once per iteration",
    Family.TWO_STAGE: "many programs reduce slices at once and a second stage combines their partials: "
    "every SM reads, not one",
}


def modest_gain(bound: float) -> float:
    """Half the excess of a resource bound, as the speedup to expect from a rewrite.

    A bound (bytes or FLOPs before / after) assumes the kernel is limited by that resource
    alone; it rarely is, so every tier claims half of the excess: a 3x bound is a 2x gain.
    """
    if bound <= 1.0:
        return 1.0
    return round(1.0 + (bound - 1.0) / 2.0, 2)


def score(finding: Finding) -> float:
    """Severity times gain (a missing gain counts as 1): what choose_family maximizes."""
    return finding.severity.rank * (finding.gain if finding.gain is not None else 1.0)


def for_proposer(findings: Iterable[Finding], family: Family | None) -> list[Finding]:
    """The findings in the order a round hands them to the proposer: the round's family first,
    best-scored first (a proposer that takes the head of the list acts on what the evidence
    narrowed to)."""
    return sorted(findings, key=lambda f: (f.family is not family, -score(f)))


def actionable(findings: Iterable[Finding]) -> list[Finding]:
    """Findings that point to a rewrite: not informational and with a family."""
    return [f for f in findings if f.family is not Family.NONE and f.severity is not Severity.INFO]


def top_finding(findings: Iterable[Finding]) -> Finding | None:
    """The actionable finding with the highest severity*gain; ties go to the higher severity,
    then to the earlier finding (tiers emit in a stable order)."""
    best: Finding | None = None
    for f in actionable(findings):
        if best is None or (score(f), f.severity.rank) > (score(best), best.severity.rank):
            best = f
    return best


def choose_family(findings: Iterable[Finding]) -> Family | None:
    """The family of the finding with the highest severity*gain, or None when nothing points anywhere."""
    top = top_finding(findings)
    return top.family if top is not None else None


def top_severity_families(findings: Iterable[Finding]) -> set[Family]:
    """The families of the actionable findings at the highest severity present."""
    acts = actionable(findings)
    if not acts:
        return set()
    best = max(f.severity.rank for f in acts)
    return {f.family for f in acts if f.severity.rank == best}


# ---------------------------------------------------------------------------------------
# the decision

TESTS = ("localizes", "narrows", "explains")
# Each test that failed, in a kernel engineer's words (the decisions' reasons are shown on the
# run page and in reports).
FAILED_TEST_WORDS = {
    "localizes": "the evidence names no line",
    "narrows": "no finding points at one rewrite",
    "explains": "no finding explains why a rewrite would be faster",
}


def failing_words(failed: Sequence[str]) -> str:
    """What the failed tests mean, joined: 'the evidence names no line; no finding ...'."""
    return "; ".join(FAILED_TEST_WORDS[t] for t in TESTS if t in failed)


@dataclass(frozen=True)
class Decision:
    """What the round loop does next, and why."""

    climb: bool
    next_tier: Tier | None
    reason: str
    family: Family | None
    failed_tests: tuple[str, ...]

    @property
    def inconclusive(self) -> bool:
        """The round stops without evidence that explains a change: record it, do not guess."""
        return not self.climb and ("explains" in self.failed_tests or self.family is None)


def decide(results: Sequence[TierResult], *, max_tier: Tier, available: set[Tier]) -> Decision:
    """Climb while the accumulated evidence fails a test and a higher tier can still run.

    ``available`` holds the tiers that can run here (no device: tier 1 is missing, tiers 2
    and 3 are not); unavailable tiers are skipped, not waited for. The family comes from the
    deepest tier whose evidence narrows, because deeper evidence is more specific; when no
    tier narrows, the best-scored finding overall names it, with ``narrows`` failed.
    """
    ran = sorted({r.tier for r in results})
    deepest = ran[-1] if ran else None
    localizes = any(r.localizes for r in results)
    narrows = any(r.narrows for r in results)
    explains = any(r.explains for r in results)
    passed = {"localizes": localizes, "narrows": narrows, "explains": explains}
    failed = tuple(t for t in TESTS if not passed[t])
    family = _family(results)

    if not results:
        nxt = _next_tier(None, max_tier, available)
        if nxt is None:
            return Decision(False, None, "inconclusive: no tier can run here", None, TESTS)
        return Decision(True, nxt, f"start at tier {int(nxt)}", None, TESTS)

    if not failed:
        return Decision(
            False,
            None,
            f"sufficient: up to tier {int(deepest)} the evidence names the lines, points at one rewrite "
            "and explains why it would be faster",
            family,
            (),
        )

    nxt = _next_tier(deepest, max_tier, available)
    failing = failing_words(failed)
    if nxt is not None:
        skipped = [t for t in Tier if deepest is not None and deepest < t < nxt]
        note = f" (tier {', '.join(str(int(t)) for t in skipped)} cannot run here)" if skipped else ""
        return Decision(True, nxt, f"climb to tier {int(nxt)}{note}: {failing}", family, failed)

    why = (
        f"tier {int(deepest)} is the deepest allowed"
        if deepest is not None and deepest >= max_tier
        else "no deeper tier can run here"
    )
    if not explains or family is None:
        return Decision(False, None, f"inconclusive: {failing} ({why})", family, failed)
    return Decision(False, None, f"partial: {failing} ({why})", family, failed)


def _next_tier(deepest: Tier | None, max_tier: Tier, available: set[Tier]) -> Tier | None:
    for tier in Tier:
        if (deepest is None or tier > deepest) and tier <= max_tier and tier in available:
            return tier
    return None


def _family(results: Sequence[TierResult]) -> Family | None:
    for result in sorted(results, key=lambda r: r.tier, reverse=True):
        if result.narrows:
            family = choose_family(result.findings)
            if family is not None:
                return family
    return choose_family(f for r in results for f in r.findings)
