"""Kernel modules written the way other projects write them, and the code-style variants the
rules tests run every transform on.

The modules here follow Triton's tutorials, liger-kernel and flag-gems: launches in helpers,
positional arguments, `calculate_settings`, grid lambdas over meta, `with` blocks. The functions
below turn any module into the same module in another import style; they are plain text
substitutions, checked by the tests that use them (each variant must still parse and find its
kernels).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.rules import Rewrite, RuleInput, apply_family

HERE = Path(__file__).resolve().parent


def source(name: str) -> str:
    return (HERE / name).read_text()


def as_tr(text: str) -> str:
    """`import triton as tr`, every `triton.X` written `tr.X` (triton.language imports stay)."""
    text = re.sub(r"^import triton$", "import triton as tr", text, flags=re.M)
    return re.sub(r"\btriton\.(?!language\b)", "tr.", text)


def from_jit(text: str) -> str:
    """`from triton import jit` and `@jit`."""
    text = re.sub(r"^import triton$", "import triton\nfrom triton import jit", text, count=1, flags=re.M)
    return text.replace("@triton.jit", "@jit")


def as_lang(text: str) -> str:
    """`import triton.language as lang`, every `tl.X` written `lang.X`."""
    text = text.replace("import triton.language as tl", "import triton.language as lang")
    return re.sub(r"\btl\.", "lang.", text)


def from_constexpr(text: str) -> str:
    """`from triton.language import constexpr` and `BLOCK: constexpr`."""
    text = text.replace(
        "import triton.language as tl", "import triton.language as tl\nfrom triton.language import constexpr"
    )
    return text.replace(": tl.constexpr", ": constexpr")


IMPORT_STYLES: dict[str, Callable[[str], str]] = {
    "triton-as-tr": as_tr,
    "from-triton-import-jit": from_jit,
    "triton-language-as-lang": as_lang,
    "from-triton-language-import-constexpr": from_constexpr,
}


def for_interpreter(text: str) -> str:
    """`text` as the interpreter can run it. Triton 3.6's interpreter does not read a constexpr
    annotated through another alias of triton.language (`BLOCK: lang.constexpr` fails with
    "arange's arguments must be of type tl.constexpr"; the compiler accepts it, TRITON_NOTES):
    those annotations are spelled `tl.constexpr` here, nothing else changes."""
    if not re.search(r":\s*lang\.constexpr", text):
        return text
    text = re.sub(r"(:\s*)lang\.constexpr", r"\1tl.constexpr", text)
    return text.replace(
        "import triton.language as lang", "import triton.language as lang\nimport triton.language as tl", 1
    )


# ---------------------------------------------------------------------------------------
# table rows: a module in some style, and what its rewrite must hold


@dataclass(frozen=True)
class StyleCase:
    """One row of a rule's code-style table."""

    source: str
    cases: str = ""  # the style module whose input cases the rule sees ("": none)
    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


def row(source: str, cases: str, present: Iterable[str] = (), absent: Iterable[str] = (), *, id: str) -> Any:  # noqa: A002
    return pytest.param(StyleCase(source, cases, tuple(present), tuple(absent)), id=id)


def import_rows(name: str, present: Iterable[str] = (), absent: Iterable[str] = ()) -> list[Any]:
    """A row per import style of the style module `name`; the expected texts are written in
    that style too (`@triton.autotune(` is `@tr.autotune(` where triton is `tr`)."""
    return [
        row(
            fn(source(name)),
            name,
            [fn(p) for p in present],
            [fn(a) for a in absent],
            id=f"{Path(name).stem}-{style}",
        )
        for style, fn in IMPORT_STYLES.items()
    ]


def rule_input(case: StyleCase) -> RuleInput:
    from tests.engine.rules_cases import harness as h

    return h.rule_input(h.cases_of(HERE / case.cases) if case.cases else ())


def rewrite(family: Family, case: StyleCase) -> Rewrite:
    """The family's rewrite of the row's module, checked against the row."""
    from tests.engine.rules_cases import harness as h

    rw = apply_family(family, case.source, rule_input(case))
    assert rw is not None, "no rewrite"
    assert h.parses(rw.source)
    for text in case.present:
        assert text in rw.source, text
    for text in case.absent:
        assert text not in rw.source, text
    return rw


def refused(family: Family, case: StyleCase) -> bool:
    return apply_family(family, case.source, rule_input(case)) is None
