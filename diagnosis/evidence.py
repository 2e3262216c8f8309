"""What the evidence pages read from the database: the source versions a run diagnosed, their
artefacts in pipeline order and once each, the stage maps of each kernel, and the profile.

A run diagnoses its uploaded version and, after a verified improvement, candidates that are
no KernelVersion yet; each is a `SourceVersion` here, named in URLs by `key`: the
KernelVersion's id, or `p<id>` of the proposal whose source it is. Artefacts and rounds carry
the sha256 of the source they belong to (runner.persist). Old rows may hold duplicates and
server paths: both are dealt with here, on the way out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.core.cache import cache

from diagnosis.engine import irmap
from diagnosis.engine.paths import display_name, scrub_paths
from diagnosis.engine.profile import ProfileResult
from diagnosis.engine.records import sha256
from diagnosis.engine.roofline import Roofline, RooflineCase, roofline
from diagnosis.engine.serialize import summary_from_json, verification_from_json
from diagnosis.engine.sol import math_class, peak_tflops
from diagnosis.engine.tier1 import short_kernel_name
from diagnosis.models import Artefact, DiagnosisRun, Finding, KernelVersion, Proposal

# Pipeline order of the kinds on every page (amdgcn and linalg stand where their targets put them)
KIND_ORDER = {
    k: i
    for i, k in enumerate(
        (
            "ttir",
            "ttgir",
            "linalg",
            "llir",
            "ptx",
            "amdgcn",
            "sass",
            "pass_dump",
            "profile",
            "ncu",
            "log",
            "source",
        )
    )
}
STAGE_KINDS = frozenset(irmap.STAGES)
MAX_PANEL_LINES = 120  # per stage in a line's panel; the artefact page has the rest
MAP_CACHE_SECONDS = 3600


def module_name(run: DiagnosisRun) -> str:
    return display_name(run.version.filename)


def shown(text: str, run: DiagnosisRun) -> str:
    """Stored text as a page shows it: rows written before paths were scrubbed are scrubbed here."""
    return scrub_paths(text, module_name(run))


# --- source versions -------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceVersion:
    key: str  # "12": KernelVersion 12; "p34": the source of proposal 34
    sha256: str
    source: str
    label: str
    version: KernelVersion | None = None
    proposal: Proposal | None = None
    rounds: tuple[int, ...] = ()  # the rounds that diagnosed it


def run_versions(run: DiagnosisRun) -> list[SourceVersion]:
    """Every source the run diagnosed, the upload first, then in the order rounds reached them."""
    rounds = list(
        run.rounds.order_by("index").values_list("index", "parent_sha256", "parent_version__sha256")
    )
    by_sha: dict[str, list[int]] = {run.version.sha256: []}
    for index, parent_sha, version_sha in rounds:
        by_sha.setdefault(parent_sha or version_sha or run.version.sha256, []).append(index)
    for sha in run.artefacts.order_by().values_list("source_sha256", flat=True).distinct():
        by_sha.setdefault(sha or run.version.sha256, [])
    versions = {
        v.sha256: v
        for v in KernelVersion.objects.filter(kernel_id=run.version.kernel_id, sha256__in=list(by_sha)).only(
            "id", "number", "sha256", "source", "filename", "kernel_id"
        )
    }
    missing = [sha for sha in by_sha if sha not in versions]
    proposals: dict[str, Proposal] = {}
    if missing:
        for p in (
            Proposal.objects.filter(round__run=run).select_related("round").order_by("round__index", "id")
        ):
            proposals.setdefault(sha256(p.source), p)
    out = []
    for sha, indices in by_sha.items():
        if sha in versions:
            v = versions[sha]
            label = f"v{v.number}" + (" (uploaded)" if v.pk == run.version_id else "")
            out.append(SourceVersion(str(v.pk), sha, v.source, label, version=v, rounds=tuple(indices)))
        elif sha in proposals:
            p = proposals[sha]
            label = f"proposal {p.pk} (round {p.round.index})"
            out.append(SourceVersion(f"p{p.pk}", sha, p.source, label, proposal=p, rounds=tuple(indices)))
    return out


def _shas(run: DiagnosisRun, version: SourceVersion) -> list[str]:
    """The source digests whose rows belong to `version`: rows written without one (by other
    importers) count as the run's own version's."""
    return [version.sha256, ""] if version.sha256 == run.version.sha256 else [version.sha256]


def pick_version(versions: Sequence[SourceVersion], key: str | None) -> SourceVersion | None:
    """The version `key` names, else the first (the upload); None for a key the run has not."""
    if not key:
        return versions[0] if versions else None
    return next((v for v in versions if v.key == key), None)


# --- artefacts -------------------------------------------------------------------------------


def kernel_of(a: Artefact) -> str:
    """`k.ptx` -> k, `k/30-TritonGPUPipeline` -> k; other names are their own."""
    if a.kind == Artefact.Kind.PASS_DUMP and "/" in a.name:
        return a.name.rsplit("/", 1)[0]
    if a.name.endswith(f".{a.kind}"):
        return a.name[: -len(a.kind) - 1]
    return ""


def _pass_index(a: Artefact) -> int:
    steps = irmap.pass_steps([a.name]) if a.kind == Artefact.Kind.PASS_DUMP else []
    return steps[0][0] if steps else -1


def ordered(artefacts: Iterable[Artefact], versions: Sequence[SourceVersion] = ()) -> list[Artefact]:
    """Pipeline order within each version (versions in run order), each artefact once: rows an
    older worker stored again for every round (same source, kind, name and digest) show once."""
    rank = {v.sha256: i for i, v in enumerate(versions)}
    default = versions[0].sha256 if versions else ""
    seen: set[tuple[str, str, str, str]] = set()
    out = []
    for a in sorted(
        artefacts,
        key=lambda a: (
            rank.get(a.source_sha256 or default, len(rank)),
            KIND_ORDER.get(a.kind, len(KIND_ORDER)),
            kernel_of(a),
            _pass_index(a),
            a.name,
            a.pk,
        ),
    ):
        key = (a.source_sha256, a.kind, a.name, a.sha256)
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


@dataclass
class VersionArtefacts:
    version: SourceVersion
    artefacts: list[Artefact]


def run_artefacts(run: DiagnosisRun, versions: Sequence[SourceVersion]) -> list[VersionArtefacts]:
    """The run page's artefact list, grouped by source version, without the stored text."""
    rows = ordered(run.artefacts.select_related("round").defer("data"), versions)
    groups = []
    for v in versions:
        mine = [a for a in rows if (a.source_sha256 or run.version.sha256) == v.sha256]
        if mine:
            groups.append(VersionArtefacts(v, mine))
    return groups


