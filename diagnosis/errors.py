"""The web app's exceptions (the engine's are in `diagnosis/engine/errors.py`)."""

from __future__ import annotations


class DecisionRefused(Exception):
    """A reviewer's decision on a proposal that is not pending (already decided, or it failed
    verification). The view shows the message; nothing was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
