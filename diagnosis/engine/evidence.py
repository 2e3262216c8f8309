"""Evidence types shared by every tier, the proposers and the persistence layer.

A Finding is a small frozen record: a stable code (registered once, with its message
template and the rewrite family it points to), the arguments for that template and the
source lines it is about. Rendering lives elsewhere (templates, `diagnosis.engine.serialize`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Tier(enum.IntEnum):
    TRIAGE = 0  # source patterns
    PROFILE = 1  # timing, SOL, hardware counters
    IR = 2  # per-line attribution of the compiled IR
    COMPILER = 3  # pass dumps and counterfactual recompiles


class Severity(enum.StrEnum):
    """How much a finding matters; members are in rising order (`rank`)."""

    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """0 for INFO up to 3 for HIGH: what escalation's score multiplies and every tier compares."""
        return _SEVERITY_ORDER.index(self)


_SEVERITY_ORDER = tuple(Severity)


class Family(enum.StrEnum):
    """Rewrite families: what kind of source change a finding points to.

    The rules proposer keys its transforms by family; the round loop uses the family to
    decide whether the evidence 'narrows the next change to one rewrite family'.
    """

    LAUNCH_CONFIG = "launch_config"  # block sizes, grid shape, num_warps, num_stages, autotune space
    HINTS = "hints"  # tl.multiple_of / tl.max_contiguous / divisibility of scalar arguments
    SINGLE_PASS = "single_pass"  # multi-pass loop over a row that fits one block
    BLOCK_REDUCTION = "block_reduction"  # per-block atomics -> in-block reduction
    USE_DOT = "use_dot"  # elementwise multiply + tl.sum where tl.dot applies
    COALESCE = "coalesce"  # strided innermost access
    INDEX_MATH = "index_math"  # integer division / modulo in hot loops
    FUSION = "fusion"  # several launches that could be one
    DOT_PRECISION = "dot_precision"  # tl.dot on fp32 without an input_precision choice
    MASKING = "masking"  # missing or needless masks
    INT64_OFFSETS = "int64_offsets"  # int32 offset overflow risk
    SWIZZLE = "swizzle"  # program-order (grouped) ordering for GEMM tiles
    PIPELINING = "pipelining"  # num_stages / loads that do not qualify for cp.async
    HOIST = "hoist"  # loop-invariant loads or math inside a loop
    TWO_STAGE = "two_stage"  # a whole-tensor reduction in one program -> partials of many programs + a second stage
    NONE = "none"  # informative only, points to no rewrite


@dataclass(frozen=True)
class CodeInfo:
    code: str
    tier: Tier
    family: Family
    template: str  # str.format template over the finding's args
    title: str = ""


_CODES: dict[str, CodeInfo] = {}


def register_code(
    code: str, tier: Tier, family: Family, template: str, title: str = ""
) -> CodeInfo:
    """Register a finding code once; registering the same code twice differently is a bug."""
    info = CodeInfo(code, tier, family, template, title or code)
    old = _CODES.get(code)
    if old is not None and old != info:
        raise ValueError(f"finding code {code!r} registered twice with different meanings")
    _CODES[code] = info
    return info


def code_info(code: str) -> CodeInfo:
    return _CODES[code]


def all_codes() -> dict[str, CodeInfo]:
    return dict(_CODES)


@dataclass(frozen=True)
class ArtefactRef:
    """Points at evidence: an IR stage or a profile of one kernel, and lines inside it."""

    kind: str  # ttir, ttgir, llir, ptx, sass, amdgcn, linalg, pass_dump, profile, ncu, log
    kernel: str = ""
    lines: tuple[int, ...] = ()
    excerpt: str = ""  # a few lines of the artefact, for the page and the LLM prompt
    name: str = ""  # e.g. the pass name for a pass dump


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    args: dict[str, Any] = field(default_factory=dict, hash=False)
    lines: tuple[int, ...] = ()  # lines of the uploaded Python source
    kernel: str = ""  # the @triton.jit function it is about, when there is one
    evidence: tuple[ArtefactRef, ...] = ()
    gain: float | None = None  # estimated speedup factor if the rewrite works, when one can be made
    family_override: Family | None = None

    @property
    def info(self) -> CodeInfo:
        return _CODES[self.code]

    @property
    def tier(self) -> Tier:
        return self.info.tier

    @property
    def family(self) -> Family:
        return self.family_override or self.info.family

    @property
    def message(self) -> str:
        try:
            return self.info.template.format(**self.args)
        except (KeyError, IndexError, ValueError):
            return f"{self.code} {self.args}"


@dataclass(frozen=True)
class Artefact:
    """A stored piece of evidence: the whole text of an IR stage, a pass dump, a profile."""

    kind: str
    name: str  # e.g. "softmax_kernel.ptx" or "softmax_kernel/TritonGPUPipeline"
    text: str


@dataclass
class TierResult:
    """What one tier returns: its findings and whether its evidence passes the three tests.

    The three tests of DESIGN.md: the evidence (1) localizes the dominant hotspot,
    (2) narrows the next change to one rewrite family, (3) explains why it should help.
    """

    tier: Tier
    findings: list[Finding] = field(default_factory=list)
    artefacts: list[Artefact] = field(default_factory=list)
    localizes: bool = False
    narrows: bool = False
    explains: bool = False
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    device_s: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)  # tier-specific figures (profile numbers, line tables)

    @property
    def sufficient(self) -> bool:
        return self.localizes and self.narrows and self.explains
