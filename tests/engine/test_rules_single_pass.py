"""SINGLE_PASS: multi-pass row loops get a one-block copy of the kernel, guarded by the row size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.proposers.rules import apply_family
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

SOFTMAX = h.source("softmax_loops.py")

LAYERNORM = '''import torch
import triton
import triton.language as tl


@triton.jit
def ln_kernel(x_ptr, w_ptr, out_ptr, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * stride
    out_ptr += row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0)
        tl.store(out_ptr + cols, (x - mean) * w, mask=mask)


class ModelNew:
    def forward(self, x):
        out = torch.empty_like(x)
        ln_kernel[(x.shape[0],)](
            x, self.weight, out, x.stride(0), self.hidden, self.eps,
            BLOCK_SIZE=1024,
        )
        return out
'''

CUMSUM = '''import torch
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    carry = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row * stride + cols, tl.cumsum(x, axis=0) + carry, mask=cols < n_cols)
        carry += tl.sum(x, axis=0)


class ModelNew:
    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        cumsum_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=1024)
        return out
'''

L2NORM = '''import torch
import triton
import triton.language as tl


@triton.jit
def l2n_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for i in range(tl.cdiv(n_cols, BLOCK_SIZE)):
        cols = i * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    norm = tl.sqrt(tl.sum(acc, axis=0))
    for i in range(tl.cdiv(n_cols, BLOCK_SIZE)):
        cols = i * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row * stride + cols, x / norm, mask=cols < n_cols)


class ModelNew:
    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        BLOCK = 512
        l2n_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK, num_warps=4)
        return out
'''

# sglang's temperature softmax: each pass scales what it loads in place, so a later pass's load
# is no repeat of the first (its name holds the scaled row by then): read once all the same,
# and scaled once
SCALED = SOFTMAX.replace('other=float("-inf"))\n', 'other=float("-inf"))\n        x = x * 0.5\n').replace(
    "torch.softmax(x, dim=-1)", "torch.softmax(x * 0.5, dim=-1)"
)
STORE_BETWEEN = SOFTMAX.replace(
    "        denom += tl.sum(tl.exp(x - row_max), axis=0)\n",
    "        denom += tl.sum(tl.exp(x - row_max), axis=0)\n        tl.store(out_row + cols, x, mask=cols < n_cols)\n",
)


def single_pass_fn(source: str) -> str:
    m = re.search(r"def \w+_single_pass\(.*?(?=\n\n\n)", source, re.S)
    assert m is not None
    return m.group(0)


FIX = [
    pytest.param(
        SOFTMAX,
        1,
        [
            # the loop variable is 0, each statement and the load the passes repeat is kept once
            # and the running max and sum, started at -inf and 0 and stepped once, are that step
            '    # pass 1: row max\n    cols = tl.arange(0, BLOCK_SIZE)\n'
            '    x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))\n'
            "    row_max = tl.max(x, axis=0)\n",
            # the row size is a name already: the guard reads it
            "        if 0 < n_cols <= 16384:\n"
            "            single_pass_block = triton.next_power_of_2(n_cols)\n"
            "            single_pass_warps = 4 if single_pass_block <= 2048 else 8 if single_pass_block <= 8192 else 16\n"
            "            softmax_kernel_single_pass[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), "
            "BLOCK_SIZE=single_pass_block, num_warps=single_pass_warps)\n"
            "        else:\n"
            "            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)\n",
            "    # pass 2: sum of exponentials\n    denom = tl.sum(tl.exp(x - row_max), axis=0)\n\n"
            "    # pass 3: normalise and write\n    mask = cols < n_cols\n    tl.store(",
        ],
        id="three-passes-read-the-row-once",
    ),
    pytest.param(
        LAYERNORM,
        2,  # x once (the inline load of pass 1 and `mask=mask` of pass 2 are the same), w once
        ["    x = tl.load(x_ptr + cols, mask=cols < N, other=0.0)\n    acc += x\n",
         "        single_pass_n = self.hidden\n",
         "BLOCK_SIZE=single_pass_block, num_warps=single_pass_warps,\n            )"],
        id="inline-load-and-mask-variable-merged",
    ),
    pytest.param(
        L2NORM,
        1,
        ["    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n    cols = tl.arange(0, BLOCK_SIZE)\n",
         "BLOCK_SIZE=single_pass_block, num_warps=single_pass_warps)\n", "BLOCK_SIZE=BLOCK, num_warps=4)\n"],
        id="two-cdiv-loops",
    ),
    pytest.param(
        STORE_BETWEEN,
        2,
        ["    denom = tl.sum(tl.exp(x - row_max), axis=0)\n    tl.store(out_row + cols, x, mask=cols < n_cols)\n",
         # read again after the store: it may see what the store wrote
         '    mask = cols < n_cols\n    x = tl.load(x_row + cols, mask=mask, other=float("-inf"))\n'],
        id="no-merge-across-a-store",
    ),
    pytest.param(
        SCALED,
        1,
        ['    x_vals = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))\n    x = x_vals * 0.5\n',
         # the later passes' `x = x_vals * 0.5` is what x holds already
         "    denom = tl.sum(", "    mask = cols < n_cols\n    tl.store("],
        id="a-pass-scales-what-it-loads-in-place",
    ),
]


NOOP = [
    pytest.param(h.source("matmul.py"), (), id="dot-kernel"),
    pytest.param(
        SOFTMAX.replace(
            "softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)",
            "softmax_kernel[(n_rows, triton.cdiv(n_cols, 256))](x, out, n_cols, x.stride(0), out.stride(0), BLOCK_SIZE=256)",
        ),
        (),
        id="grid-depends-on-the-block",
    ),
    pytest.param(
        SOFTMAX.replace("    row_max = float", "    n_cols = n_cols - 1\n    row_max = float"), (), id="bound-rebound-in-kernel"
    ),
    pytest.param(
        SOFTMAX.replace(
            "        softmax_kernel[(n_rows,)](", "        _ = softmax_kernel[(n_rows,)]("
        ),
        (),
        id="launch-is-not-a-statement",
    ),
    pytest.param(
        SOFTMAX,
        (CaseShape(0, ((64, 65536),), ("float32",)), CaseShape(1, ((8, 40000),), ("float32",))),
        id="every-case-too-wide-for-one-block",
    ),
    pytest.param(
        L2NORM.replace("tl.arange(0, BLOCK_SIZE)\n", "tl.arange(0, BLOCK_SIZE) + tl.arange(0, 16)[:, None] * 0\n", 1),
        (),
        id="second-tiled-dimension",
    ),
    pytest.param(CUMSUM, (), id="one-loop-reads-the-row-once-already"),
]


@pytest.mark.parametrize(("before", "loads", "present"), FIX)
def test_it_adds_a_guarded_single_pass_kernel(before: str, loads: int, present: list[str]) -> None:
    rw = apply_family(Family.SINGLE_PASS, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    fn = single_pass_fn(rw.source)
    assert fn.count("tl.load(") == loads
    assert "for " not in fn
    for text in present:
        assert text in rw.source
    # the original kernel stays, untouched, as the fallback
    kernel = rw.kernels[0]
    assert before[before.index(f"def {kernel}("):].split("\n\n\n")[0] in rw.source


@pytest.mark.parametrize(("before", "cases"), NOOP)
def test_it_leaves_other_kernels_alone(before: str, cases: tuple[CaseShape, ...]) -> None:
    assert apply_family(Family.SINGLE_PASS, before, h.rule_input(cases)) is None


def test_it_holds_twice_the_elements_for_16_bit_rows() -> None:
    cases = (CaseShape(0, ((64, 20000),), ("float16",)),)
    rw = apply_family(Family.SINGLE_PASS, SOFTMAX, h.rule_input(cases))
    assert rw is not None
    assert "if 0 < n_cols <= 32768:" in rw.source


def test_single_pass_modules_are_correct(tmp_path: Path) -> None:
    single = apply_family(Family.SINGLE_PASS, SOFTMAX, h.rule_input())
    assert single is not None
    tuned = apply_family(Family.LAUNCH_CONFIG, single.source, h.rule_input())
    assert tuned is not None
    scaled = apply_family(Family.SINGLE_PASS, SCALED, h.rule_input())
    assert scaled is not None
    paths = []
    for name, text in (("single.py", single.source), ("single_tuned.py", tuned.source), ("scaled.py", scaled.source)):
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        assert results[str(path)]["ok"], results[str(path)]["message"]
    assert results[str(tmp_path / "single_tuned.py")]["configs"] >= 4


# --- code styles: the rewrite of modules written the way other projects write them ------------

FAMILY = Family.SINGLE_PASS
ONLINE = st.source("softmax_online.py")
ONLINE_LAUNCH = "        softmax_kernel_inner[grid](out, x, M, N, TILE_N, num_warps=4)\n"
ONLINE_HEURISTICS = ONLINE.replace(
    "@triton.jit\ndef softmax_kernel_inner(output_ptr, input_ptr, M, N, TILE_N: tl.constexpr):",
    '@triton.heuristics({"EVEN_N": lambda args: args["N"] % args["TILE_N"] == 0})\n'
    "@triton.jit\ndef softmax_kernel_inner(output_ptr, input_ptr, M, N, TILE_N: tl.constexpr, EVEN_N: tl.constexpr):",
).replace(
    '        inp = tl.load(input_ptr + offset, mask=mask, other=-float("inf")).to(tl.float32)\n        m_new',
    "        if EVEN_N:\n            inp = tl.load(input_ptr + offset).to(tl.float32)\n        else:\n"
    '            inp = tl.load(input_ptr + offset, mask=mask, other=-float("inf")).to(tl.float32)\n        m_new',
)
ONLINE_AUTOTUNED = ONLINE.replace(
    "@triton.jit\n",
    '@triton.autotune(configs=[triton.Config({"TILE_N": 256}, num_warps=4), triton.Config({"TILE_N": 1024}, num_warps=8)],'
    ' key=["N"])\n@triton.jit\n',
).replace(ONLINE_LAUNCH, "        softmax_kernel_inner[grid](out, x, M, N)\n")
ONLINE_DEFAULT = ONLINE.replace("TILE_N: tl.constexpr):", "TILE_N: tl.constexpr = 256):").replace(
    ONLINE_LAUNCH, "        softmax_kernel_inner[grid](out, x, M, N, num_warps=4)\n"
)
COPY = "softmax_kernel_inner_single_pass[grid](out, x, M, N, "

STYLES = [
    st.row(ONLINE, "softmax_online.py",
           [COPY + "single_pass_block, num_warps=single_pass_warps)\n",
            # both passes' statements once, the tile's offsets from 0
            "    n_offsets = tl.arange(0, TILE_N)\n    offset = pid_m * N + n_offsets\n    mask = n_offsets < N\n"
            '    inp = tl.load(input_ptr + offset, mask=mask, other=-float("inf")).to(tl.float32)\n    m_new',
            "    m = m_reduced\n    o = tl.exp(inp - m) / z\n"],
           ["start_n = 0"], id="online-softmax-tile-by-position-in-a-with-block"),
    st.row(st.source("layernorm_tutorial.py"), "layernorm_tutorial.py",
           ["N, self.ln.eps, single_pass_block, num_warps=single_pass_warps\n",
            "    a = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)\n",
            "    x = tl.where(cols < N, a - mean, 0.0)\n"],  # the second pass's load is the first's value
           ["off = 0", " = X_vals"], id="tutorial-layernorm-three-passes"),
    st.row(ONLINE_HEURISTICS, "softmax_online.py",
           ['@triton.heuristics({"EVEN_N": lambda args: args["N"] % args["TILE_N"] == 0})\n'
            "@triton.jit\ndef softmax_kernel_inner_single_pass("],  # they recompute EVEN_N for the new tile
           id="heuristics-kept-on-the-copy"),
    st.row(ONLINE_AUTOTUNED, "softmax_online.py",
           ["\n\n\n@triton.jit\ndef softmax_kernel_inner_single_pass(",
            COPY + "TILE_N=single_pass_block, num_warps=single_pass_warps)\n",
            "        else:\n            softmax_kernel_inner[grid](out, x, M, N)\n"],
           id="autotuned-tile-set-on-the-copy"),
    st.row(ONLINE_DEFAULT, "softmax_online.py", [COPY + "TILE_N=single_pass_block, num_warps=single_pass_warps)\n"],
           id="tile-from-the-constexpr-default"),
    st.row(ONLINE.replace("    grid = (M, 1, 1)\n", "    grid = lambda meta: (M, 1, 1)  # noqa: E731\n"), "softmax_online.py",
           [COPY + "single_pass_block, num_warps=single_pass_warps)\n"], id="grid-lambda"),
    *st.import_rows("softmax_online.py",
                    ["def softmax_kernel_inner_single_pass(", "single_pass_block = triton.next_power_of_2(N)"]),
]

STYLE_REFUSALS = [
    st.row(ONLINE.replace("@triton.jit\n", '@triton.heuristics({"TILE_N": lambda args: 256})\n@triton.jit\n').replace(
        ONLINE_LAUNCH, "        softmax_kernel_inner[grid](out, x, M, N, num_warps=4)\n"),
        "softmax_online.py", id="tile-from-heuristics"),
    st.row(ONLINE_AUTOTUNED.replace('configs=[triton.Config({"TILE_N": 256}, num_warps=4), '
                                    'triton.Config({"TILE_N": 1024}, num_warps=8)]', "configs=tuned_configs()"),
           "softmax_online.py", id="autotune-configs-it-cannot-read"),
    st.row(ONLINE.replace("    grid = (M, 1, 1)\n", '    grid = lambda meta: (M * triton.cdiv(N, meta["TILE_N"]),)  # noqa: E731\n'),
           "softmax_online.py", id="grid-reads-the-tile"),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_flattens_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)


@pytest.mark.parametrize("case", STYLE_REFUSALS)
def test_it_refuses_a_tile_it_cannot_set(case: st.StyleCase) -> None:
    assert st.refused(FAMILY, case)


def test_a_constant_written_twice_stays_written_and_a_repeated_load_is_shared() -> None:
    """liger's fused CE+TVD starts both online maxima at `-float("inf")`; the tidy pass after
    flattening made the second `teacher_max = student_max`, a copy a reviewer would undo."""
    import libcst as cst

    from diagnosis.engine.proposers.rules.tidy import drop_repeats

    body = cst.parse_module('a = -float("inf")\nb = -float("inf")\nc = tl.load(p)\nd = tl.load(p)\n').body
    code = cst.Module(body=drop_repeats(list(body))).code
    assert code == 'a = -float("inf")\nb = -float("inf")\nc = tl.load(p)\nd = c\n'


def test_the_blank_lines_of_dropped_statements_do_not_stack_up() -> None:
    """A former pass's repeated index and load go; their blank lines and the kept statement's
    made two blank lines in a row inside liger's flattened CE+TVD kernel (ruff E303)."""
    import libcst as cst

    from diagnosis.engine.proposers.rules.tidy import drop_repeats

    src = "x = tl.load(p)\n\ny = x\n\nx = tl.load(p)\n\n# the sum\nz = x + y\n"
    code = cst.Module(body=drop_repeats(list(cst.parse_module(src).body))).code
    assert code == "x = tl.load(p)\n\ny = x\n\n# the sum\nz = x + y\n"


