"""LAUNCH_CONFIG: fixed block sizes and warps become an @triton.autotune space."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from pathlib import Path

import pytest

from diagnosis.engine import sol
from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import CaseShape, ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, apply_family
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n\n"

ELEMENTWISE_KERNEL = '''@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


'''

ROW_KERNEL = '''@triton.jit
def row_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * stride + cols, x / tl.sum(x, axis=0), mask=cols < n_cols)


'''

TWO_KERNELS = ELEMENTWISE_KERNEL + ELEMENTWISE_KERNEL.replace("copy_kernel", "copy2_kernel")


STEP_KERNEL = '''@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0) * n
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + row + start + offs, mask=start + offs < n, other=0.0)
        tl.store(out_ptr + row + start + offs, 2 * x, mask=start + offs < n)


'''


SCALE_KERNEL = ELEMENTWISE_KERNEL.replace("tl.load(x_ptr + offs, mask=offs < n)", "2 * tl.load(x_ptr + offs, mask=offs < n)")


def wrapper(body: str) -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return f"class ModelNew:\n    def forward(self, x):\n{lines}\n"


# A launch in a nested function (unsloth_zoo's `def run()` handed to a launcher) whose block is
# written in the function around it
NESTED = HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
block = 1024

def run():
    copy_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK_SIZE=block)

run()
return out
''')
NESTED_GRID = h.variant(
    NESTED,
    ("        block = 1024\n", "        block = 1024\n        grid = (triton.cdiv(n, block),)\n"),
    ("copy_kernel[(triton.cdiv(n, block),)]", "copy_kernel[grid]"),
)

# A launch under a comment (sglang's MLA decode says why its warps are fixed)
COMMENTED_ROW = HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
# COMMENT
row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=triton.next_power_of_2(n_cols), num_warps=4)
return out
''')
COMMENTED_COPY = HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
# COMMENT
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
return out
''')


FIX = [
    pytest.param(
        h.source("vec_add.py"),
        [
            '@triton.autotune(\n    configs=[\n        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),',
            'triton.Config({"BLOCK_SIZE": 8192}, num_warps=8),\n    ],\n    key=["n_elements"],\n)\n@triton.jit',
            'grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)',
            "add_kernel[grid](x, y, out, n_elements)\n",
        ],
        ["BLOCK_SIZE = 1024", "BLOCK_SIZE=BLOCK_SIZE"],
        id="elementwise-local-block-and-num-warps",
    ),
    pytest.param(
        h.source("matmul.py"),
        [
            'triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3)',
            'key=["M", "N", "K"]',
            'grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))',
            "c.stride(0), c.stride(1),\n        )",
        ],
        ["BLOCK_M=64"],
        id="gemm-equal-literals-told-apart-by-grid-axis",
    ),
    pytest.param(
        HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
BLOCK_SIZE = triton.next_power_of_2(n_cols)
row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
return out
'''),
        # the grid's row count is no argument of the kernel: it becomes one, read by the key only
        ["triton.Config({}, num_warps=16)", 'key=["n_cols", "n_rows"]',
         "def row_kernel(x_ptr, out_ptr, n_cols, stride, n_rows, BLOCK_SIZE: tl.constexpr):",
         "row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE, n_rows=n_rows)\n"],
        ["num_warps=4)\n        return"],
        id="row-block-from-next-power-of-2-tunes-warps-only",
    ),
    pytest.param(
        HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
BLOCK_SIZE = triton.next_power_of_2(n_cols)
row_kernel[(n_rows,)](x_ptr=x, out_ptr=out, n_cols=n_cols, stride=x.stride(0), BLOCK_SIZE=BLOCK_SIZE)
return out
'''),
        # every argument by keyword (fla's style): the key's argument goes after the runtime
        # parameters, not first
        ["def row_kernel(x_ptr, out_ptr, n_cols, stride, n_rows, BLOCK_SIZE: tl.constexpr):",
         "BLOCK_SIZE=BLOCK_SIZE, n_rows=n_rows)\n"],
        [],
        id="all-keyword-launch-key-argument-after-the-runtime-parameters",
    ),
    pytest.param(
        HEADER + ROW_KERNEL + wrapper('''
out = torch.empty_like(x)
row_kernel[(x.shape[0],)](
    x, out, x.shape[1], x.stride(0),
    BLOCK_SIZE=triton.next_power_of_2(x.shape[1]),
)
return out
'''),
        # an expression, not a name: the argument is named after the grid axis, on its own line
        ['key=["n_cols", "grid_size_0"]',
         "def row_kernel(x_ptr, out_ptr, n_cols, stride, grid_size_0, BLOCK_SIZE: tl.constexpr):",
         "BLOCK_SIZE=triton.next_power_of_2(x.shape[1]),\n            grid_size_0=x.shape[0],\n        )"],
        [],
        id="grid-size-expression-becomes-a-key-argument",
    ),
    pytest.param(
        h.source("matmul.py"),
        ['key=["M", "N", "K"]'],
        ["grid_size", "M=M"],  # both grid axes are cdiv(M | N, block): the key already sees them
        id="grid-sizes-already-in-the-key-add-nothing",
    ),
    pytest.param(
        HEADER + TWO_KERNELS + wrapper('''
n = x.numel()
BLOCK = 1024
grid = (triton.cdiv(n, BLOCK),)
tmp = torch.empty_like(x)
copy_kernel[grid](x, tmp, n, BLOCK_SIZE=BLOCK)
out = torch.empty_like(x)
copy2_kernel[grid](tmp, out, n, BLOCK_SIZE=BLOCK)
return out
'''),
        [
            'copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, tmp, n)',
            'copy2_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](tmp, out, n)',
        ],
        ["BLOCK = 1024", "grid = ("],
        id="grid-shared-by-two-launches-gets-a-lambda-per-launch",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](
    x, out, n,
    BLOCK_SIZE=1024,
)
return out
'''),
        ['copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](\n            x, out, n,\n        )'],
        ["1024,\n"],
        id="inline-grid-literal-multi-line-call",
    ),
]

FLAGGED_KERNEL = ELEMENTWISE_KERNEL.replace(
    "n, BLOCK_SIZE: tl.constexpr):", "n, BLOCK_SIZE: tl.constexpr, SCALE: tl.constexpr):"
).replace("tl.load(x_ptr + offs, mask=offs < n)", "tl.load(x_ptr + offs, mask=offs < n) * SCALE")

FIX.append(
    pytest.param(
        HEADER + FLAGGED_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024, SCALE=2)
return out
'''),
        ['copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n, SCALE=2)'],
        ['"SCALE"'],
        id="constexpr-that-is-not-a-block-keeps-its-value",
    )
)

FIX.append(
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, 1024)
return out
'''),
        ['copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)\n', 'key=["n"]'],
        [", 1024)"],
        id="block-passed-positionally-is-dropped",
    )
)

FIX += [
    pytest.param(
        HEADER + STEP_KERNEL + wrapper('''
rows, n = x.shape
out = torch.empty_like(x)
scale_kernel[(rows,)](x, out, n, BLOCK=min(65536, triton.next_power_of_2(n)))
return out
'''),
        ['triton.Config({"BLOCK": 1024}, num_warps=8),\n    ],\n    key=["n", "rows"],',
         "scale_kernel[(rows,)](x, out, n, rows=rows)\n"],
        ["BLOCK=min("],
        id="loop-step-the-wrapper-computes",
    ),
    pytest.param(
        HEADER + SCALE_KERNEL.replace("out_ptr + offs", "x_ptr + offs", 1) + wrapper('''
n = x.numel()
copy_kernel[(triton.cdiv(n, 1024),)](x, x, n, BLOCK_SIZE=1024)
return x
'''),
        ['key=["n"],\n    restore_value=["x_ptr"],\n)'],
        ["BLOCK_SIZE=1024"],
        id="in-place-kernel-restored-after-each-benchmarking-run",
    ),
]  # fmt: skip

NOOP = [
    # the author says the fixed warps keep the numerics the same at every shape: a config per
    # shape would reorder the reductions
    pytest.param(
        COMMENTED_ROW.replace("COMMENT", "num_warps reorders the fp32 accumulation: one geometry for every batch"),
        id="warps-fixed-for-reproducible-numerics",
    ),
    # a grid the function around a nested launch binds twice: it may be rebound between the
    # `def` and the call, so the launch's grid is not known
    pytest.param(
        h.variant(NESTED_GRID, ("        run()\n", "        grid = (triton.cdiv(n, 512),)\n        run()\n")),
        id="a-nested-launchs-grid-rebound-after-the-def",
    ),
    # the nested function's parameter hides the outer `block`: what the launch passes is unknown
    pytest.param(
        h.variant(NESTED, ("def run():", "def run(block):"), ("        run()\n", "        run(2048)\n")),
        id="a-nested-functions-parameter-hides-the-outer-block",
    ),
    pytest.param(
        HEADER + "@triton.autotune(configs=[triton.Config({'BLOCK_SIZE': 1024}), triton.Config({'BLOCK_SIZE': 4096})],"
        " key=['n'])\n" + ELEMENTWISE_KERNEL + wrapper('''
out = torch.empty_like(x)
copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, out, x.numel())
return out
'''),
        id="already-autotuned-over-a-space",
    ),
    pytest.param(h.source("mean_atomic.py"), id="atomics-would-accumulate-while-benchmarking"),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
BLOCK = 1024
n_blocks = triton.cdiv(n, BLOCK)
partials = torch.empty(n_blocks)
copy_kernel[(n_blocks,)](x, partials, n, BLOCK_SIZE=BLOCK)
return partials
'''),
        id="block-also-sizes-a-buffer",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
copy_kernel[(triton.cdiv(n, 1024),)](out, out, n, BLOCK_SIZE=1024)
return out
'''),
        id="two-launch-sites",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[make_grid(n)](x, out, n, BLOCK_SIZE=1024)
return out
'''),
        id="grid-from-a-helper",
    ),
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(n // 1000,)](x, out, n, BLOCK_SIZE=1024)
return out
'''),
        id="grid-does-not-follow-the-block",
    ),
    pytest.param(
        HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=triton.next_power_of_2(n_cols))
n_rows = 0
return out
'''),
        id="grid-size-rebound-after-the-launch",
    ),
]


FIX.append(
    pytest.param(
        HEADER + "@triton.autotune(configs=[triton.Config({'BLOCK_SIZE': 1024})], key=['n'])\n"
        + ELEMENTWISE_KERNEL + wrapper('''
out = torch.empty_like(x)
copy_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, out, x.numel())
return out
'''),
        # one config tunes nothing: it is widened in place, its own config first, the key kept
        ['configs=[\n        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),\n',
         'triton.Config({"BLOCK_SIZE": 8192}, num_warps=8),\n    ],\n    key=[\'n\'],\n)\n@triton.jit'],
        ["configs=[triton.Config({'BLOCK_SIZE': 1024})]"],
        id="one-config-autotune-widened",
    )
)  # fmt: skip


# A launch in a loop (flag_gems' `cat` launches once per batch of tensors): the grid lambda the
# rule writes binds the loop's names it reads as defaults, so ruff (B023) and a reviewer see no
# late binding; a lambda the author wrote stays as it is.
FIX.append(
    pytest.param(
        HEADER + ELEMENTWISE_KERNEL + wrapper('''
outs = []
for t in x.unbind(0):
    n = t.numel()
    out = torch.empty_like(t)
    copy_kernel[(triton.cdiv(n, 1024),)](t, out, n, BLOCK_SIZE=1024)
    outs.append(out)
keep = [lambda: n for n in range(2)]
return torch.stack(outs), keep
'''),
        ['copy_kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](t, out, n)',
         "keep = [lambda: n for n in range(2)]"],
        ["BLOCK_SIZE=1024"],
        id="a-grid-lambda-written-in-a-loop-binds-the-loops-names",
    )
)  # fmt: skip


# A launch in a nested function that reads the loop step its enclosing function computed
# (unsloth_zoo's `def run()` handed to a launcher): the step goes from where it was computed.
FIX.append(
    pytest.param(
        HEADER + STEP_KERNEL + wrapper('''
rows, n = x.shape
out = torch.empty_like(x)
block = min(4096, triton.next_power_of_2(n))

def run():
    scale_kernel[(rows,)](x, out, n, BLOCK=block, num_warps=4)

run()
return out
'''),
        ["scale_kernel[(rows,)](x, out, n, rows=rows)"],
        ["block = min(", "BLOCK=block"],
        id="a-step-the-enclosing-function-computed-goes-with-the-argument",
    )
)  # fmt: skip


# The block, or the grid, of a launch in a nested function written in the function around it:
# the rule reads them there, and edits them where they are.
FIX += [
    pytest.param(
        NESTED,
        ['copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)', 'key=["n"]'],
        ["block = 1024", "BLOCK_SIZE=block"],
        id="a-nested-launch-reads-its-block-from-the-function-around-it",
    ),
    pytest.param(
        NESTED_GRID,
        ['grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)', "copy_kernel[grid](x, out, n)"],
        ["block = 1024", "BLOCK_SIZE=block"],
        id="a-nested-launch-reads-its-grid-from-the-function-around-it",
    ),
    # a comment about something else that is invariant does not hold the warps fixed
    pytest.param(
        COMMENTED_ROW.replace("COMMENT", "the loop-invariant row offset is hoisted in the kernel"),
        ["triton.Config({}, num_warps=4),\n        triton.Config({}, num_warps=2),"],
        [", num_warps=4)\n"],
        id="a-comment-on-a-loop-invariant-leaves-the-warps-tunable",
    ),
    # ... and an element-wise kernel computes the same values at any block and warps
    pytest.param(
        COMMENTED_COPY.replace("COMMENT", "bit-identical to torch's copy"),
        ['copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)'],
        ["BLOCK_SIZE=1024"],
        id="a-bit-exact-element-wise-kernel-is-still-tuned",
    ),
]


# Warps a wrapper computes (liger's and flag_gems' styles): once the launch stops passing them,
# what computed them goes too, where it is pure: the module's own helpers count when their
# bodies are (`get_num_warps`, `is_hip`); an `if` that only chose the warps goes with the comment
# above it; an `else` that only set them goes, its `if` keeps the rest.
WARP_HELPERS = """def is_hip():
    return torch.version.hip is not None


