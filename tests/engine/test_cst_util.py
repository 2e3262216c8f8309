"""cst_util's edits keep the layout a reviewer sees: a parameter list written one per line gets
new parameters one per line, with the indentation of the others."""

from __future__ import annotations

import libcst as cst
import pytest

from diagnosis.engine.proposers.rules import cst_util as cu

HEAD = "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"


def _inserted(signature: str, at: int, names: list[str]) -> str:
    module = cst.parse_module(HEAD + signature + "    pass\n")
    kernel = cu.find_kernels(module)["k"]
    fn = kernel.node.with_changes(params=cu.insert_params(kernel, at, names))
    return module.code_for_node(fn).split("@triton.jit\n", 1)[1].removesuffix("    pass\n")


@pytest.mark.parametrize(
    ("signature", "at", "names", "expected"),
    [
        ("def k(x, y, BLOCK: tl.constexpr):\n", 3, ["n"], "def k(x, y, BLOCK: tl.constexpr, n):\n"),
        ("def k(x, y, BLOCK: tl.constexpr):\n", 2, ["n", "m"], "def k(x, y, n, m, BLOCK: tl.constexpr):\n"),
        (
            "def k(\n    x,\n    BLOCK: tl.constexpr,\n):\n",
            2,
            ["n", "m"],
            "def k(\n    x,\n    BLOCK: tl.constexpr,\n    n,\n    m,\n):\n",
        ),
        (
            "def k(\n    x,\n    BLOCK: tl.constexpr\n):\n",
            2,
            ["n"],
            "def k(\n    x,\n    BLOCK: tl.constexpr,\n    n\n):\n",
        ),
        (
            "def k(\n    x,  # input\n    BLOCK: tl.constexpr,\n):\n",
            1,
            ["n"],
            "def k(\n    x,  # input\n    n,\n    BLOCK: tl.constexpr,\n):\n",
        ),
        (
            "def k(\n    x, y,\n    n,\n    BLOCK: tl.constexpr,\n):\n",
            2,
            ["a", "b"],
            "def k(\n    x, y,\n    a, b,\n    n,\n    BLOCK: tl.constexpr,\n):\n",
        ),
    ],
    ids=["inline-appended", "inline-inserted", "one-per-line-appended", "no-trailing-comma", "comment-kept",
         "groups-get-a-group"],
)
def test_insert_params_keeps_the_lists_layout(signature: str, at: int, names: list[str], expected: str) -> None:
    assert _inserted(signature, at, names) == expected


def test_inserting_no_names_leaves_the_parameters_as_they_are() -> None:
    assert _inserted("def k(\n    x,\n    BLOCK: tl.constexpr,\n):\n", 2, []) == "def k(\n    x,\n    BLOCK: tl.constexpr,\n):\n"
