"""The LLM proposer's prompt: a versioned template filled from one round's evidence, bounded in size.

What the model gets (DESIGN.md section 2): the numbered source, the kernels and their launch
sites, the findings of the round's family with their evidence excerpts (per-line IR rows, the
pass that did not fire and why), the other evidence (counterfactual recompiles, the profile's
%SOL, the other findings), the input cases with their measured and speed-of-light times, what
earlier rounds on this version tried and how they ended, and the team's accepted patterns that
matched the module. The templates live in `prompts/<VERSION>/`.

Size: the caller gives a character budget. The system text, the task and the whole source are
never cut; when everything does not fit, evidence is left out by priority, lowest first (other
findings' excerpts, then informational findings, patterns, other findings, the cases, the
counterfactuals, the family's excerpts, the earlier rounds, and last the family's findings),
and the prompt says how much was left out. When even the source does not fit, `build_prompt`
raises a permanent `ProposerError` (`prompt_too_large`): the module is not sent in pieces.

Plain Python: no Django.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from diagnosis.engine.errors import ProposerError
from diagnosis.engine.escalation import MECHANISMS, actionable
from diagnosis.engine.evidence import ArtefactRef, Family, Finding, Severity, Tier
from diagnosis.engine.loop import REFERENCE_NAMES
from diagnosis.engine.patterns import PATTERN_MATCH, PatternSpec
from diagnosis.engine.proposers import prompts
from diagnosis.engine.proposers.base import ProposalContext, RoundHistory
from diagnosis.engine.srcmodel import SourceModelError, model_of

# tokens ~ characters / 4: the estimate the prompt sizes are reported in (docs, run page)
CHARS_PER_TOKEN = 4
MAX_EXCERPT_CHARS = 1500  # per evidence excerpt
MAX_FINDINGS = 40
MAX_HISTORY = 12  # earlier rounds listed (the newest)
MAX_PATTERN_CHARS = 1200  # per side of a pattern's before/after example
MAX_REASON_CHARS = 300  # per earlier round's failure reason
TIER_NAMES = {
    Tier.TRIAGE: "pattern triage",
    Tier.PROFILE: "profile",
    Tier.IR: "IR attribution",
    Tier.COMPILER: "compiler analysis",
}
ARTEFACT_NAMES = {
    "ttir": "TTIR",
    "ttgir": "TTGIR",
    "llir": "LLVM IR",
    "ptx": "PTX",
    "sass": "SASS",
    "amdgcn": "AMDGCN",
    "linalg": "linalg",
    "pass_dump": "pass dump",
    "profile": "profile",
    "ncu": "ncu counters",
    "log": "log",
}
COUNTERFACTUAL_CODES = frozenset({"CG_COUNTERFACTUAL", "CG_COUNTERFACTUAL_NO_EFFECT"})

# what is kept longest when the budget is short (higher: kept longer)
P_FAMILY_FINDING = 100
P_HISTORY = 90
P_FAMILY_EXCERPT = 80
P_COUNTERFACTUAL = 75
P_CASES = 70
P_OUTLINE = 65
P_OTHER_FINDING = 60
P_PATTERN = 55
P_INFO_FINDING = 45
P_OTHER_EXCERPT = 40


def estimate_tokens(chars: int) -> int:
    """Tokens of a text of `chars` characters, estimated at CHARS_PER_TOKEN."""
    return math.ceil(chars / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Prompt:
    """The two messages of one request and what was left out of them for size."""

    system: str
    user: str
    version: str
    omitted: tuple[str, ...] = ()  # e.g. ("2 evidence excerpts", "1 earlier round")

    @property
    def chars(self) -> int:
        return len(self.system) + len(self.user)

    @property
    def tokens_estimate(self) -> int:
        return estimate_tokens(self.chars)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@dataclass(frozen=True)
class _Block:
    section: str
    priority: float
    text: str
    what: str  # how the omission note counts it: "evidence excerpt", "finding", ...


# --- kernels and launches ------------------------------------------------------------------


@dataclass(frozen=True)
class KernelInfo:
    name: str
    line: int
    params: tuple[str, ...]  # "BLOCK: constexpr" for constexpr parameters
    decorators: tuple[str, ...]  # dotted names, e.g. ("triton.autotune", "triton.jit")


@dataclass(frozen=True)
class LaunchInfo:
    kernel: str
    line: int
    where: str  # the enclosing function, e.g. "ModelNew.forward"
    grid: str  # the grid expression's source
    arguments: str  # the call's arguments' source


@dataclass(frozen=True)
class ModuleOutline:
    kernels: tuple[KernelInfo, ...] = ()
    launches: tuple[LaunchInfo, ...] = ()


def read_kernels_and_launches(source: str) -> ModuleOutline:
    """The module's Triton kernels and every launch site of them, as the source model reads
    them (diagnosis.engine.srcmodel: any import alias or decorator stack, launches in helpers and
    nested functions), so the prompt sees what the rules see."""
    try:
        model = model_of(source)
    except (SyntaxError, SourceModelError):
        return ModuleOutline()
    kernels = tuple(
        KernelInfo(
            name=k.name,
            line=model.position(k.node)[0],
            params=tuple(f"{p}: constexpr" if p in k.constexprs else p for p in k.params),
            decorators=k.decorators,
        )
        for k in model.kernels.values()
    )
    launches = tuple(
        LaunchInfo(
            kernel=lc.kernel,
            line=model.position(lc.call)[0],
            where=lc.qualname or "module level",
            grid=model.tree.code_for_node(lc.grid),
            arguments=", ".join(model.tree.code_for_node(a).strip().rstrip(",") for a in lc.call.args),
        )
        for lc in model.launches
    )
    return ModuleOutline(
        tuple(sorted(kernels, key=lambda k: k.line)), tuple(sorted(launches, key=lambda lc: lc.line))
    )


# --- the prompt ----------------------------------------------------------------------------


def build_prompt(
    source: str,
    findings: Sequence[Finding],
    context: ProposalContext,
    *,
    max_chars: int | None = None,
    patterns: Sequence[PatternSpec] = (),
    version: str = prompts.VERSION,
) -> Prompt:
    """The prompt for one round (see the module docstring); `max_chars` bounds system + user."""
    templates = prompts.load(version)
    family = context.family
    families = ", ".join(f.value for f in Family if f is not Family.NONE)
    system = templates.system.substitute(
        families=families, reference_names=", ".join(f"`{n}`" for n in REFERENCE_NAMES)
    )
    blocks = _blocks(source, list(findings)[:MAX_FINDINGS], context, family, patterns)
    fixed = {
        "round": str(context.round_index or 1),
        "task": (
            f"one rewrite of family `{family}` ({MECHANISMS.get(family, 'no known mechanism')})"
            if family is not None
            else "one rewrite, of the family the findings point to"
        ),
        "findings_title": f"Findings for `{family}` (what this rewrite acts on)" if family else "Findings",
        "line_count": str(len(source.splitlines())),
        "numbered_source": "\n".join(f"{i:4d}| {line}" for i, line in enumerate(source.splitlines(), 1)),
        "device": _device(context),
    }
    sections = ("outline", "family_findings", "other_evidence", "cases", "history", "patterns")
    present = {b.section for b in blocks}

    def render(kept: list[_Block], dropped: list[_Block]) -> str:
        values = dict(fixed)
        for name in sections:
            texts = [b.text for b in kept if b.section == name]
            if texts:
                values[name] = "\n".join(texts)
            elif name in present:
                values[name] = "(left out to fit the prompt budget)"
            else:
                values[name] = "(none)"
        values["omitted"] = _omitted_note(dropped)
        return templates.user.substitute(values)

    kept = list(blocks)
    dropped: list[_Block] = []
    user = render(kept, dropped)
    if max_chars is not None:
        # lowest priority first; among equals the later block (the less important finding)
        order = sorted(range(len(kept)), key=lambda i: (kept[i].priority, -i))
        drop_ids: set[int] = set()
        while len(system) + len(user) > max_chars and len(drop_ids) < len(order):
            drop_ids.add(order[len(drop_ids)])
            dropped = [b for i, b in enumerate(blocks) if i in drop_ids]
            user = render([b for i, b in enumerate(blocks) if i not in drop_ids], dropped)
        if len(system) + len(user) > max_chars:
            need = len(system) + len(user)
            raise ProposerError(
                f"the module alone makes a prompt of {need} characters (about {estimate_tokens(need)} tokens), "
                f"over the budget of {max_chars} characters: raise the round's token cap",
                permanent=True,
                code="prompt_too_large",
            )
    return Prompt(system=system, user=user, version=templates.version, omitted=_omitted(dropped))


def _blocks(
    source: str,
    findings: list[Finding],
    context: ProposalContext,
    family: Family | None,
    patterns: Sequence[PatternSpec],
) -> list[_Block]:
    blocks: list[_Block] = []
    outline = read_kernels_and_launches(source)
    for k in outline.kernels:
        deco = ", ".join(f"@{d}" for d in k.decorators)
        blocks.append(
            _Block(
                "outline",
                P_OUTLINE,
                f"- kernel `{k.name}` (line {k.line}, {deco}): {', '.join(k.params)}",
                "kernel",
            )
        )
    for launch in outline.launches:
        blocks.append(
            _Block(
                "outline",
                P_OUTLINE,
                f"- launch of `{launch.kernel}` at line {launch.line} in {launch.where}: "
                f"grid {launch.grid}; arguments {launch.arguments}",
                "launch site",
            )
        )

    ours = [f for f in findings if f.code != PATTERN_MATCH.code and (family is None or _family(f) is family)]
    if family is None:  # no named family: the actionable findings are the ones to act on
        ours = [f for f in actionable(ours) if f.code != PATTERN_MATCH.code]
    for f in ours:
        blocks.append(_Block("family_findings", P_FAMILY_FINDING, _headline(f), "finding"))
        blocks.extend(
            _Block("family_findings", P_FAMILY_EXCERPT, text, "evidence excerpt") for text in _excerpts(f)
        )
    rest = [f for f in findings if f not in ours and f.code != PATTERN_MATCH.code]
    for f in rest:
        if f.code in COUNTERFACTUAL_CODES:
            text = "\n".join([_headline(f), *_excerpts(f)])
            blocks.append(_Block("other_evidence", P_COUNTERFACTUAL, text, "counterfactual recompile"))
            continue
        informational = f.severity is Severity.INFO or _family(f) is Family.NONE
        if f.tier is Tier.PROFILE:  # the profile's %SOL, bandwidth, waves
            priority = P_CASES
        elif informational:
            priority = P_INFO_FINDING
        else:
            priority = P_OTHER_FINDING
        blocks.append(_Block("other_evidence", priority, _headline(f), "finding"))
        blocks.extend(
            _Block("other_evidence", P_OTHER_EXCERPT, text, "evidence excerpt") for text in _excerpts(f)
        )

    if context.cases:
        blocks.append(_Block("cases", P_CASES, "\n".join(_case(c) for c in context.cases), "case list"))

    history = list(context.history)[-MAX_HISTORY:]
    for n, h in enumerate(history):
        # newer rounds are kept longer
        blocks.append(_Block("history", P_HISTORY + n / 100, _history(h), "earlier round"))

    by_name = {p.name: p for p in patterns if p.name}
    for f in findings:
        if f.code != PATTERN_MATCH.code:
            continue
        spec = by_name.get(str(f.args.get("pattern", "")))
        text = f"- {f.message} [{f.code}]"
        if spec is not None:
            gain = f", measured x{spec.gain:.2f}" if spec.gain else ""
            text += (
                f" (evidence codes {', '.join(spec.evidence_codes) or 'none'}{gain})\n"
                f"  before:\n  ```\n{_indent(_clip(spec.before, MAX_PATTERN_CHARS))}\n  ```\n"
                f"  after:\n  ```\n{_indent(_clip(spec.after, MAX_PATTERN_CHARS))}\n  ```"
            )
        blocks.append(_Block("patterns", P_PATTERN, text, "pattern"))
    return blocks


def _family(f: Finding) -> Family:
    try:
        return f.family
    except KeyError:  # a code nobody registered in this process
        return f.family_override or Family.NONE


def _headline(f: Finding) -> str:
    try:
        tier = f"tier {int(f.tier)} ({TIER_NAMES.get(f.tier, '')})"
    except KeyError:
        tier = "tier ?"
    where = f"lines {', '.join(map(str, f.lines))}" if f.lines else "no specific line"
    kernel = f" in `{f.kernel}`" if f.kernel else ""
    gain = f", estimated gain x{f.gain:.2f}" if f.gain else ""
    return f"- [{f.code}] {tier}, {f.severity}, family {_family(f)}, {where}{kernel}{gain}: {f.message}"


def _excerpts(f: Finding) -> list[str]:
    out = []
    for ref in f.evidence:
        if ref.excerpt.strip():
            out.append(
                f"  evidence for {f.code}: {_label(ref)}\n  ```\n{_indent(_clip(ref.excerpt, MAX_EXCERPT_CHARS))}\n  ```"
            )
    return out


def _label(ref: ArtefactRef) -> str:
    what = ARTEFACT_NAMES.get(ref.kind, ref.kind)
    if ref.name:
        what += f" {ref.name}"
    if ref.kernel:
        what += f" of `{ref.kernel}`"
    if ref.lines:
        what += f", lines {_ranges(ref.lines)}"
    return what


def _ranges(lines: Sequence[int]) -> str:
    """(41, 42, 43, 50) -> '41-43, 50'."""
    out: list[str] = []
    values = sorted(set(lines))
    start = prev = values[0]
    for n in [*values[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if n is not None:
            start = prev = n
    return ", ".join(out)


def _case(c) -> str:
    shapes = ", ".join(f"{tuple(s)} {d}" for s, d in zip(c.shapes, c.dtypes, strict=False))
    kind = "timed" if c.timed else "correctness only"
    line = f"- case {c.index} ({kind}): {shapes}"
    if c.time_us:
        line += f"; measured {c.time_us:.1f} us"
    if c.sol_us:
        line += f"; speed-of-light {c.sol_us:.1f} us"
        if c.time_us:
            line += f" ({100.0 * c.sol_us / c.time_us:.0f}% of SOL)"
    if c.launch_ints:
        ints = "; ".join(f"{k}: " + ", ".join(f"{n}={v}" for n, v in args) for k, args in c.launch_ints)
        line += f"; integer launch arguments {ints}"
    return line


def _device(context: ProposalContext) -> str:
    d = context.device
    if d is not None:
        peaks = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in d.peak_tflops.items())
        return f"{d.name} ({d.kind}), {d.sm_count} SMs, {d.peak_bw_gbs:g} GB/s" + (
            f", {peaks}" if peaks else ""
        )
    line = context.device_kind + (f", compile target {context.target}" if context.target else "")
    if context.device_kind == "cpu":
        line += " (no timing device: correctness is checked, speed is not measured)"
    return line


def _history(h: RoundHistory) -> str:
    if h.family is None:
        what = "nothing proposed"
    else:
        what = f"{h.family}" + (f" (addressing {', '.join(h.findings)})" if h.findings else "")
    by = f" by {h.proposer}" if h.proposer else ""
    speed = f", x{h.speedup:.3f} over its parent" if h.speedup else ""
    why = f": {_clip(h.reason, MAX_REASON_CHARS)}" if h.reason else ""
    return f"- round {h.index}{by}: {what} -> {h.verdict}{speed}{why}"


def _omitted(dropped: Sequence[_Block]) -> tuple[str, ...]:
    counts = Counter(b.what for b in dropped)
    return tuple(f"{n} {what}{'s' if n > 1 else ''}" for what, n in counts.items())


def _omitted_note(dropped: Sequence[_Block]) -> str:
    parts = _omitted(dropped)
    if not parts:
        return ""
    return "\n(Left out to fit the prompt budget: " + ", ".join(parts) + ".)\n"


def _clip(text: str, limit: int) -> str:
    text = text.rstrip()
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n... ({len(text) - limit} more characters)"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


__all__ = [
    "CHARS_PER_TOKEN",
    "ModuleOutline",
    "Prompt",
    "build_prompt",
    "estimate_tokens",
    "read_kernels_and_launches",
]
