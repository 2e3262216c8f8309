"""One encoder and one decoder for each JSON shape kernelopt stores.

| shape | encoder / decoder | stored in |
|---|---|---|
| finding | `finding_json` / `finding_from_json` | Finding rows (their columns), a report round's findings |
| decision | `decision_json` / `decision_from_json` | Round.escalation, a report round's decisions |
| case | `case_json` / `case_from_json` | the versions of a run summary, a report round's outcome |
| version | `version_json` / `version_from_json` | DiagnosisRun.summary's initial and best |
| outcome | `outcome_json` / `outcome_from_json` | a report round (per field, over the cases) |
| verification | `verification_json` / `verification_from_json` | Proposal.verification (per case: the review page's rows) |
| rationale | `rationale_json` / `rationale_from_json` | Proposal.rationale_parts (mechanism, evidence, expected) |
| round | `round_json` / `round_from_json` | each round of a loop report |
| LLM usage | `usage_json` / `usage_from_json` | a report round's cost (the Round row has a column per field) |
| loop report | `loop_result_json` / `loop_report_from_json` | each operator of a bench/run.py result file |
| run summary | `summary_json` / `summary_from_json` | DiagnosisRun.summary |

The outcome and the verification are one record (`CandidateOutcome`) in two layouts: the
report keeps a column per field for the tables, the database a row per case for the page.

Two stores, two ways with numbers. Reports (`bench/results/*.json`) round them, so a file
reads and diffs well; the database keeps full precision and writes a non-finite number as
null (JSON has none), finding arguments as plain JSON and evidence excerpts cut at
`MAX_EXCERPT_CHARS`: encoders that serve both take `db=True` for the database's form.

Decoders return the engine's records. What a store does not keep comes back empty: a report
written without sources decodes with empty proposal sources. A finding decodes as a
`StoredFinding`, which keeps the stored tier, family and message, so a code retired since
(or a tier this process never imported) still reads back as it was written.

Plain Python: no Django.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from diagnosis.engine.evidence import ArtefactRef, CodeInfo, Family, Finding, Severity, Tier, code_info
from diagnosis.engine.proposers.base import Candidate
from diagnosis.engine.records import (
    CandidateOutcome,
    CaseTiming,
    DecisionRecord,
    EvidenceRef,
    Hypothesis,
    LoopResult,
    RoundCost,
    RoundRecord,
    StopReason,
    VersionStats,
    sha256,
)
from diagnosis.engine.usage import LLMUsage
from diagnosis.engine.verdict import Verdict

JSON = dict[str, Any]  # a decoded JSON object: what the encoders write and the decoders read

MAX_EXCERPT_CHARS = 8000  # per evidence excerpt kept on a Finding row; the whole text is an Artefact
# the round verdicts a loop report counts, in its key order
REPORTED_VERDICTS = (Verdict.IMPROVED, Verdict.NO_GAIN, Verdict.UNTIMED, Verdict.FAILED, Verdict.INCONCLUSIVE)


# --- numbers --------------------------------------------------------------------------------


def rounded(value: float | None, digits: int = 4) -> float | None:
    """A report's number: rounded to `digits`."""
    return None if value is None else round(float(value), digits)


