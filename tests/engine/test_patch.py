"""diagnosis.engine.patch: a stored diff applied to its parent gives back the proposal's source."""

from __future__ import annotations

import pytest

from diagnosis.engine.patch import PatchError, apply_unified_diff
from diagnosis.engine.proposers.base import unified_diff

BASE = "".join(f"line {i}\n" for i in range(1, 21))

PAIRS = [
    pytest.param(BASE, BASE.replace("line 5\n", "line five\n"), id="one-line-changed"),
    pytest.param(BASE, "header\n" + BASE, id="added-at-the-top"),
    pytest.param(BASE, BASE + "footer\n", id="added-at-the-end"),
    pytest.param(BASE, BASE.replace("line 1\n", ""), id="first-line-removed"),
    pytest.param(BASE, BASE.replace("line 20\n", ""), id="last-line-removed"),
    pytest.param(
        BASE, BASE.replace("line 2\n", "two\n").replace("line 18\n", "eighteen\nand more\n"), id="two-hunks"
    ),
    pytest.param(BASE, BASE.replace("line 10\n", "\n\n"), id="blank-lines"),
    pytest.param("", "new\nfile\n", id="from-empty"),
    pytest.param(BASE, "", id="to-empty"),
    pytest.param(BASE, BASE.rstrip("\n"), id="no-newline-at-the-end"),
    pytest.param(BASE, BASE, id="identical"),
]


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_a_diff_applied_to_its_parent_rebuilds_the_new_source(before, after):
    assert apply_unified_diff(before, unified_diff(before, after)) == after


BAD = [
    pytest.param(BASE.replace("line 4\n", "changed\n"), id="context-differs"),
    pytest.param(BASE.replace("line 5\n", "gone\n"), id="removed-line-differs"),
    pytest.param("line 1\n", id="source-too-short"),
]


@pytest.mark.parametrize("other", BAD)
def test_a_diff_applied_to_another_source_is_refused(other):
    diff = unified_diff(BASE, BASE.replace("line 5\n", "line five\n"))
    with pytest.raises(PatchError):
        apply_unified_diff(other, diff)


@pytest.mark.parametrize(
    "diff",
    [
        pytest.param("not a diff\n", id="no-header"),
        pytest.param("--- a/k.py\n+++ b/k.py\n", id="no-hunk"),
        pytest.param(
            "--- a/k.py\n+++ b/k.py\n@@ -9,1 +9,1 @@\n-line 9\n+x\n@@ -2,1 +2,1 @@\n-line 2\n+y\n",
            id="hunks-out-of-order",
        ),
        pytest.param("--- a/k.py\n+++ b/k.py\n@@ -1,1 +1,1 @@\n?line 1\n", id="unknown-line-tag"),
    ],
)
def test_what_is_not_a_unified_diff_is_refused(diff):
    with pytest.raises(PatchError):
        apply_unified_diff(BASE, diff)