def device_arch():
    return "hopper"


def get_num_warps(block):
    num_warps = 4
    if block >= 32768:
        num_warps = 32 if not is_hip() else 16
    elif block >= 2048:
        num_warps = 8
    return num_warps


"""


def row_launch(warps: str, option: str = "num_warps") -> str:
    """A row kernel's wrapper whose warps `warps` computes, passed as `option`."""
    return HEADER + ROW_KERNEL + WARP_HELPERS + f"""def rows(x):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
{warps}
    row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps={option})
    return out
"""


FIX += [
    pytest.param(
        row_launch('    num_warps = 32 if device_arch() == "xpu" else get_num_warps(BLOCK_SIZE)'),
        ["BLOCK_SIZE = triton.next_power_of_2(n_cols)\n    row_kernel[(n_rows,)](", "def get_num_warps(block):"],
        ["device_arch() ==", "num_warps=num_warps"],
        id="warps-from-pure-module-helpers-go-with-the-option",
    ),
    pytest.param(
        "import builtins\n" + row_launch("    num_warps = builtins.min(8, builtins.max(1, BLOCK_SIZE // 128))"),
        ["BLOCK_SIZE = triton.next_power_of_2(n_cols)\n    row_kernel[(n_rows,)]("],
        ["builtins.min", "num_warps=num_warps"],
        id="warps-from-builtins-min-and-max-go-with-the-option",
    ),
    pytest.param(
        row_launch("""    # the warps depend on the vendor and the architecture
    if is_hip():
        ce_num_warps = 16
    else:
        is_blackwell = device_arch().startswith("blackwell")
        ce_num_warps = 8 if (x.element_size() == 2 and is_blackwell) else 32""", "ce_num_warps"),
        ["BLOCK_SIZE = triton.next_power_of_2(n_cols)\n    row_kernel[(n_rows,)]("],
        ["vendor", "is_hip()\n", "is_blackwell", "ce_num_warps"],
        id="an-if-that-only-chose-the-warps-goes-whole",
    ),
    pytest.param(
        row_launch("""    if n_cols > 128:
        n_cols = 128
        num_warps = 1
    else:
        num_warps = 4"""),
        ["    if n_cols > 128:\n        n_cols = 128\n    row_kernel["],
        ["num_warps = 1", "else:", "        num_warps = 4"],
        id="an-else-that-only-set-the-warps-goes",
    ),
    pytest.param(
        row_launch("""    if n_cols >= 8192:
        num_warps = 16
    elif n_cols >= 2048:
        num_warps = 8
    else:
        num_warps = 4"""),
        ["BLOCK_SIZE = triton.next_power_of_2(n_cols)\n    row_kernel[(n_rows,)]("],
        ["n_cols >= 8192", "n_cols >= 2048", "num_warps = 16"],
        id="an-elif-chain-that-only-chose-the-warps-goes-whole",
    ),
]


@pytest.mark.parametrize(("before", "present", "absent"), FIX)
def test_it_adds_an_autotune_space(before: str, present: list[str], absent: list[str]) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None
    assert h.parses(rw.source)
    for text in present:
        assert text in rw.source
    for text in absent:
        assert text not in rw.source


@pytest.mark.parametrize(
    ("warps", "kept"),
    [
        pytest.param("    num_warps = pick_warps(BLOCK_SIZE)", "    num_warps = pick_warps(BLOCK_SIZE)\n",
                     id="a-helper-with-an-effect"),
        pytest.param("    if torch.cuda.is_available():\n        num_warps = 8\n    else:\n        num_warps = 4",
                     "    if torch.cuda.is_available():\n        num_warps = 8\n    else:\n        num_warps = 4\n",
                     id="an-if-whose-test-calls-out-of-the-module"),
    ],
)  # fmt: skip
def test_what_computed_the_warps_stays_where_dropping_it_could_lose_an_effect(warps: str, kept: str) -> None:
    effect = "\n\nCHOSEN = []\n\n\ndef pick_warps(block):\n    CHOSEN.append(block)\n    return 4\n"
    rw = apply_family(Family.LAUNCH_CONFIG, row_launch(warps) + effect, h.rule_input())
    assert rw is not None and h.parses(rw.source)
    assert kept in rw.source
    assert "num_warps=num_warps" not in rw.source


@pytest.mark.parametrize("before", NOOP)
def test_it_leaves_unsafe_launches_alone(before: str) -> None:
    assert apply_family(Family.LAUNCH_CONFIG, before, h.rule_input()) is None


CAPPED_ROW = HEADER + ROW_KERNEL + """def rows(x, softcap=None):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    BLOCK_SIZE = min(triton.next_power_of_2(n_cols), 64 * 1024)
    if softcap is not None and n_cols > BLOCK_SIZE:
        BLOCK_SIZE = 8 * 1024
    row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE)
    return out


class ModelNew:
    def forward(self, x):
        return rows(x)
"""
ROW_CASES = tuple(CaseShape(i, ((64, n),), ("float32",)) for i, n in enumerate((1000, 32000, 100000)))


@pytest.mark.parametrize(
    ("call", "tuned"),
    [
        pytest.param("rows(x)", True, id="softcap-left-none"),
        pytest.param("rows(x, softcap=None)", True, id="softcap-passed-none"),
        pytest.param("rows(x, softcap=self.softcap)", False, id="softcap-unknown"),
    ],
)
def test_a_row_block_rebound_under_a_none_test_is_sized_by_the_row(call: str, tuned: bool) -> None:
    # fla's cross entropy: the block follows the row unless a softcap is given, which the wrapper
    # tests with `is not None`; decided, the block is the row's and its warps are tuned
    rw = apply_family(Family.LAUNCH_CONFIG, CAPPED_ROW.replace("rows(x)\n", call + "\n"), h.rule_input(ROW_CASES))
    assert (rw is not None) == tuned
    if rw is not None:
        assert "triton.Config({}, num_warps=16)" in rw.source and "BLOCK_SIZE=BLOCK_SIZE" in rw.source