def _folded(src: str) -> str:
    import libcst as cst

    from diagnosis.engine.proposers.rules.tidy import fold_identities

    return cst.Module(body=fold_identities(list(cst.parse_module(src).body))).code


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param('m = float("-inf")\nx = tl.load(p)\nm = tl.maximum(m, tl.max(x, axis=0))\n',
                     "x = tl.load(p)\nm = tl.max(x, axis=0)\n", id="running-max"),
        pytest.param('m = float("inf")\nm = tl.minimum(tl.min(x, axis=0), m)\n',
                     "m = tl.min(x, axis=0)\n", id="running-min-either-side"),
        pytest.param("s = 0.0\ns += tl.sum(tl.exp(x), axis=0)\n", "s = tl.sum(tl.exp(x), axis=0)\n",
                     id="float-sum-of-a-float"),
        pytest.param("s = 0\ns += tl.sum(k, axis=0)\n", "s = tl.sum(k, axis=0)\n", id="int-start"),
        # `0.0 + e` of an integer `e` is a float: the start stays
        pytest.param("s = 0.0\ns += tl.sum(k, axis=0)\n", "s = 0.0\ns += tl.sum(k, axis=0)\n",
                     id="float-start-of-an-unknown-type-stays"),
        # the online softmax on its one block (liger's fused CE+TVD, flattened)
        pytest.param('m = -float("inf")\ns = 0.0\nb = tl.max(x, axis=0)\nn = tl.maximum(m, b)\n'
                     "s = s * tl.exp(m - n) + tl.sum(tl.exp(x - n), axis=0)\nm = n\n",
                     "b = tl.max(x, axis=0)\nn = b\ns = tl.sum(tl.exp(x - n), axis=0)\nm = n\n",
                     id="online-rescale"),
        # a start read again before it is rebound stays
        pytest.param('m = float("-inf")\nn = tl.maximum(m, b)\ny = tl.exp(m - n)\n',
                     'm = float("-inf")\nn = b\ny = tl.exp(m - n)\n', id="a-start-still-read-stays"),
        # a start rebound inside a branch is not followed there
        pytest.param('m = float("-inf")\nif c:\n    m = 1.0\nm = tl.maximum(m, b)\n',
                     'm = float("-inf")\nif c:\n    m = 1.0\nm = tl.maximum(m, b)\n', id="rebound-in-a-branch"),
    ],
)  # fmt: skip
def test_an_accumulator_stepped_once_is_written_as_its_step(before: str, after: str) -> None:
    """The issue's machine-output complaint: a flattened softmax kept `row_max = float("-inf")`
    then `row_max = tl.maximum(row_max, tl.max(x, axis=0))`, and `denom = 0.0; denom += ...`."""
    assert _folded(before) == after
