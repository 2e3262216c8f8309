"""The review page's diff: hunks of numbered lines, side by side or unified, with the words
that changed inside a changed line marked (difflib, on the server).

Plain Python (no Django): `diff_hunks` computes the rows, `render_split` / `render_unified`
write them as escaped HTML tables for the template tag.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from html import escape

CONTEXT_LINES = 3
# Words, runs of blanks, and single punctuation: `BLOCK=128` against `BLOCK=1024` marks the
# number only, `tl.load(x_ptr + offs)` against `tl.load(x_ptr + offs, mask=m)` the addition.
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
# Beyond this many lines on a side, a changed block is not paired line by line for words
# (the quadratic matcher would dominate the page); its lines are shown removed and added.
MAX_PAIRED_BLOCK = 200


@dataclass(frozen=True)
class Segment:
    text: str
    changed: bool = False  # within a changed line: one of the words that differ


@dataclass(frozen=True)
class Line:
    number: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Row:
    """One row of the side-by-side table; the unified one reads the same rows.

    kind: "same" (both sides), "change" (a removed line beside the line it became), "del"
    (removed, nothing beside it), "add" (added, nothing beside it).
    """

    kind: str
    old: Line | None
    new: Line | None


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    rows: tuple[Row, ...]
    skipped_before: int  # unchanged lines between this hunk and the one before (or the top)

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_count} +{self.new_start},{self.new_count} @@"


@dataclass(frozen=True)
class DiffStats:
    added: int
    removed: int


def _words(a: str, b: str) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    left: list[Segment] = []
    right: list[Segment] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        changed = op != "equal"
        if i2 > i1:
            left.append(Segment("".join(ta[i1:i2]), changed))
        if j2 > j1:
            right.append(Segment("".join(tb[j1:j2]), changed))
    return tuple(left), tuple(right)


def _plain(text: str) -> tuple[Segment, ...]:
    return (Segment(text),)


def _rows(a: list[str], b: list[str], op: str, i1: int, i2: int, j1: int, j2: int) -> list[Row]:
    if op == "equal":
        return [
            Row("same", Line(i + 1, _plain(a[i])), Line(j + 1, _plain(b[j])))
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
        ]
    rows: list[Row] = []
    olds, news = list(range(i1, i2)), list(range(j1, j2))
    paired = min(len(olds), len(news)) if max(len(olds), len(news)) <= MAX_PAIRED_BLOCK else 0
    for i, j in zip(olds[:paired], news[:paired], strict=True):
        left, right = _words(a[i], b[j])
        rows.append(Row("change", Line(i + 1, left), Line(j + 1, right)))
    rows.extend(Row("del", Line(i + 1, _plain(a[i])), None) for i in olds[paired:])
    rows.extend(Row("add", None, Line(j + 1, _plain(b[j]))) for j in news[paired:])
    return rows


def diff_hunks(before: str, after: str, context: int = CONTEXT_LINES) -> list[Hunk]:
    """The hunks that turn `before` into `after`, `context` unchanged lines around each change."""
    a, b = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    hunks: list[Hunk] = []
    last_old = 0
    for group in matcher.get_grouped_opcodes(context):
        first, final = group[0], group[-1]
        rows: list[Row] = []
        for op, i1, i2, j1, j2 in group:
            rows.extend(_rows(a, b, op, i1, i2, j1, j2))
        old_start, old_end, new_start, new_end = first[1], final[2], first[3], final[4]
        hunks.append(
            Hunk(
                old_start=old_start + 1,
                old_count=old_end - old_start,
                new_start=new_start + 1,
                new_count=new_end - new_start,
                rows=tuple(rows),
                skipped_before=old_start - last_old,
            )
        )
        last_old = old_end
    return hunks


def diff_stats(hunks: list[Hunk]) -> DiffStats:
    added = sum(1 for h in hunks for r in h.rows if r.kind in ("add", "change"))
    removed = sum(1 for h in hunks for r in h.rows if r.kind in ("del", "change"))
    return DiffStats(added, removed)


# --- HTML -----------------------------------------------------------------------------------


def _code(line: Line | None, mark: str) -> str:
    if line is None:
        return ""
    return "".join(
        f"<{mark}>{escape(s.text, quote=False)}</{mark}>" if s.changed else escape(s.text, quote=False)
        for s in line.segments
    )


_SPOKEN = {
    "del": '<span class="visually-hidden">removed: </span>',
    "add": '<span class="visually-hidden">added: </span>',
}


def _num(line: Line | None) -> str:
    return "" if line is None else str(line.number)


def _skip_row(hunk: Hunk, columns: int) -> str:
    skipped = (
        f"{hunk.skipped_before} unchanged line{'s' if hunk.skipped_before != 1 else ''} · "
        if hunk.skipped_before
        else ""
    )
    return f'<tr class="hunk"><td colspan="{columns}">{skipped}<code>{escape(hunk.header)}</code></td></tr>'


def render_split(hunks: list[Hunk], old_label: str = "before", new_label: str = "after") -> str:
    """Old on the left, new on the right; a changed line beside what it became."""
    head = (
        '<table class="diff-table diff-split"><colgroup><col class="ln"><col class="code">'
        '<col class="ln"><col class="code"></colgroup>'
        f'<thead><tr><th scope="col" class="ln">line</th><th scope="col">{escape(old_label)}</th>'
        f'<th scope="col" class="ln">line</th><th scope="col">{escape(new_label)}</th></tr></thead><tbody>'
    )
    out = [head]
    for hunk in hunks:
        out.append(_skip_row(hunk, 4))
        for r in hunk.rows:
            left = {"same": "same", "change": "del", "del": "del", "add": "empty"}[r.kind]
            right = {"same": "same", "change": "add", "del": "empty", "add": "add"}[r.kind]
            out.append(
                f'<tr class="row-{r.kind}">'
                f'<td class="ln {left}">{_num(r.old)}</td>'
                f'<td class="code {left}">{_SPOKEN.get(left, "")}{_code(r.old, "del")}</td>'
                f'<td class="ln {right}">{_num(r.new)}</td>'
                f'<td class="code {right}">{_SPOKEN.get(right, "")}{_code(r.new, "ins")}</td>'
                "</tr>"
            )
    out.append("</tbody></table>")
    return "".join(out)


def render_unified(hunks: list[Hunk]) -> str:
    """One column: each removed line above the line it became."""
    out = [
        '<table class="diff-table diff-unified"><colgroup><col class="ln"><col class="ln">'
        '<col class="mark"><col class="code"></colgroup>'
        '<thead><tr><th scope="col" class="ln">old</th><th scope="col" class="ln">new</th>'
        '<th scope="col" class="mark"><span class="visually-hidden">change</span></th>'
        '<th scope="col">source</th></tr></thead><tbody>'
    ]
    for hunk in hunks:
        out.append(_skip_row(hunk, 4))
        # a block of changed rows lists its removed lines, then its added ones
        removed: list[str] = []
        added: list[str] = []
        for r in (*hunk.rows, None):
            if r is None or r.kind == "same":
                out.extend(removed)
                out.extend(added)
                removed, added = [], []
            if r is None:
                break
            if r.kind == "same":
                out.append(
                    f'<tr class="row-same"><td class="ln">{_num(r.old)}</td><td class="ln">{_num(r.new)}</td>'
                    f'<td class="mark"></td><td class="code same">{_code(r.new, "ins")}</td></tr>'
                )
                continue
            if r.old is not None:
                removed.append(
                    f'<tr class="row-del"><td class="ln del">{_num(r.old)}</td><td class="ln del"></td>'
                    f'<td class="mark del" title="removed">-</td><td class="code del">{_code(r.old, "del")}</td></tr>'
                )
            if r.new is not None:
                added.append(
                    f'<tr class="row-add"><td class="ln add"></td><td class="ln add">{_num(r.new)}</td>'
                    f'<td class="mark add" title="added">+</td><td class="code add">{_code(r.new, "ins")}</td></tr>'
                )
    out.append("</tbody></table>")
    return "".join(out)
