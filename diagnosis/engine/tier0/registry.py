"""The registry of tier-0 rules: each rule is a function registered by decorator.

A rule reads a KernelContext (scope "kernel": called once per ``@triton.jit`` function) or
the ModuleContext (scope "module": called once) and yields Findings. It declares the codes
it may emit; the codes themselves are registered with ``register_code`` in the rule's
module, so a code's template and family live next to the rule that emits it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from diagnosis.engine.evidence import Finding, all_codes

Scope = Literal["kernel", "module"]
RuleFunc = Callable[..., Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    name: str  # module.function, for error notes
    codes: tuple[str, ...]
    scope: Scope
    func: RuleFunc


_RULES: list[Rule] = []


def rule(*codes: str, scope: Scope = "kernel") -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule that may emit ``codes``; each must already be registered."""
    if not codes:
        raise ValueError("a rule declares at least one finding code")
    known = all_codes()
    missing = [c for c in codes if c not in known]
    if missing:
        raise ValueError(f"rule declares unregistered codes {missing}; call register_code first")

    def decorator(func: RuleFunc) -> RuleFunc:
        name = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"
        if any(r.name == name for r in _RULES):  # a module imported twice (reload in tests)
            return func
        _RULES.append(Rule(name, tuple(codes), scope, func))
        return func

    return decorator


def rules() -> tuple[Rule, ...]:
    return tuple(_RULES)


def rule_codes() -> set[str]:
    return {c for r in _RULES for c in r.codes}
