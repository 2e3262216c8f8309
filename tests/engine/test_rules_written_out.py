"""What the rules read written out: a launch's `**d` of a local dict literal as keywords, its
`*x.stride()` one argument a dimension, a kernel jitted by a call decorated."""

from __future__ import annotations

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.proposers.rules import apply_family
from diagnosis.engine.proposers.rules.written_out import written_out
from tests.engine.rules_cases import harness as h

HEAD = """import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def scale(x):
    n = x.numel()
    out = torch.empty_like(x)
"""
ONE_LINE = (
    HEAD
    + """    kw = {"BLOCK": 1024, "num_warps": 4}
    scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, **kw)
    return out
"""
)
PER_LINE = (
    HEAD
    + """    block = triton.next_power_of_2(min(n, 4096))
    kw = {"BLOCK": block, "num_warps": 4}
    grid = (triton.cdiv(n, block),)
    scale_kernel[grid](
        x,
        out,
        n,
        **kw,
    )
    return out
"""
)


def test_a_local_dict_becomes_the_keywords_it_holds() -> None:
    assert written_out(ONE_LINE) == ONE_LINE.replace(
        '    kw = {"BLOCK": 1024, "num_warps": 4}\n', ""
    ).replace("(x, out, n, **kw)", "(x, out, n, BLOCK=1024, num_warps=4)")
    # one key takes the place of the `**` as well
    one = ONE_LINE.replace('{"BLOCK": 1024, "num_warps": 4}', '{"BLOCK": 1024}')
    assert written_out(one) == one.replace('    kw = {"BLOCK": 1024}\n', "").replace("**kw)", "BLOCK=1024)")
    # a statement between them that binds none of its values leaves them as they were
    assert written_out(PER_LINE) == PER_LINE.replace(
        '    kw = {"BLOCK": block, "num_warps": 4}\n', ""
    ).replace("        **kw,\n", "        BLOCK=block,\n        num_warps=4,\n")


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(ONE_LINE.replace("    scale_kernel", '    kw["num_stages"] = 2\n    scale_kernel'), id="filled-later"),
        pytest.param(ONE_LINE.replace("    kw = ", "    if n:\n        kw = ").replace("    scale_kernel", "    else:\n        kw = {}\n    scale_kernel"), id="bound-in-branches"),
        pytest.param(PER_LINE.replace("    grid = (", "    block = 2048\n    grid = ("), id="value-rebound-before-the-launch"),
        pytest.param(ONE_LINE.replace("(x, out, n, **kw)", "(x, out, n, num_warps=8, **kw)"), id="key-also-passed"),
        pytest.param(ONE_LINE.replace('{"BLOCK": 1024, "num_warps": 4}', "dict(BLOCK=1024, num_warps=4)"), id="not-a-literal"),
        pytest.param(ONE_LINE.replace('"num_warps": 4', '"num_warps": next(WARPS)'), id="value-with-an-effect"),
        pytest.param(ONE_LINE.replace("def scale(x):", "def scale(x, kw=None):").replace('    kw = {"BLOCK": 1024, "num_warps": 4}\n', ""), id="a-parameter"),
        pytest.param(ONE_LINE.replace("    return out", "    print(kw)\n    return out"), id="read-after-the-launch"),
    ],
)  # fmt: skip
def test_a_dict_that_may_not_be_what_the_launch_receives_stays(source: str) -> None:
    assert written_out(source) is None


def test_a_rule_that_applies_as_written_keeps_the_dict() -> None:
    """The dict is written out only for a rule that cannot apply otherwise: one of keys that are
    neither parameters nor options (an XPU's `grf_mode`) hides nothing from LAUNCH_CONFIG."""
    source = ONE_LINE.replace('{"BLOCK": 1024, "num_warps": 4}', '{"grf_mode": "256"}').replace(
        "(x, out, n, **kw)", "(x, out, n, BLOCK=1024, **kw)"
    )
    rw = apply_family(Family.LAUNCH_CONFIG, source, h.rule_input())
    assert rw is not None and "triton.autotune(" in rw.source
    assert '    kw = {"grf_mode": "256"}\n' in rw.source and "**kw)" in rw.source
    # where it passes the block, the rule takes the launch written out: the dict goes
    rw = apply_family(Family.LAUNCH_CONFIG, ONE_LINE, h.rule_input())
    assert rw is not None and "triton.autotune(" in rw.source
    assert rw.source.endswith(
        "    out = torch.empty_like(x)\n"
        '    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)\n'
        "    return out\n"
    )


# unsloth's form: a plain function, jitted and given its heuristics by rebinding its name
JITTED_BY_CALLS = """import torch
import triton
import triton.language as tl


def _scale_rows(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * 2, mask=cols < n_cols)


_scale_rows = triton.jit(_scale_rows)
_scale_rows = triton.heuristics({"EVEN": lambda args: args["n_cols"] % args["BLOCK"] == 0})(_scale_rows)


def scale(x):
    out = torch.empty_like(x)
    _scale_rows[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024)
    return out
"""