# --- kernels of one version and their stage maps ----------------------------------------------


@dataclass
class KernelStages:
    name: str
    artefacts: dict[str, Artefact]  # stage kind -> artefact (its text loaded on first use)
    maps: dict[str, irmap.StageMap] = field(default_factory=dict)  # lines empty until `text` is read
    chips: dict[int, list[irmap.Chip]] = field(default_factory=dict)
    num_warps: str = ""
    shared: str = ""
    pass_count: int = 0
    module: str = "kernel.py"  # what shown text calls the module (paths.display_name)
    _texts: dict[str, str] | None = None

    def texts(self) -> dict[str, str]:
        """The stages' stored text, fetched in one query the first time (a page that opens no
        line and finds its maps cached decompresses nothing)."""
        if self._texts is None:
            rows = Artefact.objects.filter(pk__in=[a.pk for a in self.artefacts.values()]).only("id", "data")
            by_id = {a.pk: a.text for a in rows}
            self._texts = {stage: by_id.get(a.pk, "") for stage, a in self.artefacts.items()}
        return self._texts

    def lines(self) -> set[int]:
        return {n for m in self.maps.values() for n in m.by_source}


# `module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 16 : i32, ttg.shared = 66560 : i32, ...}`
_NUM_WARPS = re.compile(r'"ttg\.num-warps" = (\d+)')
_SHARED = re.compile(r"ttg\.shared = (\d+)")


