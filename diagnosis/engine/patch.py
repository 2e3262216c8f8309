"""Apply a unified diff (the one `proposers.base.unified_diff` writes) to the source it was
made from.

A benchmark report keeps each proposal's diff and the sha256 of its source, not the source
itself (`loop_result_json(sources=False)`): importing a report rebuilds every proposal's
source from its parent's, and the digest says whether that worked. Strict: a context or
removed line that does not match, or a hunk out of order, is a `PatchError`, never a fuzzy
guess.

Plain Python: no Django.
"""

from __future__ import annotations

import re

from diagnosis.engine.errors import EngineError

# "@@ -51,6 +51,27 @@" (a count of 1 may be left out: "@@ -7 +7 @@")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(EngineError):
    """The diff does not apply to this source (or is not a unified diff)."""


def apply_unified_diff(source: str, diff: str) -> str:
    """`source` with `diff` applied; an empty diff leaves it as it is."""
    if not diff.strip():
        return source
    old = source.splitlines(keepends=True)
    out: list[str] = []
    at = 0  # lines of `old` consumed so far
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        if not lines[i].startswith(("---", "+++")):
            raise PatchError(f"diff line {i + 1}: expected a file header or a hunk, got {lines[i][:40]!r}")
        i += 1
    if i == len(lines):
        raise PatchError("the diff has no hunk")
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if match is None:
            raise PatchError(f"diff line {i + 1}: expected a hunk header, got {lines[i][:40]!r}")
        start, count = int(match[1]), int(match[2] if match[2] is not None else 1)
        # difflib numbers an empty old side from the line before it ("-0,0" at the top)
        first = start - 1 if count else start
        if first < at or first > len(old):
            raise PatchError(f"diff line {i + 1}: hunk at line {start} is out of order or past the end")
        out.extend(old[at:first])
        at = first
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            line = lines[i]
            tag, text = line[:1], line[1:]
            if tag == "\\":  # "\ No newline at end of file": the line before ends without one
                if out and out[-1].endswith("\n"):
                    out[-1] = out[-1][:-1]
                i += 1
                continue
            if tag in (" ", "-"):
                if at >= len(old) or old[at].rstrip("\n") != text.rstrip("\n"):
                    raise PatchError(
                        f"diff line {i + 1}: {text.rstrip()[:60]!r} is not line {at + 1} of the source"
                    )
                if tag == " ":
                    out.append(old[at])
                at += 1
            elif tag == "+":
                out.append(text)  # without a newline only as the file's last line
            elif line.strip() == "":  # a context line whose single space was stripped
                if at >= len(old) or old[at].strip() != "":
                    raise PatchError(f"diff line {i + 1}: a blank line is not line {at + 1} of the source")
                out.append(old[at])
                at += 1
            else:
                raise PatchError(f"diff line {i + 1}: unexpected {line[:40]!r}")
            i += 1
    out.extend(old[at:])
    return "".join(out)