NEXT_POW2_ROWS = HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=triton.next_power_of_2(n_cols))
return out
''')


@pytest.mark.parametrize(
    ("widths", "warps"),
    [
        pytest.param((64, 128, 200), (4, 1, 2, 8), id="rows-of-at-most-256-take-one-warp"),
        pytest.param((64, 128, 1000), (4, 2, 8, 16), id="a-wider-row-keeps-two-to-sixteen"),
    ],
)
def test_narrow_rows_tune_down_to_one_warp(widths: tuple[int, ...], warps: tuple[int, ...]) -> None:
    # IR_THIN_TILE: a 128-element bf16 row on four warps loads 2 bytes a thread, on one warp 8
    cases = tuple(CaseShape(i, ((4096, n),), ("bfloat16",)) for i, n in enumerate(widths))
    rw = apply_family(Family.LAUNCH_CONFIG, NEXT_POW2_ROWS, h.rule_input(cases))
    assert rw is not None
    assert re.findall(r"num_warps=(\d+)", rw.source) == [str(w) for w in warps]
    assert ("on 1-2 warps each thread loads a vector" in rw.effect) == (1 in warps)


# lmdeploy's top-k router, reduced to top-1: one program a row, all 192 experts in one tile of
# 256 (no loop walks them), the lanes past them masked to -inf
ROUTER = HEADER + """@triton.jit
def router_kernel(scores_ptr, ids_ptr, stride, NUM_EXPERTS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    experts = tl.arange(0, BLOCK_SIZE)
    scores = tl.load(scores_ptr + row * stride + experts, mask=experts < NUM_EXPERTS, other=0.0)
    scores = tl.where(experts < NUM_EXPERTS, scores, -float("inf"))
    tl.store(ids_ptr + row, tl.argmax(scores, axis=0))


""" + wrapper("""
ids = torch.empty(x.shape[0], dtype=torch.int32, device=x.device)
router_kernel[(x.shape[0],)](x, ids, x.stride(0), NUM_EXPERTS=192, BLOCK_SIZE=256, num_warps=8)
return ids
""")
ROUTER_CASES = (CaseShape(0, ((4096, 192),), ("float32",)),)


def test_a_block_that_is_one_whole_tile_keeps_its_value() -> None:
    """A block that no program id, loop or divisor walks holds its extent in one tile: 128
    would route among the first 128 experts only. Its warps are tuned, its value stays."""
    rw = apply_family(Family.LAUNCH_CONFIG, ROUTER, h.rule_input(ROUTER_CASES))
    assert rw is not None and h.parses(rw.source)
    assert "NUM_EXPERTS=192, BLOCK_SIZE=256," in rw.source
    configs = re.findall(r"triton\.Config\((.*)\)", rw.source)
    assert len(configs) >= 2 and all(c.startswith("{}, num_warps=") for c in configs), configs


@pytest.mark.parametrize(
    "walk",
    [
        pytest.param(("row = tl.program_id(0)", "row = tl.program_id(0)\n    chunks = tl.cdiv(NUM_EXPERTS, BLOCK_SIZE)"),
                     id="a-cdiv-divisor"),
        pytest.param(("row = tl.program_id(0)", "row = tl.program_id(0)\n    chunks = NUM_EXPERTS // BLOCK_SIZE"),
                     id="a-floor-divisor"),
        pytest.param(("experts = tl.arange(0, BLOCK_SIZE)", "experts = tl.arange(0, BLOCK_SIZE)\n"
                      "    for start in range(0, NUM_EXPERTS, BLOCK_SIZE):\n        pass"), id="a-loop-range"),
        pytest.param(("experts = tl.arange(0, BLOCK_SIZE)", "experts = tl.arange(0, BLOCK_SIZE)\n"
                      "    experts += BLOCK_SIZE\n    experts -= BLOCK_SIZE"), id="added-in-place"),
    ],
)  # fmt: skip
def test_a_block_that_walks_is_tuned(walk: tuple[str, str]) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, ROUTER.replace(*walk), h.rule_input(ROUTER_CASES))
    assert rw is not None and '"BLOCK_SIZE": ' in rw.source


@pytest.mark.parametrize(
    ("kernel", "shapes", "fixed"),
    [
        pytest.param("rows_pid_offset.py", ((1024, 256),), 256, id="rows-beside-a-whole-tile-of-256-columns"),
        pytest.param("rows_divmod_index.py", ((4096, 32, 128), (4096, 32)), 128, id="rows-beside-a-head-dim-of-128"),
    ],
)
def test_one_tuned_axis_of_a_2d_tile_gets_the_tiled_space(kernel: str, shapes: tuple, fixed: int) -> None:
    """The elementwise space (1024-8192) is for the block of a 1-D kernel: beside a tile's fixed
    other axis it made tiles of up to a million elements. The tiled space stays near the launch,
    and no tile passes 16384 elements."""
    source = (Path(__file__).resolve().parents[1] / "kernels" / kernel).read_text()
    cases = (CaseShape(0, shapes, ("float32",) * len(shapes)),)
    rw = apply_family(Family.LAUNCH_CONFIG, source, h.rule_input(cases))
    assert rw is not None and "(tiled," in rw.mechanism
    blocks = [int(b) for b in re.findall(r'triton\.Config\(\{"BLOCK(?:_M)?": (\d+)\}', rw.source)]
    assert len(blocks) >= 4 and max(blocks) * fixed <= 16384, blocks


def test_without_cases_a_kept_whole_tile_still_bounds_the_tile() -> None:
    """No case gives the columns' block: the launch's literal 256 does, so 64 rows may double
    (128 x 256 = 32768 elements is past the bound) only downwards."""
    source = (Path(__file__).resolve().parents[1] / "kernels" / "rows_pid_offset.py").read_text()
    source = source.replace("triton.cdiv(M, 8), 1)](x, out, M, N, 1, BLOCK_M=8,", "triton.cdiv(M, 64), 1)](x, out, M, N, 1, BLOCK_M=64,")
    rw = apply_family(Family.LAUNCH_CONFIG, source, h.rule_input())
    assert rw is not None and "BLOCK_N=256" in rw.source
    blocks = {int(b) for b in re.findall(r'triton\.Config\(\{"BLOCK_M": (\d+)\}', rw.source)}
    assert 64 in blocks and max(blocks) * 256 <= 16384, blocks


def test_it_prunes_gemm_tiles_larger_than_every_case() -> None:
    small = tuple(CaseShape(i, ((m, 64), (64, 64)), ("float16", "float16")) for i, m in enumerate((64, 50)))
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), h.rule_input(small))
    assert rw is not None
    assert '"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64' in rw.source
    assert '"BLOCK_M": 128' not in rw.source


def test_it_takes_the_fp32_tile_set_for_fp32_operands() -> None:
    cases = (CaseShape(0, ((512, 512), (512, 512)), ("float32", "float32")),)
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), h.rule_input(cases))
    assert rw is not None
    assert '"BLOCK_K": 64' not in rw.source


def test_it_only_touches_the_kernels_the_findings_name() -> None:
    before = HEADER + TWO_KERNELS + wrapper('''
n = x.numel()
tmp = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, tmp, n, BLOCK_SIZE=1024)
copy2_kernel[(triton.cdiv(n, 1024),)](tmp, x, n, BLOCK_SIZE=1024)
return x
''')
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input(kernels=frozenset({"copy2_kernel"})))
    assert rw is not None and rw.kernels == ("copy2_kernel",)
    assert rw.source.count("@triton.autotune") == 1
    assert "copy_kernel[(triton.cdiv(n, 1024),)](x, tmp, n, BLOCK_SIZE=1024)" in rw.source


def _correct_for_every_config(tmp_path: Path, befores: dict[str, str]) -> None:
    """Each module's LAUNCH_CONFIG rewrite, checked under the interpreter with every config."""
    paths = []
    for name, before in befores.items():
        rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
        assert rw is not None
        path = tmp_path / name
        path.write_text(rw.source)
        paths.append(path)
    results = h.interp_check(paths)
    for path in paths:
        r = results[str(path)]
        assert r["ok"], r["message"]
        assert r["configs"] >= 6


def test_rewritten_modules_are_correct_for_every_config(tmp_path: Path) -> None:
    befores = {n: h.source(n) for n in ("vec_add.py", "matmul.py", "softmax_loops.py")}
    _correct_for_every_config(tmp_path, {**befores, "add_guarded.py": ADD_GUARDED})


@pytest.mark.parametrize(
    "block",
    [
        pytest.param("min(65536, triton.next_power_of_2(n))", id="clamped-next-power-of-two"),
        pytest.param("max(512, triton.next_power_of_2(n) // 4)", id="quarter-row"),
        pytest.param("pick_block(n)", id="from-a-helper"),
    ],
)
def test_a_loop_step_the_wrapper_computes_is_tuned(block: str) -> None:
    """Whatever the wrapper sizes a loop's step with, a masked walk covers the same elements
    with any power of two: the step joins the autotune space, the launch stops passing it."""
    before = HEADER + STEP_KERNEL + wrapper(f'''
rows, n = x.shape
block = {block}
out = torch.empty_like(x)
scale_kernel[(rows,)](x, out, n, BLOCK=block)
return out, block
''')
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None
    assert 'triton.Config({"BLOCK": 2048}, num_warps=4)' in rw.source
    assert 'triton.Config({"BLOCK": 8192}, num_warps=8)' in rw.source
    assert "scale_kernel[(rows,)](x, out, n, rows=rows)\n" in rw.source
    assert f"block = {block}\n" in rw.source  # the wrapper still returns it


@pytest.mark.parametrize(
    "kernel",
    [
        pytest.param(STEP_KERNEL.replace(", mask=start + offs < n, other=0.0", ""), id="unmasked-load"),
        pytest.param(STEP_KERNEL.replace(", mask=start + offs < n)", ")"), id="unmasked-store"),
    ],
)
def test_an_unmasked_loop_step_is_not_tuned(kernel: str) -> None:
    """Without masks the wrapper's step may be what keeps the walk inside the row."""
    before = HEADER + kernel + wrapper('''
