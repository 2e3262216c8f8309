"""Rules, then the LLM (DESIGN.md section 2): one proposer that asks the LLM only where the
rules cannot go.

Per round, for the family the round's evidence narrowed to (`ProposalContext.family`):

* the rules propose first; when they have a rewrite of that family (or one that acts on its
  findings), that is the round's proposal and no token is spent;
* when they have none (a backed family no transform applies to: alone, the loop would record
  "no applicable rewrite" and move on), the LLM is asked for that family instead;
* once the rules have stalled, `stall_rounds` rounds on the current version without a win
  (the rules' misses, and rounds where nothing untried was left to them), the LLM is asked
  first, and a family the rules failed on is open to it again (`excluded_families`: the loop
  asks the proposer which families the version's history rules out). A win resets this: the
  new version starts with the rules.

Both answers go through the same gate. Candidates keep their own proposer ("rules" or "llm"),
so every round and proposal says which one made it. Errors of the LLM (a refused answer, the
token cap) are the round's, as with the LLM proposer alone.

Plain Python: no Django.
"""

from __future__ import annotations

from collections.abc import Sequence

from diagnosis.engine.evidence import Family, Finding
from diagnosis.engine.proposers.base import (
    Candidate,
    FamilyPolicy,
    ProposalContext,
    Proposer,
    RoundHistory,
    rejected_families,
)
from diagnosis.engine.verdict import Verdict

DEFAULT_STALL_ROUNDS = 2


class HybridProposer:
    """The rules first; the LLM for what they cannot rewrite, and once they stop gaining."""

    name = "hybrid"

    def __init__(self, rules: Proposer, llm: Proposer, *, stall_rounds: int = DEFAULT_STALL_ROUNDS) -> None:
        if stall_rounds < 1:
            raise ValueError("stall_rounds must be at least 1")
        self.rules = rules
        self.llm = llm
        self.stall_rounds = stall_rounds

    def stalled(self, history: Sequence[RoundHistory]) -> bool:
        """`stall_rounds` rounds on this version without a win. The history is the version's
        own (a win starts a new one), so an inconclusive round counts too: when the rules have
        no untried family left the round has nothing to propose, and that is a stall as well."""
        misses = sum(1 for h in history if h.verdict is not Verdict.IMPROVED)
        return misses >= self.stall_rounds

    def excluded_families(self, history: Sequence[RoundHistory]) -> set[Family]:
        if self.stalled(history):
            # the rules are done here: only what the LLM itself failed on is ruled out
            return rejected_families(history, by={self.llm.name})
        if isinstance(self.rules, FamilyPolicy):
            return self.rules.excluded_families(history)
        return rejected_families(history)

    def propose(self, source: str, findings: list[Finding], context: ProposalContext) -> list[Candidate]:
        if not self.stalled(context.history):
            family = context.family or _lead(findings)
            candidates = self.rules.propose(source, findings, context)
            codes = {f.code for f in findings if family is not None and _family(f) is family}
            ours = [
                c
                for c in candidates
                if family is None or c.family is family or codes & set(c.findings_addressed)
            ]
            if ours:
                return ours
        return self.llm.propose(source, findings, context)


def _family(f: Finding) -> Family | None:
    try:
        return f.family
    except KeyError:
        return f.family_override


def _lead(findings: Sequence[Finding]) -> Family | None:
    """Without a named family, the first finding's (the loop puts its hypothesis first)."""
    return next((fam for f in findings if (fam := _family(f)) is not None), None)


__all__ = ["DEFAULT_STALL_ROUNDS", "HybridProposer"]
