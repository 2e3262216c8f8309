"""The LLM proposer: any OpenAI-compatible chat endpoint rewrites the module from the evidence.

The prompt carries the whole source (with line numbers, so findings can point at lines), the
round's findings with their evidence excerpts, the shape cases, the device and what earlier
rounds tried. The answer must be a whole revised module in one fenced python block, preceded
by a FAMILY line and a RATIONALE line; anything else is rejected as a `ProposerError`, never
passed on as a guess. Tokens (prompt + completion) are counted even for rejected answers.

The endpoint, model and key come from an `LLMConfig` the caller builds (the worker reads
them from Django settings); this module imports no Django.

Tested only against a local OpenAI-compatible stand-in server (tests/engine/
test_llm_proposer.py); no real, paid LLM API has been exercised by the test suite.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

import openai

from diagnosis.engine.evidence import Family, Finding
from diagnosis.engine.proposers.base import Candidate, ProposalContext, ProposerError, unified_diff

REQUIRED_NAMES = ("Model", "ModelNew", "get_inputs", "get_init_inputs")
MAX_EXCERPT_CHARS = 1500  # per evidence excerpt in the prompt
MAX_FINDINGS = 20

SYSTEM_PROMPT = """\
You are an expert in writing fast Triton GPU kernels. You are given one Python module in the \
KernelBench convention: `class Model(nn.Module)` is the PyTorch reference, `class ModelNew(nn.Module)` \
computes the same thing with `@triton.jit` kernels defined in the file, and `get_inputs()` / \
`get_init_inputs()` (optionally `get_input_cases()`, `get_verify_inputs()`) build the inputs.

You also get findings from a compiler-grounded diagnosis: each has a code, the source lines it is \
about and evidence (IR, profile) excerpts. Make ONE focused rewrite that acts on the findings. \
Keep `Model`, `get_inputs`, `get_init_inputs` and any input-case functions exactly as they are; \
only `ModelNew` and its Triton kernels may change. The output must stay numerically equivalent.

Answer in exactly this form:
FAMILY: <one of: {families}>
ADDRESSES: <comma-separated finding codes you act on>
RATIONALE: <one or two sentences: why this change should make the kernel faster, citing the evidence>
```python
<the whole revised module>
```
"""


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask. Built by the caller from settings (LLM_BASE_URL, LLM_MODEL, ...)."""

    base_url: str
    model: str
    api_key: str | None = None  # local servers usually need none
    timeout_s: float = 120.0
    max_tokens: int = 8192
    temperature: float = 0.2
    max_retries: int = 1  # the client's own retries on connection errors and 429/5xx


class LLMProposer:
    """Proposer backed by an OpenAI-compatible `/chat/completions` endpoint."""

    name = "llm"

    def __init__(self, config: LLMConfig, *, client: Any | None = None) -> None:
        self.config = config
        self._client = client or openai.OpenAI(
            base_url=config.base_url,
            # The client insists on a key; OpenAI-compatible local servers ignore it.
            api_key=config.api_key or "not-needed",
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
        messages = build_messages(source, findings, context)
        text, tokens = self._ask(messages)
        return [parse_answer(text, source, findings, tokens=tokens)]

    def _ask(self, messages: list[dict[str, str]]) -> tuple[str, int]:
        cfg = self.config
        try:
            response = self._client.chat.completions.create(
                model=cfg.model,
                messages=messages,
                max_tokens=cfg.max_tokens,
                temperature=cfg.temperature,
            )
        except openai.APITimeoutError as exc:
            raise ProposerError(f"LLM endpoint {cfg.base_url} timed out after {cfg.timeout_s:g} s") from exc
        except openai.APIConnectionError as exc:
            raise ProposerError(f"cannot reach LLM endpoint {cfg.base_url}: {exc}") from exc
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
            raise ProposerError(
                f"LLM endpoint {cfg.base_url} refused model {cfg.model!r} (HTTP {exc.status_code}): {_brief(exc)}",
                permanent=True,
            ) from exc
        except openai.APIStatusError as exc:
            raise ProposerError(
                f"LLM endpoint {cfg.base_url} answered HTTP {exc.status_code}: {_brief(exc)}"
            ) from exc
        except openai.OpenAIError as exc:
            raise ProposerError(f"LLM request failed: {exc}") from exc

        usage = getattr(response, "usage", None)
        tokens = 0
        if usage is not None:
            tokens = int(usage.prompt_tokens or 0) + int(usage.completion_tokens or 0)
        choices = getattr(response, "choices", None) or []
        if not choices or choices[0].message is None or not choices[0].message.content:
            raise ProposerError("LLM answer has no content", tokens=tokens)
        return choices[0].message.content, tokens


def _brief(exc: openai.APIStatusError) -> str:
    # The client hands over either the whole JSON body or its "error" object.
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body)
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:300]
    return str(exc.message)[:300]


# --- the prompt ---------------------------------------------------------------------------


def build_messages(source: str, findings: list[Finding], context: ProposalContext) -> list[dict[str, str]]:
    families = ", ".join(f.value for f in Family if f is not Family.NONE)
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(families=families)},
        {"role": "user", "content": _user_prompt(source, findings, context)},
    ]


