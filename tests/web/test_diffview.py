"""The review page's diff (diagnosis.diffview): hunks, line numbers and the words that changed."""

from __future__ import annotations

import pytest

from diagnosis.diffview import MAX_PAIRED_BLOCK, diff_hunks, diff_stats, render_split, render_unified
from tests.conftest import GOOD_SOURCE, PROPOSED_SOURCE

BEFORE = "".join(f"line {i}\n" for i in range(1, 21))


def _kinds(before: str, after: str) -> list[tuple[str, int | None, int | None]]:
    return [
        (r.kind, r.old.number if r.old else None, r.new.number if r.new else None)
        for h in diff_hunks(before, after)
        for r in h.rows
        if r.kind != "same"
    ]


CASES = [
    pytest.param(BEFORE, BEFORE, [], id="identical"),
    pytest.param(
        BEFORE, BEFORE.replace("line 10\n", "line ten\n"), [("change", 10, 10)], id="one-changed-line"
    ),
    pytest.param(BEFORE, BEFORE.replace("line 10\n", ""), [("del", 10, None)], id="one-removed-line"),
    pytest.param(
        BEFORE, BEFORE.replace("line 10\n", "line 10\nnew\n"), [("add", None, 11)], id="one-added-line"
    ),
    pytest.param(
        BEFORE,
        BEFORE.replace("line 10\n", "a\nb\n"),
        [("change", 10, 10), ("add", None, 11)],
        id="a-line-becomes-two",
    ),
    pytest.param(
        BEFORE,
        BEFORE.replace("line 2\n", "two\n").replace("line 19\n", "nineteen\n"),
        [("change", 2, 2), ("change", 19, 19)],
        id="two-far-apart-changes",
    ),
]


@pytest.mark.parametrize(("before", "after", "expected"), CASES)
def test_rows_carry_the_kind_and_both_line_numbers(before, after, expected):
    assert _kinds(before, after) == expected


def test_far_apart_changes_are_two_hunks_with_the_unchanged_lines_between_counted():
    hunks = diff_hunks(BEFORE, BEFORE.replace("line 2\n", "two\n").replace("line 19\n", "nineteen\n"))
    assert [(h.old_start, h.old_count, h.skipped_before) for h in hunks] == [(1, 5, 0), (16, 5, 10)]
    assert hunks[1].header == "@@ -16,5 +16,5 @@"


def test_only_the_words_that_differ_are_marked():
    (hunk,) = diff_hunks(GOOD_SOURCE, PROPOSED_SOURCE)
    changed = [r for r in hunk.rows if r.kind == "change"]
    assert [(r.old.number, r.new.number) for r in changed] == [(23, 23)]  # the launch line
    old_marked = [s.text for s in changed[0].old.segments if s.changed]
    new_marked = [s.text for s in changed[0].new.segments if s.changed]
    assert old_marked == ["128", "128"] and new_marked == ["1024", "1024"]
    stats = diff_stats([hunk])
    assert (stats.added, stats.removed) == (1, 1)


def test_a_huge_changed_block_is_shown_removed_then_added_without_word_pairing():
    n = MAX_PAIRED_BLOCK + 1
    before = "".join(f"a{i}\n" for i in range(n))
    after = "".join(f"b{i}\n" for i in range(n))
    kinds = {r.kind for h in diff_hunks(before, after) for r in h.rows}
    assert kinds == {"del", "add"}


def test_both_renderings_escape_the_source_and_mark_words():
    before = "x = '<b>' + 1\n"
    after = "x = '<b>' + 2\n"
    for html in (render_split(diff_hunks(before, after)), render_unified(diff_hunks(before, after))):
        assert "<b>" not in html and "&lt;b&gt;" in html
        assert "<del>1</del>" in html and "<ins>2</ins>" in html
        assert "<a " not in html  # line numbers are text: no tab stop per line


def test_the_unified_rendering_lists_the_removed_line_above_the_added_one():
    html = render_unified(diff_hunks(BEFORE, BEFORE.replace("line 10\n", "line ten\n")))
    assert html.index('<tr class="row-del"><td class="ln del">10</td>') < html.index(
        '<tr class="row-add"><td class="ln add"></td><td class="ln add">10</td>'
    )


def test_the_split_rendering_puts_a_changed_line_beside_what_it_became():
    html = render_split(diff_hunks(BEFORE, BEFORE.replace("line 10\n", "line ten\n")))
    assert '<tr class="row-change"><td class="ln del">10</td>' in html
    assert (
        '<td class="ln add">10</td><td class="code add"><span class="visually-hidden">added: </span>line <ins>ten</ins>'
        in html
    )