def version_kernels(run: DiagnosisRun, version: SourceVersion) -> list[KernelStages]:
    """Each kernel's stages for `version`, mapped to source lines. The maps, the chips and the
    TTGIR's warps and shared memory are cached by the stages' digests: the stored text is read
    only to build them, and for the lines a panel shows."""
    rows = list(
        run.artefacts.filter(source_sha256__in=_shas(run, version), kind__in=list(STAGE_KINDS))
        .defer("data")
        .order_by("id")
    )
    passes = (
        run.artefacts.filter(source_sha256__in=_shas(run, version), kind=Artefact.Kind.PASS_DUMP)
        .order_by()
        .values_list("name", flat=True)
    )
    kernels: dict[str, KernelStages] = {}
    for a in ordered(rows):
        k = kernels.setdefault(kernel_of(a), KernelStages(kernel_of(a), {}, module=module_name(run)))
        if a.kind not in k.artefacts:  # another specialization of the same kernel: the first speaks
            k.artefacts[a.kind] = a
    for pass_name in passes:
        kernel = pass_name.rsplit("/", 1)[0]
        if kernel in kernels:
            kernels[kernel].pass_count += 1
    for k in kernels.values():
        key = "evidence-map:v1:" + sha256("|".join(f"{s}:{a.sha256}" for s, a in sorted(k.artefacts.items())))
        cached = cache.get(key)
        if cached is None:
            texts = k.texts()
            filename = irmap.kernel_filename(texts)  # names match by base name: scrubbed or not
            maps = irmap.map_stages(texts, filename)
            ttgir = texts.get("ttgir", "")
            warps, shared = _NUM_WARPS.search(ttgir), _SHARED.search(ttgir)
            cached = (
                {s: (m.by_source, m.via) for s, m in maps.items()},
                irmap.chips_for(texts, filename),
                warps.group(1) if warps else "",
                shared.group(1) if shared else "",
            )
            cache.set(key, cached, MAP_CACHE_SECONDS)
        stage_maps, k.chips, k.num_warps, k.shared = cached
        k.maps = {s: irmap.StageMap(s, (), by, via) for s, (by, via) in stage_maps.items()}
    return [k for k in kernels.values() if k.artefacts]


@dataclass(frozen=True)
class PanelLine:
    number: int | None  # None: a gap between runs of lines
    text: str = ""
    via: str = ""
    cited: bool = False


@dataclass
class PanelStage:
    stage: str
    label: str
    artefact: Artefact
    lines: list[PanelLine]
    total: int
    first: int | None


STAGE_LABELS = dict(Artefact.Kind.choices)


def _panel_text(stage: str, text: str) -> str:
    """A stage line as the panel shows it, out of its context: no indentation, no MLIR
    locations (the panel already says which line they point at), SASS and PTX columns closed up."""
    if stage in ("ttir", "ttgir"):
        return irmap.strip_locs(text).strip()
    if stage in ("sass", "ptx", "amdgcn"):
        return " ".join(text.split())
    return text.strip()


def panel_stages(
    kernel: KernelStages, line: int, cited: dict[str, set[int]] | None = None
) -> list[PanelStage]:
    """The stage lines that came from source `line`, stage by stage, runs separated by gaps."""
    cited = cited or {}
    out = []
    for stage, m in kernel.maps.items():
        numbers = list(m.by_source.get(line, ()))
        if not numbers:
            continue
        lines = kernel.texts()[stage].splitlines()
        rows: list[PanelLine] = []
        prev = None
        for n in numbers[:MAX_PANEL_LINES]:
            if prev is not None and n != prev + 1:
                rows.append(PanelLine(None))
            # only the lines shown are scrubbed (rows stored before paths were): not megabytes
            text = scrub_paths(_panel_text(stage, lines[n - 1] if n <= len(lines) else ""), kernel.module)
            rows.append(PanelLine(n, text, m.via.get(n, ""), n in cited.get(stage, set())))
            prev = n
        out.append(
            PanelStage(
                stage, STAGE_LABELS.get(stage, stage), kernel.artefacts[stage], rows, len(numbers), numbers[0]
            )
        )
    return out


# --- findings of one version -----------------------------------------------------------------


@dataclass
class FindingRef:
    finding: Finding  # the first of its kind
    rounds: list[int]
    message: str