rows, n = x.shape
out = torch.empty_like(x)
scale_kernel[(rows,)](x, out, n, BLOCK=min(65536, triton.next_power_of_2(n)))
return out
''')
    assert apply_family(Family.LAUNCH_CONFIG, before, h.rule_input()) is None


def test_a_computed_loop_step_is_correct_for_every_config(tmp_path: Path) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("group_stats.py"), h.rule_input())
    assert rw is not None
    assert "BLOCK=block" not in rw.source
    path = tmp_path / "group_stats.py"
    path.write_text(rw.source)
    r = h.interp_check([path])[str(path)]
    assert r["ok"], r["message"]
    assert r["configs"] == 8


WIDE_ROWS = tuple(CaseShape(i, ((64, n),), ("float32",)) for i, n in enumerate((1000, 4096, 30000)))
WIDE_TILES = ('{"BLOCK": 4096}, num_warps=16', '{"BLOCK": 16384}, num_warps=16')


def _row_scale(kernel: str) -> str:
    """`kernel` (scale_kernel's signature) launched once per row with a literal block of 256."""
    return HEADER + kernel + wrapper("""
rows, n = x.shape
out = torch.empty_like(x)
scale_kernel[(rows,)](x, out, n, BLOCK=256)
return out
""")


@pytest.mark.parametrize(
    "loop",
    [
        pytest.param("for start in range(0, n, BLOCK):", id="stepped-by-the-block"),
        pytest.param("for i in range(tl.cdiv(n, BLOCK)):\n        start = i * BLOCK", id="count-by-cdiv"),
        # flag_gems' argmax: the full tiles counted apart (its remainder is the next tile, masked)
        pytest.param("steps = (n + BLOCK - 1) // BLOCK\n    for i in range(0, steps):\n        start = i * BLOCK",
                     id="count-through-a-local"),
    ],
)  # fmt: skip
def test_a_loop_along_the_row_also_gets_a_tile_that_holds_each_row(loop: str) -> None:
    """flag_gems sizes its softmax and argmax tiles by the row (one step, or its one-tile path);
    their first conversions, tuned over 64-512 elements around the literal, stayed at 66 and 57
    %SOL on the H200 where the library's own reached 79 and 78. Past that neighbourhood the
    space gets each case's row rounded up to a power of two, at most MAX_BLOCK (30000 -> 16384),
    on 16 warps from 4096 up; a row already inside it (1000 -> 1024) adds nothing."""
    before = _row_scale(STEP_KERNEL.replace("for start in range(0, n, BLOCK):", loop))
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input(WIDE_ROWS))
    assert rw is not None
    configs = re.findall(r'triton\.Config\(\{"BLOCK": (\d+)\}, num_warps=(\d+)\)', rw.source)
    assert configs[-2:] == [("4096", "16"), ("16384", "16")]
    assert ("1024", "4") in configs and ("2048", "8") not in configs
    assert "Configs with BLOCK = 4096, 16384 hold a case's whole row" in rw.effect
    without_cases = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert without_cases is not None and not any(t in without_cases.source for t in WIDE_TILES)
    assert "whole row" not in without_cases.effect


def test_the_row_tiles_are_correct_at_every_config(tmp_path: Path) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("softmax_loops.py"), h.rule_input(WIDE_ROWS))
    assert rw is not None
    assert '"BLOCK_SIZE": 4096}, num_warps=16' in rw.source and '"BLOCK_SIZE": 16384}, num_warps=16' in rw.source
    path = tmp_path / "softmax_loops.py"
    path.write_text(rw.source)
    r = h.interp_check([path])[str(path)]
    assert r["ok"], r["message"]
    assert r["configs"] == 10


ROWS_KERNEL = """@triton.jit
def rows_scale_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        tl.store(out_ptr + rows[:, None] * N + cols[None, :], 2 * x, mask=mask)


"""


ROWS_MODULE_TAIL = """

class Model(torch.nn.Module):
    def forward(self, x):
        return 2 * x


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(37, 3001)]


def get_input_cases():
    return [get_inputs(), [torch.randn(5, 70)], [torch.randn(2, 1000)], [torch.randn(9, 17)], [torch.randn(1, 4097)]]


def get_verify_inputs():
    return [get_inputs(), [torch.randn(3, 33)]]
"""


def _rows_scale(kernel: str, grid: str = "triton.cdiv(M, 8)") -> str:
    """`kernel` launched over [8 x 256] tiles, with a Model and cases for the interpreter check."""
    return HEADER + kernel + f"""class ModelNew(torch.nn.Module):
    def forward(self, x):
        M, N = x.shape
        out = torch.empty_like(x)
        rows_scale_kernel[({grid},)](x, out, M, N, BLOCK_M=8, BLOCK_N=256)
        return out
""" + ROWS_MODULE_TAIL


def test_a_tile_of_rows_walking_along_its_last_axis_gets_one_row_a_program(tmp_path: Path) -> None:
    """flag_gems' log_softmax tiles [BLOCK_M rows, BLOCK_N of each row] and walks the rows twice
    in BLOCK_N steps. One row a program with the whole row in one step: on an H100 (a probe,
    `triton.testing.do_bench` medians) 1.18-1.49x over the first conversion's tuned rewrite on
    four of its five cases (rows of 4096-65536), 0.99x on rows of 1024 (no such config)."""
    rw = apply_family(Family.LAUNCH_CONFIG, _rows_scale(ROWS_KERNEL), h.rule_input(WIDE_ROWS))
    assert rw is not None
    configs = re.findall(r'triton\.Config\(\{"BLOCK_M": (\d+), "BLOCK_N": (\d+)\}, num_warps=(\d+)\)', rw.source)
    assert configs[-2:] == [("1", "4096", "16"), ("1", "16384", "16")]
    path = tmp_path / "rows_scale.py"
    path.write_text(rw.source)
    r = h.interp_check([path])[str(path)]
    assert r["ok"], r["message"]
    assert r["configs"] == len(configs) == 10


def test_a_dot_kernels_tiled_space_claims_no_row_tiles() -> None:
    """A `tl.dot` kernel outside the GEMM table gets the plain tiled space; its K loop is no row,
    and the rationale must not name tiles the space does not hold."""
    source = (Path(__file__).resolve().parents[1] / "kernels" / "dot_tf32.py").read_text()
    cases = (CaseShape(0, ((256, 64, 256), (256, 256, 64)), ("float32", "float32")),)
    rw = apply_family(Family.LAUNCH_CONFIG, source, h.rule_input(cases))
    assert rw is not None and "(tiled, 8 configs" in rw.mechanism
    assert "whole row" not in rw.effect and '"BLOCK_K": 256' not in rw.source


def test_a_tile_walking_along_its_first_axis_keeps_its_last_axis() -> None:
    """A column walk (`rows[:, None]` steps, the contiguous `cols[None, :]` stays): a one-wide
    last axis would cost every coalesced access, so no row tile is added."""
    column_walk = (
        ROWS_KERNEL.replace("rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)",
                            "cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)")
        .replace("for start in range(0, N, BLOCK_N):\n        cols = start + tl.arange(0, BLOCK_N)",
                 "for start in range(0, M, BLOCK_M):\n        rows = start + tl.arange(0, BLOCK_M)")
    )  # fmt: skip
    rw = apply_family(Family.LAUNCH_CONFIG, _rows_scale(column_walk, "triton.cdiv(N, 256)"), h.rule_input(WIDE_ROWS))
    assert rw is not None
    assert '"BLOCK_N": 1}' not in rw.source and '"BLOCK_M": 1,' not in rw.source


def test_a_2d_tiles_axis_and_a_loop_not_along_a_parameter_get_no_row_tiles() -> None:
    tiled = apply_family(Family.LAUNCH_CONFIG, st.source("chunk_mean_fla.py"), h.rule_input(WIDE_ROWS))
    assert tiled is not None and "num_warps=16" not in tiled.source
    before = _row_scale(STEP_KERNEL.replace("range(0, n, BLOCK)", "range(0, 4 * BLOCK, BLOCK)"))
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input(WIDE_ROWS))
    assert rw is not None and "num_warps=16" not in rw.source


def test_one_axis_of_a_2d_tile_also_gets_smaller_tiles_on_fewer_warps() -> None:
    """fla's chunk mean tiles [BT, BD] with BT fixed by the chunk: halving and quartering BD on
    two warps makes more programs of less work, which a 1-D loop's block does not get."""
    rw = apply_family(Family.LAUNCH_CONFIG, st.source("chunk_mean_fla.py"), h.rule_input())
    assert rw is not None
    for config in ('{"BD": 32}, num_warps=2', '{"BD": 16}, num_warps=2', '{"BD": 16}, num_warps=4',
                   '{"BD": 64}, num_warps=8', '{"BD": 128}, num_warps=8'):  # fmt: skip
        assert config in rw.source
    assert '"BD": 8}' not in rw.source  # below 16 lanes of a row
    loops = apply_family(Family.LAUNCH_CONFIG, h.source("softmax_loops.py"), h.rule_input())
    assert loops is not None and "num_warps=2" not in loops.source


@pytest.mark.parametrize(
    ("kernel", "launch", "restored"),
    [
        pytest.param(SCALE_KERNEL.replace("out_ptr + offs", "x_ptr + offs", 1), "(x, x, n, BLOCK_SIZE=1024)",
                     'restore_value=["x_ptr"]', id="kernel-stores-what-it-loads"),
        pytest.param(SCALE_KERNEL, "(x, x, n, BLOCK_SIZE=1024)", 'restore_value=["out_ptr"]',
                     id="launch-passes-one-tensor-twice"),
    ],
)  # fmt: skip
def test_an_in_place_launch_is_restored_after_each_benchmarking_run(kernel: str, launch: str, restored: str) -> None:
    """Doubling x in place once per config the autotuner times would hand back x times 2**k:
    the autotuner restores what the kernel writes and the launch also reads."""
    before = HEADER + kernel + wrapper(f"""
n = x.numel()
copy_kernel[(triton.cdiv(n, 1024),)]{launch}
return x
""")
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None
    assert f'    key=["n"],\n    {restored},\n)\n@triton.jit' in rw.source


def test_an_out_of_place_launch_restores_nothing() -> None:
    before = HEADER + SCALE_KERNEL + wrapper("""
n = x.numel()
out = torch.empty_like(x)
copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
return out
""")
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None and "restore_value" not in rw.source


def test_the_parents_own_config_stays_in_the_space() -> None:
    """The autotuner may then never pick something slower than the parent on any shape."""
    path = Path(__file__).resolve().parents[2] / "bench/suite/01_gemm_fp16.py"
    rw = apply_family(Family.LAUNCH_CONFIG, path.read_text(), h.rule_input(h.cases_of(path)))
    assert rw is not None
    assert '"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4)' in rw.source
    assert '"BLOCK_M": 128, "BLOCK_N": 256' in rw.source


def test_the_parents_warps_from_a_module_constant_stay_in_the_space() -> None:
    before = "NUM_WARPS = 2\n" + h.source("vec_add.py").replace("num_warps=4", "num_warps=NUM_WARPS")
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None
    assert 'triton.Config({"BLOCK_SIZE": 1024}, num_warps=2),' in rw.source


# --- size dispatch: launch-bound sizes keep the fixed launch --------------------------------


@pytest.mark.parametrize(
    ("widths", "own"),
    [
        # calculate_settings: 4 warps up to 2047 columns, 8 to 8191, 16 to 32767, then 32
        pytest.param((1000, 40000), (4, 32), id="a-row-of-32768-keeps-its-32-warps"),
        pytest.param((3000, 5000), (8, 16), id="neither-case-on-four-warps"),
    ],
)
def test_the_parents_warps_computed_case_by_case_stay_in_the_space(widths: tuple[int, ...], own: tuple[int, ...]) -> None:
    """liger launches with the warps `calculate_settings` returns for each row: each case's
    value is a config, so the autotuner (keyed by the row) can keep every case's own choice."""
    cases = tuple(CaseShape(i, ((64, n),), ("float32",)) for i, n in enumerate(widths))
    rw = apply_family(Family.LAUNCH_CONFIG, st.source("softmax_liger.py"), h.rule_input(cases))
    assert rw is not None
    warps = [int(w) for w in re.findall(r"num_warps=(\d+)", rw.source)]
    assert tuple(warps[: len(own)]) == own
    assert set(warps) == set(own) | {2, 4, 8, 16}

# sglang's q/k norm: one helper, called for q and again for k, each launch with its own warps
SOFTMAX_TWICE = st.source("softmax_liger.py").replace(
    "class ModelNew(nn.Module):\n    def forward(self, x):\n        return LigerSoftmaxFunction.apply(x)\n",
    "class ModelNew(nn.Module):\n    def forward(self, q, k):\n        return _softmax_forward(q), _softmax_forward(k)\n",
)


def test_the_parents_warps_on_every_call_path_stay_in_the_space() -> None:
    cases = tuple(
        CaseShape(i, ((64, q), (64, k)), ("float32", "float32")) for i, (q, k) in enumerate([(1000, 40000), (3000, 5000)])
    )
    rw = apply_family(Family.LAUNCH_CONFIG, SOFTMAX_TWICE, h.rule_input(cases))
    assert rw is not None
    warps = [int(w) for w in re.findall(r"num_warps=(\d+)", rw.source)]
    # q's rows on 4 and 8 warps, k's on 32 and 16: all four are the parent's own
    assert warps[:4] == [4, 8, 16, 32]


def test_a_block_that_follows_the_row_on_another_call_path_is_tuned(tmp_path) -> None:
    """q's rows are 64 wide on every case, k's 4096 and 8192: read along q's path alone, the
    block is one constant and the rule has nothing to tune (it refused); along both, it follows
    the row, and the space holds each path's own warps."""
    cases = tuple(
        CaseShape(i, ((64, 64), (64, k)), ("float32", "float32")) for i, k in enumerate([4096, 8192])
    )
    rw = apply_family(Family.LAUNCH_CONFIG, SOFTMAX_TWICE, h.rule_input(cases))
    assert rw is not None
    warps = [int(w) for w in re.findall(r"num_warps=(\d+)", rw.source)]
    assert warps[:3] == [4, 8, 16] and set(warps) == {2, 4, 8, 16}
    assert 'key=["n_cols", "n_rows"]' in rw.source
    module = re.sub(r"def get_inputs\(\):.*", QK_INPUTS, rw.source, flags=re.S).replace(
        "    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n",
        "    def forward(self, q, k):\n        return torch.softmax(q, dim=-1), torch.softmax(k, dim=-1)\n",
    )
    h.assert_interp_ok({"qk": module}, tmp_path)


QK_INPUTS = """def get_inputs():
    return [torch.randn(64, 64), torch.randn(64, 4096)]


def get_input_cases():
    return [[torch.randn(64, 64), torch.randn(64, k)] for k in (4096, 8192, 4096, 8192, 4096)]


def get_verify_inputs():
    return [[torch.randn(3, 64), torch.randn(2, 300)], [torch.randn(5, 37), torch.randn(4, 1000)]]
"""


# sglang's KV-buffer writes skip the rows whose location equals a reserved index: a marker in
# the data, compared with loaded values, not a size
SENTINEL_KERNEL = """@triton.jit
def put_rows(out_ptr, x_ptr, loc_ptr, skip, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    loc = tl.load(loc_ptr + row)
    cols = tl.arange(0, BLOCK)
    keep = (cols < n_cols) & (loc != skip)
    tl.store(out_ptr + loc * n_cols + cols, tl.load(x_ptr + row * n_cols + cols, mask=keep), mask=keep)


"""


@pytest.mark.parametrize(
    ("compare", "key"),
    [
        pytest.param("loc != skip", '["n_cols", "n"]', id="a-marker-compared-with-a-loaded-value"),
        # the same name compared with a row index is a size
        pytest.param("row != skip", '["skip", "n_cols", "n"]', id="compared-with-the-program-index"),
    ],
)
def test_a_sentinel_compared_with_loaded_values_is_no_key(compare: str, key: str) -> None:
    source = HEADER + SENTINEL_KERNEL.replace("loc != skip", compare) + wrapper(
        "n, n_cols = x.shape\n"
        "out = torch.zeros(2 * n, n_cols, device=x.device, dtype=x.dtype)\n"
        "loc = torch.arange(n, device=x.device) * 2\n"
        "put_rows[(n,)](out, x, loc, 0, n_cols, BLOCK=1024)\n"
        "return out\n"
    )
    cases = tuple(CaseShape(i, ((m, 1000),), ("float32",)) for i, m in enumerate((64, 300)))
    rw = apply_family(Family.LAUNCH_CONFIG, source, h.rule_input(cases))
    assert rw is not None and f"key={key}" in rw.source


H200 = sol.lookup("NVIDIA H200").spec


def _gemm_cases(*mnk: tuple[int, int, int], verify: tuple[int, int, int] = (37, 129, 77)) -> tuple[CaseShape, ...]:
    timed = [CaseShape(i, ((m, k), (k, n)), ("float16", "float16")) for i, (m, n, k) in enumerate(mnk)]
    m, n, k = verify
    return (*timed, CaseShape(len(timed), ((m, k), (k, n)), ("float16", "float16"), timed=False))


def _on_h200(cases: tuple[CaseShape, ...]) -> RuleInput:
    return RuleInput((), ProposalContext(cases=cases, device=H200))


def test_launch_bound_gemm_sizes_keep_the_fixed_launch() -> None:
    # 1024^3 is 2.2 us of tensor-core work at the H200's peak, 4096^3 139 us: one launch-bound case
    cases = _gemm_cases((4096, 4096, 4096), (1024, 1024, 1024), (2048, 2048, 2048))
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), _on_h200(cases))
    assert rw is not None and h.parses(rw.source)
    src = rw.source
    # the kernel itself stays a plain @triton.jit; an autotuned handle of it follows
    assert "@triton.autotune" not in src
    assert 'matmul_kernel_tuned = triton.autotune(\n    configs=[\n' in src
    assert 'key=["M", "N", "K"],\n)(matmul_kernel)\n' in src
    limit = int(re.search(r"^MATMUL_KERNEL_FIXED_UP_TO = ([\d_]+)$", src, re.M).group(1))
    assert 1024**3 < limit < 2048**3  # between the launch-bound case and the next one
    assert "        if M * N * K <= MATMUL_KERNEL_FIXED_UP_TO:\n            matmul_kernel[grid](\n" in src
    # the fixed branch is the parent's launch, unchanged; the tuned one reads its blocks from meta
    assert "                BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,\n            )\n        else:\n" in src
    assert (
        '            matmul_kernel_tuned[lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), '
        'triton.cdiv(N, meta["BLOCK_N"]))](\n' in src
    )
    assert "grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))" in src  # the fixed launch still reads it
    assert "launch-bound" in rw.mechanism and "matmul_kernel_tuned" in rw.mechanism


def test_the_baseline_profiles_sol_decides_which_cases_are_launch_bound() -> None:
    # N is not known from the shapes (a weight's size): the cases' measured SOL times decide,
    # and M*K, which the shapes do give, tells the sizes apart at run time
    source = h.source("matmul.py").replace("_, N = b.shape", "N = self.n")
    cases = tuple(
        replace(c, sol_us=t) if c.timed else c
        for c, t in zip(_gemm_cases((8192, 1024, 2048), (1024, 1024, 2048)), (34.7, 4.3, 0.0), strict=True)
    )
    rw = apply_family(Family.LAUNCH_CONFIG, source, _on_h200(cases))
    assert rw is not None
    assert "if M * K <= MATMUL_KERNEL_FIXED_UP_TO:" in rw.source
    limit = int(re.search(r"^MATMUL_KERNEL_FIXED_UP_TO = ([\d_]+)$", rw.source, re.M).group(1))
    assert 1024 * 2048 < limit < 8192 * 2048


def _with_times(cases: tuple[CaseShape, ...], sol_us: list[float], time_us: list[float] | None) -> tuple:
    return tuple(
        replace(c, sol_us=sol_us[c.index], time_us=time_us[c.index] if time_us else None) if c.timed else c
        for c in cases
    )


def test_cases_with_little_headroom_over_sol_keep_the_fixed_launch() -> None:
    """24_rmsnorm_silu_gate on the H200: every case's SOL is over 8 us, but the two shortest
    leave 15-18 us between the measured time and SOL, less than the autotuner's host work can
    cost; its autotuned candidate was 2-19 us slower there. They keep the fixed launch."""
    path = Path(__file__).resolve().parents[2] / "bench/suite/24_rmsnorm_silu_gate_fp16.py"
    sol_us, time_us = [26.2, 52.4, 13.1, 38.4, 9.6], [53.0, 97.0, 30.9, 73.5, 24.5]
    rw = apply_family(Family.LAUNCH_CONFIG, path.read_text(), _on_h200(_with_times(h.cases_of(path), sol_us, time_us)))
    assert rw is not None and h.parses(rw.source)
    limit = int(re.search(r"^RMSNORM_SILU_GATE_KERNEL_FIXED_UP_TO = ([\d_]+)$", rw.source, re.M).group(1))
    # the launch compares the bytes of its tensors: x, g and out (rows x hidden) and the weight
    rows, hidden = zip(*(c.shapes[0] for c in h.cases_of(path) if c.timed), strict=True)
    sizes = [2 * (3 * r * hd + hd) for r, hd in zip(rows, hidden, strict=True)]
    assert max(sizes[2], sizes[4]) < limit < min(sizes[0], sizes[1], sizes[3])
    assert "20 us above it) and keep the fixed launch" in rw.source
    # measured times unknown: SOL alone calls none of them launch-bound, so no dispatch
    plain = apply_family(Family.LAUNCH_CONFIG, path.read_text(), _on_h200(_with_times(h.cases_of(path), sol_us, None)))
    assert plain is not None and "FIXED_UP_TO" not in plain.source


def test_a_short_case_with_headroom_is_still_tuned() -> None:
    """01_gemm's 2048^3 case: 50 us measured over 17 us of SOL leaves room for better tiles
    (1.65x on the H200); only 1024^3 (SOL 2.2 us) keeps the fixed launch."""
    cases = _with_times(
        _gemm_cases((4096, 4096, 4096), (1024, 1024, 1024), (2048, 2048, 2048)), [139.0, 2.2, 17.4], [431.6, 17.3, 49.6]
    )
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), _on_h200(cases))
    assert rw is not None
    limit = int(re.search(r"^MATMUL_KERNEL_FIXED_UP_TO = ([\d_]+)$", rw.source, re.M).group(1))
    assert 1024**3 < limit < 2048**3


def test_a_row_kernel_dispatches_on_the_bytes_of_its_tensors() -> None:
    before = HEADER + ROW_KERNEL + wrapper('''
