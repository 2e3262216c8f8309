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


def _launched_with(call_text: str, drop: list[str], add: dict[str, str]) -> str:
    module = cst.parse_module(call_text)
    call = module.body[0].body[0].value
    ids = {id(a) for a in call.args if cu.code(a.value) in drop}
    added = [cu.keyword_arg(k, cst.parse_expression(v)) for k, v in add.items()]
    return module.code_for_node(cu.drop_args(call, call, ids, added))


@pytest.mark.parametrize(
    ("call_text", "drop", "add", "expected"),
    [
        ("k[g](a, b)\n", [], {"M": "M"}, "k[g](a, b, M=M)"),
        ("k[g](a, B=1)\n", ["1"], {}, "k[g](a)"),
        # flag_gems: the arguments on one line between a broken `(` and `)`
        ("k[M,](\n    a, b\n)\n", [], {"M": "M"}, "k[M,](\n    a, b, M=M\n)"),
        ("k[g](\n    a,\n    b\n)\n", [], {"M": "M"}, "k[g](\n    a,\n    b,\n    M=M\n)"),
        ("k[g](\n    a,\n    b,\n)\n", [], {"M": "M"}, "k[g](\n    a,\n    b,\n    M=M,\n)"),
        ("k[g](\n    a,\n    B=1,\n)\n", ["1"], {"M": "M"}, "k[g](\n    a,\n    M=M,\n)"),
        # liger: a comment on the last argument's line stays on it
        ("k[g](\n    a,\n    **kw,  # XPU\n)\n", [], {"M": "M"}, "k[g](\n    a,\n    **kw,  # XPU\n    M=M,\n)"),
        # sglang: a comment line above the argument after a dropped one stays above it, and the
        # separator the added arguments take carries no copy of it
        ("k[g](\n    a,\n    W=4,\n    # no FMA\n    F=0,\n)\n", ["4"], {"M": "M"},
         "k[g](\n    a,\n    # no FMA\n    F=0,\n    M=M,\n)"),
        ("k[g](\n    a,\n    W=4,  # warps\n    F=0,\n)\n", ["4"], {}, "k[g](\n    a,\n    F=0,\n)"),
    ],
)  # fmt: skip
def test_drop_args_keeps_the_calls_layout(call_text: str, drop: list[str], add: dict[str, str], expected: str) -> None:
    assert _launched_with(call_text, drop, add) == expected


DEAD = """def k(x_ptr, y_ptr, n):
    v = n * 2
    a, b = n, v
    c = a
    tl.store(y_ptr, v)
"""


@pytest.mark.parametrize(
    ("before", "expected"),
    [
        # b goes first (its value's read of v released), then a with c: the tuple goes whole,
        # and v, which the store still reads, stays
        pytest.param(DEAD, "def k(x_ptr, y_ptr, n):\n    v = n * 2\n    tl.store(y_ptr, v)\n", id="whole-after-part"),
        pytest.param(DEAD.replace("    c = a\n", "    tl.store(x_ptr, a)\n"),
                     "def k(x_ptr, y_ptr, n):\n    v = n * 2\n    a = n\n    tl.store(x_ptr, a)\n    tl.store(y_ptr, v)\n",
                     id="one-name-left"),
        pytest.param(DEAD.replace("a, b = n, v", "a, b, d = n, v, n + 1").replace("    c = a\n", "    tl.store(x_ptr, a + d)\n"),
                     "def k(x_ptr, y_ptr, n):\n    v = n * 2\n    a, d = n, n + 1\n    tl.store(x_ptr, a + d)\n"
                     "    tl.store(y_ptr, v)\n",
                     id="two-names-left"),
    ],
)  # fmt: skip
def test_drop_dead_takes_the_unread_names_out_of_a_tuple_assignment(before: str, expected: str) -> None:
    fn = cst.parse_module(before).body[0]
    assert isinstance(fn, cst.FunctionDef)
    out = cu.drop_dead(fn, lambda node: not any(cu.is_call(n, "tl.store") for n in cu.walk(node)))
    assert cst.Module(body=[out]).code == expected


def test_imports_a_rewrite_left_unread_go_and_the_authors_stay() -> None:
    before = (
        "import builtins\nimport os, sys as s\nfrom a.b import x, y as z\nimport q.r\nimport unread\n\n"
        "print(builtins.min(1, 2), os.sep, s, x, z, q)\n"
    )
    after = before.replace("print(builtins.min(1, 2), os.sep, s, x, z, q)", "print(os.sep, x)")
    assert cu.drop_orphaned_imports(before, after) == "import os\nfrom a.b import x\nimport unread\n\nprint(os.sep, x)\n"
    assert cu.drop_orphaned_imports(before, before) == before


WRAPPER = """def launch(x, n):
    block: int = 1024
    grid = (n,)
    for i in range(n):
        block += i
    return block, grid
"""


def test_a_functions_bindings_are_read_once_and_each_reader_gets_its_own() -> None:
    """The bindings of a function are read once and kept (the rules ask for them per family and
    per finding); what one reader does to its containers is not what the next one reads."""
    fn = cst.parse_module(WRAPPER).body[0]
    assert isinstance(fn, cst.FunctionDef)
    first = cu.Bindings(fn)
    assert [b.value.value for b in first.by_name["block"] if b.value is not None] == ["1024"]  # `block: int = 1024`
    assert len(first.by_name["block"]) == 2 and first.single("grid") is not None and "i" in first.by_name
    first.by_name["grid"].clear()
    first.target_ids.clear()
    first.by_name["new"] = []
    again = cu.Bindings(fn)
    assert again.single("grid") is not None and again.target_ids and "new" not in again.by_name
    assert again.by_name["block"][0] is cu.Bindings(fn).by_name["block"][0]  # the same reading, kept
    assert cu.Bindings(cst.parse_module(WRAPPER).body[0]).single("grid") is not None  # another tree


LOOP = """import triton


def run(xs, k):
    for x in xs:
        n = x.numel()
        k[(n,)](x, n)
    k[(4,)](xs[0], 4)
"""


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        pytest.param(LOOP.replace("k[(n,)]", 'k[lambda meta: (triton.cdiv(n, meta["B"]),)]'),
                     LOOP.replace("k[(n,)]", 'k[lambda meta, n=n: (triton.cdiv(n, meta["B"]),)]'),
                     id="in-the-loop-binds-its-names"),
        pytest.param(LOOP.replace("k[(4,)]", 'k[lambda meta: (triton.cdiv(4, meta["B"]),)]'), None,
                     id="after-the-loop-stays"),
    ],
)  # fmt: skip
def test_a_lambda_written_in_a_loop_binds_the_loops_names(after: str, expected: str | None) -> None:
    assert cu.bind_loop_names(LOOP, after) == (expected or after)
