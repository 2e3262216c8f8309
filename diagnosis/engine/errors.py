"""The engine's exceptions, and the record of a job that failed.

Nothing user code does raises out of the round loop: a failed job comes back as a `JobError`
inside an outcome, and the loop turns it into a verdict or a stop reason. The exceptions here
are the engine's own boundaries: a proposer that cannot answer, a tier that cannot run, a
device kind nobody registered. Tier 0's rule errors are in `tier0/errors.py`.

Standard library only: the sandbox child imports `JobError` (through `runner.protocol`).
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.engine.usage import LLMUsage


@dataclass
class JobError:
    """Why a sandboxed job failed: what the child (or the sandbox around it) reports.

    `kind` is stable (`runner.errors.KINDS`: import_error, incorrect, timeout, ...); tests,
    the database and the pages key on it. The message is for people and may change.
    """

    kind: str
    message: str
    line: int | None = None  # line of the uploaded module, when known
    traceback: str = ""
    stderr_tail: str = ""

    def describe(self) -> str:
        """'kind: message (line N)', as a round's reason and a run's error show it."""
        where = f" (line {self.line})" if self.line else ""
        return f"{self.kind}: {self.message}{where}"


class EngineError(Exception):
    """Base of the engine's exceptions."""


class ProposerError(EngineError):
    """A proposer could not produce a candidate (endpoint down, timeout, unusable answer).

    The round loop records the message on the round and carries on; `permanent` says whether
    trying the same proposer again in a later round is pointless (bad credentials, no model).
    `code` is stable (tests and pages key on it: `no_code_block`, `invalid_module`, `timeout`,
    ...); the message is for people.
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        tokens: int = 0,
        code: str = "",
        usage: LLMUsage | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.code = code
        self.usage = usage  # what the requests behind the failure cost, when an LLM was asked
        # tokens spent before the failure (an unusable answer still costs)
        self.tokens = tokens or (usage.tokens if usage is not None else 0)


class TokenBudgetExhausted(ProposerError):
    """The run's LLM token cap leaves too little for another request: the run stops proposing
    (the loop's stop reason `token_budget`)."""

    def __init__(self, message: str, *, usage: LLMUsage | None = None) -> None:
        super().__init__(message, permanent=True, code="token_budget", usage=usage)


class TierUnavailable(EngineError):
    """A tier could not produce evidence for this source (its job failed); the round goes on
    without it and records why."""


class UnknownDevice(EngineError, ValueError):
    """A device kind that `diagnosis.engine.devices` does not register."""