n_rows, n_cols = x.shape
out = torch.empty_like(x)
row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=triton.next_power_of_2(n_cols))
return out
''')
    cases = tuple(CaseShape(i, ((r, 4096),), ("float32",)) for i, r in enumerate((65536, 256)))
    rw = apply_family(Family.LAUNCH_CONFIG, before, _on_h200(cases))
    assert rw is not None and h.parses(rw.source)
    assert "if x.nbytes + out.nbytes <= ROW_KERNEL_FIXED_UP_TO:" in rw.source
    # the key argument the grid needs goes to both launches
    assert "BLOCK_SIZE=triton.next_power_of_2(n_cols), n_rows=n_rows)\n" in rw.source
    assert (  # a row block follows the row: only the warps are tuned
        "row_kernel_tuned[(n_rows,)](x, out, n_cols, x.stride(0), "
        "BLOCK_SIZE=triton.next_power_of_2(n_cols), n_rows=n_rows)\n" in rw.source
    )


OPTIONAL_TENSORS = HEADER + """@triton.jit
def row_scale_kernel(x_ptr, w_ptr, out_ptr, mean_ptr, n_cols, stride, HAS_W: tl.constexpr, BLOCK_SIZE: tl.constexpr, scale=None):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    if HAS_W:
        x *= tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    if mean_ptr is not None:
        tl.store(mean_ptr + row, tl.sum(x, axis=0) / n_cols)
    tl.store(out_ptr + row * stride + cols, x, mask=cols < n_cols)


def row_scale(x, weight=None, with_mean=True):
    scale = x.new_ones(x.shape[0])
    n_rows, n_cols = x.shape
    if weight is not None:
        assert weight.shape == (n_cols,)
    out = torch.empty_like(x)
    mean = torch.empty(n_rows, device=x.device) if with_mean else None
    row_scale_kernel[(n_rows,)](
        x, weight, out, mean, n_cols, x.stride(0), HAS_W=weight is not None, BLOCK_SIZE=triton.next_power_of_2(n_cols),
        scale=scale.float() if scale is not None else None,
    )
    return out


class ModelNew:
    def forward(self, x, w):
        return row_scale(x, w)
"""


def test_the_size_dispatch_reads_no_tensor_the_wrapper_lets_be_none() -> None:
    """fla's gated layer norm: every timed case passes a weight, yet the wrapper takes none too
    (`if weight is not None`), and its `mean` is None under RMS norm. The dispatch sums only the
    tensors that are always there; `weight.nbytes` would fail on the call that passes none, as
    would a conditional argument's (`scale.float() if scale is not None else None`)."""
    cases = tuple(CaseShape(i, ((r, 4096), (4096,)), ("float32", "float32")) for i, r in enumerate((65536, 256)))
    rw = apply_family(Family.LAUNCH_CONFIG, OPTIONAL_TENSORS, _on_h200(cases))
    assert rw is not None and h.parses(rw.source)
    assert "    if x.nbytes + out.nbytes <= ROW_SCALE_KERNEL_FIXED_UP_TO:\n" in rw.source
    assert "weight.nbytes" not in rw.source and "mean.nbytes" not in rw.source and "None).nbytes" not in rw.source


@pytest.mark.parametrize(
    ("cases", "why"),
    [
        pytest.param(_gemm_cases((4096, 4096, 4096), (2048, 2048, 2048)), "all large", id="all-large"),
        pytest.param(_gemm_cases((1024, 1024, 1024), (512, 512, 512)), "all small", id="all-small"),
        pytest.param(
            tuple(replace(c, sol_us=t) if c.timed else c for c, t in zip(
                _gemm_cases((4096, 4096, 64), (1024, 1024, 1024)), (2.0, 30.0, 0.0), strict=True
            )),
            "the smaller product is the slower case",
            id="not-separable-by-size",
        ),
    ],
)
def test_no_dispatch_unless_the_sizes_separate_launch_bound_cases(cases: tuple[CaseShape, ...], why: str) -> None:
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), _on_h200(cases))
    assert rw is not None
    assert "FIXED_UP_TO" not in rw.source, why
    assert "@triton.autotune(" in rw.source


def test_no_dispatch_without_a_device() -> None:
    cases = _gemm_cases((4096, 4096, 4096), (1024, 1024, 1024))
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), h.rule_input(cases))
    assert rw is not None and "FIXED_UP_TO" not in rw.source


def test_both_branches_of_a_dispatched_module_are_correct(tmp_path: Path) -> None:
    """The verify inputs are small: as written they take the fixed launch; with the limit at -1
    they take the autotuned one (every config)."""
    cases = _gemm_cases((4096, 4096, 4096), (1024, 1024, 1024))
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), _on_h200(cases))
    assert rw is not None
    fixed, tuned = tmp_path / "fixed_matmul.py", tmp_path / "tuned_matmul.py"
    fixed.write_text(rw.source)
    tuned.write_text(re.sub(r"^(MATMUL_KERNEL_FIXED_UP_TO) = .*$", r"\1 = -1", rw.source, flags=re.M))
    results = h.interp_check([fixed, tuned], jobs=2)
    assert results[str(fixed)]["ok"], results[str(fixed)]["message"]
    assert results[str(fixed)]["configs"] == 1  # no autotuned launch ran
    assert results[str(tuned)]["ok"], results[str(tuned)]["message"]
    assert results[str(tuned)]["configs"] >= 6


def test_a_dispatched_kernel_is_not_tuned_again() -> None:
    cases = _gemm_cases((4096, 4096, 4096), (1024, 1024, 1024))
    rw = apply_family(Family.LAUNCH_CONFIG, h.source("matmul.py"), _on_h200(cases))
    assert rw is not None and "matmul_kernel_tuned" in rw.source
    assert apply_family(Family.LAUNCH_CONFIG, rw.source, _on_h200(cases)) is None


def test_tier0_sees_the_dispatched_kernels_autotune_space() -> None:
    """After the dispatch rewrite tier 0 must not report the kernel as never autotuned (the
    fixed launch is deliberate), while the parent still is."""
    from tests.engine import tier0

    before = h.source("matmul.py")
    assert "T0-NO-AUTOTUNE" in {f.code for f in tier0(before).findings}
    cases = _gemm_cases((4096, 4096, 4096), (1024, 1024, 1024))
    rw = apply_family(Family.LAUNCH_CONFIG, before, _on_h200(cases))
    assert rw is not None
    assert "T0-NO-AUTOTUNE" not in {f.code for f in tier0(rw.source).findings}


def test_sizes_the_shapes_do_not_give_come_from_the_recorded_launches() -> None:
    """N and the element-wise kernel's n come from a weight: the baseline's recorded launches
    give them, so both kernels of a linear + GELU module dispatch."""
    path = Path(__file__).resolve().parents[2] / "bench/suite/21_linear_gelu_fp16.py"
    tokens, sol_us = [8192, 4096, 16384, 1024, 6000], [34.7, 17.4, 69.5, 4.3, 25.4]
    cases = tuple(
        replace(
            c,
            sol_us=sol_us[c.index],
            launch_ints=(
                ("gelu_kernel", (("n_elements", tokens[c.index] * 1024),)),
                ("linear_kernel", (("K", 2048), ("M", tokens[c.index]), ("N", 1024))),
            ),
        )
        if c.timed
        else c
        for c in h.cases_of(path)
    )
    rw = apply_family(Family.LAUNCH_CONFIG, path.read_text(), _on_h200(cases))
    assert rw is not None
    assert "        if M * N * K <= LINEAR_KERNEL_FIXED_UP_TO:\n" in rw.source
    assert "        if n <= GELU_KERNEL_FIXED_UP_TO:\n" in rw.source
    assert "GELU_KERNEL_FIXED_UP_TO = 2_097_152\n" in rw.source  # between 1024 and 4096 tokens of 1024
    # without the recorded sizes neither the product with N nor n is known
    bare = tuple(replace(c, launch_ints=()) for c in cases)
    rw = apply_family(Family.LAUNCH_CONFIG, path.read_text(), _on_h200(bare))
    assert rw is not None and "GELU_KERNEL_FIXED_UP_TO" not in rw.source
    assert "if M * K <= LINEAR_KERNEL_FIXED_UP_TO:" in rw.source


# --- code styles: the rewrite of modules written the way other projects write them ------------

FAMILY = Family.LAUNCH_CONFIG
ADD = st.source("add_tutorial.py")
ADD_LOADS = "    x = tl.load(x_ptr + offsets, mask=mask)\n    y = tl.load(y_ptr + offsets, mask=mask)\n"
ADD_HEURISTICS = ADD.replace(
    "@triton.jit\ndef add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):",
    '@triton.heuristics({"EVEN": lambda args: args["n_elements"] % args["BLOCK_SIZE"] == 0})\n'
    "@triton.jit\ndef add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):",
).replace(
    ADD_LOADS,
    "    if EVEN:\n        x = tl.load(x_ptr + offsets)\n        y = tl.load(y_ptr + offsets)\n"
    "    else:\n" + ADD_LOADS.replace("    ", "        "),
)
# flag_gems: a wrapper of its own above the heuristics, which come from a runtime lookup
ADD_RUNTIME_HEURISTICS = ADD_HEURISTICS.replace(
    '@triton.heuristics({"EVEN": lambda args: args["n_elements"] % args["BLOCK_SIZE"] == 0})\n',
    '@libentry()\n@triton.heuristics(heuristic_config("add"))\n',
).replace(
    "\n\n@libentry()",
    "\n\ndef libentry():\n    return lambda fn: fn\n\n\n"
    "def heuristic_config(op):\n"
    '    return {"add": {"EVEN": lambda args: args["n_elements"] % args["BLOCK_SIZE"] == 0}}[op]\n\n\n@libentry()',
)
ADD_DEFAULT = ADD.replace("BLOCK_SIZE: tl.constexpr):", "BLOCK_SIZE: tl.constexpr = 1024):").replace(
    ", BLOCK_SIZE=1024)", ")"
)
ADD_AUTOTUNED = ADD.replace(
    "@triton.jit\n",
    '@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 512}), triton.Config({"BLOCK_SIZE": 2048})],'
    ' key=["n_elements"])\n@triton.jit\n',
).replace(", BLOCK_SIZE=1024)", ")")

# lightllm and unsloth: the kernel and the helper that launches it defined under a module-level
# `if` (a version check) with a fallback in its `else`, and an import under `try`
ADD_GUARDED = ADD.replace(
    "import triton.language as tl\n",
    "import triton.language as tl\n\ntry:\n    from triton.language.extra import libdevice\n"
    "except ImportError:\n    libdevice = None\n",
).replace(
    ADD[ADD.index("@triton.jit") : ADD.index("class ModelNew")],
    'if triton.__version__ >= "3.0":\n\n'
    + "".join(
        f"    {line}" if line.strip() else line
        for line in ADD[ADD.index("@triton.jit") : ADD.index("class ModelNew")].rstrip().splitlines(keepends=True)
    )
    + "\n\nelse:\n\n    def add(x: torch.Tensor, y: torch.Tensor):\n        return x + y\n\n\n",
)

MATMUL_LAMBDA = (
    '    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)'
    "  # noqa: E731\n"
)
# fla-core writes its grid as a function beside the launch (`def grid(meta): return (...)`)
MATMUL_GRID_DEF = st.source("matmul_tutorial.py").replace(
    MATMUL_LAMBDA,
    '\n    def grid(META):\n        return (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)\n\n',
)

LIGER_KERNEL_ARGS = (
    st.source("softmax_liger.py")
    .replace(
        "\n\ndef _softmax_forward(x):\n",
        '\n\ndef set_large_grf_mode(kernel_args: dict):\n    kernel_args["grf_mode"] = "256"\n\n\n'
        "def _softmax_forward(x):\n    kernel_args = {}\n"
        '    if x.device.type == "xpu":\n        set_large_grf_mode(kernel_args)\n',
    )
    .replace("        num_warps=num_warps,\n    )", "        num_warps=num_warps,\n        **kernel_args,  # XPU-specific\n    )")
)

# sglang: programmatic dependent launch where the GPU has it, a switch of the kernel and a
# launch option in a dict that is empty elsewhere
SOFTMAX_PDL = (
    st.source("softmax_liger.py")
    .replace("BLOCK_SIZE: tl.constexpr):\n", "BLOCK_SIZE: tl.constexpr, USE_GDC: tl.constexpr = False):\n")
    .replace("    row_id = tl.program_id(0)\n", "    row_id = tl.program_id(0)\n    if USE_GDC:\n        tl.extra.cuda.gdc_wait()\n")
    .replace(
        "\n\ndef _softmax_forward(x):\n",
        "\n\ndef is_arch_support_pdl():\n"
        "    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9\n\n\n"
        "def _softmax_forward(x):\n",
    )
    .replace("    y2d = torch.empty_like(x2d)\n",
             '    y2d = torch.empty_like(x2d)\n    pdl_kwargs = {"USE_GDC": True, "launch_pdl": True} if is_arch_support_pdl() else {}\n')
    .replace("        num_warps=num_warps,\n    )", "        num_warps=num_warps,\n        **pdl_kwargs,\n    )")
)
# ... or written in the launch itself
SOFTMAX_PDL_INLINE = SOFTMAX_PDL.replace(
    '    pdl_kwargs = {"USE_GDC": True, "launch_pdl": True} if is_arch_support_pdl() else {}\n', ""
).replace("        **pdl_kwargs,\n", '        **({"USE_GDC": True, "launch_pdl": True} if is_arch_support_pdl() else {}),\n')
# ... or returned by a helper beside the switch's value (sglang's LoRA kernels:
# `enable_pdl, pdl_kwargs = get_pdl_launch_metadata()`)
SOFTMAX_PDL_RETURNED = SOFTMAX_PDL.replace(
    "\n\n\ndef _softmax_forward(x):\n",
    "\n\n\ndef get_pdl_launch_metadata():\n    enable_pdl = is_arch_support_pdl()\n"
    '    return enable_pdl, ({"launch_pdl": True} if enable_pdl else {})\n\n\ndef _softmax_forward(x):\n',
).replace(
    '    pdl_kwargs = {"USE_GDC": True, "launch_pdl": True} if is_arch_support_pdl() else {}\n',
    "    enable_pdl, pdl_kwargs = get_pdl_launch_metadata()\n",
).replace("        **pdl_kwargs,\n", "        USE_GDC=enable_pdl,\n        **pdl_kwargs,\n")

# liger's selective log-softmax passes its block and launch options in a local dict
SOFTMAX_DICT = st.source("softmax_liger.py").replace(
    "    y2d = torch.empty_like(x2d)\n",
    '    y2d = torch.empty_like(x2d)\n    kwargs = {"BLOCK_SIZE": BLOCK_SIZE, "num_warps": num_warps}\n',
).replace("        BLOCK_SIZE=BLOCK_SIZE,\n        num_warps=num_warps,\n", "        **kwargs,\n")

# unsloth: the kernel a plain function, jitted by rebinding its name
ADD_JIT_CALL = ADD.replace("@triton.jit\ndef add_kernel(", "def add_kernel(").replace(
    "\n\n\ndef add(", "\n\n\nadd_kernel = triton.jit(add_kernel)\n\n\ndef add("
)

# unsloth's wrapper: an alias of a Triton function, `divmod`, a bool in arithmetic, bare
# annotations; its kernels jitted by calls, one of them never launched (it keeps its statement)
SOFTMAX_UNSLOTH = (
    st.source("softmax_liger.py")
    .replace("MAX_FUSED_SIZE = 65536\n", "MAX_FUSED_SIZE = 65536\nnext_power_of_2 = triton.next_power_of_2\n")
    .replace("    BLOCK_SIZE = triton.next_power_of_2(n)\n", "    BLOCK_SIZE: int = next_power_of_2(n)\n")
    .replace("@triton.jit\ndef _softmax_single_block_forward_kernel(", "def _softmax_single_block_forward_kernel(")
    .replace(
        "\n\n\ndef _softmax_forward(x):\n",
        "\n\n\n_softmax_single_block_forward_kernel = triton.jit(_softmax_single_block_forward_kernel)\n\n\n"
        "def _unused_kernel(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)\n\n\n"
        "_unused_kernel = triton.jit(_unused_kernel)\n\n\n"
        "def _softmax_forward(x):\n    div, mod = divmod(x.shape[-1], MAX_FUSED_SIZE)\n"
        "    n_chunks: int = div + (mod != 0)\n    BLOCK_SIZE: int\n",
    )
    .replace("    BLOCK_SIZE, num_warps = calculate_settings(n_cols)\n",
             "    if n_chunks == 1:\n        BLOCK_SIZE, num_warps = calculate_settings(n_cols)\n")
)  # fmt: skip

STYLES = [
    st.row(ADD, "add_tutorial.py",
           ['key=["n_elements"]', "    add_kernel[grid](x, y, output, n_elements)\n",
            'grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)'],  # the lambda already reads meta
           id="tutorial-helper-launch-and-grid-lambda"),
    st.row(st.source("matmul_tutorial.py"), "matmul_tutorial.py",
           ['triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32}, num_warps=4, num_stages=2)',
            'key=["M", "N", "K"]',
            # the tiles went; GROUP_SIZE_M, after them, is passed by keyword to bind as before
            "        c.stride(0), c.stride(1),\n        GROUP_SIZE_M=8,\n        ACTIVATION=activation,\n    )\n"],
           ["64, 64, 32, 8", "num_stages=2,\n    )"], id="tiles-by-position-later-arguments-by-keyword"),
    st.row(st.source("softmax_liger.py"), "softmax_liger.py",
           ["triton.Config({}, num_warps=16)", "    BLOCK_SIZE, _ = calculate_settings(n_cols)\n",
            "        BLOCK_SIZE=BLOCK_SIZE,\n        n_rows=n_rows,\n    )"],
           ["num_warps=num_warps"], id="calculate-settings-block-tunes-the-warps"),
    # sglang's MXFP8 GEMM: block and warps bound together from a tuple; the warps go, the block stays
    st.row(st.source("softmax_liger.py").replace(
               "    BLOCK_SIZE, num_warps = calculate_settings(n_cols)\n",
               "    BLOCK_SIZE, num_warps = triton.next_power_of_2(n_cols), 4\n"),
           "softmax_liger.py", ["triton.Config({}, num_warps=16)", "    BLOCK_SIZE = triton.next_power_of_2(n_cols)\n"],
           ["    BLOCK_SIZE, num_warps = ", "num_warps=num_warps"], id="warps-unpacked-from-a-tuple-beside-the-block"),
    # sglang's MLA decode: three from one tuple, two of them still read
    st.row(st.source("softmax_liger.py").replace(
               "    BLOCK_SIZE, num_warps = calculate_settings(n_cols)\n",
               "    BLOCK_SIZE, num_warps, rows = (\n        triton.next_power_of_2(n_cols),\n        4,\n        n_rows,\n    )\n")
           .replace("_softmax_single_block_forward_kernel[(n_rows,)](", "_softmax_single_block_forward_kernel[(rows,)]("),
           "softmax_liger.py",
           ["    BLOCK_SIZE, rows = (\n        triton.next_power_of_2(n_cols),\n        n_rows,\n    )\n"],
           ["num_warps=num_warps", "        4,\n"], id="two-of-three-unpacked-names-stay"),
    st.row(st.source("softmax_online.py"), "softmax_online.py",
           ['triton.Config({"TILE_N": 256}, num_warps=4)', "softmax_kernel_inner[grid](out, x, M, N)\n"],
           ["TILE_N = 256"], id="tile-by-position-in-a-with-block"),
    st.row(ADD_HEURISTICS, "add_tutorial.py",
           ['    key=["n_elements"],\n)\n@triton.heuristics('],  # above the heuristics, which read the block
           id="heuristics-stay-under-the-autotuner"),
    st.row(ADD_RUNTIME_HEURISTICS, "add_tutorial.py",
           ['@libentry()\n@triton.autotune(', '    key=["n_elements"],\n)\n@triton.heuristics(heuristic_config("add"))'],
           ["BLOCK_SIZE=1024"], id="heuristics-from-a-runtime-lookup-under-a-library-wrapper"),
    st.row(ADD_GUARDED, "add_tutorial.py",
           ['    @triton.autotune(\n        configs=[\n', '        key=["n_elements"],\n    )\n    @triton.jit\n',
            "        add_kernel[grid](x, y, output, n_elements)\n"],
           ["BLOCK_SIZE=1024", " \n"], id="kernel-and-helper-under-a-module-level-if"),
    st.row(ADD_DEFAULT, "add_tutorial.py",
           ['triton.Config({"BLOCK_SIZE": 1024}, num_warps=4)', "BLOCK_SIZE: tl.constexpr = 1024):"],
           id="block-from-the-constexpr-default"),
    st.row(st.source("unit_norm_branches.py"), "unit_norm_branches.py",
           ['triton.Config({"BLOCK_R": 2, "BLOCK_C": 512}, num_warps=4)', 'key=["R", "C"]',
            # each branch's grid already reads meta: both stay, the launches lose their blocks
            '        grid = lambda META: (triton.cdiv(R, META["BLOCK_R"]),)  # noqa: E731\n'
            "        with torch.device(x.device):\n            unit_rows_kernel[grid](out, x, R, C)\n",
            "unit_cols_kernel[grid](out, x, R, C)\n"],
           ["BLOCK_R=2", "BLOCK_R=512"], id="grid-lambda-bound-in-each-branch-of-a-dim-dispatch"),
    # liger-kernel passes the row length as a constexpr: it is the key, the grid's rows are added
    st.row(st.source("softmax_liger.py").replace("X_row_stride, n_cols, BLOCK", "X_row_stride, n_cols: tl.constexpr, BLOCK"),
           "softmax_liger.py", ["triton.Config({}, num_warps=16)", 'key=["n_cols", "n_rows"]'],
           ["num_warps=num_warps"], id="row-length-as-a-constexpr-is-the-key"),
    # liger's swiglu: a float scalar passed as `float(gate)` beside the constexpr row length is
    # no size; the row length is the key, whatever else the launch passes
    st.row(st.source("softmax_liger.py")
           .replace("X_row_stride, n_cols, BLOCK", "X_row_stride, gate, n_cols: tl.constexpr, BLOCK")
           .replace("    y = e / d\n", "    y = e / d * gate\n")
           .replace("def _softmax_forward(x):", "def _softmax_forward(x, gate=1.0):")
           .replace("        x2d.stride(0),\n        n_cols,", "        x2d.stride(0),\n        float(gate),\n        n_cols,"),
           "softmax_liger.py", ['key=["n_cols", "n_rows"]', "        float(gate),\n        n_cols,\n"],
           ['key=["gate"'], id="float-scalar-beside-a-constexpr-row-length-is-no-key"),
    # a grid axis that is a product: D joins the key as it is passed, NT (a local) is passed for
    # the key under a name the kernel's own `NT = tl.cdiv(T, BT)` does not hide; one per line
    st.row(st.source("chunk_mean_fla.py"), "chunk_mean_fla.py",
           ['key=["T", "NT_key", "B", "D", "H"]', "        BT=CHUNK,\n        NT_key=NT,\n        B=B,\n    )\n",
            'return (triton.cdiv(D, meta["BD"]) * NT, B * H)'],
           ["BD=32"], id="product-grid-axis-sizes-join-the-key"),
    st.row(MATMUL_GRID_DEF, "matmul_tutorial.py",
           ['key=["M", "N", "K"]', "    def grid(META):\n", "    matmul_kernel[grid](\n"],
           ["64, 64, 32, 8"], id="grid-function-beside-the-launch-reads-meta"),
    # flag_gems names its GEMM tiles TILE_M/N/K beside GROUP_M: the tiles are the constexprs that
    # size the kernel's aranges, so the GEMM space (tiles, warps and stages) is the one tuned
    st.row(st.source("matmul_tutorial.py").replace("BLOCK_SIZE_", "TILE_").replace("GROUP_SIZE_M", "GROUP_M"),
           "matmul_tutorial.py",
           ['triton.Config({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, num_warps=8, num_stages=3)',
            "        GROUP_M=8,\n"],
           ['"GROUP_M": 8'], id="gemm-tiles-named-tile"),
    # flag_gems writes a grid of rows in the launch's subscript (`kernel[M,](...)`): it stays
    st.row(st.source("softmax_liger.py").replace("_kernel[(n_rows,)](", "_kernel[n_rows,]("), "softmax_liger.py",
           ["triton.Config({}, num_warps=16)", "_softmax_single_block_forward_kernel[n_rows,](\n"],
           ["num_warps=num_warps"], id="grid-of-rows-in-the-subscript"),
    # ... and one that divides by the block becomes a lambda over meta, in the subscript's place
    st.row(ADD.replace("add_kernel[grid](", "add_kernel[triton.cdiv(n_elements, 1024), 1](").replace(
               '    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731\n', ""),
           "add_tutorial.py",
           ['add_kernel[lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]), 1)](x, y, output, n_elements)'],
           ["BLOCK_SIZE=1024", "1024), 1]"], id="grid-of-blocks-in-the-subscript"),
    # liger's norms pass `**kernel_args`, a dict only an XPU branch fills (with `grf_mode`): it
    # passes no parameter and no option the rule sets, so it stays, the rows after it
    st.row(LIGER_KERNEL_ARGS, "softmax_liger.py",
           ["triton.Config({}, num_warps=16)", "        **kernel_args,  # XPU-specific\n        n_rows=n_rows,\n    )"],
           ["num_warps=num_warps"], id="kernel-args-dict-filled-on-xpu-only"),
    # written decorated first: the autotune goes above the jit, the call statement goes
    st.row(ADD_JIT_CALL, "add_tutorial.py",
           ['    key=["n_elements"],\n)\n@triton.jit\ndef add_kernel(', "    add_kernel[grid](x, y, output, n_elements)\n"],
           ["add_kernel = triton.jit(add_kernel)", "BLOCK_SIZE=1024"], id="kernel-jitted-by-a-call"),
    st.row(SOFTMAX_UNSLOTH, "softmax_liger.py",
           ["triton.Config({}, num_warps=16)", "@triton.jit\ndef _softmax_single_block_forward_kernel(",
            "_unused_kernel = triton.jit(_unused_kernel)\n"],
           ["_softmax_single_block_forward_kernel = triton.jit(", "num_warps=num_warps"],
           id="unsloth-wrapper-divmod-annotations-triton-alias"),
    # sglang's `**pdl_kwargs`: a switch and a launch option the rule does not tune; they stay
    st.row(SOFTMAX_PDL, "softmax_liger.py",
           ["triton.Config({}, num_warps=16)", "        **pdl_kwargs,\n        n_rows=n_rows,\n    )"],
           ["num_warps=num_warps"], id="pdl-kwargs-dict-with-a-switch"),
    st.row(SOFTMAX_PDL_INLINE, "softmax_liger.py",
           ["triton.Config({}, num_warps=16)",
            '        **({"USE_GDC": True, "launch_pdl": True} if is_arch_support_pdl() else {}),\n        n_rows=n_rows,\n'],
           ["num_warps=num_warps"], id="pdl-kwargs-literal-in-the-launch"),
    st.row(SOFTMAX_PDL_RETURNED, "softmax_liger.py",
           ["triton.Config({}, num_warps=16)", "        USE_GDC=enable_pdl,\n        **pdl_kwargs,\n        n_rows=n_rows,\n"],
           ["num_warps=num_warps"], id="pdl-kwargs-returned-by-a-helper"),
    # ... and one that passes them, written out as keywords first: the dict goes
    st.row(SOFTMAX_DICT, "softmax_liger.py",
           ["triton.Config({}, num_warps=16)",
            "        n_cols,\n        BLOCK_SIZE=BLOCK_SIZE,\n        n_rows=n_rows,\n    )\n"],
           ["kwargs", "num_warps=num_warps"], id="block-and-warps-in-a-local-dict"),
    *st.import_rows("add_tutorial.py", ["@triton.autotune(", 'key=["n_elements"]'], ["BLOCK_SIZE=1024"]),
]

STYLE_REFUSALS = [
    # the dict passes the block itself: the rule cannot take it out of the launch
    st.row(LIGER_KERNEL_ARGS.replace('kernel_args = {}', 'kernel_args = {"BLOCK_SIZE": BLOCK_SIZE}')
           .replace("        BLOCK_SIZE=BLOCK_SIZE,\n", ""), "softmax_liger.py", id="kernel-args-dict-passes-the-block"),
    # the dict may pass the warps the rule takes over ...
    st.row(SOFTMAX_PDL.replace('{"USE_GDC": True, "launch_pdl": True}', '{"USE_GDC": True, "num_stages": 3}'),
           "softmax_liger.py", id="pdl-kwargs-dict-passes-an-option"),
    st.row(SOFTMAX_PDL_RETURNED.replace('({"launch_pdl": True} if enable_pdl else {})', '({"num_warps": 8} if enable_pdl else {})'),
           "softmax_liger.py", id="pdl-kwargs-returned-by-a-helper-pass-an-option"),
    # ... or a constexpr the kernel computes with, not only tests
    st.row(SOFTMAX_PDL.replace("    y = e / d\n", "    y = e / d * (1 + USE_GDC)\n"), "softmax_liger.py",
           id="pdl-kwargs-dict-passes-a-constexpr-read-as-a-value"),
    # a dict a helper reads (not only fills) may hold anything
    st.row(LIGER_KERNEL_ARGS.replace('    kernel_args["grf_mode"] = "256"\n',
                                     '    kernel_args["grf_mode"] = "256"\n    print(kernel_args)\n'),
           "softmax_liger.py", id="kernel-args-dict-read-by-its-helper"),
    st.row(ADD_AUTOTUNED, "add_tutorial.py", id="an-existing-autotune"),
    # a grid function that computes with the fixed tiles itself would have to be rewritten
    st.row(MATMUL_GRID_DEF.replace('META["BLOCK_SIZE_M"]', "64"), "matmul_tutorial.py",
           id="grid-function-beside-the-launch-with-a-fixed-tile"),
    st.row(
        ADD.replace("@triton.jit\n", '@triton.heuristics({"BLOCK_SIZE": lambda args: 1024})\n@triton.jit\n').replace(
            ", BLOCK_SIZE=1024)", ")"
        ),
        "add_tutorial.py",
        id="block-supplied-by-heuristics",
    ),
    # the grid each launch reads is its branch's lambda or, for small inputs, a tuple of the
    # fixed block: no one binding reaches the launch, so the block cannot leave it
    st.row(
        re.sub(
            r"(        grid = lambda META: \(triton.cdiv\((\w), .*\n)",
            r"\1        if \2 < 4096:\n            grid = (triton.cdiv(\2, 2),)\n",
            st.source("unit_norm_branches.py"),
        ),
        "unit_norm_branches.py",
        id="grid-rebound-in-a-branch-before-the-launch",
    ),
]


@pytest.mark.parametrize("case", STYLES)
def test_it_tunes_every_code_style(case: st.StyleCase) -> None:
    st.rewrite(FAMILY, case)


@pytest.mark.parametrize("case", STYLE_REFUSALS)
def test_it_refuses_a_block_it_does_not_own(case: st.StyleCase) -> None:
    assert st.refused(FAMILY, case)


# ---------------------------------------------------------------- widening a one-config autotune


def _one_config(name: str) -> tuple[str, str]:
    """(a module whose kernel is autotuned over a single config, that config): LAUNCH_CONFIG's own
    rewrite of a case with its space cut to the first config, as a first conversion writes it."""
    rw = apply_family(Family.LAUNCH_CONFIG, h.source(name), h.rule_input())
    assert rw is not None
    configs = re.search(r"configs=\[\n(.*?)\n    \]", rw.source, re.S)
    assert configs is not None
    first = configs.group(1).splitlines()[0].strip().rstrip(",")
    return rw.source.replace(configs.group(0), f"configs=[{first}]"), first


@pytest.mark.parametrize(
    ("name", "space"),
    [
        pytest.param("vec_add.py", 'triton.Config({"BLOCK_SIZE": 8192}, num_warps=8)', id="elementwise"),
        pytest.param("matmul.py", 'triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, '
                     "num_stages=3)", id="gemm"),
    ],
)  # fmt: skip
def test_a_one_config_autotune_is_widened_with_its_config_first(name: str, space: str) -> None:
    before, first = _one_config(name)
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None and rw.transform == "autotune_launch_config" and "widened the one-config" in rw.mechanism
    assert f"configs=[\n        {first},\n" in rw.source and space in rw.source
    assert h.parses(rw.source)
    # nothing but the configs list changed: key, launch and grid stay
    removed = [ln for ln in difflib.unified_diff(before.splitlines(), rw.source.splitlines(), lineterm="", n=0)
               if ln.startswith("-") and not ln.startswith("---")]  # fmt: skip
    assert removed == [f"-    configs=[{first}],"]


# Triton's matmul tutorial as its autotuner ships it, cut to one config: a group size beside the
# blocks, every argument but the tiles by position
TUTORIAL_ONE_CONFIG = (
    st.source("matmul_tutorial.py")
    .replace(
        "@triton.jit\ndef matmul_kernel(",
        "@triton.autotune(\n    configs=[triton.Config({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32, "
        "'GROUP_SIZE_M': 8}, num_stages=2)],\n    key=['M', 'N', 'K'],\n)\n@triton.jit\ndef matmul_kernel(",
    )
    .replace("        64, 64, 32, 8,\n", "")
    .replace("        num_stages=2,\n", "")
)


def test_a_one_config_autotune_keeps_a_group_size_beside_its_gemm_tiles(tmp_path: Path) -> None:
    assert "64, 64, 32, 8" not in TUTORIAL_ONE_CONFIG and "GROUP_SIZE_M': 8}" in TUTORIAL_ONE_CONFIG
    rw = apply_family(Family.LAUNCH_CONFIG, TUTORIAL_ONE_CONFIG, st.rule_input(st.StyleCase(TUTORIAL_ONE_CONFIG, "matmul_tutorial.py")))
    assert rw is not None and "widened the one-config" in rw.mechanism
    assert (
        'triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, '
        "num_warps=4, num_stages=2)" in rw.source
    )
    assert '"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}' in rw.source
    path = tmp_path / "matmul_tutorial.py"
    path.write_text(rw.source)
    result = h.interp_check([path])[str(path)]
    assert result["ok"], result["message"]


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        pytest.param(lambda s, c: s.replace(f"configs=[{c}]", f"configs=[{c}, {c.replace('num_warps=', 'num_stages=2, num_warps=')}]"),
                     "two configs: already a space", id="two-configs"),
        pytest.param(lambda s, c: s.replace(c, c[:-1] + ", pre_hook=HOOKS[0])"), "a computed pre_hook", id="pre-hook"),
        pytest.param(lambda s, c: s.replace(f"configs=[{c}]", f"configs=[{c}, {c}][:1]"),
                     "a computed config on a kernel that is not a GEMM: no values to widen", id="computed"),
        pytest.param(lambda s, c: s.replace("tl.store(out_ptr + offsets", "tl.store(x_ptr + offsets"),
                     "stores into what it loads", id="in-place"),
        pytest.param(lambda s, c: s.replace("add_kernel[grid](x, y, out,", "add_kernel[grid](x, y, x,"),
                     "one tensor passed as input and output", id="aliased-launch"),
        # fla's Ascend kernels: `configs=[triton.Config({})]`, which raised an IndexError
        pytest.param(lambda s, c: s.replace(c, "triton.Config({})"), "a config of no block", id="no-block"),
    ],
)  # fmt: skip
def test_a_one_config_autotune_is_left_alone_where_widening_is_unsafe(edit, why: str) -> None:
    before, first = _one_config("vec_add.py")
    changed = edit(before, first)
    assert changed != before, why
    assert apply_family(Family.LAUNCH_CONFIG, changed, h.rule_input()) is None, why


TMA_COMPUTED = h.source("matmul_tma.py")
TMA_LITERAL = h.variant(
    TMA_COMPUTED,
    (
        '@tuner(configs=[c for c in tma_configs() if c.kwargs["BLOCK_M"] == 32][:1], key=["M", "N", "K"])',
        "@triton.autotune(\n"
        '    configs=[triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, pre_hook=set_block_shapes)],\n'
        '    key=["M", "N", "K"],\n'
        ")",
    ),
)
HOOKED = re.compile(r"^        triton\.Config\(.*, pre_hook=set_block_shapes\),$", re.M)


@pytest.mark.parametrize(
    ("before", "first"),
    [
        pytest.param(TMA_COMPUTED, None, id="computed-through-a-forwarding-factory"),
        pytest.param(TMA_LITERAL, 'triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, '
                     "pre_hook=set_block_shapes)", id="literal"),
    ],
)  # fmt: skip
def test_a_one_config_autotune_with_a_pre_hook_is_widened_with_the_hook_on_every_config(
    before: str, first: str | None
) -> None:
    """A TMA GEMM whose pre_hook sets the descriptors' blocks: every config of the space keeps the
    hook; a list the module computes and cuts to one entry (`[...][:1]`) is replaced whole."""
    rw = apply_family(Family.LAUNCH_CONFIG, before, h.rule_input())
    assert rw is not None and "widened the one-config" in rw.mechanism and "pre_hook=set_block_shapes" in rw.mechanism
    configs = re.search(r"    configs=\[\n(.*?\n)    \],\n", rw.source, re.S)
    assert configs is not None
    lines = configs.group(1).splitlines()
    assert len(lines) >= 6 and all(HOOKED.match(ln) for ln in lines), lines
    assert '"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64' in configs.group(1)
    assert (lines[0].strip() == f"{first},") if first else "tma_configs()" not in configs.group(1)
    assert '    key=["M", "N", "K"],\n)\n@triton.jit' in rw.source
    assert ("@tuner(\n" in rw.source) == (first is None)


def test_a_pre_hook_widening_is_refused_where_the_hook_is_not_one_name() -> None:
    two = h.variant(
        TMA_COMPUTED,
        ("[c for c in tma_configs() if", "[c for c in tma_configs() + tma_configs(pre_hook=other_hook) if"),
        ("def _descriptor(t):", "def other_hook(nargs):\n    pass\n\n\ndef _descriptor(t):"),
    )
    assert apply_family(Family.LAUNCH_CONFIG, two, h.rule_input()) is None
    computed = h.variant(TMA_COMPUTED, ("def tma_configs(pre_hook=set_block_shapes):", "def tma_configs(pre_hook=HOOKS[0]):"))
    assert apply_family(Family.LAUNCH_CONFIG, computed, h.rule_input()) is None


def test_a_widened_autotune_is_correct_for_every_config(tmp_path: Path) -> None:
    befores = {n: _one_config(n)[0] for n in ("vec_add.py", "matmul.py")}
    _correct_for_every_config(tmp_path, {**befores, "matmul_tma.py": TMA_COMPUTED})


def test_a_block_a_heuristic_sets_is_not_tuned() -> None:
    """triton 3.6's `Heuristics.run` sets its constexprs after the autotuner has: a config's
    BLOCK_SIZE would be overwritten, a space of configs that all run the heuristic's block."""
    source = ADD.replace(
        "@triton.jit\ndef add_kernel(", '@triton.heuristics({"BLOCK_SIZE": lambda args: 1024})\n@triton.jit\ndef add_kernel('
    )
    assert source != ADD
    rw = apply_family(FAMILY, source, h.rule_input())
    assert rw is None or '"BLOCK_SIZE":' not in rw.source
