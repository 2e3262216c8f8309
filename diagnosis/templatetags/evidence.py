"""Template helpers of the evidence pages: Python source highlighted line by line, and stored
text with server paths out (for rows written before runner.persist scrubbed them)."""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from pygments.lexers import PythonLexer
from pygments.token import STANDARD_TYPES, _TokenType

from diagnosis.engine.paths import scrub_paths

register = template.Library()


def _css_class(ttype: _TokenType) -> str:
    # pygments' own classes (static/css/pygments.css): the nearest token type that has one
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return STANDARD_TYPES[ttype]


def highlight_lines(source: str) -> list[SafeString]:
    """One HTML fragment per source line. Lexing the whole file keeps multi-line strings and
    docstrings right; each line's spans are closed on that line, so lines stand alone."""
    lines: list[list[str]] = [[]]
    for ttype, value in PythonLexer(stripnl=False, ensurenl=False).get_tokens(source or ""):
        cls = _css_class(ttype)
        for i, piece in enumerate(value.split("\n")):
            if i:
                lines.append([])
            if piece:
                lines[-1].append(f'<span class="{cls}">{escape(piece)}</span>' if cls else escape(piece))
    count = len((source or "").splitlines())
    return [mark_safe("".join(parts)) for parts in lines[:count]]  # noqa: S308 - every piece is escaped


@register.filter
def scrubbed(text: str, module_name: str = "kernel.py") -> str:
    """Stored text as pages show it: no server paths (diagnosis.engine.paths)."""
    return scrub_paths(str(text or ""), module_name or "kernel.py")