def test_a_kernel_jitted_by_calls_is_written_decorated() -> None:
    """The calls become the decorators, the last statement's outermost, and the statements go."""
    assert written_out(JITTED_BY_CALLS) == JITTED_BY_CALLS.replace(
        "\n\n_scale_rows = triton.jit(_scale_rows)\n"
        '_scale_rows = triton.heuristics({"EVEN": lambda args: args["n_cols"] % args["BLOCK"] == 0})(_scale_rows)\n',
        "",
    ).replace(
        "def _scale_rows(",
        '@triton.heuristics({"EVEN": lambda args: args["n_cols"] % args["BLOCK"] == 0})\n@triton.jit\ndef _scale_rows(',
    )
    # with options, the jit call is the decorator as written
    cols = JITTED_BY_CALLS.replace(
        "triton.jit(_scale_rows)", "triton.jit(do_not_specialize=['n_cols'])(_scale_rows)"
    )
    assert "@triton.jit(do_not_specialize=['n_cols'])\ndef _scale_rows(" in written_out(cols)


# sglang's form: a tensor's strides unpacked into the launch
STRIDES = """import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, stride_on, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * stride_om + cols * stride_on, x * 2, mask=cols < n_cols)


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        scale_rows[(x.shape[0],)](x, out, x.shape[1], *x.stride(), *out.stride(), BLOCK=1024)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(64, 1000)]


def get_input_cases():
    return [[torch.randn(m, 1000)] for m in (64, 300, 7, 1, 129)]


def get_verify_inputs():
    return [[torch.randn(5, 1000)], [torch.randn(3, 1000)[:, ::2]]]
"""
ROWS = tuple(CaseShape(i, ((m, 1000),), ("float32",)) for i, m in enumerate((64, 300, 7)))


def test_unpacked_strides_become_one_argument_a_dimension() -> None:
    assert written_out(STRIDES, cases=ROWS) == STRIDES.replace(
        "*x.stride(), *out.stride()", "x.stride(0), x.stride(1), out.stride(0), out.stride(1)"
    )
    # a call laid out one argument per line stays so; sizes unpack the same way
    per_line = STRIDES.replace(
        "(x, out, x.shape[1], *x.stride(), *out.stride(), BLOCK=1024)",
        "(\n            x,\n            out,\n            *x.shape[1:],\n            *x.stride(),\n"
        "            *out.stride(),\n            BLOCK=1024,\n        )",
    )
    assert written_out(per_line, cases=ROWS) == per_line.replace(
        "            *x.shape[1:],\n            *x.stride(),\n            *out.stride(),\n",
        "            x.shape[1],\n            x.stride(0),\n            x.stride(1),\n            out.stride(0),\n"
        "            out.stride(1),\n",
    )
    sizes = STRIDES.replace("*x.stride(), *out.stride()", "*x.shape, *out.size()")
    assert (
        "(x, out, x.shape[1], x.shape[0], x.shape[1], out.size(0), out.size(1), BLOCK=1024)"
        in written_out(sizes, cases=ROWS)
    )
    # sglang's `*q.stride()[:3]` and `*image.stride()[-3:]`: the dimensions a literal slice keeps
    sliced = STRIDES.replace(
        "*x.stride(), *out.stride()", "*x.stride()[:1], *x.stride()[1:], *out.stride()[-2:]"
    )
    assert written_out(sliced, cases=ROWS) == STRIDES.replace(
        "*x.stride(), *out.stride()", "x.stride(0), x.stride(1), out.stride(0), out.stride(1)"
    )


@pytest.mark.parametrize(
    ("source", "cases"),
    [
        pytest.param(STRIDES, (), id="no-case-tells-the-rank"),
        pytest.param(STRIDES, (*ROWS, CaseShape(3, ((4, 5, 1000),), ("float32",))), id="rank-differs-between-cases"),
        pytest.param(STRIDES.replace("*x.stride(), *out.stride()", "*x.t().stride(), *out.stride()").replace(
            "*out.stride()", "out.stride(0), out.stride(1)"), ROWS, id="not-a-name"),
        pytest.param(STRIDES.replace("*x.stride(), *out.stride()", "*STRIDES, *out.stride()").replace(
            "*out.stride()", "out.stride(0), out.stride(1)"), ROWS, id="not-a-tensors-strides"),
        pytest.param(STRIDES.replace("*x.stride(), *out.stride()", "*x.stride()[::1], *out.stride()[:2]").replace(
            "*out.stride()[:2]", "out.stride(0), out.stride(1)"), ROWS, id="a-slice-with-a-step"),
        pytest.param(STRIDES.replace("*x.stride(), *out.stride()", "*x.stride()[:n], *out.stride()[:2]").replace(
            "*out.stride()[:2]", "out.stride(0), out.stride(1)"), ROWS, id="a-slice-bound-not-a-literal"),
    ],
)  # fmt: skip
def test_unpacked_arguments_whose_count_the_cases_do_not_tell_stay(source: str, cases: tuple) -> None:
    assert written_out(source, cases=cases) is None