def _user_prompt(source: str, findings: list[Finding], context: ProposalContext) -> str:
    parts: list[str] = []
    numbered = "\n".join(f"{i:4d}| {line}" for i, line in enumerate(source.splitlines(), 1))
    parts.append("## Module (line numbers for reference only; do not include them in your answer)\n")
    parts.append(f"```\n{numbered}\n```\n")

    parts.append("## Findings\n")
    if not findings:
        parts.append("(none)\n")
    for f in findings[:MAX_FINDINGS]:
        where = f"lines {', '.join(map(str, f.lines))}" if f.lines else "no specific line"
        kernel = f" in `{f.kernel}`" if f.kernel else ""
        gain = f"; estimated gain x{f.gain:.2f}" if f.gain else ""
        parts.append(
            f"- [{f.code}] tier {int(f.tier)}, {f.severity}, family {f.family}: {f.message} ({where}{kernel}{gain})\n"
        )
        for ref in f.evidence:
            if not ref.excerpt:
                continue
            label = (
                ref.kind + (f" {ref.name}" if ref.name else "") + (f" of {ref.kernel}" if ref.kernel else "")
            )
            excerpt = ref.excerpt[:MAX_EXCERPT_CHARS]
            parts.append(f"  evidence ({label}):\n  ```\n{_indent(excerpt)}\n  ```\n")

    if context.cases:
        parts.append("\n## Input cases\n")
        for case in context.cases:
            shapes = ", ".join(f"{tuple(s)} {d}" for s, d in zip(case.shapes, case.dtypes, strict=False))
            kind = "timed" if case.timed else "correctness only"
            parts.append(f"- case {case.index} ({kind}): {shapes}\n")

    parts.append("\n## Device\n")
    if context.device is not None:
        d = context.device
        peaks = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in d.peak_tflops.items())
        parts.append(
            f"{d.name} ({d.kind}), {d.sm_count} SMs, {d.peak_bw_gbs:g} GB/s"
            + (f", {peaks}" if peaks else "")
            + "\n"
        )
    else:
        parts.append(
            f"{context.device_kind}" + (f", compile target {context.target}" if context.target else "") + "\n"
        )

    if context.history:
        parts.append("\n## Earlier rounds (do not repeat a family that failed or brought no gain)\n")
        for h in context.history:
            fam = h.family.value if h.family else "nothing proposed"
            speed = f", speedup x{h.speedup:.2f}" if h.speedup else ""
            why = f" ({h.reason})" if h.reason else ""
            parts.append(f"- round {h.index}: {fam} by {h.proposer or '?'} -> {h.verdict}{speed}{why}\n")
    return "".join(parts)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


# --- the answer ---------------------------------------------------------------------------

# ```python\n...\n``` or ```py ... ``` or a bare ``` fence
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_FAMILY = re.compile(r"^\s*\**FAMILY\**\s*:\s*`?([a-z_]+)`?", re.IGNORECASE | re.MULTILINE)
_ADDRESSES = re.compile(r"^\s*\**ADDRESSES\**\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_RATIONALE = re.compile(
    r"^\s*\**RATIONALE\**\s*:\s*(.+?)(?=^\s*```|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL
)


def parse_answer(text: str, parent: str, findings: list[Finding], *, tokens: int = 0) -> Candidate:
    """Turn the model's answer into a Candidate, or raise ProposerError saying what was wrong."""
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if not blocks:
        raise ProposerError("LLM answer contains no fenced python code block", tokens=tokens)
    # The longest block is the module; shorter ones are usually illustrative snippets.
    code = max(blocks, key=len).strip("\n") + "\n"
    check_module(code, tokens=tokens)
    if code.strip() == parent.strip():
        raise ProposerError("LLM answer is identical to the current source", tokens=tokens)

    known = {f.code for f in findings}
    addressed: tuple[str, ...] = ()
    m = _ADDRESSES.search(text)
    if m:
        named = [c.strip(" `*.") for c in m.group(1).split(",")]
        addressed = tuple(dict.fromkeys(c for c in named if c in known))

    family: Family | None = None
    m = _FAMILY.search(text)
    if m:
        try:
            family = Family(m.group(1).lower())
        except ValueError:
            family = None
    if family is None:
        # Fall back to the family of the findings it says it acts on, else the strongest finding.
        pool = [f for f in findings if f.code in addressed] or list(findings)
        family = pool[0].family if pool else Family.NONE
    if not addressed:
        addressed = tuple(dict.fromkeys(f.code for f in findings if f.family == family))

    m = _RATIONALE.search(text)
    rationale = " ".join(m.group(1).split()) if m else ""
    return Candidate(
        source=code,
        diff=unified_diff(parent, code),
        family=family,
        rationale=rationale[:2000],
        findings_addressed=addressed,
        proposer="llm",
        tokens=tokens,
    )


def check_module(code: str, *, tokens: int = 0) -> None:
    """A whole module: parses, defines the required names, has at least one @triton.jit function."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise ProposerError(
            f"LLM answer is not valid Python: {exc.msg} at line {exc.lineno}", tokens=tokens
        ) from exc
    defined: set[str] = set()
    jit = False
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
            if not isinstance(node, ast.ClassDef) and any(_is_triton_jit(d) for d in node.decorator_list):
                jit = True
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [n for n in REQUIRED_NAMES if n not in defined]
    if missing:
        raise ProposerError(
            f"LLM answer is not a whole module: it does not define {', '.join(missing)}", tokens=tokens
        )
    if not jit:
        raise ProposerError("LLM answer defines no @triton.jit kernel", tokens=tokens)


def _is_triton_jit(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(target, ast.Attribute):
        return target.attr in ("jit", "autotune", "heuristics")
    return isinstance(target, ast.Name) and target.id in ("jit", "autotune", "heuristics")
