"""Proposers: turn a round's findings into whole revised modules (see base.py for the interface)."""

from diagnosis.engine.proposers.base import (
    Candidate,
    CaseShape,
    ProposalContext,
    Proposer,
    ProposerError,
    RoundHistory,
    unified_diff,
)

__all__ = [
    "Candidate",
    "CaseShape",
    "ProposalContext",
    "Proposer",
    "ProposerError",
    "RoundHistory",
    "unified_diff",
]
