"""The source model: kernels, launches, bindings, grids and values, whatever the code style."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from diagnosis.engine.proposers.base import CaseShape
from diagnosis.engine.proposers.rules import cst_util as cu
from diagnosis.engine.srcmodel import Launch, TensorValue, model_of, model_of_tree, read
from diagnosis.engine.srcmodel.read import dotted
from tests.engine import src


def module(imports: str, decorator: str, annotation: str, tl: str = "tl", launch: str = "") -> str:
    """A copy kernel and its wrapper, written with the given imports and spellings."""
    launch = launch or "k[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)"
    return (
        f"{imports}\n\n\n{decorator}\n"
        f"def k(x_ptr, y_ptr, n, BLOCK: {annotation}):\n"
        f"    pid = {tl}.program_id(0)\n"
        f"    offs = pid * BLOCK + {tl}.arange(0, BLOCK)\n"
        f"    {tl}.store(y_ptr + offs, {tl}.load(x_ptr + offs, mask=offs < n), mask=offs < n)\n\n\n"
        "class ModelNew:\n"
        "    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n"
        "        n = x.numel()\n"
        f"        {launch}\n"
        "        return y\n"
    )


KERNEL_STYLES = [
    pytest.param(
        module("import torch\nimport triton\nimport triton.language as tl", "@triton.jit", "tl.constexpr"),
        id="plain",
    ),
    pytest.param(
        module(
            "import torch\nimport triton as tr\nimport triton.language as tl",
            "@tr.jit",
            "tl.constexpr",
            launch="k[(tr.cdiv(n, 256),)](x, y, n, BLOCK=256)",
        ),
        id="import-triton-as-tr",
    ),
    pytest.param(
        module(
            "import torch\nimport triton\nfrom triton import jit\nimport triton.language as tl",
            "@jit",
            "tl.constexpr",
        ),
        id="from-triton-import-jit",
    ),
    pytest.param(
        module(
            "import torch\nimport triton\nimport triton.language as lang",
            "@triton.jit",
            "lang.constexpr",
            "lang",
        ),
        id="triton-language-as-lang",
    ),
    pytest.param(
        module(
            "import torch\nimport triton\nimport triton.language as tl\nfrom triton.language import constexpr",
            "@triton.jit",
            "constexpr",
        ),
        id="from-triton-language-import-constexpr",
    ),
    pytest.param(
        module(
            "import torch\nimport triton\nfrom triton import language as tl",
            "@triton.jit(do_not_specialize=['n'])",
            "tl.constexpr",
        ),
        id="jit-call-and-from-triton-import-language",
    ),
]


@pytest.mark.parametrize("source", KERNEL_STYLES)
def test_it_finds_the_kernel_its_constexpr_and_launch_in_every_import_style(source: str) -> None:
    m = model_of(source)
    assert list(m.kernels) == ["k"]
    k = m.kernels["k"]
    assert k.params == ["x_ptr", "y_ptr", "n", "BLOCK"] and k.constexprs == ["BLOCK"]
    assert not k.autotuned and k.supplied == {}
    assert [c for c in k.calls("tl.load", "tl.store")] and k.program_axes() == {"pid": 0}
    (launch,) = m.launches
    assert (launch.kernel, launch.qualname) == ("k", "ModelNew.forward")
    assert set(launch.bound(k)) == {"x_ptr", "y_ptr", "n", "BLOCK"}


def test_canonical_names_undo_every_alias() -> None:
    m = model_of(
        "import triton as tr\nimport triton.language as lang\nfrom triton.language import arange as ar\n"
    )
    m.activate()
    import libcst as cst

    for text, canonical in (
        ("lang.load", "tl.load"),
        ("tr.cdiv", "triton.cdiv"),
        ("tr.language.dot", "tl.dot"),
        ("ar", "tl.arange"),
        ("x.stride", "x.stride"),
    ):
        assert dotted(cst.parse_expression(text)) == canonical


DECORATED = src(
    """
    import torch
    import triton
    import triton.language as tl

    CONFIGS = [triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 256}, num_warps=8)]


    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @triton.jit
    def tuned(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    @triton.heuristics(values={"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
    @triton.jit
    def heur(x_ptr, n, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    @triton.jit
    def plain(x_ptr, n, BLOCK: tl.constexpr = 1024):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    plain_tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])(plain)
    """
)


def test_it_records_what_autotune_and_heuristics_supply() -> None:
    m = model_of(DECORATED)
    tuned, heur, plain = m.kernels["tuned"], m.kernels["heur"], m.kernels["plain"]
    assert tuned.decorators == ("triton.autotune", "triton.heuristics", "triton.jit")
    assert tuned.autotuned and tuned.supplied == {"BLOCK": "autotune", "EVEN": "heuristics"}
    assert (
        not heur.autotuned and heur.supplied == {"BLOCK": "heuristics"} and list(heur.heuristics) == ["BLOCK"]
    )
    assert plain.autotuned and plain.handles == ("plain_tuned",) and plain.supplied == {"BLOCK": "autotune"}
    assert [d.decorator for d in heur.jit_decorators()] == [d.decorator for d in heur.node.decorators]
    assert list(plain.defaults) == ["BLOCK"]
    assert tuned.tuned_values == {"BLOCK": {128, 256}} and plain.tuned_values == {"BLOCK": {64}}


# unsloth defines its kernels as plain functions and jits them by rebinding the name
JIT_CALLS = src(
    """
    import triton
    import triton.language as tl
    from triton import jit


    def rows(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    rows = triton.jit(rows)
    rows = triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})(rows)


    def cols(x_ptr, n, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    cols = jit(do_not_specialize=["n"])(cols)


    def early(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    EARLY_NAME = early.__name__
    early = triton.jit(early)


    def renamed(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    other = triton.jit(renamed)


    def launch(x):
        rows[(4,)](x, x.numel(), BLOCK=128)
        cols[(4,)](x, x.numel(), BLOCK=128)
    """
)


def test_a_function_rebound_to_its_jitted_self_is_a_kernel() -> None:
    """`f = triton.jit(f)` then `f = triton.heuristics(...)(f)` is the decorator stack written
    as calls; module code that read `f` before the jit saw a plain function, and a jitted copy
    under another name is not `f`: both are left out."""
    m = model_of(JIT_CALLS)
    assert sorted(m.kernels) == ["cols", "rows"]
    rows, cols = m.kernels["rows"], m.kernels["cols"]
    assert rows.decorators == ("triton.heuristics", "triton.jit") and cols.decorators == ("triton.jit",)
    assert rows.supplied == {"EVEN": "heuristics"} and list(rows.heuristics) == ["EVEN"]
    assert [st.body[0].targets[0].target.value for st in rows.wrapped_by] == ["rows", "rows"]
    assert [(lc.kernel, lc.qualname) for lc in m.launches] == [("rows", "launch"), ("cols", "launch")]
    assert cu.find_kernels(m.tree) == {}  # the rules see them once written decorated


ALIAS_LAUNCHES = src(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def plain_norm(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


    @triton.jit
    def gemma_norm(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 2.0)


    def norm(x, gemma):
        fx = gemma_norm if gemma else plain_norm
        fx[(4,)](x, BLOCK=128)
        kernel = plain_norm
        kernel[(2,)](x, BLOCK=64)
        other = gemma_norm if gemma else print
        other[(1,)](x, BLOCK=32)
        if gemma:
            chosen = gemma_norm
        else:
            chosen = plain_norm
        chosen[(8,)](x, BLOCK=16)
    """
)


def test_a_launch_through_a_local_bound_to_kernels_is_theirs() -> None:
    """unsloth picks its norm kernel into a local and launches that: the launch is each
    kernel's the local may hold, written with the local's name (a rule, which edits the launches
    of its kernel's own names, leaves it); a local that may hold something else launches none."""
    m = model_of(ALIAS_LAUNCHES)
    assert [(lc.kernel, lc.target, lc.call.args[-1].value.value) for lc in m.launches] == [
        ("gemma_norm", "fx", "128"),
        ("plain_norm", "fx", "128"),
        ("plain_norm", "kernel", "64"),
        ("gemma_norm", "chosen", "16"),
        ("plain_norm", "chosen", "16"),
    ]
    assert cu.find_launches(m.tree, m.kernels) == []


UNSLOTH_WRAPPER = src(
    """
    import torch
    import triton
    import triton.language as tl

    next_power_of_2 = triton.next_power_of_2


    @triton.jit
    def k(x_ptr, n, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0, mask=tl.arange(0, BLOCK) < n)


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            n_rows: int
            n_rows, n = x.shape
            div, mod = divmod(n, 4096)
            chunks: int = div + (mod != 0)
            if chunks == 1:
                block = next_power_of_2(n)
            else:
                block = 4096
            k[(n_rows,)](x, n, block)
            return x
    """
)


@pytest.mark.parametrize(("shape", "block"), [((3, 300), 512), ((2, 9000), 4096)])
def test_unsloths_wrapper_arithmetic_is_evaluated(shape: tuple[int, int], block: int) -> None:
    """`divmod`, a comparison's bool in a sum, a bare annotation (which binds nothing) and a
    module name bound to a Triton function: the wrapper's values reach the launch."""
    m = model_of(UNSLOTH_WRAPPER)
    assert m.names.resolve("next_power_of_2") == "triton.next_power_of_2"
    (launch,) = m.launches
    (values,) = m.launch_values(launch, m.kernels["k"], [CaseShape(0, (shape,), ("float32",))])
    assert values["BLOCK"] == block and values["n"] == shape[1]
    assert cu.Bindings(launch.function).single("n_rows") is not None  # `n_rows: int` is no binding


@pytest.mark.parametrize(
    ("handle_configs", "values"),
    [
        pytest.param("[triton.Config({'BT': 512})]", {"BT": {32, 64, 512}}, id="both-read: their union"),
        pytest.param("[triton.Config({'BT': bt}) for bt in SIZES]", {}, id="one-unread: unknown"),
    ],
)
def test_two_autotuners_of_one_kernel_give_the_values_of_both(handle_configs: str, values: dict) -> None:
    m = model_of(
        "import triton\nimport triton.language as tl\nSIZES = [16, 32]\n"
        "@triton.autotune(configs=[triton.Config({'BT': BT}) for BT in [32, 64]], key=['T'])\n@triton.jit\n"
        "def k(x, T, BT: tl.constexpr):\n    tl.store(x + tl.arange(0, BT), 1.0)\n"
        f"k_tuned = triton.autotune(configs={handle_configs}, key=['T'])(k)\n"
    )
    assert m.kernels["k"].handles == ("k_tuned",) and m.kernels["k"].tuned_values == values


@pytest.mark.parametrize(
    ("configs", "values", "unknown"),
    [
        pytest.param(
            "[triton.Config({'BT': BT}, num_warps=w, num_stages=s) for BT in [32, 64, 128, 256]"
            " for w in [2, 4, 8] for s in (1, 2)]",
            {"BT": {32, 64, 128, 256}},
            False,
            id="fla-comprehension",
        ),
        pytest.param(
            "[triton.Config({'BT': 64, 'BS': BS}, num_warps=4) for BS in [16, 32]]",
            {"BT": {64}, "BS": {16, 32}},
            False,
            id="literal-and-loop-name",
        ),
        pytest.param("[triton.Config({'BT': bt}) for bt in SIZES]", {}, False, id="a-loop-over-a-name"),
        pytest.param(
            "[triton.Config({'BT': BT}) for BT in [16, 32]] + [triton.Config({'BT': 512})]",
            {},
            True,
            id="a-computed-list",
        ),
        pytest.param("[triton.Config({'BT': 2 * BT}) for BT in [16, 32]]", {}, False, id="a-computed-value"),
        pytest.param("[triton.Config({'BT': 32}), triton.Config({'BT': n})]", {}, False, id="one-unknown"),
    ],
)
def test_it_reads_the_values_the_autotuners_configs_give(configs: str, values: dict, unknown: bool) -> None:
    """A rule that sizes a tile from a block the autotuner chooses needs the largest it may be:
    only where every config's value can be read."""
    m = model_of(
        "import triton\nimport triton.language as tl\nSIZES = [16, 32]\n"
        f"@triton.autotune(configs={configs}, key=['T'])\n@triton.jit\n"
        "def k(x, T, BT: tl.constexpr, BS: tl.constexpr = 16):\n    tl.store(x + tl.arange(0, BT), 1.0)\n"
    )
    k = m.kernels["k"]
    assert k.tuned_values == values and k.supplied_unknown is unknown
    assert k.supplied.get("BT") == ("autotune" if not unknown else None)


FACTORY = """
import triton
import triton.language as tl


def tuner(configs, key, restore_value=None, strategy="log"):
    \"\"\"The project's autotuner.\"\"\"
    return triton.autotune(configs, key, restore_value=restore_value)


def guess(values):
    return triton.heuristics(values)


def {other}


@tuner([triton.Config({{"BLOCK": 128}})], ["n"])
@guess({{"EVEN": lambda args: args["n"] % 128 == 0}})
@triton.jit
def a(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@other(configs=[triton.Config({{"BLOCK": 128}})], key=["n"])
@triton.jit
def b(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
"""


@pytest.mark.parametrize(
    "other",
    [
        pytest.param("other(key, configs):\n    return triton.autotune(configs, key)", id="arguments-reordered"),
        pytest.param("other(configs, key):\n    return triton.autotune(configs[:2], key)", id="configs-changed"),
        pytest.param("other(configs, key):\n    print(key)\n    return triton.autotune(configs, key)", id="more-than-return"),
        pytest.param("other(configs, key, **kw):\n    return triton.autotune(configs, key, **kw)", id="star-args"),
        pytest.param("other(configs, key):\n    return triton.autotune(configs, key, warmup=5)", id="own-value"),
    ],
)  # fmt: skip
def test_a_function_that_only_forwards_to_autotune_or_heuristics_is_read_as_it(other: str) -> None:
    m = model_of(FACTORY.format(other=other))
    a, b = m.kernels["a"], m.kernels["b"]
    assert a.decorators == ("triton.autotune", "triton.heuristics", "triton.jit")
    assert a.autotuned and a.supplied == {"BLOCK": "autotune", "EVEN": "heuristics"}
    # a function that does anything but pass its own arguments on stays an unknown decorator
    assert b.decorators == ("other", "triton.jit") and not b.autotuned and b.supplied == {}


ALIASED = """
import triton
import triton.language as tl
from triton import autotune

cached_autotune = autotune
maybe_tuner = triton.autotune
{rebinding}

@cached_autotune(configs=[triton.Config({{}}, num_warps=w) for w in [2, 4]], key=["n"])
@triton.jit
def a(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@maybe_tuner(configs=[triton.Config({{"BLOCK": 128}})], key=["n"])
@triton.jit
def b(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
"""


def test_a_module_name_bound_once_to_autotune_is_read_as_it() -> None:
    """fla's `fla_cache_autotune = triton.autotune` (no cache installed): without it a rule saw
    an untuned kernel and stacked a second autotuner on it (two num_warps at the launch)."""
    m = model_of(ALIASED.format(rebinding=""))
    assert m.kernels["a"].decorators == ("triton.autotune", "triton.jit") and m.kernels["a"].autotuned
    assert m.kernels["b"].autotuned and m.kernels["b"].supplied == {"BLOCK": "autotune"}
    # bound twice, it may be anything at the decorator: an unknown decorator
    m = model_of(ALIASED.format(rebinding="maybe_tuner = print"))
    assert m.kernels["a"].autotuned
    assert m.kernels["b"].decorators == ("maybe_tuner", "triton.jit") and not m.kernels["b"].autotuned


HELPER = src(
    """
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl

    MAX_FUSED_SIZE = 65536


    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK_SIZE: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_SIZE)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(out_ptr + row * out_stride + cols, x, mask=cols < n_cols)


    def calculate_settings(n):
        BLOCK_SIZE = triton.next_power_of_2(n)
        if BLOCK_SIZE > MAX_FUSED_SIZE:
            raise RuntimeError("too wide")
        num_warps = 4
        if BLOCK_SIZE >= 32768:
            num_warps = 32
        elif BLOCK_SIZE >= 2048:
            num_warps = 8
        return BLOCK_SIZE, num_warps


    def softmax(x, scale=2):
        n_rows, n_cols = x.shape
        BLOCK_SIZE, num_warps = calculate_settings(n_cols)
        y = torch.empty_like(x)
        grid = lambda meta: (n_rows,)
        softmax_kernel[grid](y, x, x.stride(0), y.stride(0), n_cols * scale // 2, BLOCK_SIZE, num_warps=num_warps)
        return y


    class SoftmaxFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return softmax(x.view(-1, x.shape[-1]))


    class ModelNew(nn.Module):
        def forward(self, x):
            with torch.no_grad():
                return SoftmaxFunction.apply(x)
    """
)


def test_values_follow_forward_through_apply_a_helper_and_its_settings() -> None:
    m = model_of(HELPER)
    k = m.kernels["softmax_kernel"]
    (launch,) = m.launches
    assert launch.qualname == "softmax" and launch.by_position(k, "BLOCK_SIZE")
    cases = [CaseShape(0, ((4, 8, 3000),), ("float32",)), CaseShape(1, ((64, 100),), ("float32",))]
    first, second = m.launch_values(launch, k, cases)
    assert first["n_cols"] == 3000 and first["BLOCK_SIZE"] == 4096
    assert first["in_ptr"] == TensorValue((32, 3000), "float32")
    assert (second["n_cols"], second["BLOCK_SIZE"]) == (100, 128)
    assert [ev(launch.keywords["num_warps"].value) for ev in m.launch_envs(launch, cases)] == [8, 4]
    grid = m.grid(launch)
    assert grid.form == "lambda" and grid.meta == "meta" and len(grid.elements or []) == 1


NONE_BRANCHES = src(
    """
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl


    @triton.jit
    def row_kernel(x_ptr, y_ptr, w_ptr, n, BV: tl.constexpr, HAS_W: tl.constexpr):
        pass


    def rows(x, weight=None, softcap=None, scale=None):
        n_rows, V = x.shape
        BV = min(triton.next_power_of_2(V), 64 * 1024)
        if softcap is not None and V > BV:
            BV = 8 * 1024
        y = torch.empty_like(x) if scale is None else None
        has_w = weight is not None
        row_kernel[(n_rows,)](x, y, weight, V, BV=BV, HAS_W=has_w)
        return y


    class ModelNew(nn.Module):
        def forward(self, x, w):
            return rows(x, softcap=30.0 if w is None else None)
    """
)


@pytest.mark.parametrize(
    ("call", "bv"),
    [
        pytest.param("rows(x, softcap=30.0 if w is None else None)", 65536, id="none-passed"),
        pytest.param("rows(x)", 65536, id="none-by-default"),
        pytest.param("rows(x, softcap=30.0)", 8192, id="a-value-passed"),
        pytest.param("rows(x, softcap=self.cap)", None, id="unknown"),
    ],
)
def test_python_none_decides_branches_and_stays_unknown_to_callers(call: str, bv: int | None) -> None:
    m = model_of(NONE_BRANCHES.replace("rows(x, softcap=30.0 if w is None else None)", call))
    k = m.kernels["row_kernel"]
    (launch,) = m.launches
    cases = [CaseShape(0, ((64, 100000), (8,)), ("float32", "float32"))]
    (values,) = m.launch_values(launch, k, cases)
    assert values.get("BV") == bv
    assert values["HAS_W"] is False  # `weight is not None`, weight left to its default None
    assert values["y_ptr"] == TensorValue((64, 100000), "float32")  # `scale is None`: the tensor branch
    assert "w_ptr" not in values  # None itself is not a value a rule reads
    (env,) = m.launch_envs(launch, cases)
    assert {"weight", "scale"}.isdisjoint(env.known())


@pytest.mark.parametrize(
    ("grid", "form", "axes"),
    [
        pytest.param("(triton.cdiv(n, 256),)", "tuple", 1, id="tuple"),
        pytest.param('lambda META: (triton.cdiv(n, META["BLOCK"]), 1)', "lambda", 2, id="lambda"),
        pytest.param("g", "tuple", 1, id="name-bound-once"),
        pytest.param("grid_fn", "function", 1, id="function-of-meta"),
        pytest.param("make(n)", "other", None, id="call-not-followed"),
        # flag_gems writes the tuple in the subscript: `k[M,]` is `k[(M,)]`, not `k[M]`
        pytest.param("n,", "tuple", 1, id="one-axis-in-the-subscript"),
        pytest.param("triton.cdiv(n, 256), 4", "tuple", 2, id="two-axes-in-the-subscript"),
    ],
)
def test_it_reads_the_grid_in_every_form(grid: str, form: str, axes: int | None) -> None:
    source = module(
        "import torch\nimport triton\nimport triton.language as tl\n\n\n"
        'def grid_fn(meta):\n    return (triton.cdiv(1000, meta["BLOCK"]),)',
        "@triton.jit",
        "tl.constexpr",
        launch=f"g = (n,)\n        k[{grid}](x, y, n, BLOCK=256)",
    )
    m = model_of(source)
    g = m.grid(m.launches[0])
    assert g.form == form
    assert (None if g.elements is None else len(g.elements)) == axes


def test_a_grid_in_the_subscript_keeps_the_modules_nodes_and_is_replaced_through_it() -> None:
    source = module(
        "import torch\nimport triton\nimport triton.language as tl", "@triton.jit", "tl.constexpr",
        launch="k[triton.cdiv(n, 256), 4](x, y, n, BLOCK=256)",
    )
    m = model_of(source)
    (launch,) = m.launches
    sub = launch.call.func
    axes = m.grid(launch).elements
    assert len(axes) == 2 and all(e.slice.value is a for e, a in zip(sub.slice, axes, strict=True))  # the same nodes
    edited = cu.replace(m.tree, [(launch.grid, cst.parse_expression("lambda meta: (n, 4)"))])
    assert "k[lambda meta: (n, 4)](x, y, n, BLOCK=256)" in edited.code
    # an edit of the call that holds it keeps the grid's edit (the call rebuilt from its parts)
    call = cu.replace_in(launch.call, [(launch.grid, cst.parse_expression("(n,)"))])
    assert cu.holds(launch.call, launch.grid) and cu.code(call) == "k[(n,)](x, y, n, BLOCK=256)"


def test_a_sliced_subscript_is_no_launch() -> None:
    source = module(
        "import torch\nimport triton\nimport triton.language as tl", "@triton.jit", "tl.constexpr",
        launch="fns = [k]\n        fns[0:1](x, y, n, BLOCK=256)\n        k[n,](x, y, n, BLOCK=256)",
    )
    assert [cu.code(launch.grid) for launch in model_of(source).launches] == ["(n,)"]


@pytest.mark.parametrize(
    ("launch", "form", "local", "axes"),
    [
        pytest.param(
            'def grid_fn(meta):\n            return (triton.cdiv(n, meta["BLOCK"]), 2)\n'
            "        k[grid_fn](x, y, n, BLOCK=256)",
            "function", True, 2, id="def-beside-the-launch-hides-the-module-one",
        ),
        pytest.param("k[grid_fn](x, y, n, BLOCK=256)", "function", False, 1, id="module-level-def"),
        pytest.param(
            'def grid_fn(meta):\n            return (triton.cdiv(n, meta["BLOCK"]), 2)\n'
            "        grid_fn = make(n)\n        k[grid_fn](x, y, n, BLOCK=256)",
            "other", False, None, id="the-binding-that-reaches-the-launch-wins",
        ),
    ],
)
def test_it_reads_a_grid_function_defined_beside_the_launch(
    launch: str, form: str, local: bool, axes: int | None
) -> None:
    source = module(
        "import torch\nimport triton\nimport triton.language as tl\n\n\n"
        'def grid_fn(meta):\n    return (triton.cdiv(1000, meta["BLOCK"]),)',
        "@triton.jit",
        "tl.constexpr",
        launch=launch,
    )
    m = model_of(source)
    g = m.grid(m.launches[0])
    assert (g.form, g.local) == (form, local)
    assert (None if g.elements is None else len(g.elements)) == axes


def _forward(body: str) -> str:
    """A module whose forward runs `body` (written at no indentation) with kernels `k` and `k2`."""
    lines = "".join(f"        {line}\n" if line else "\n" for line in src(body).splitlines())
    kernel = (
        "@triton.jit\ndef {}(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, 1.0, mask=offs < n)\n\n\n"
    )
    return (
        "import torch\nimport triton\nimport triton.language as tl\n\n\n"
        + kernel.format("k") + kernel.format("k2")
        + f"class ModelNew:\n    def forward(self, x, dim, n):\n{lines}        return x\n"
    )


@pytest.mark.parametrize(
    ("body", "forms"),
    [
        pytest.param(
            """
            if dim == 0:
                grid = (triton.cdiv(n, 256),)
                k[grid](x, n, BLOCK=256)
            elif dim == 1:
                grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
                with torch.device(x.device):
                    k2[grid](x, n, BLOCK=128)
            else:
                grid = (1,)
            """,
            ["tuple", "lambda"],
            id="each-branch-binds-its-own",
        ),
        pytest.param(
            """
            for i in range(2):
                if i == 0:
                    grid = (n,)
                    k[grid](x, n, BLOCK=256)
                else:
                    grid = (1,)
            """,
            ["tuple"],
            id="in-a-loop-the-branch-binds-it-first",
        ),
        pytest.param(
            """
            if dim == 0:
                grid = (n,)
            else:
                grid = (1,)
            k[grid](x, n, BLOCK=256)
            """,
            ["other"],
            id="launch-after-the-branches",
        ),
        pytest.param(
            """
            grid = (n,)
            if dim == 0:
                grid = (1,)
            k[grid](x, n, BLOCK=256)
            """,
            ["other"],
            id="rebound-in-a-branch-before-the-launch",
        ),
        pytest.param(
            """
            grid = (n,)
            for i in range(2):
                if i == 0:
                    k[grid](x, n, BLOCK=256)
                else:
                    grid = (1,)
            """,
            ["other"],
            id="rebound-in-the-other-branch-of-a-loop",
        ),
        pytest.param(
            """
            grid = (1,)
            if dim == 0:
                grid = (n,)
            for i in range(2):
                grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
                k[grid](x, n, BLOCK=256)
                grid = (1,)
            """,
            ["lambda"],
            id="the-last-binding-before-it-overrides-every-other",
        ),
        pytest.param(
            """
            grid = (n,)
            for i in range(2):
                k[grid](x, n, BLOCK=256)
                grid = (1,)
            """,
            ["other"],
            id="rebound-after-it-in-a-loop",
        ),
        pytest.param(
            """
            a, grid = 0, (n,)
            if dim == 0:
                grid = (1,)
            else:
                k[grid](x, n, BLOCK=256)
            """,
            ["other"],
            id="the-binding-before-it-is-not-plain",
        ),
        pytest.param(
            """
            if dim == 0:
                k[grid](x, n, BLOCK=256)
                grid = (n,)
            else:
                grid = (1,)
            """,
            ["other"],
            id="bound-after-the-launch",
        ),
        # fla's token shift: a tuple in one branch, `def grid(meta)` in the other
        pytest.param(
            """
            if dim == 0:
                grid = (n, 2)
                k[grid](x, n, BLOCK=256)
            else:
                def grid(meta):
                    return (triton.cdiv(n, meta["BLOCK"]),)
                k2[grid](x, n, BLOCK=128)
            """,
            ["tuple", "function"],
            id="a-tuple-and-a-def-in-two-branches",
        ),
        pytest.param(
            """
            grid = (n, 2)
            if dim == 0:
                def grid(meta):
                    return (n,)
            k[grid](x, n, BLOCK=256)
            """,
            ["other"],
            id="a-def-in-a-branch-before-it",
        ),
    ],
)
def test_a_grid_name_bound_in_several_branches_is_read_where_one_binding_reaches(body: str, forms: list[str]) -> None:
    m = model_of(_forward(body))
    assert [m.grid(launch).form for launch in m.launches] == forms


NESTED = src(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def k(x_ptr, n, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0, mask=tl.arange(0, BLOCK) < n)


    class ModelNew:
        def _launch(self, t, width):
            def go(block):
                k[(1,)](t, width, block)

            go(triton.next_power_of_2(width))

        def forward(self, x):
            self._launch(x, x.shape[1])
            return x
    """
)


def test_a_launch_in_a_nested_function_reached_through_self_gets_forwards_values() -> None:
    m = model_of(NESTED)
    (launch,) = m.launches
    assert launch.qualname == "ModelNew._launch.go"
    (values,) = m.launch_values(launch, m.kernels["k"], [CaseShape(0, ((3, 300),), ("float32",))])
    assert values == {"x_ptr": TensorValue((3, 300), "float32"), "n": 300, "BLOCK": 512}


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        pytest.param(", dtype=x.dtype", "bfloat16", id="the-inputs"),
        pytest.param("", "float32", id="torchs-default"),
        pytest.param(", dtype=torch.float16", "float16", id="named"),
        pytest.param(", dtype=torch.half", "float16", id="alias"),
        pytest.param(", dtype=self.dtype", None, id="unknown"),
    ],
)
def test_a_new_tensors_shape_and_dtype_are_read(dtype: str, expected: str | None) -> None:
    # flag_gems' embedding: `torch.empty((*indices.shape, N), dtype=weight.dtype, ...)`
    source = module(
        "import torch\nimport triton\nimport triton.language as tl", "@triton.jit", "tl.constexpr",
        launch=f"y = torch.empty((*x.shape, 4){dtype})\n        k[n,](x, y, n, BLOCK=256)",
    )
    m = model_of(source)
    (values,) = m.launch_values(m.launches[0], m.kernels["k"], [CaseShape(0, ((3, 300),), ("bfloat16",))])
    assert values.get("y_ptr") == (None if expected is None else TensorValue((3, 300, 4), expected))


def _run_launch(tail: str) -> Launch:
    """The launch in `run` of a module of kernel `k` with `tail` after it."""
    source = module("import torch\nimport triton\nimport triton.language as tl", "@triton.jit", "tl.constexpr")
    (launch,) = [lc for lc in model_of(source + "\n\n" + tail).launches if lc.qualname == "run"]
    return launch


KERNEL_ARGS = (
    'def grf(d: dict):\n    d["grf_mode"] = "256"\n\n\n'
    "def run(x, y, n):\n    kw = {}\n    if x.device.type == 'xpu':\n        grf(kw)\n"
    "    k[(n,)](x, y, n, BLOCK=256, **kw)\n"
)


@pytest.mark.parametrize(
    ("change", "keys", "hidden"),
    [
        pytest.param(("", ""), {"grf_mode"}, False, id="filled-by-a-helper-on-one-branch"),
        pytest.param(("kw = {}", 'kw = {"num_stages": 3}'), {"grf_mode", "num_stages"}, True, id="a-launch-option"),
        pytest.param(("        grf(kw)\n", '        kw["n"] = 1\n'), {"n"}, True, id="a-kernel-parameter"),
        pytest.param(("        grf(kw)\n", "        kw.update(x=1)\n"), {"x"}, False, id="updated-by-keywords"),
        # sglang's `kwargs.update({"ENABLE_PDL": True, "launch_pdl": True})`
        pytest.param(("        grf(kw)\n", '        kw.update({"launch_pdl": True})\n'), {"launch_pdl"}, False,
                     id="updated-by-a-literal"),
        pytest.param(("        grf(kw)\n", "        kw.update(x=1, num_warps=8)\n"), {"x", "num_warps"}, True,
                     id="updated-with-a-launch-option"),
        pytest.param(("        grf(kw)\n", "        kw.update(opts)\n"), None, True, id="updated-from-another-dict"),
        pytest.param(("        grf(kw)\n", "        kw.update(**opts)\n"), None, True, id="updated-from-a-star"),
        pytest.param(("        grf(kw)\n", '        kw.setdefault("x", 1)\n'), None, True, id="filled-by-a-method"),
        pytest.param(('    d["grf_mode"] = "256"\n', '    d["grf_mode"] = "256"\n    log(d)\n'), None, True,
                     id="passed-on-by-its-helper"),
        pytest.param(("kw = {}", 'kw = {"launch_pdl": True} if n > 1 else {}'), {"grf_mode", "launch_pdl"}, False,
                     id="either-of-two-literals"),
        pytest.param(("kw = {}", 'kw = {"launch_pdl": True} if n > 1 else dict(n=1)'), {"grf_mode", "launch_pdl", "n"},
                     True, id="a-literal-or-a-dict-call"),
        pytest.param(("kw = {}", 'kw = {"launch_pdl": True} if n > 1 else make(n)'), None, True,
                     id="a-literal-or-a-call"),
        pytest.param(("kw = {}", "kw = dict(opts)"), None, True, id="a-dict-of-another"),
        # sglang writes the conditional in the launch itself
        pytest.param(("**kw)", '**({"launch_pdl": True} if n > 1 else {}))'), {"launch_pdl"}, False,
                     id="a-conditional-literal-in-the-launch"),
        pytest.param(("**kw)", '**dict(num_warps=8))'), {"num_warps"}, True, id="a-dict-call-in-the-launch"),
        pytest.param(("**kw)", "*kw)"), None, True, id="star-args"),
        pytest.param(("    kw = {}\n", "    pass\n"), None, True, id="a-global"),
        pytest.param(("def run(x, y, n):\n    kw = {}",
                     "def run(x, y, n, kw):\n    pass"), None, True, id="a-parameter"),
    ],
)
def test_the_keys_a_kwargs_dict_may_pass_are_read(change: tuple[str, str], keys: set[str] | None, hidden: bool) -> None:
    launch = _run_launch(KERNEL_ARGS.replace(*change))
    assert launch.star_keys == (None if keys is None else frozenset(keys))
    assert launch.hides_args is hidden and launch.has_star_args


@pytest.mark.parametrize(
    ("helper", "keys"),
    [
        pytest.param('    return {"launch_pdl": True} if pdl_ok() else {}', {"launch_pdl"}, id="a-conditional-literal"),
        pytest.param('    kw = {}\n    if pdl_ok():\n        kw["launch_pdl"] = True\n    return kw', {"launch_pdl"},
                     id="a-local-dict-filled-on-a-branch"),
        pytest.param("    return dict(num_warps=8)", {"num_warps"}, id="a-dict-call"),
        pytest.param("    return inner()\n\n\ndef inner():\n    return {\"launch_pdl\": True}", {"launch_pdl"},
                     id="through-another-helper"),
        pytest.param("    return looped()\n\n\ndef looped():\n    return opts()", None, id="a-cycle"),
        pytest.param("    kw = {}\n    kw.update(extra)\n    return kw", None, id="a-dict-updated"),
        pytest.param("    pass", None, id="no-return"),
        pytest.param('    def inner():\n        return {"num_warps": 8}\n\n    return {"launch_pdl": True}',
                     {"launch_pdl"}, id="a-nested-functions-return-is-not-its-own"),
        pytest.param("    return OPTS", None, id="a-global-dict"),
    ],
)
def test_the_keys_of_a_dict_a_helper_returns_in_the_launch_are_read(helper: str, keys: set[str] | None) -> None:
    tail = f"def opts():\n{helper}\n\n\ndef run(x, y, n):\n    k[(n,)](x, y, n, BLOCK=256, **opts())\n"
    expected = None if keys is None else frozenset(keys)
    assert _run_launch(tail).star_keys == expected
    # a helper's call in a local: the same keys
    local = tail.replace("**opts())", "**kw)").replace("def run(x, y, n):\n", "def run(x, y, n):\n    kw = opts()\n")
    assert _run_launch(local).star_keys == expected


# sglang's LoRA kernels: `enable_pdl, pdl_kwargs = get_pdl_launch_metadata()`, a helper that
# returns the switch and the launch's keywords together
RETURNED = (
    "def meta():\n    on = pdl_ok()\n    return on, ({\"launch_pdl\": True} if on else {})\n\n\n"
    "def run(x, y, n):\n    on, kw = meta()\n    k[(n,)](x, y, n, BLOCK=256, **kw)\n"
)


# sglang's attention kernels pass `**_AMD_LAUNCH_KWARGS`, a module-level dict
GLOBAL_KW = (
    'IS_HIP = False\nLAUNCH_KW = {"waves_per_eu": 4} if IS_HIP else {}\n\n\n'
    "def run(x, y, n):\n    k[(n,)](x, y, n, BLOCK=256, **LAUNCH_KW)\n"
)


@pytest.mark.parametrize(
    ("template", "change", "keys"),
    [
        pytest.param(RETURNED, ("", ""), {"launch_pdl"}, id="an-element-of-a-returned-tuple"),
        pytest.param(RETURNED, ("    return on, (", "    return False, {}\n    return on, ("), {"launch_pdl"},
                     id="every-return-counts"),
        pytest.param(RETURNED, ("on, kw = meta()", "kw = meta()[1]"), None, id="a-subscript-of-the-call"),
        pytest.param(RETURNED, ("    on = pdl_ok()\n    return on, ({\"launch_pdl\": True} if on else {})",
                      "    kw = {}\n    if pdl_ok():\n        kw[\"launch_pdl\"] = True\n    return kw"),
                     None, id="a-local-dict-returned-unpacked"),
        pytest.param(RETURNED, ("on, kw = meta()", "kw = meta()"), None, id="a-tuple-where-a-dict-is-read"),
        pytest.param(RETURNED, ("    return on, (", "    return on, dict(extra) or ("), None, id="a-dict-of-another"),
        pytest.param(RETURNED, ("def meta():", "def meta(opts):"), {"launch_pdl"}, id="a-helper-with-parameters"),
        pytest.param(RETURNED, ("return on, ({\"launch_pdl\": True} if on else {})", "return on, opts"),
                     None, id="a-global-returned"),
        pytest.param(RETURNED, ("on, kw = meta()", "*rest, kw = meta()"), None, id="a-starred-unpacking"),
        pytest.param(RETURNED, ("def meta():", "def other():"), None, id="no-such-function"),
        pytest.param(GLOBAL_KW, ("", ""), {"waves_per_eu"}, id="a-conditional-literal"),
        pytest.param(GLOBAL_KW, ('LAUNCH_KW = {"waves_per_eu": 4} if IS_HIP else {}\n',
                      'if IS_HIP:\n    LAUNCH_KW = {"waves_per_eu": 4}\nelse:\n    LAUNCH_KW = dict(num_stages=1)\n'),
                     {"waves_per_eu", "num_stages"}, id="bound-in-each-branch-of-an-if"),
        pytest.param(GLOBAL_KW, ('LAUNCH_KW = {"waves_per_eu": 4} if IS_HIP else {}\n',
                      'try:\n    LAUNCH_KW = {"waves_per_eu": 4}\nexcept ImportError:\n    LAUNCH_KW = {}\n'),
                     {"waves_per_eu"}, id="bound-under-try"),
        pytest.param(GLOBAL_KW, ("\n\n\ndef run", '\nLAUNCH_KW["num_warps"] = 8\n\n\ndef run'), None, id="filled-at-the-module-level"),
        pytest.param(GLOBAL_KW, ("    k[(n,)]", "    LAUNCH_KW.update(num_warps=8)\n    k[(n,)]"), None, id="updated-in-a-function"),
        pytest.param(GLOBAL_KW, ("def run(x, y, n):\n", "def run(x, y, n):\n    global LAUNCH_KW\n"), None, id="declared-global"),
        pytest.param(GLOBAL_KW, ('LAUNCH_KW = {"waves_per_eu": 4} if IS_HIP else {}\n', "from elsewhere import LAUNCH_KW\n"),
                     None, id="imported"),
        pytest.param(GLOBAL_KW, ('LAUNCH_KW = {"waves_per_eu": 4} if IS_HIP else {}\n', "LAUNCH_KW = make()\n"), None,
                     id="bound-to-an-unread-call"),
        pytest.param(GLOBAL_KW, ("    k[(n,)]", '    LAUNCH_KW = {"num_warps": 8}\n    k[(n,)]'), {"num_warps"},
                     id="a-local-shadows-it"),
    ],
)
def test_the_keys_of_a_dict_a_helper_returns_or_the_module_binds_are_read(
    template: str, change: tuple[str, str], keys: set[str] | None
) -> None:
    assert _run_launch(template.replace(*change)).star_keys == (None if keys is None else frozenset(keys))


def test_one_parse_per_text_and_per_tree() -> None:
    a, b = model_of(HELPER), model_of(HELPER)
    assert a is b and model_of_tree(a.tree) is a
    assert model_of(HELPER + "\n") is not a


def test_nested_kernels_count_as_kernels_but_not_as_top_level_ones() -> None:
    source = src(
        """
        import triton
        import triton.language as tl


        def make():
            @triton.jit
            def inner(x_ptr):
                tl.store(x_ptr, 1.0)

            return inner
        """
    )
    m = model_of(source)
    assert m.kernels == {} and [k.name for k in m.all_kernels] == ["inner"]


# lightllm's and unsloth's layout: an import under `try`, its fallback under `except`, the kernel
# and its launching helper under a version check with a fallback helper in the `else`
GUARDED = src(
    """
    import torch
    import triton
    import triton.language as tl

    try:
        from triton.language.extra import libdevice
        HAS_LIBDEVICE = True
    except ImportError:
        libdevice = None
        HAS_LIBDEVICE = False
        FALLBACK_NOTE = "no libdevice"

    with torch.no_grad():
        SCALE = 2

    if triton.__version__ >= "3.0":

        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

        def copy(x):
            y = torch.empty_like(x)
            n = x.numel()
            k[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
            return y

    elif triton.__version__ >= "2.1":

        def copy(x):
            return x.clone()

        OLD_TRITON = True

    else:
        raise ImportError("triton too old")


    class ModelNew:
        def forward(self, x):
            return copy(x)
    """
)


def test_kernels_and_helpers_under_module_level_if_and_try_are_the_modules() -> None:
    m = model_of(GUARDED)
    assert list(m.kernels) == ["k"]
    (launch,) = m.launches
    assert (launch.kernel, launch.qualname) == ("k", "copy")
    path = m.calls.path(launch.function)
    assert path is not None and [step.caller.name.value for step in path] == ["forward"]
    # the first alternative of each `if` and `try` binds: the `elif`'s copy and the handler's
    # rebinding of libdevice and HAS_LIBDEVICE are left out, what only they bind is kept
    statements = [cu.code(st).strip().splitlines()[-1] for st in read.module_statements(m.tree)]
    assert "HAS_LIBDEVICE = True" in statements and "HAS_LIBDEVICE = False" not in statements
    assert "libdevice = None" not in statements and 'FALLBACK_NOTE = "no libdevice"' in statements
    assert "        return x.clone()" not in statements and "OLD_TRITON = True" in statements
    assert {"libdevice", "HAS_LIBDEVICE", "SCALE", "k", "copy"} <= m.names.bound
    assert cu.module_constants(m.tree, read.int_literal) == {"SCALE": 2}
    # the ast-side readers take the same statements, by line
    assert [getattr(st, "name", None) for st in m.ast_module_statements()].count("copy") == 1
    assert m.ast_module_statements()[-1].lineno == m.position(m.calls.entry())[0] - 1


@pytest.mark.parametrize(
    ("imports", "expected_head", "expected_call"),
    [
        pytest.param("import triton\nimport triton.language as tl\n", "", "triton.cdiv(n, tl.arange(0, 4))", id="plain"),
        pytest.param("import triton as tr\nimport triton.language as tl\n", "", "tr.cdiv(n, tl.arange(0, 4))",
                     id="triton-as-tr"),
        pytest.param("import triton\nimport triton.language as lang\n", "", "triton.cdiv(n, lang.arange(0, 4))",
                     id="language-as-lang"),
        pytest.param("import triton as tr\n", "", "tr.cdiv(n, tr.language.arange(0, 4))", id="only-triton-as-tr"),
        pytest.param("from triton import jit\nimport triton.language as tl\n", "import triton\n",
                     "triton.cdiv(n, tl.arange(0, 4))", id="triton-not-imported"),
    ],
)  # fmt: skip
def test_new_code_is_spelled_the_way_the_module_imports(
    imports: str, expected_head: str, expected_call: str
) -> None:
    import libcst as cst

    from diagnosis.engine.srcmodel import respell

    original = model_of(imports + "\n\ndef f(n):\n    return n\n")
    new = original.tree.with_changes(
        body=[
            *original.tree.body,
            cst.parse_statement("def g(n):\n    return triton.cdiv(n, tl.arange(0, 4))\n"),
        ]
    )
    text = respell(new, original.names).code
    assert expected_call in text
    assert text.startswith(imports + expected_head)


def _sources() -> list[str]:
    """The kernel modules of the tests, the rules' cases and the benchmark suite, and the
    engine's own code (classes, imports, comprehensions, f-strings, decorators...)."""
    root = Path(__file__).resolve().parents[2]
    folders = ("tests/modules", "tests/engine/rules_cases", "bench/suite", "diagnosis/engine/srcmodel")
    return [TRICKY] + [p.read_text() for folder in folders for p in sorted((root / folder).rglob("*.py"))]


# Forms whose rebuild skips a field when it is empty (an f-string's format_spec) or visits it
# conditionally (`from x import *`), one node of each kind with and without.
TRICKY = """\
from . import (a, b as c)
from .x import *
w = f"{a!r:>{b}} {c=} {d}"
e = [y async for y in z if y] if (q := 1) else lambda *p, k=1, **kw: p
match e:
    case [1, *rest] | {"k": _}:
        pass
"""


def test_children_are_libcsts_children_in_source_order() -> None:
    # nodes.children reads each class's field order once and then the fields; libcst's own
    # `children` rebuilds the node. Every node of every module here must give the same tuple.
    import libcst as cst

    from diagnosis.engine.srcmodel import nodes

    seen: set[type] = set()
    count = 0
    for source in _sources():
        try:
            tree = cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue
        stack: list[cst.CSTNode] = [tree]
        while stack:
            node = stack.pop()
            expected = tuple(node.children)
            got = nodes._children(node)
            assert [id(n) for n in got] == [id(n) for n in expected], type(node).__name__
            seen.add(type(node))
            count += 1
            stack.extend(expected)
    assert count > 50_000 and len(seen) > 80, (count, len(seen))


TWICE = src(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def k(x, y, n, BLOCK: tl.constexpr):
        pass


    def norm(x):
        y = x.new_empty(x.shape)
        k[(1,)](x, y, x.shape[-1], BLOCK=256)
        return y


    def both(q, k_):
        return norm(q), norm(k_)


    class ModelNew:
        def forward(self, q, k_):
            if q.shape[0] > 1:
                return both(q, k_)
            return norm(q)
    """
)


def test_every_call_path_to_a_launch_is_its_own() -> None:
    m = model_of(TWICE)
    (launch,) = m.launches
    paths = m.calls.paths(launch.function)
    # shortest first; each call site of norm is a path of its own
    assert [[cu.code(step.call) for step in p] for p in paths] == [
        ["norm(q)"], ["both(q, k_)", "norm(q)"], ["both(q, k_)", "norm(k_)"]
    ]
    assert [step.call for step in m.calls.path(launch.function)] == [step.call for step in paths[0]]
    cases = [CaseShape(0, ((4, 100), (4, 300)), ("float32", "float32"))]
    n = launch.bound(m.kernels["k"])["n"]
    assert [[ev(n) for ev in envs] for envs in m.launch_envs_per_path(launch, cases)] == [[100], [100], [300]]


@pytest.mark.parametrize(
    ("alloc", "shape", "dtype"),
    [
        pytest.param("x.new_empty(n, 4, dtype=torch.float32)", (3, 4), "float32", id="new-empty-sizes-and-dtype"),
        pytest.param("x.new_zeros((n, 2))", (3, 2), "bfloat16", id="new-zeros-a-tuple-the-tensors-dtype"),
        pytest.param("x.new_full((n,), 0.5)", (3,), "bfloat16", id="new-full-its-fill-no-size"),
        pytest.param("torch.empty(n, 8, dtype=torch.float16)", (3, 8), "float16", id="torch-empty-sizes"),
        pytest.param("torch.full((n, 2), 7.0, dtype=torch.float32)", (3, 2), "float32", id="torch-full"),
        pytest.param("torch.empty([], dtype=torch.float32)", (), "float32", id="a-0-d-tensor"),
    ],
)
def test_allocations_give_their_shape_and_dtype(alloc: str, shape: tuple, dtype: str) -> None:
    source = src(
        f"""
        import torch
        import triton
        import triton.language as tl


        @triton.jit
        def k(x, y, BLOCK: tl.constexpr):
            pass


        class ModelNew:
            def forward(self, x):
                n = x.shape[0]
                y = {alloc}
                k[(1,)](x, y, BLOCK=16)
                return y
        """
    )
    m = model_of(source)
    (ev,) = m.launch_envs(m.launches[0], [CaseShape(0, ((3, 5),), ("bfloat16",))])
    assert ev(cst.Name("y")) == TensorValue(shape, dtype)


NESTED_LAUNCH = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)


def outer(x, n):
    block = 1024
    EXTRA
    def run(PARAMS):
        k[(triton.cdiv(n, block),)](x, n, BLOCK=block)

    run()
"""


@pytest.mark.parametrize(
    ("extra", "params", "scope"),
    [
        pytest.param("", "", "outer", id="the-function-around-it"),
        # a kernel defined inside the outer function: its body is no local of the launch's
        pytest.param(
            "@triton.jit\n    def inner_k(y_ptr):\n        tl.store(y_ptr, 0.0)\n",
            "",
            "run",
            id="a-kernel-inside-it",
        ),
        # the nested function's parameter hides the outer `block`
        pytest.param("", "block", "run", id="a-parameter-hides-an-outer-name"),
        pytest.param("", "other", "outer", id="a-parameter-hiding-nothing"),
    ],
)
def test_a_nested_launch_reads_the_locals_of_the_function_around_it(
    extra: str, params: str, scope: str
) -> None:
    m = model_of(NESTED_LAUNCH.replace("EXTRA", extra).replace("PARAMS", params))
    (launch,) = m.launches
    assert launch.function.name.value == "run"
    assert launch.reading_scope.name.value == scope


def test_a_node_memo_computes_once_per_node_and_key_and_forgets_past_its_bound() -> None:
    from diagnosis.engine.srcmodel.nodes import NodeMemo

    memo, calls = NodeMemo(3), []

    def answer(node: cst.CSTNode, key: str) -> str:
        return memo.get(node, lambda: calls.append((node, key)) or f"{cu.code(node)}:{key}", key)

    a, b = cst.parse_expression("x + 1"), cst.parse_expression("x + 1")  # equal text, two nodes
    assert answer(a, "k") == answer(a, "k") == "x + 1:k" and len(calls) == 1
    assert answer(a, "j") == "x + 1:j" and answer(b, "k") == "x + 1:k" and len(calls) == 3  # by identity and key
    assert answer(cst.parse_expression("y"), "k") == "y:k" and len(calls) == 4  # past 3 entries: all dropped
    assert answer(a, "k") == "x + 1:k" and len(calls) == 5


@pytest.mark.parametrize(
    ("copy", "found"),
    [
        ("x.t().contiguous()", True),
        ("x.T.contiguous()", True),
        ("x.permute(1, 0).contiguous()", True),
        ("th.transpose(x, 0, 1).contiguous()", True),
        ("x.movedim(0, -1).contiguous()", True),
        ("x.contiguous()", False),  # in order already: no permutation
        ("x.t().clone()", False),  # a clone keeps the view's strides
        ("x.reshape(-1).contiguous()", False),
    ],
)
def test_the_wrappers_permuted_copies(copy: str, found: bool) -> None:
    from diagnosis.engine.srcmodel.copies import permuted_copies

    text = module("import torch\nimport torch as th\nimport triton\nimport triton.language as tl", "@triton.jit",
                  "tl.constexpr")  # fmt: skip
    text = text.replace("        y = torch.empty_like(x)\n", f"        x = {copy}\n        y = torch.empty_like(x)\n")
    copies = permuted_copies(model_of(text))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if copy in t)
    assert [(c.line, c.code) for c in copies] == ([(line, copy)] if found else [])
