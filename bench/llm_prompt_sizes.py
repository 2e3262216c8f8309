"""Estimate what the LLM proposer costs per round on the suite, from its prompt builder's sizes.

Usage: python bench/llm_prompt_sizes.py [--markdown] [files...]   (default: every bench/suite/NN_*.py)

For each module: tier 0's findings (source only: no compile, no device), the prompt the LLM
proposer would send for the family tier 0 narrows to (diagnosis.engine.proposers.prompt, the
current template VERSION), and tokens estimated as characters / 4. The answer repeats the whole
module plus a header and a rationale, estimated as the module's characters / 4 plus 150. These
are estimates, not any tokenizer's counts: code usually tokenizes denser than 4 characters a
token, and a round that climbs to tiers 2 and 3 adds their evidence excerpts (up to 1500
characters each) to the prompt. Multiply by the rounds a run uses (15 by default) for a run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnosis.engine.escalation import choose_family  # noqa: E402
from diagnosis.engine.proposers.base import ProposalContext  # noqa: E402
from diagnosis.engine.proposers.prompt import build_prompt, estimate_tokens  # noqa: E402
from diagnosis.engine.tier0 import run_tier0  # noqa: E402

ANSWER_EXTRA_TOKENS = 150  # FAMILY, ADDRESSES, a two- or three-sentence RATIONALE, the fence


def sizes(path: Path) -> dict[str, object]:
    source = path.read_text()
    findings = run_tier0(source).findings
    family = choose_family(findings)
    context = ProposalContext(family=family, round_index=1, device_kind="cuda", target="sm_90")
    prompt = build_prompt(source, findings, context)
    prompt_tokens = estimate_tokens(prompt.chars)
    answer_tokens = estimate_tokens(len(source)) + ANSWER_EXTRA_TOKENS
    return {
        "module": path.stem,
        "family": str(family) if family else "-",
        "findings": len(findings),
        "source_chars": len(source),
        "prompt_chars": prompt.chars,
        "prompt_tokens": prompt_tokens,
        "answer_tokens": answer_tokens,
        "round_tokens": prompt_tokens + answer_tokens,
        "version": prompt.version,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    files = args.files or sorted((ROOT / "bench" / "suite").glob("[0-9][0-9]_*.py"))
    rows = [sizes(p) for p in files]
    cols = (
        "module",
        "family",
        "findings",
        "source_chars",
        "prompt_chars",
        "prompt_tokens",
        "answer_tokens",
        "round_tokens",
    )
    if args.markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for r in rows:
            print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    else:
        print("  ".join(f"{c:>13}" if c != "module" else f"{c:<30}" for c in cols))
        for r in rows:
            print("  ".join(f"{r[c]!s:>13}" if c != "module" else f"{r[c]!s:<30}" for c in cols))
    per_round = [int(r["round_tokens"]) for r in rows]
    prompts = [int(r["prompt_tokens"]) for r in rows]
    print(
        f"\n{len(rows)} modules, prompt template {rows[0]['version'] if rows else '-'}: "
        f"prompt ~{statistics.median(prompts):.0f} tokens median ({min(prompts)}-{max(prompts)}); "
        f"a round ~{statistics.median(per_round):.0f} tokens median ({min(per_round)}-{max(per_round)}); "
        f"15 rounds ~{15 * statistics.median(per_round):.0f} (median module) to {15 * max(per_round)} (largest); "
        "estimated at 4 characters a token, tier-0 evidence only"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