def finite(value: float | None) -> float | None:
    """The database's number: full precision, None where JSON has no number (inf, nan)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _num(value: float | None, digits: int, db: bool) -> float | None:
    return finite(value) if db else rounded(value, digits)


def _opt_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def plain_json(value: Any) -> Any:
    """Finding args may hold tuples, enums or numpy scalars; a JSON column wants plain JSON."""
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain_json(v) for v in value]
    if isinstance(value, enum.Enum):
        return plain_json(value.value)
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return finite(value)
    if hasattr(value, "item"):  # numpy scalar
        return plain_json(value.item())
    if hasattr(value, "__dataclass_fields__"):
        return plain_json(asdict(value))
    return str(value)


# --- findings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredFinding(Finding):
    """A finding read back from storage. It says what was stored (tier, family, message)
    whether or not this process registers its code (a retired code, a tier never imported)."""

    stored_tier: Tier = Tier.TRIAGE
    stored_message: str = ""

    @property
    def info(self) -> CodeInfo:
        try:
            return code_info(self.code)
        except KeyError:
            template = self.stored_message.replace("{", "{{").replace("}", "}}")
            return CodeInfo(self.code, self.stored_tier, self.family_override or Family.NONE, template)

    @property
    def tier(self) -> Tier:
        return self.stored_tier

    @property
    def message(self) -> str:
        return self.stored_message


def artefact_ref_json(ref: ArtefactRef, *, db: bool = False) -> JSON:
    excerpt = ref.excerpt[:MAX_EXCERPT_CHARS] if db else ref.excerpt
    return {
        "kind": ref.kind,
        "kernel": ref.kernel,
        "lines": list(ref.lines),
        "excerpt": excerpt,
        "name": ref.name,
    }


def artefact_ref_from_json(d: Mapping[str, Any]) -> ArtefactRef:
    return ArtefactRef(
        kind=str(d.get("kind", "")),
        kernel=str(d.get("kernel", "")),
        lines=tuple(n for n in d.get("lines") or () if isinstance(n, int)),
        excerpt=str(d.get("excerpt", "")),
        name=str(d.get("name", "")),
    )


def finding_json(f: Finding, *, db: bool = False) -> JSON:
    """A finding with its rendered message; with `db`, exactly the columns of a Finding row."""
    return {
        "code": f.code,
        "tier": int(f.tier),
        "severity": str(f.severity),
        "family": str(f.family),
        "message": f.message,
        "args": plain_json(f.args) if db else f.args,
        "lines": list(f.lines),
        "kernel": f.kernel,
        "gain": finite(f.gain) if db else f.gain,
        "evidence": [artefact_ref_json(e, db=db) for e in f.evidence],
    }


def finding_from_json(d: Mapping[str, Any]) -> StoredFinding:
    """A stored finding; a severity or family this process does not know reads as info / none."""
    severity = Severity(d["severity"]) if d.get("severity") in set(Severity) else Severity.INFO
    family = Family(d["family"]) if d.get("family") in set(Family) else None
    return StoredFinding(
        code=str(d["code"]),
        severity=severity,
        args=dict(d.get("args") or {}),
        lines=tuple(d.get("lines") or ()),
        kernel=str(d.get("kernel") or ""),
        evidence=tuple(artefact_ref_from_json(e) for e in d.get("evidence") or () if isinstance(e, Mapping)),
        gain=_opt_float(d.get("gain")),
        family_override=family,
        stored_tier=Tier(d["tier"]) if d.get("tier") in set(Tier) else Tier.TRIAGE,
        stored_message=str(d.get("message") or ""),
    )


# --- decisions ------------------------------------------------------------------------------


def decision_json(d: DecisionRecord) -> JSON:
    return {
        "tier": int(d.tier),
        "climb": d.climb,
        "next_tier": None if d.next_tier is None else int(d.next_tier),
        "reason": d.reason,
        "family": None if d.family is None else str(d.family),
        "failed_tests": list(d.failed_tests),
    }


def decision_from_json(d: Mapping[str, Any]) -> DecisionRecord:
    return DecisionRecord(
        tier=Tier(d["tier"]),
        climb=bool(d["climb"]),
        next_tier=None if d.get("next_tier") is None else Tier(d["next_tier"]),
        reason=str(d.get("reason", "")),
        family=None if d.get("family") is None else Family(d["family"]),
        failed_tests=tuple(d.get("failed_tests") or ()),
    )


# --- cases and versions ---------------------------------------------------------------------


def case_json(c: CaseTiming, *, db: bool = False) -> JSON:
    return {
        "index": c.index,
        "time_ms": _num(c.time_ms, 6, db),
        "ref_ms": _num(c.ref_ms, 6, db),
        "sol_ms": _num(c.sol_ms, 6, db),
        "pct_sol": _num(c.pct_sol, 2, db),
        "speedup_over_eager": _num(c.speedup_over_eager, 4, db),
    }


def case_from_json(d: Mapping[str, Any]) -> CaseTiming:
    return CaseTiming(int(d["index"]), _opt_float(d.get("time_ms")), _opt_float(d.get("ref_ms")),
                      _opt_float(d.get("sol_ms")))  # fmt: skip


def version_json(v: VersionStats | None) -> JSON | None:
    """A version of a run summary (the database's form)."""
    if v is None:
        return None
    return {
        "sha256": v.sha256,
        "timed": v.timed,
        "cases": [case_json(c, db=True) for c in v.cases],
        "pct_sol": finite(v.pct_sol),
        "speedup_over_eager": finite(v.speedup_over_eager),
    }


def version_from_json(d: Mapping[str, Any] | None) -> VersionStats | None:
    if not d:
        return None
    return VersionStats(str(d["sha256"]), tuple(case_from_json(c) for c in d.get("cases") or ()))


# --- a candidate's outcome: the report's layout and the database's -------------------------


def outcome_json(o: CandidateOutcome | None) -> JSON | None:
    """The report's layout: one list per field, in case order."""
    if o is None:
        return None
    out: JSON = {
        "correct": o.correct,
        "error_kind": o.error_kind,
        "message": o.message,
        "cases": [case_json(c) for c in o.cases],
        "parent_ms": [rounded(p, 6) for p in o.parent_ms],
        "speedups": [rounded(s) for s in o.speedups],
        "speedup": rounded(o.speedup),
        "noise": rounded(o.noise),
        "case_noise": [rounded(n) for n in o.case_noise],
        "case_rounds": [
            {"candidate_ms": [rounded(t, 6) for t in cand], "parent_ms": [rounded(t, 6) for t in par]}
            for cand, par in o.case_rounds
        ],
        "suspect": o.suspect,
        "wall_s": rounded(o.wall_s, 3),
        "device_s": rounded(o.device_s, 3),
        "autotune_choices": {label: list(c) for label, c in o.autotune_choices},
    }
    # the gate's case lists, where the outcome has them (reports written before they were
    # kept re-encode to what they hold)
    if o.checked or o.skipped:
        out.update(checked=list(o.checked), skipped=list(o.skipped))
    if o.dropped_compiles:
        out["dropped_compiles"] = list(o.dropped_compiles)
    if o.gate_notes:  # only where the gate said something: reports written before it read the same
        out["gate_notes"] = list(o.gate_notes)
    return out


def outcome_from_json(d: Mapping[str, Any] | None) -> CandidateOutcome | None:
    if d is None:
        return None
    return CandidateOutcome(
        correct=bool(d["correct"]),
        error_kind=str(d.get("error_kind", "")),
        message=str(d.get("message", "")),
        cases=tuple(case_from_json(c) for c in d.get("cases") or ()),
        parent_ms=tuple(_opt_float(p) for p in d.get("parent_ms") or ()),
        noise=_opt_float(d.get("noise")),
        case_noise=tuple(_opt_float(n) for n in d.get("case_noise") or ()),
        case_rounds=tuple(
            _rounds(r.get("candidate_ms"), r.get("parent_ms")) for r in d.get("case_rounds") or ()
        ),
        suspect=bool(d.get("suspect")),
        wall_s=float(d.get("wall_s") or 0.0),
        device_s=float(d.get("device_s") or 0.0),
        autotune_choices=_choices(d.get("autotune_choices")),
        gate_notes=_labels(d.get("gate_notes")),
        checked=_labels(d.get("checked")),
        skipped=_labels(d.get("skipped")),
        dropped_compiles=_labels(d.get("dropped_compiles")),
    )


def verification_json(o: CandidateOutcome) -> JSON:
    """The database's layout (Proposal.verification): a row per case with its parent's time in
    the same process, the ratio, the case's noise floor, its timing rounds and what
    @triton.autotune chose for its shapes."""
    chosen = dict(o.autotune_choices)
    cases = []
    for c, p, f, r in zip(o.cases, _padded(o.parent_ms, o.cases), _padded(o.case_noise, o.cases),
                          _padded(o.case_rounds, o.cases), strict=True):  # fmt: skip
        row = case_json(c, db=True)
        row["parent_ms"] = finite(p)
        row["speedup"] = finite(p / c.time_ms) if (p and c.time_ms) else None
        row["noise_floor"] = finite(f)  # the wider spread of the parent's and the candidate's timings
        if r is not None:  # the medians of every timing round, behind the floor and the verdict
            row["rounds_ms"] = {"candidate": [finite(t) for t in r[0]], "parent": [finite(t) for t in r[1]]}
        if chosen.get(f"case {c.index}"):
            row["autotune_choice"] = "; ".join(chosen[f"case {c.index}"])
        cases.append(row)
    stored: JSON = {
        "correct": o.correct,
        "error_kind": o.error_kind,
        "message": o.message,
        "timed": o.timed,
        "cases": cases,
        "autotune_choices": {label: list(v) for label, v in o.autotune_choices},
        "speedup": finite(o.speedup),
        "noise": finite(o.noise),
        "suspect": o.suspect,
        "wall_s": o.wall_s,
        "device_s": o.device_s,
        # the cases the gate checked and those too big for the device: "correct on every case"
        # is only said when `skipped` is empty
        "checked": list(o.checked),
        "skipped": list(o.skipped),
        # compiles stopped at the loop's compile bound (configs dropped from the choice)
        **({"dropped_compiles": list(o.dropped_compiles)} if o.dropped_compiles else {}),
    }
    if o.gate_notes:
        stored["gate_notes"] = list(o.gate_notes)
    return stored


def verification_from_json(d: object) -> CandidateOutcome | None:
    """Proposal.verification as the outcome it records; None when nothing was recorded yet.
    Rows stored before noise floors or timing rounds were kept decode without them."""
    if not isinstance(d, Mapping) or not d:
        return None
    rows = [r for r in d.get("cases") or () if isinstance(r, Mapping)]
    floors = tuple(_opt_float(r.get("noise_floor")) for r in rows)
    rounds = []
    for r in rows:  # the encoder leaves them out from the first case without any
        if not isinstance(r.get("rounds_ms"), Mapping):
            break
        rounds.append(_rounds(r["rounds_ms"].get("candidate"), r["rounds_ms"].get("parent")))
    return CandidateOutcome(
        correct=bool(d.get("correct")),
        error_kind=str(d.get("error_kind") or ""),
        message=str(d.get("message") or ""),
        cases=tuple(case_from_json(r) for r in rows),
        parent_ms=tuple(_opt_float(r.get("parent_ms")) for r in rows),
        noise=_opt_float(d.get("noise")),
        case_noise=floors if any(f is not None for f in floors) else (),
        case_rounds=tuple(rounds),
        suspect=bool(d.get("suspect")),
        wall_s=float(d.get("wall_s") or 0.0),
        device_s=float(d.get("device_s") or 0.0),
        autotune_choices=_choices(d.get("autotune_choices")),
        gate_notes=_labels(d.get("gate_notes")),
        checked=_labels(d.get("checked")),
        skipped=_labels(d.get("skipped")),
        dropped_compiles=_labels(d.get("dropped_compiles")),
    )


def _labels(d: object) -> tuple[str, ...]:
    """A list of strings (case labels, the gate's notes); rows stored before it was kept: ()."""
    return tuple(str(x) for x in d) if isinstance(d, list | tuple) else ()


def _padded(values: Sequence[Any], cases: Sequence[CaseTiming]) -> list[Any]:
    return list(values[: len(cases)]) + [None] * max(0, len(cases) - len(values))


def _rounds(
    candidate: Iterable[object] | None, parent: Iterable[object] | None
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    def side(values: Iterable[object] | None) -> tuple[float, ...]:
        return tuple(v for v in map(_opt_float, values or ()) if v is not None)

    return (side(candidate), side(parent))


def _choices(d: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(d, Mapping):
        return ()
    return tuple((str(label), tuple(str(c) for c in v)) for label, v in d.items())


# --- a proposal's rationale, in parts ------------------------------------------------------


@dataclass(frozen=True)
class RationaleEvidence:
    """One finding a proposal acts on, as it read when the proposal was made."""

    code: str
    tier: int
    lines: tuple[int, ...]
    kernel: str
    message: str


@dataclass(frozen=True)
class Rationale:
    """Proposal.rationale_parts: what the rewrite changes, the findings behind it and what it
    should bring. What was measured is the verification's (`verification_from_json`)."""

    mechanism: str
    expected: str
    evidence: tuple[RationaleEvidence, ...]

    @property
    def empty(self) -> bool:
        return not (self.mechanism or self.expected or self.evidence)


def rationale_json(candidate: Candidate, findings: Iterable[Finding]) -> JSON:
    """The parts of `candidate`'s rationale; `findings` are those it addresses (any others
    are left out)."""
    addressed = set(candidate.findings_addressed)
    return {
        "mechanism": candidate.mechanism,
        "expected": candidate.expected,
        "evidence": [
            {
                "code": f.code,
                "tier": int(f.tier),
                "lines": list(f.lines),
                "kernel": f.kernel,
                "message": f.message,
            }
            for f in dict.fromkeys(findings)
            if f.code in addressed
        ],
    }


def rationale_from_json(d: object) -> Rationale | None:
    """None for a row stored before the parts were kept (its rationale is the text alone)."""
    if not isinstance(d, Mapping) or not d:
        return None
    evidence = tuple(
        RationaleEvidence(
            code=str(e.get("code", "")),
            tier=int(e.get("tier") or 0),
            lines=tuple(n for n in e.get("lines") or () if isinstance(n, int)),
            kernel=str(e.get("kernel") or ""),
            message=str(e.get("message") or ""),
        )
        for e in d.get("evidence") or ()
        if isinstance(e, Mapping)
    )
    return Rationale(str(d.get("mechanism") or ""), str(d.get("expected") or ""), evidence)


# --- rounds ---------------------------------------------------------------------------------


def hypothesis_json(h: Hypothesis | None) -> JSON | None:
    if h is None:
        return None
    return {"family": str(h.family), "mechanism": h.mechanism, "findings": list(h.findings), "text": h.text}


def hypothesis_from_json(d: Mapping[str, Any] | None) -> Hypothesis | None:
    if d is None:
        return None
    return Hypothesis(Family(d["family"]), str(d.get("mechanism", "")), tuple(d.get("findings") or ()))


def evidence_json(e: EvidenceRef) -> JSON:
    return {
        "code": e.code,
        "tier": int(e.tier),
        "family": str(e.family),
        "lines": list(e.lines),
        "kernel": e.kernel,
        "artefacts": list(e.artefacts),
    }


def evidence_from_json(d: Mapping[str, Any]) -> EvidenceRef:
    return EvidenceRef(
        code=str(d["code"]),
        tier=Tier(d["tier"]),
        family=Family(d["family"]),
        lines=tuple(d.get("lines") or ()),
        kernel=str(d.get("kernel", "")),
        artefacts=tuple(d.get("artefacts") or ()),
    )


def proposal_json(p: Candidate | None, *, sources: bool = False) -> JSON | None:
    if p is None:
        return None
    out = {
        "sha256": sha256(p.source),
        "family": str(p.family),
        "rationale": p.rationale,
        "proposer": p.proposer,
        "findings_addressed": list(p.findings_addressed),
        "tokens": p.tokens,
        "diff": p.diff,
    }
    # the rationale's parts, where the proposer gave them (reports written before they were
    # kept, or by an LLM proposer, have neither key)
    if p.mechanism:
        out["mechanism"] = p.mechanism
    if p.expected:
        out["expected"] = p.expected
    if p.transform:
        out["transform"] = p.transform
    if sources:
        out["source"] = p.source
    return out


def proposal_from_json(d: Mapping[str, Any] | None) -> Candidate | None:
    """The proposal of a report round; its source is empty unless the report kept sources."""
    if d is None:
        return None
    return Candidate(
        source=str(d.get("source", "")),
        diff=str(d.get("diff", "")),
        family=Family(d["family"]),
        rationale=str(d.get("rationale", "")),
        findings_addressed=tuple(d.get("findings_addressed") or ()),
        proposer=str(d.get("proposer", "")),
        tokens=int(d.get("tokens") or 0),
        mechanism=str(d.get("mechanism") or ""),
        expected=str(d.get("expected") or ""),
        transform=str(d.get("transform") or ""),
    )


def cost_json(c: RoundCost) -> JSON:
    out = {
        "wall_s": rounded(c.wall_s, 3),
        "device_s": rounded(c.device_s, 3),
        "tokens": c.tokens,
        "wall_by_tier": {str(k): rounded(v, 3) for k, v in sorted(c.wall_by_tier.items())},
        "device_by_tier": {str(k): rounded(v, 3) for k, v in sorted(c.device_by_tier.items())},
        "verify_wall_s": rounded(c.verify_wall_s, 3),
        "verify_device_s": rounded(c.verify_device_s, 3),
    }
    if c.llm is not None:  # only rounds that asked an LLM: rules-only reports stay as they were
        out["llm"] = usage_json(c.llm)
    return out


def cost_from_json(d: Mapping[str, Any]) -> RoundCost:
    return RoundCost(
        wall_s=float(d.get("wall_s") or 0.0),
        device_s=float(d.get("device_s") or 0.0),
        tokens=int(d.get("tokens") or 0),
        wall_by_tier={int(k): float(v) for k, v in (d.get("wall_by_tier") or {}).items()},
        device_by_tier={int(k): float(v) for k, v in (d.get("device_by_tier") or {}).items()},
        verify_wall_s=float(d.get("verify_wall_s") or 0.0),
        verify_device_s=float(d.get("verify_device_s") or 0.0),
        llm=usage_from_json(d.get("llm")),
    )


def usage_json(u: LLMUsage | None) -> JSON | None:
    if u is None:
        return None
    return {
        "model": u.model,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "latency_s": rounded(u.latency_s, 3),
        "cost": rounded(u.cost, 6),
        "prompt_chars": u.prompt_chars,
        "prompt_version": u.prompt_version,
        "requests": u.requests,
        "estimated": u.estimated,
    }


def usage_from_json(d: Mapping[str, Any] | None) -> LLMUsage | None:
    if not d:
        return None
    return LLMUsage(
        model=str(d.get("model", "")),
        prompt_tokens=int(d.get("prompt_tokens") or 0),
        completion_tokens=int(d.get("completion_tokens") or 0),
        latency_s=float(d.get("latency_s") or 0.0),
        cost=_opt_float(d.get("cost")),
        prompt_chars=int(d.get("prompt_chars") or 0),
        prompt_version=str(d.get("prompt_version", "")),
        requests=int(d.get("requests") or 0),
        estimated=bool(d.get("estimated")),
    )


def round_json(r: RoundRecord, *, sources: bool = False) -> JSON:
    return {
        "index": r.index,
        "parent_sha256": r.parent_sha256,
        "tier_reached": int(r.tier_reached),
        "verdict": str(r.verdict),
        "reason": r.reason,
        "hypothesis": hypothesis_json(r.hypothesis),
        "evidence": [evidence_json(e) for e in r.evidence],
        "findings": [finding_json(f) for f in r.findings],
        "decisions": [decision_json(d) for d in r.decisions],
        "proposal": proposal_json(r.proposal, sources=sources),
        "outcome": outcome_json(r.outcome),
        "cost": cost_json(r.cost),
    }


def round_from_json(d: Mapping[str, Any]) -> RoundRecord:
    """A report round (its tiers' artefacts are not in a report: `tier_results` is empty)."""
    return RoundRecord(
        index=int(d["index"]),
        parent_sha256=str(d["parent_sha256"]),
        tier_reached=Tier(d["tier_reached"]),
        verdict=Verdict(d["verdict"]),
        reason=str(d.get("reason", "")),
        hypothesis=hypothesis_from_json(d.get("hypothesis")),
        evidence=[evidence_from_json(e) for e in d.get("evidence") or ()],
        findings=[finding_from_json(f) for f in d.get("findings") or ()],
        decisions=[decision_from_json(x) for x in d.get("decisions") or ()],
        proposal=proposal_from_json(d.get("proposal")),
        outcome=outcome_from_json(d.get("outcome")),
        cost=cost_from_json(d.get("cost") or {}),
    )


# --- the loop report: what a benchmark keeps of one loop ------------------------------------


@dataclass(frozen=True)
class CaseReport:
    """One case of a loop report: the initial and the best version's times side by side."""

    index: int
    initial_ms: float | None
    best_ms: float | None
    ref_ms: float | None
    sol_ms: float | None
    speedup_over_initial: float | None
    speedup_over_eager: float | None
    pct_sol: float | None


@dataclass(frozen=True)
class LoopReport:
    """What `loop_result_json` keeps of a LoopResult: figures, not versions (no stats, and
    sources only when asked for). `stop_reason` is a string: bench/run.py writes its own
    'op_budget' there when an operator's time ran out."""

    initial_sha256: str | None
    best_sha256: str | None
    improved: bool
    cases: tuple[CaseReport, ...]
    speedup_over_initial: float | None
    speedup_over_eager: float | None
    initial_speedup_over_eager: float | None
    initial_pct_sol: float | None
    pct_sol: float | None
    rounds_used: int
    verdicts: dict[Verdict, int]
    winning_rounds: tuple[int, ...]
    winning_tiers: tuple[Tier, ...]
    winning_families: tuple[Family, ...]
    stop_reason: str
    stop_detail: str
    error: str
    wall_s: float | None
    device_s: float | None
    baseline_wall_s: float | None
    baseline_device_s: float | None
    tokens: int
    rounds: tuple[RoundRecord, ...] | None = None  # None: written without rounds
    unchecked: str = ""  # why the initial version could not be checked here ('' when it was)
    skipped_cases: tuple[str, ...] = ()  # its cases too big for the device
    initial_source: str | None = None
    best_source: str | None = None


def loop_result_json(result: LoopResult, *, sources: bool = False, rounds: bool = True) -> JSON:
    """Everything a benchmark or a stored run needs about one loop; sources only when asked."""
    initial_cases = result.initial.cases if result.initial else ()
    best_cases = result.best.cases if result.best else ()
    cases = []
    for i, b in enumerate(best_cases):
        a = initial_cases[i] if i < len(initial_cases) else None
        up = result.speedups_over_initial[i] if i < len(result.speedups_over_initial) else None
        cases.append(
            {
                "index": b.index,
                "initial_ms": rounded(a.time_ms if a else None, 6),
                "best_ms": rounded(b.time_ms, 6),
                "ref_ms": rounded(b.ref_ms, 6),
                "sol_ms": rounded(b.sol_ms, 6),
                "speedup_over_initial": rounded(up),
                "speedup_over_eager": rounded(b.speedup_over_eager),
                "pct_sol": rounded(b.pct_sol, 2),
            }
        )
    out: JSON = {
        "initial_sha256": result.initial.sha256 if result.initial else None,
        "best_sha256": result.best.sha256 if result.best else None,
        "improved": result.improved,
        "cases": cases,
        "speedup_over_initial": rounded(result.speedup_over_initial),
        "speedup_over_eager": rounded(result.speedup_over_eager),
        "initial_speedup_over_eager": rounded(result.initial.speedup_over_eager if result.initial else None),
        "initial_pct_sol": rounded(result.initial.pct_sol if result.initial else None, 2),
        "pct_sol": rounded(result.pct_sol, 2),
        "rounds_used": len(result.rounds),
        "verdicts": {str(v): sum(1 for r in result.rounds if r.verdict is v) for v in REPORTED_VERDICTS},
        "winning_rounds": [r.index for r in result.winning_rounds],
        "winning_tiers": [int(t) for t in result.winning_tiers],
        "winning_families": [str(r.proposal.family) for r in result.winning_rounds if r.proposal],
        "stop_reason": str(result.stop_reason),
        "stop_detail": result.stop_detail,
        "error": result.error,
        "wall_s": rounded(result.wall_s, 3),
        "device_s": rounded(result.device_s, 3),
        "baseline_wall_s": rounded(result.baseline_wall_s, 3),
        "baseline_device_s": rounded(result.baseline_device_s, 3),
        "tokens": result.tokens,
        "unchecked": result.unchecked,
        "skipped_cases": list(result.skipped_cases),
    }
    if rounds:
        out["rounds"] = [round_json(r, sources=sources) for r in result.rounds]
    if sources:
        out["initial_source"] = result.initial_source
        out["best_source"] = result.best_source
    return out


def loop_report_from_json(d: Mapping[str, Any]) -> LoopReport:
    """A loop report, also from a bench/run.py operator record (its own keys are ignored)."""
    return LoopReport(
        initial_sha256=d.get("initial_sha256"),
        best_sha256=d.get("best_sha256"),
        improved=bool(d["improved"]),
        cases=tuple(
            CaseReport(int(c["index"]), *(_opt_float(c.get(k)) for k in _CASE_REPORT_FIGURES))
            for c in d["cases"]
        ),
        speedup_over_initial=_opt_float(d.get("speedup_over_initial")),
        speedup_over_eager=_opt_float(d.get("speedup_over_eager")),
        initial_speedup_over_eager=_opt_float(d.get("initial_speedup_over_eager")),
        initial_pct_sol=_opt_float(d.get("initial_pct_sol")),
        pct_sol=_opt_float(d.get("pct_sol")),
        rounds_used=int(d["rounds_used"]),
        verdicts={Verdict(k): int(n) for k, n in (d.get("verdicts") or {}).items()},
        winning_rounds=tuple(int(i) for i in d.get("winning_rounds") or ()),
        winning_tiers=tuple(Tier(t) for t in d.get("winning_tiers") or ()),
        winning_families=tuple(Family(f) for f in d.get("winning_families") or ()),
        stop_reason=str(d.get("stop_reason", "")),
        stop_detail=str(d.get("stop_detail", "")),
        error=str(d.get("error") or ""),
        wall_s=_opt_float(d.get("wall_s")),
        device_s=_opt_float(d.get("device_s")),
        baseline_wall_s=_opt_float(d.get("baseline_wall_s")),
        baseline_device_s=_opt_float(d.get("baseline_device_s")),
        tokens=int(d.get("tokens") or 0),
        rounds=None if "rounds" not in d else tuple(round_from_json(r) for r in d["rounds"]),
        unchecked=str(d.get("unchecked") or ""),
        skipped_cases=_labels(d.get("skipped_cases")),
        initial_source=d.get("initial_source"),
        best_source=d.get("best_source"),
    )


_CASE_REPORT_FIGURES = (
    "initial_ms",
    "best_ms",
    "ref_ms",
    "sol_ms",
    "speedup_over_initial",
    "speedup_over_eager",
    "pct_sol",
)


# --- the run summary: what DiagnosisRun.summary holds once the loop ends --------------------


@dataclass(frozen=True)
class RunSummary:
    """DiagnosisRun.summary: how the loop ended, the two versions it compares and the figures
    the run's pages and `manage.py optimize` show."""

    stop_reason: StopReason
    stop_detail: str
    attempt: int
    rounds: int
    improved: bool
    initial: VersionStats | None
    best: VersionStats | None
    best_proposal: int | None  # the Proposal row whose source is the best version; None: the upload
    best_sha256: str
    speedup_over_initial: float | None
    speedups_over_initial: tuple[float | None, ...]
    speedup_over_eager: float | None
    pct_sol: float | None
    winning_tiers: tuple[Tier, ...]
    device_name: str
    baseline_wall_s: float
    baseline_device_s: float
    error: str
    # False: the initial version could not be checked for correctness on this device, and
    # `unchecked` says why; pages must say so rather than show it as the best version
    checked: bool = True
    unchecked: str = ""
    skipped_cases: tuple[str, ...] = ()  # the initial version's cases too big for the device


def summary_json(result: LoopResult, *, best_proposal_id: int | None, attempt: int) -> JSON:
    return {
        "stop_reason": str(result.stop_reason),
        "stop_detail": result.stop_detail,
        "attempt": attempt,
        "rounds": len(result.rounds),
        "improved": result.improved,
        "initial": version_json(result.initial),
        "best": version_json(result.best),
        "best_proposal": best_proposal_id,
        "best_sha256": sha256(result.best_source),
        "speedup_over_initial": finite(result.speedup_over_initial),
        "speedups_over_initial": [finite(s) for s in result.speedups_over_initial],
        "speedup_over_eager": finite(result.speedup_over_eager),
        "pct_sol": finite(result.pct_sol),
        "winning_tiers": [int(t) for t in result.winning_tiers],
        "device_name": result.device_name,
        "baseline_wall_s": result.baseline_wall_s,
        "baseline_device_s": result.baseline_device_s,
        "error": result.error,
        "checked": result.checked,
        "unchecked": result.unchecked,
        "skipped_cases": list(result.skipped_cases),
    }


def summary_from_json(d: object) -> RunSummary | None:
    """A finished run's summary; None for a run that has none yet (queued, running, lost)."""
    if not isinstance(d, Mapping) or not d:
        return None
    return RunSummary(
        stop_reason=StopReason(d["stop_reason"]),
        stop_detail=str(d.get("stop_detail", "")),
        attempt=int(d.get("attempt") or 0),
        rounds=int(d.get("rounds") or 0),
        improved=bool(d.get("improved")),
        initial=version_from_json(d.get("initial")),
        best=version_from_json(d.get("best")),
        best_proposal=d.get("best_proposal"),
        best_sha256=str(d.get("best_sha256", "")),
        speedup_over_initial=_opt_float(d.get("speedup_over_initial")),
        speedups_over_initial=tuple(_opt_float(x) for x in d.get("speedups_over_initial") or ()),
        speedup_over_eager=_opt_float(d.get("speedup_over_eager")),
        pct_sol=_opt_float(d.get("pct_sol")),
        winning_tiers=tuple(Tier(t) for t in d.get("winning_tiers") or ()),
        device_name=str(d.get("device_name", "")),
        baseline_wall_s=float(d.get("baseline_wall_s") or 0.0),
        baseline_device_s=float(d.get("baseline_device_s") or 0.0),
        error=str(d.get("error", "")),
        # a summary stored before the flag: a diagnosis-only run is the one that checked nothing
        checked=bool(d.get("checked", StopReason(d["stop_reason"]) is not StopReason.DIAGNOSED_ONLY)),
        unchecked=str(d.get("unchecked") or ""),
        skipped_cases=_labels(d.get("skipped_cases")),
    )
