"""Template helpers: Python source and diffs through pygments, the review page's diff tables,
links into paginated artefacts and the evidence viewer, figures in words."""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

from diagnosis import diffview, wording

register = template.Library()

ARTEFACT_PAGE_LINES = 2000  # lines per artefact page; the view imports it from here


def _lines(value) -> list[int]:
    if not value:
        return []
    if isinstance(value, int):
        return [value]
    return sorted({int(v) for v in value if isinstance(v, int) or str(v).isdigit()})


@register.simple_tag
def python_source(source: str, hl_lines=None, anchor: str = "src") -> SafeString:
    """The whole source with line numbers linking to `#<anchor>-<n>` and `hl_lines` highlighted."""
    formatter = HtmlFormatter(
        linenos="table", hl_lines=_lines(hl_lines), lineanchors=anchor, anchorlinenos=True, wrapcode=True
    )
    return mark_safe(highlight(source or "", PythonLexer(), formatter))  # noqa: S308 - pygments escapes the text


@register.simple_tag
def source_excerpt(source: str, lines, context: int = 2, anchor: str = "src") -> SafeString:
    """A few lines around `lines`, highlighted, numbered as in the whole file; links go to the full listing."""
    wanted = _lines(lines)
    all_lines = (source or "").splitlines()
    if not wanted or not all_lines:
        return mark_safe("")
    first = max(1, wanted[0] - context)
    last = min(len(all_lines), wanted[-1] + context)
    if last - first > 40:  # far-apart lines: show the first few only
        last = min(len(all_lines), first + 2 * context + 10)
    chunk = "\n".join(all_lines[first - 1 : last]) + "\n"
    formatter = HtmlFormatter(
        linenos="table",
        linenostart=first,
        hl_lines=[n - first + 1 for n in wanted if first <= n <= last],
        anchorlinenos=True,
        lineanchors=f"{anchor}-x{first}",
        wrapcode=True,
    )
    html = highlight(chunk, PythonLexer(), formatter)
    # Line-number links point at the full listing's anchors, not at the excerpt's own.
    html = html.replace(f'href="#{anchor}-x{first}-', f'href="#{anchor}-')
    return mark_safe(html)  # noqa: S308


@register.simple_tag
def diff_html(diff: str) -> SafeString:
    return mark_safe(highlight(diff or "", DiffLexer(), HtmlFormatter(wrapcode=True)))  # noqa: S308


@register.simple_tag
def artefact_line_url(artefact_id: int, line: int | None = None) -> str:
    """The artefact page (and page number) that shows `line`, with its `#L<n>` anchor."""
    url = reverse("artefact-detail", args=[artefact_id])
    if not line:
        return url
    page = (int(line) - 1) // ARTEFACT_PAGE_LINES + 1
    return f"{url}?page={page}#L{line}" if page > 1 else f"{url}#L{line}"


@register.filter
def ms(value) -> str:
    """A time in milliseconds, with sensible precision."""
    if value is None or value == "":
        return "–"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{v:.4f}" if v < 0.01 else f"{v:.3f}" if v < 10 else f"{v:.1f}"


@register.filter
def ratio(value, digits: int = 2) -> str:
    if value is None or value == "":
        return "–"
    try:
        return f"{float(value):.{int(digits)}f}"
    except (TypeError, ValueError):
        return str(value)


@register.simple_tag
def diff_table(before: str, after: str, view: str = "split") -> SafeString:
    """The numbered diff of `before` -> `after`, side by side (`split`) or `unified`, words marked."""
    hunks = diffview.diff_hunks(before or "", after or "")
    if not hunks:
        return mark_safe('<p class="empty">The two sources are identical.</p>')
    html = diffview.render_unified(hunks) if view == "unified" else diffview.render_split(hunks, "parent", "proposal")
    return mark_safe(html)  # noqa: S308 - diffview escapes every line


@register.simple_tag
def evidence_url(run_id: int, line: int | None = None) -> str:
    """Line `line` of run `run_id` in the evidence viewer (`runs/<pk>/evidence/?line=N#LN`)."""
    url = reverse("run-evidence", args=[run_id])
    return f"{url}?line={line}#L{line}" if line else url


@register.filter
def speedup_words(value) -> str:
    """A ratio parent / candidate in words: "2.31x faster", "1.25x slower", "not timed"."""
    return wording.speed(value)


@register.filter
def percent(value, digits: int = 1) -> str:
    """A percentage with its unit: "61.5 %"; "–" when there is none."""
    if value is None or value == "":
        return "–"
    try:
        return f"{float(value):.{int(digits)}f} %"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def ms_unit(value) -> str:
    """A time in milliseconds with its unit: "0.020 ms"; "not timed" when there is none."""
    if value is None or value == "":
        return "not timed"
    return f"{ms(value)} ms"
