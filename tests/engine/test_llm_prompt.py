"""The LLM prompt (diagnosis.engine.proposers.prompt): versioned templates, what a round's
evidence becomes, and how the size bound leaves evidence out by priority, never the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.engine.counterfactual import CONFIRMED as COUNTERFACTUAL
from diagnosis.engine.errors import ProposerError
from diagnosis.engine.escalation import choose_family
from diagnosis.engine.evidence import ArtefactRef, Family, Finding, Severity, Tier, register_code
from diagnosis.engine.patterns import PATTERN_MATCH, PatternSpec
from diagnosis.engine.proposers import prompts
from diagnosis.engine.proposers.base import CaseShape, ProposalContext, RoundHistory
from diagnosis.engine.proposers.llm import LLMConfig, LLMProposer
from diagnosis.engine.proposers.prompt import build_prompt, estimate_tokens, read_kernels_and_launches
from diagnosis.engine.tier0 import run_tier0
from diagnosis.engine.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "tests" / "kernels" / "vadd_unaligned.py").read_text()

FAM = register_code("test_prompt.family", Tier.IR, Family.HINTS, "family finding {n}")
OTHER = register_code("test_prompt.other", Tier.TRIAGE, Family.LAUNCH_CONFIG, "other finding {n}")
INFO = register_code("test_prompt.info", Tier.COMPILER, Family.NONE, "informational {n}")
PROFILE = register_code("test_prompt.profile", Tier.PROFILE, Family.NONE, "case {n}: 41% of speed-of-light")


def excerpt(tag: str) -> tuple[ArtefactRef, ...]:
    return (ArtefactRef(kind="ptx", kernel="add_kernel", lines=(3,), excerpt=f"{tag} " + "x" * 600),)


FINDINGS = [
    Finding(
        FAM.code,
        Severity.HIGH,
        {"n": 1},
        lines=(15,),
        kernel="add_kernel",
        evidence=excerpt("FAMILY-EXCERPT"),
    ),
    Finding(OTHER.code, Severity.MEDIUM, {"n": 2}, lines=(29,), evidence=excerpt("OTHER-EXCERPT")),
    Finding(INFO.code, Severity.INFO, {"n": 3}),
    Finding(PROFILE.code, Severity.MEDIUM, {"n": 0}),
    Finding(
        COUNTERFACTUAL.code,
        Severity.INFO,
        {"hypothesis": "tt.divisibility=16 on n", "effect": "the loads become ld.global.v4.b32"},
        evidence=(ArtefactRef("log", "add_kernel", excerpt="COUNTERFACTUAL-LOG", name="counterfactual"),),
    ),
]
CONTEXT = ProposalContext(
    cases=(CaseShape(0, ((1_000_003,), (1_000_003,)), ("float32", "float32"), sol_us=2.5, time_us=6.1),),
    device_kind="cuda",
    target="sm_90",
    history=(RoundHistory(1, Family.LAUNCH_CONFIG, Verdict.NO_GAIN, proposer="rules", speedup=1.01),),
    round_index=2,
    family=Family.HINTS,
)
# what each piece of evidence leaves in the prompt, highest priority first
MARKERS = [
    "[test_prompt.family]",  # the family's finding
    "round 1 by rules",  # an earlier round
    "FAMILY-EXCERPT",  # the family's evidence excerpt
    "COUNTERFACTUAL-LOG",  # a counterfactual recompile
    "case 0 (timed)",  # the cases (and the profile's %SOL, kept as long)
    "launch of `add_kernel`",  # the outline
    "[test_prompt.other]",  # another actionable finding
    "[test_prompt.info]",  # an informational one
    "OTHER-EXCERPT",  # another finding's excerpt
]


def test_the_templates_are_versioned() -> None:
    assert prompts.load(prompts.VERSION).version == prompts.VERSION
    assert build_prompt(SOURCE, FINDINGS, CONTEXT).version == prompts.VERSION
    with pytest.raises(KeyError):
        prompts.load("v0")


def test_it_carries_every_kind_of_evidence_when_there_is_room() -> None:
    prompt = build_prompt(SOURCE, FINDINGS, CONTEXT)
    for marker in MARKERS:
        assert marker in prompt.user, marker
    assert prompt.omitted == ()
    assert "Findings for `hints`" in prompt.user
    # the family's finding is under its own heading, before the other evidence
    assert prompt.user.index("[test_prompt.family]") < prompt.user.index("## Other evidence")
    assert prompt.user.index("## Other evidence") < prompt.user.index("[test_prompt.other]")
    assert "(41% of SOL)" in prompt.user


def test_evidence_is_left_out_lowest_priority_first_and_never_the_source() -> None:
    full = build_prompt(SOURCE, FINDINGS, CONTEXT).chars
    bare = build_prompt(SOURCE, [], ProposalContext(family=Family.HINTS, round_index=2)).chars
    seen_cuts = set()
    for budget in range(full, bare - 1, -97):
        prompt = build_prompt(SOURCE, FINDINGS, CONTEXT, max_chars=budget + 300)  # + the omission note
        assert prompt.chars <= budget + 300
        for i, line in enumerate(SOURCE.splitlines(), 1):
            assert f"{i:4d}| {line}" in prompt.user
        present = [m in prompt.user for m in MARKERS]
        # what is kept is always a prefix of the priority order
        assert present == sorted(present, reverse=True), (budget, present)
        seen_cuts.add(sum(present))
        if prompt.omitted:
            assert "Left out to fit the prompt budget" in prompt.user
    assert len(seen_cuts) >= 6  # the sweep did go through the priorities one by one


def test_a_module_too_big_for_the_budget_is_refused_whole() -> None:
    with pytest.raises(ProposerError) as info:
        build_prompt(SOURCE, FINDINGS, CONTEXT, max_chars=len(SOURCE))
    assert info.value.code == "prompt_too_large" and info.value.permanent


def test_matching_patterns_come_with_their_before_and_after() -> None:
    spec = PatternSpec(
        family=Family.HINTS,
        mechanism="offsets declared contiguous",
        before="offs = pid * BLOCK + tl.arange(0, BLOCK)",
        after="offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)",
        evidence_codes=(FAM.code,),
        signature=frozenset({f"code:{FAM.code}"}),
        name="hints-contiguous-1",
        gain=1.4,
    )
    match = Finding(
        PATTERN_MATCH.code,
        Severity.MEDIUM,
        {"kernel": "add_kernel", "pattern": spec.name, "family": "hints", "mechanism": spec.mechanism},
        family_override=Family.HINTS,
    )
    prompt = build_prompt(SOURCE, [*FINDINGS, match], CONTEXT, patterns=[spec])
    section = prompt.user[prompt.user.index("## Patterns") :]
    assert "hints-contiguous-1" in section and spec.before in section and spec.after in section
    assert "measured x1.40" in section
    assert "[T0-PATTERN-MATCH]" not in prompt.user[: prompt.user.index("## Patterns")]


@pytest.mark.parametrize(
    ("source", "kernels", "launches"),
    [
        pytest.param(SOURCE, [("add_kernel", 11)], [("add_kernel", 29, "ModelNew.forward")], id="plain"),
        pytest.param(
            "import triton as tr\nimport triton.language as lang\n\n"
            "@tr.autotune(configs=[], key=['n'])\n@tr.jit\ndef k(x, n, B: lang.constexpr):\n    pass\n\n"
            "def launch(x):\n    k[(1,)](x, x.numel())\n",
            [("k", 6)],
            [("k", 10, "launch")],
            id="aliases-and-a-helper",
        ),
        pytest.param("def f(:\n", [], [], id="syntax-error"),
    ],
)
def test_it_reads_kernels_and_launch_sites(source: str, kernels: list, launches: list) -> None:
    outline = read_kernels_and_launches(source)
    assert [(k.name, k.line) for k in outline.kernels] == kernels
    assert [(x.kernel, x.line, x.where) for x in outline.launches] == launches


def test_constexpr_parameters_are_marked() -> None:
    (kernel,) = read_kernels_and_launches(SOURCE).kernels
    assert kernel.params == ("x_ptr", "y_ptr", "out_ptr", "n", "BLOCK: constexpr")
    assert kernel.decorators == ("triton.jit",)


@pytest.mark.parametrize("path", sorted((ROOT / "bench" / "suite").glob("*.py")), ids=lambda p: p.stem)
def test_every_suite_module_fits_the_default_round_cap(path: Path) -> None:
    """With its tier-0 findings, the prompt and the answer's reserve fit LLMConfig's default
    round cap without leaving anything out (bench/llm_prompt_sizes.py prints the figures)."""
    source = path.read_text()
    findings = run_tier0(source).findings
    context = ProposalContext(
        family=choose_family(findings), round_index=1, device_kind="cuda", target="sm_90"
    )
    prompt = build_prompt(source, findings, context)
    cfg = LLMConfig(base_url="http://127.0.0.1:9/v1", model="m")
    reserve = LLMProposer(cfg)._reserve(source)
    assert estimate_tokens(prompt.chars) + reserve < cfg.round_tokens


def test_the_llm_proposers_import_no_django() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import diagnosis.engine.proposers.llm, diagnosis.engine.proposers.hybrid; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
