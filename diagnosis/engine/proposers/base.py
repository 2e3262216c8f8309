"""The proposer interface: what every proposer (rules, llm) takes and returns.

A proposer reads the current best source and the findings of this round and returns zero or
more whole revised modules (`Candidate`). It never verifies or times anything: the round loop
does that. `ProposalContext` tells it what it needs beyond the source (the shape cases, the
device, what earlier rounds tried) so it can avoid repeating a family that already failed.

Plain Python: no Django (STYLE.md 1).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from diagnosis.engine.errors import ProposerError  # what a proposer raises: part of its interface
from diagnosis.engine.evidence import Family, Finding
from diagnosis.engine.profile import DeviceSpec
from diagnosis.engine.usage import LLMUsage
from diagnosis.engine.verdict import Verdict


@dataclass(frozen=True)
class Candidate:
    """One proposed revision of the whole module."""

    source: str  # the whole revised module
    diff: str  # unified diff from the parent source
    family: Family  # the rewrite family it belongs to
    rationale: str  # why this should help, in terms of the findings
    findings_addressed: tuple[str, ...]  # finding codes it acts on
    proposer: str  # "rules" or "llm"
    tokens: int = 0  # LLM tokens spent producing it (prompt + completion)
    # The rationale's parts, where the proposer knows them apart (the rules' Rewrite does; an
    # LLM's answer is one paragraph, kept whole in `rationale`): the review page shows them
    # as mechanism / evidence (the findings) / expected / measured (the verification).
    mechanism: str = ""  # what the rewrite changes
    expected: str = ""  # what should get faster and why, with the expected size
    usage: LLMUsage | None = None  # what the LLM requests behind it cost (tokens, latency, price)
    # the rules' transforms that wrote it, "+"-joined for a composition ("" for an LLM): a
    # family whose transform failed keeps its other transforms open (RulesProposer)
    transform: str = ""


@dataclass(frozen=True)
class CaseShape:
    """The shapes and dtypes of one input case (tensor arguments; scalars have shape ())."""

    index: int
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    timed: bool = True  # False for get_verify_inputs cases
    # the case's speed-of-light time in microseconds (the baseline profile's, from the FLOPs and
    # bytes PyTorch's reference does), when a device timed it
    sol_us: float | None = None
    # the initial version's measured time of the case in microseconds (the baseline's)
    time_us: float | None = None
    # (kernel, ((parameter, value), ...)): the integer arguments the baseline's verify job saw
    # at the case's launches; sizes the shapes alone do not give (a weight's dimension)
    launch_ints: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    def ints(self, kernel: str) -> dict[str, int]:
        return next((dict(args) for k, args in self.launch_ints if k == kernel), {})


@dataclass(frozen=True)
class RoundHistory:
    """What an earlier round of the same run tried and how it ended."""

    index: int
    family: Family | None  # the family of its proposal; None when it proposed nothing
    verdict: Verdict
    proposer: str = ""
    findings: tuple[str, ...] = ()  # finding codes the proposal addressed
    speedup: float | None = None  # vs its parent, when it was timed
    reason: str = ""  # failure reason, when it failed
    transform: str = ""  # the rules' transforms behind its proposal (Candidate.transform)


@dataclass(frozen=True)
class ProposalContext:
    cases: tuple[CaseShape, ...] = ()
    device: DeviceSpec | None = None  # None: unknown or no device (CPU)
    device_kind: str = "cpu"  # cuda, npu, cpu
    target: str | None = None  # compile target, e.g. sm_90
    history: tuple[RoundHistory, ...] = ()
    round_index: int = 0
    max_candidates: int = 1
    # the family the round's evidence narrowed to: one rewrite family per round (None: the
    # caller named none, e.g. a test asking a proposer directly)
    family: Family | None = None

    def families_tried(self) -> set[Family]:
        return {h.family for h in self.history if h.family is not None}

    def failed_families(self) -> set[Family]:
        """Families whose proposals failed verification or brought no gain."""
        return rejected_families(self.history)


def rejected_families(history: Sequence[RoundHistory], *, by: Collection[str] | None = None) -> set[Family]:
    """Families whose proposals failed or brought no gain (of the proposers in `by`, when given)."""
    return {
        h.family
        for h in history
        if h.family is not None and h.verdict.rejected and (by is None or h.proposer in by)
    }


@runtime_checkable
class Proposer(Protocol):
    name: str  # "rules" or "llm": stored on Proposal.proposer

    def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
        """Return revised modules for `source`; [] when nothing applies. Raise ProposerError on failure."""
        ...


@runtime_checkable
class FamilyPolicy(Protocol):
    """A proposer that decides which families a parent's history rules out for it. Without one
    the loop rules out every family that failed or brought no gain on the parent; the hybrid
    proposer keeps a family the rules failed on open to the LLM once the rules have stalled."""

    def excluded_families(self, history: Sequence[RoundHistory]) -> set[Family]: ...


def unified_diff(before: str, after: str, *, name: str = "kernel.py") -> str:
    """The diff stored on a Proposal and shown on the review page."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{name}",
            tofile=f"b/{name}",
        )
    )


__all__ = [
    "Candidate",
    "CaseShape",
    "FamilyPolicy",
    "ProposalContext",
    "Proposer",
    "ProposerError",
    "RoundHistory",
    "rejected_families",
    "unified_diff",
]
