"""The web app's exceptions (the engine's are in `diagnosis/engine/errors.py`)."""

from __future__ import annotations


class DecisionRefused(Exception):
    """A reviewer's decision on a proposal that is not pending (already decided, or it failed
    verification), or an accept of one that was not verified correct and measured faster.
    The view shows the message; nothing was changed. `code` names the reason for pages and
    tests (`diagnosis.reviews.Acceptability.code`, or "decided")."""

    def __init__(self, message: str, code: str = "decided") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ImportRefused(Exception):
    """A file `manage.py import_results` cannot import: not JSON, not a bench/run.py result,
    or for a device kind nobody registers. Nothing was stored."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