def version_findings(run: DiagnosisRun, version: SourceVersion) -> list[FindingRef]:
    """The findings of the rounds that diagnosed `version`, each once, with the rounds it came in."""
    rows = run.findings.select_related("round").order_by("tier", "round__index", "id")
    if version.version is not None and version.version.pk == run.version_id:
        rows = [
            f for f in rows if f.round is None or (f.round.parent_sha256 or version.sha256) == version.sha256
        ]
    else:
        rows = [f for f in rows if f.round is not None and f.round.parent_sha256 == version.sha256]
    refs: dict[tuple, FindingRef] = {}
    for f in rows:
        key = (f.code, tuple(f.lines or ()), f.message)
        ref = refs.get(key)
        if ref is None:
            refs[key] = FindingRef(f, [f.round.index] if f.round else [], shown(f.message, run))
        elif f.round and f.round.index not in ref.rounds:
            ref.rounds.append(f.round.index)
    return list(refs.values())


def findings_by_line(refs: Iterable[FindingRef]) -> dict[int, list[FindingRef]]:
    out: dict[int, list[FindingRef]] = {}
    for ref in refs:
        for n in ref.finding.lines or ():
            if isinstance(n, int):
                out.setdefault(n, []).append(ref)
    return out


def cited_lines(refs: Iterable[FindingRef], kernel: str) -> dict[str, set[int]]:
    """Stage lines that findings cite as evidence (a finding's excerpt comes from them)."""
    out: dict[str, set[int]] = {}
    for ref in refs:
        for e in ref.finding.evidence or ():
            if isinstance(e, dict) and (not e.get("kernel") or e.get("kernel") == kernel):
                out.setdefault(str(e.get("kind", "")), set()).update(
                    n for n in e.get("lines") or () if isinstance(n, int)
                )
    return out


# --- profile and roofline --------------------------------------------------------------------


@dataclass
class CaseRow:
    index: int
    dtype: str
    time_ms: float | None
    ref_ms: float | None
    bytes: int | None
    flops: int | None
    intensity: float | None
    achieved_gbs: float | None
    achieved_tflops: float | None
    sol_ms: float | None
    pct_sol: float | None
    bound: str
    cand_ms: float | None = None
    cand_speedup: float | None = None
    cand_pct_sol: float | None = None
    cand_gbs: float | None = None
    cand_tflops: float | None = None
    # (name as a reader knows it, us a call, a Triton kernel of the module) longest first
    kernels: list[tuple[str, float, bool]] = field(default_factory=list)


@dataclass
class Profile:
    device: str
    peak_bw_gbs: float | None
    peak_tflops: dict[str, float]
    rows: list[CaseRow]
    chart: Roofline | None
    notes: list[str]
    source: str  # profile (tier 1's artefact) or summary (a run's timings without bytes and FLOPs)
    candidate: Proposal | None = None
    candidates: list[Proposal] = field(default_factory=list)

    @property
    def kernel_rows(self) -> list[CaseRow]:
        """The cases whose kernels were timed one by one."""
        return [r for r in self.rows if r.kernels]


def _rate(num: float | None, ms: float | None, scale: float) -> float | None:
    return num / (ms * 1e-3) / scale if num and ms and ms > 0 else None


