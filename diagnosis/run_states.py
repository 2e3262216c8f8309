"""What the run page's status, rounds and findings sections show, built from the stored rows.

* **Status**: the run's state in one sentence (`diagnosis.wording.run_words`), whether it was
  imported from a bench run (and from which), and the device time only when a device was
  used: a cuda run on a machine without a GPU fails in seconds with "device" seconds that no
  device spent.
* **Rounds**: each in words, with the rounds that proposed nothing folded into one line per
  stretch of them.
* **Findings**: once per run. A round reads the same source again when the one before it
  did not win, so it finds the same things again; a finding (its code at its place) is listed
  once with the rounds it appeared in, and what it measured differently elsewhere (another
  case, another round's parent) folded under it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby

from diagnosis.engine import devices
from diagnosis.engine.evidence import ArtefactRef
from diagnosis.engine.records import CandidateOutcome
from diagnosis.engine.serialize import artefact_ref_from_json, summary_from_json, verification_from_json
from diagnosis.models import Artefact, DiagnosisRun, Finding, Proposal, Round
from diagnosis.wording import RoundWords, RunWords, round_words, run_words, split_hypothesis

TIER_NAMES = {
    0: "Tier 0 · pattern triage",
    1: "Tier 1 · profiling",
    2: "Tier 2 · IR attribution",
    3: "Tier 3 · compiler analysis",
}


# --- status ---------------------------------------------------------------------------------


def device_used(run: DiagnosisRun, rounds: Iterable[Round] = ()) -> bool:
    """Did the run hold a device? Only a kind with an accelerator has one, and only a run that
    reached it: the loop named the device, or a round spent time on it."""
    kind = devices.KINDS.get(run.device)
    if kind is None or not kind.accelerator:
        return False
    summary = summary_from_json(run.summary)
    return bool(summary and summary.device_name) or any(r.device_s > 0 for r in rounds)


@dataclass(frozen=True)
class RunStatus:
    words: RunWords
    device_used: bool
    imported_from: str  # "a bench run on NVIDIA H200, 2026-11-30, commit 877efb0"; '' when run here
    device_name: str
    best_proposal: int | None  # the proposal whose source is the run's best, when a rewrite won


def run_status(run: DiagnosisRun, rounds: list[Round], absence: str = "") -> RunStatus:
    summary = summary_from_json(run.summary)
    kind = devices.KINDS.get(run.device)
    words = run_words(
        run.status,
        summary,
        error=run.error,
        device=run.device,
        timing_device=bool(kind and kind.accelerator),
        absence=absence,
    )
    bench = run.bench_import if run.bench_import_id else None
    return RunStatus(
        words=words,
        device_used=device_used(run, rounds),
        imported_from=bench.label if bench is not None else "",
        device_name=summary.device_name if summary else "",
        best_proposal=summary.best_proposal if summary and summary.improved else None,
    )


# --- rounds ---------------------------------------------------------------------------------


def standing_proposal(proposals: list[Proposal]) -> Proposal | None:
    """The proposal a round is about: the one still standing (pending or accepted), else the
    last one verified (as the run's JSON report names it, diagnosis.api)."""
    standing = [p for p in proposals if p.status in (Proposal.Status.PENDING, Proposal.Status.ACCEPTED)]
    return (standing or proposals or [None])[-1]


@dataclass(frozen=True)
class RoundRow:
    round: Round
    words: RoundWords
    hypothesis: str
    reason: str  # the loop's own words, kept folded beside ours
    proposals: list[Proposal]


@dataclass
class RoundGroup:
    """Consecutive rounds shown together: one that did something, or a stretch of rounds that
    proposed nothing (folded to one line)."""

    rows: list[RoundRow] = field(default_factory=list)

    @property
    def folded(self) -> bool:
        return self.rows[0].words.idle

    @property
    def span(self) -> str:
        first, last = self.rows[0].round.index, self.rows[-1].round.index
        return f"round {first}" if first == last else f"rounds {first}–{last}"


def round_row(r: Round) -> RoundRow:
    proposals = list(r.proposals.all())
    chosen = standing_proposal(proposals)
    outcome: CandidateOutcome | None = verification_from_json(chosen.verification) if chosen else None
    hypothesis, reason = split_hypothesis(r.hypothesis)
    decisions = [d for d in r.escalation or () if isinstance(d, dict)]
    words = round_words(r.verdict, reason, decisions, outcome, bool(proposals))
    return RoundRow(r, words, hypothesis, reason, proposals)


def round_groups(rounds: list[Round]) -> list[RoundGroup]:
    """Rounds in order; each stretch of idle ones (same words) is one group."""
    groups: list[RoundGroup] = []
    for row in (round_row(r) for r in rounds):
        last = groups[-1] if groups else None
        if (
            last is not None
            and last.folded
            and row.words.idle
            and last.rows[-1].words.headline == row.words.headline
        ):
            last.rows.append(row)
        else:
            groups.append(RoundGroup([row]))
    return groups


# --- findings -------------------------------------------------------------------------------


@dataclass
class EvidenceView:
    kind: str
    kernel: str
    name: str
    lines: list[int]
    excerpt: str
    artefact: Artefact | None


@dataclass
class FindingView:
    finding: Finding  # the first time it was found
    evidence: list[EvidenceView]
    rounds: list[int]  # every round it was found in
    ids: list[int]  # every row of it
    # the other things it said (another case, another round), with the rounds that said each
    variants: dict[str, list[int]] = field(default_factory=dict)

    @property
    def other_messages(self) -> list[tuple[str, str]]:
        return [(m, _rounds_text(r)) for m, r in self.variants.items() if m != self.finding.message]

    @property
    def rounds_text(self) -> str:
        return _rounds_text(self.rounds)


def _rounds_text(rounds: list[int]) -> str:
    if not rounds:
        return ""
    if len(rounds) == 1:
        return f"round {rounds[0]}"
    return "rounds " + _ranges(sorted(rounds))


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 5] -> '1–3, 5'."""
    parts = []
    for _, run in groupby(enumerate(numbers), key=lambda p: p[1] - p[0]):
        seq = [n for _, n in run]
        parts.append(str(seq[0]) if len(seq) == 1 else f"{seq[0]}–{seq[-1]}")
    return ", ".join(parts)


def match_artefact(ref: ArtefactRef, by_kind: dict[str, list[Artefact]]) -> Artefact | None:
    candidates = by_kind.get(ref.kind, [])
    name, kernel = ref.name, ref.kernel
    for test in (
        lambda a: name and a.name == name,
        lambda a: name and name in a.name,
        lambda a: kernel and a.name.startswith(kernel),
    ):
        for artefact in candidates:
            if test(artefact):
                return artefact
    return candidates[0] if candidates else None


def _identity(f: Finding) -> tuple:
    """The same finding found again: the same code of the same tier at the same place."""
    return (f.tier, f.code, f.kernel, tuple(f.lines or ()))


def finding_tiers(
    findings: list[Finding], artefacts: list[Artefact]
) -> list[tuple[int, str, list[FindingView]]]:
    """Findings by tier, each once with the rounds it was found in. `findings` in tier, round
    and id order (the first row of each is the one shown)."""
    by_kind: dict[str, list[Artefact]] = {}
    for a in artefacts:
        by_kind.setdefault(a.kind, []).append(a)
    views: dict[tuple, FindingView] = {}
    for f in findings:
        key = _identity(f)
        view = views.get(key)
        if view is None:
            refs = [artefact_ref_from_json(ref) for ref in (f.evidence or []) if isinstance(ref, dict)]
            evidence = [
                EvidenceView(
                    ref.kind, ref.kernel, ref.name, list(ref.lines), ref.excerpt, match_artefact(ref, by_kind)
                )
                for ref in refs
            ]
            view = views[key] = FindingView(f, evidence, [], [])
        index = f.round.index if f.round_id else None
        said = view.variants.setdefault(f.message, [])
        if index is not None:
            if index not in view.rounds:
                view.rounds.append(index)
            if index not in said:
                said.append(index)
        view.ids.append(f.pk)
    tiers = []
    for tier, items in groupby(views.values(), key=lambda v: v.finding.tier):
        tiers.append((tier, TIER_NAMES.get(tier, f"tier {tier}"), list(items)))
    return tiers
