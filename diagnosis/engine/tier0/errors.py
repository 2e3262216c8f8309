"""Errors of tier 0. A rule that misbehaves is a bug in kernelopt, never in the upload."""

from __future__ import annotations


class Tier0Error(Exception):
    """Base class for tier-0 failures."""


class UndeclaredCode(Tier0Error):
    """A rule yielded a finding whose code it did not declare with ``@rule``: always raised,
    because a silently accepted code would escape the registry's checks."""