# sglang's `strides = (req.stride(0), pos.stride(0), ...)` before `k[grid](..., *strides, ...)`
TUPLE = STRIDES.replace(
    "        scale_rows[(x.shape[0],)](x, out, x.shape[1], *x.stride(), *out.stride(), BLOCK=1024)\n",
    "        strides = (x.stride(0), x.stride(1), out.stride(0), out.stride(1))\n"
    "        scale_rows[(x.shape[0],)](x, out, x.shape[1], *strides, BLOCK=1024)\n",
)


def test_a_local_tuple_becomes_the_arguments_it_holds() -> None:
    # no case needed: the literal tells how many arguments it holds
    assert written_out(TUPLE) == STRIDES.replace(
        "*x.stride(), *out.stride()", "x.stride(0), x.stride(1), out.stride(0), out.stride(1)"
    )
    listed = TUPLE.replace("strides = (x.stride(0)", "strides = [x.stride(0)").replace("out.stride(1))\n", "out.stride(1)]\n")
    assert written_out(listed) == written_out(TUPLE)


# ... and sglang's dsv41 window layout passes one such tuple to two kernels
TWICE = TUPLE.replace(
    "        scale_rows[(x.shape[0],)](x, out, x.shape[1], *strides, BLOCK=1024)\n",
    "        scale_rows[(x.shape[0],)](x, out, x.shape[1], *strides, BLOCK=1024)\n"
    "        twice_rows[(x.shape[0],)](out, out, x.shape[1], *strides, BLOCK=1024)\n",
).replace(
    "\n\nclass Model(",
    "\n\n@triton.jit\ndef twice_rows(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, stride_on, BLOCK: tl.constexpr):\n"
    "    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK)\n"
    "    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=0.0)\n"
    "    tl.store(out_ptr + row * stride_om + cols * stride_on, x * 2, mask=cols < n_cols)\n\n\nclass Model(",
)


def test_a_tuple_several_launches_unpack_goes_once_each_is_written_out() -> None:
    every = "x.stride(0), x.stride(1), out.stride(0), out.stride(1)"
    out = written_out(TWICE)
    assert out is not None and "strides" not in out and out.count(every) == 2
    # written out for one kernel only, the tuple stays for the other launch
    one = written_out(TWICE, kernels={"scale_rows"})
    assert one is not None and "strides = (" in one and "*strides, BLOCK=1024)" in one and one.count(every) == 2


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(TUPLE.replace("        return out\n", "        print(strides)\n        return out\n", 1),
                     id="read-after-the-launch"),
        pytest.param(TUPLE.replace("(x.stride(0), x.stride(1), out.stride(0), out.stride(1))",
                                   "(*x.stride(), out.stride(0), out.stride(1))"), id="a-starred-element"),
        pytest.param(TUPLE.replace("(x.stride(0), x.stride(1), out.stride(0), out.stride(1))", "tuple(x.stride())"),
                     id="not-a-literal"),
        pytest.param(TUPLE.replace("        strides = (", "        out = out.t()\n        strides = (", 1)
                     .replace("        scale_rows[", "        out = out.t()\n        scale_rows["), id="value-rebound-before-the-launch"),
        # Python binds a `*` ahead of the keywords before it: written out there it would not parse
        pytest.param(TUPLE.replace("(x, out, x.shape[1], *strides, BLOCK=1024)", "(x, out, BLOCK=1024, n_cols=x.shape[1], *strides)"),
                     id="after-a-keyword"),
    ],
)  # fmt: skip
def test_a_tuple_that_may_not_be_what_the_launch_receives_stays(source: str) -> None:
    assert written_out(source) is None


def test_unpacked_strides_after_a_keyword_stay() -> None:
    source = STRIDES.replace("(x, out, x.shape[1], *x.stride(), *out.stride(), BLOCK=1024)",
                             "(x, out, BLOCK=1024, n_cols=x.shape[1], *x.stride(), *out.stride())")
    compile(source, "m.py", "exec")  # legal Python: the `*` bind ahead of the keywords
    assert written_out(source, cases=ROWS) is None


def test_a_rule_takes_the_launch_with_its_tuple_written_out(tmp_path) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, TUPLE, h.rule_input(ROWS))
    assert rw is not None and "triton.autotune(" in rw.source and "strides" not in rw.source
    h.assert_interp_ok({"tuple": rw.source}, tmp_path)


def test_a_rule_takes_the_launch_with_its_strides_written_out(tmp_path) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, STRIDES, h.rule_input(ROWS))
    assert rw is not None and "triton.autotune(" in rw.source
    assert (
        # the row of 1000 in one tile of 1024: the block stays, the warps are tuned
        "](x, out, x.shape[1], x.stride(0), x.stride(1), out.stride(0), out.stride(1), BLOCK=1024, grid_size_0="
        in rw.source
    )
    h.assert_interp_ok({"strides": rw.source}, tmp_path)