def version_profile(
    run: DiagnosisRun, version: SourceVersion, proposal_id: str | None = None
) -> Profile | None:
    """The version's measured profile with a candidate rewrite of it beside it, or None when
    nothing about the version was measured."""
    row = (
        run.artefacts.filter(kind=Artefact.Kind.PROFILE, source_sha256__in=_shas(run, version))
        .order_by("-id")
        .first()
    )
    candidates = [
        p
        for p in Proposal.objects.filter(round__run=run, round__parent_sha256=version.sha256)
        .select_related("round")
        .order_by("round__index", "id")
        if (o := verification_from_json(p.verification)) is not None and o.timed
    ]
    chosen = next((p for p in candidates if str(p.pk) == proposal_id), None)
    if chosen is None and candidates:
        correct = [p for p in candidates if p.verification.get("correct")] or candidates
        chosen = max(correct, key=lambda p: p.speedup or 0.0)
    cand_cases = {}
    if chosen is not None:
        outcome = verification_from_json(chosen.verification)
        cand_cases = {c.index: c for c in outcome.cases} if outcome else {}
    if row is not None:
        try:
            prof = ProfileResult.from_json(json.loads(row.text))
        except (ValueError, TypeError, KeyError):
            prof = None
        if prof is not None:
            return _from_profile(prof, cand_cases, chosen, candidates)
    summary = summary_from_json(run.summary)
    stats = None
    if summary is not None:
        stats = next(
            (v for v in (summary.initial, summary.best) if v is not None and v.sha256 == version.sha256), None
        )
    if stats is None or not stats.timed:
        return None
    rows = [
        CaseRow(c.index, "", c.time_ms, c.ref_ms, None, None, None, None, None, c.sol_ms, c.pct_sol, "")
        for c in stats.cases
    ]
    _add_candidate(rows, cand_cases)
    return Profile(
        summary.device_name if summary else "",
        None,
        {},
        rows,
        None,
        ["this run kept no profile for the version: bytes, FLOPs and the roofline need tier 1's profile"],
        "summary",
        chosen,
        candidates,
    )


def _add_candidate(rows: list[CaseRow], cand_cases: dict) -> None:
    for r in rows:
        c = cand_cases.get(r.index)
        if c is None or c.time_ms is None:
            continue
        r.cand_ms = c.time_ms
        r.cand_speedup = r.time_ms / c.time_ms if r.time_ms and c.time_ms else None
        r.cand_pct_sol = 100.0 * r.sol_ms / c.time_ms if r.sol_ms and c.time_ms else c.pct_sol
        r.cand_gbs = _rate(r.bytes, c.time_ms, 1e9)
        r.cand_tflops = _rate(r.flops, c.time_ms, 1e12)


def _from_profile(
    prof: ProfileResult, cand_cases: dict, chosen: Proposal | None, candidates: list[Proposal]
) -> Profile:
    rows = []
    chart_cases: list[RooflineCase] = []
    dev = prof.device
    for c in prof.cases:
        gbs = c.achieved_gbs if c.achieved_gbs is not None else _rate(c.bytes, c.time_ms, 1e9)
        tfl = c.achieved_tflops if c.achieved_tflops is not None else _rate(c.flops, c.time_ms, 1e12)
        bound = ""
        if dev is not None and dev.peak_bw_gbs > 0:
            peak = peak_tflops(dev, c.dtype)
            t_mem = c.bytes / (dev.peak_bw_gbs * 1e9)
            t_cmp = c.flops / (peak * 1e12) if peak and c.flops else 0.0
            bound = "memory" if t_mem >= t_cmp else "compute"
        rows.append(
            CaseRow(
                c.index, c.dtype, c.time_ms, c.ref_time_ms, c.bytes, c.flops,
                c.flops / c.bytes if c.bytes and c.flops else None, gbs, tfl, c.sol_ms, c.pct_sol, bound,
            )
        )  # fmt: skip
        triton = {li.kernel for li in c.launches}
        rows[-1].kernels = [(short_kernel_name(name), us, name in triton) for name, us in c.kernel_us]
        chart_cases.append(RooflineCase(c.index, "parent", c.flops, c.bytes, c.time_ms, c.dtype))
        cand = cand_cases.get(c.index)
        if cand is not None:
            chart_cases.append(RooflineCase(c.index, "candidate", c.flops, c.bytes, cand.time_ms, c.dtype))
    _add_candidate(rows, cand_cases)
    # the peaks the cases run at (fp32 math at the TF32 rate where there is one), not the whole table
    classes = {math_class(c.dtype) for c in prof.cases}
    if "fp32" in classes and dev is not None and "tf32" in dev.peak_tflops:
        classes.add("tf32")
    return Profile(
        dev.name if dev else "no device",
        dev.peak_bw_gbs if dev else None,
        {k: v for k, v in dev.peak_tflops.items() if k in classes} if dev else {},
        rows,
        roofline(dev, chart_cases),
        list(prof.notes),
        "profile",
        chosen,
        candidates,
    )
