"""The static reader under the rules: values, launches, autotune spaces, inputs, aliases."""

from __future__ import annotations

import ast

import pytest

from diagnosis.engine.tier0.source import Resolver, is_transposed, parse_module
from tests.engine import src

MODULE = src(
    """
    import torch
    import triton
    from triton import language as lang

    BLOCK = 256
    SHAPES = [(128, 64), (4096, 4096)]


    @triton.autotune(configs=[triton.Config({"B": b}, num_warps=w) for b in (64, 128) for w in [2, 4]], key=["n"])
    @triton.jit
    def k(x_ptr, n, stride, B: lang.constexpr, C: lang.constexpr = 8):
        offs = lang.program_id(0) * B + lang.arange(0, B)
        lang.store(x_ptr + offs * stride, 1.0, mask=offs < n)


    def launch(x):
        M, N = x.shape
        n = M * N
        blk = triton.next_power_of_2(N)
        xt = x.t()
        k[lambda meta: (triton.cdiv(n, meta["B"]), 2 * 3)](x, n, xt.stride(1), C=BLOCK // 4, num_warps=BLOCK // 64)
        k[(4, BLOCK)](x, 17, x.stride(0), B=blk)


    def get_inputs():
        return [torch.randn(BLOCK, 1024, dtype=torch.float16), torch.randint(0, 10, (8, 8)).cuda()]


    def get_input_cases():
        return [[torch.rand(m, n).half()] for m, n in SHAPES]
    """
)


@pytest.fixture(scope="module")
def module():
    return parse_module(MODULE)


def test_it_finds_the_kernel_its_constexprs_and_aliases(module) -> None:
    kernel = module.kernels["k"]
    assert kernel.params == ["x_ptr", "n", "stride", "B", "C"]
    assert kernel.constexprs == ["B", "C"]
    assert kernel.runtime_params == ["x_ptr", "n", "stride"]
    assert [kernel.tl_name(c) for c in kernel.tl_calls("store")] == ["store"]
    assert kernel.param_default("C").value == 8


def test_a_kernel_under_a_module_level_if_is_read_and_triaged() -> None:
    """lightllm's layout (the source model's GUARDED): the kernel, its helper's launch and a
    constant under `if`/`try`/`with` blocks are the module's own; its finding names its line."""
    from tests.engine import tier0
    from tests.engine.test_srcmodel import GUARDED

    ctx = parse_module(GUARDED)
    assert list(ctx.kernels) == ["k"] and list(ctx.functions) == ["copy"] and "SCALE" in ctx.constants
    (launch,) = ctx.launches
    assert launch.values["BLOCK"].value == 256
    (finding,) = [f for f in tier0(GUARDED).findings if f.code == "T0-NO-AUTOTUNE"]
    call_line = next(
        i for i, line in enumerate(GUARDED.splitlines(), 1) if "k[(triton.cdiv(n, 256),)]" in line
    )
    assert finding.kernel == "k" and finding.lines == (call_line,)


@pytest.mark.parametrize(
    "dict_at",
    [
        pytest.param('    kw = {"BLOCK": 64, "num_warps": 2}\n    k[(n,)](x, n, **kw)\n', id="a-local"),
        pytest.param('    k[(n,)](x, n, **{"BLOCK": 64, "num_warps": 2})\n', id="in-place"),
    ],
)
def test_a_launchs_dict_of_keywords_is_read(dict_at: str) -> None:
    """liger passes its block and warps in a `**kwargs` dict literal: they are the launch's."""
    source = (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def k(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, 1.0, mask=offs < n)\n\n\n"
        "def run(x, n):\n" + dict_at
    )
    (launch,) = parse_module(source).launches
    assert launch.values["BLOCK"].value == 64 and launch.options["num_warps"].value == 2


def test_it_expands_an_autotune_comprehension(module) -> None:
    autotune = module.kernels["k"].autotune
    assert autotune is not None and autotune.key == ("n",)
    assert [(c.kwargs["B"].value, c.num_warps) for c in autotune.configs] == [
        (64, 2),
        (64, 4),
        (128, 2),
        (128, 4),
    ]


def test_it_resolves_launch_arguments_from_locals_and_constants(module) -> None:
    first, second = module.launches
    assert first.values["n"].kind == "shape" and first.values["n"].value is None
    assert first.values["C"].value == 64
    assert first.options["num_warps"].value == 4
    assert first.values["stride"].kind == "stride" and first.values["stride"].tensor == "xt"
    assert second.values["B"].kind == "next_power_of_2" and second.values["B"].value is None
    assert second.values["n"].value == 17
    assert second.programs == 4 * 256


def test_it_resolves_a_grid_lambda_through_meta(module) -> None:
    first = module.launches[0]
    assert first.grid is not None
    assert [d.value for d in first.grid] == [None, 6]
    assert first.programs is None


def test_it_reads_input_shapes_and_dtypes(module) -> None:
    got = [(t.function, t.shape, t.dtype) for t in module.inputs]
    assert got == [
        ("get_inputs", (256, 1024), "float16"),
        ("get_inputs", (8, 8), "int64"),
        ("get_input_cases", (128, 64), "float16"),
        ("get_input_cases", (4096, 4096), "float16"),
    ]
    assert module.max_input_numel() == 4096 * 4096


def test_it_sees_a_transposed_view(module) -> None:
    fn = module.functions["launch"]
    resolver = Resolver(module, fn)
    line = module.launches[0].line
    assert is_transposed(resolver, "xt", line)
    assert not is_transposed(resolver, "x", line)


@pytest.mark.parametrize(
    ("expr", "value", "kind"),
    [
        ("BLOCK * 2 + 1", 513, "literal"),
        ("triton.next_power_of_2(1000)", 1024, "next_power_of_2"),
        ("triton.cdiv(BLOCK, 100)", 3, "literal"),
        ("min(BLOCK, 64)", 64, "literal"),
        ("x.numel()", None, "shape"),
        ("x.shape[1] * 2", None, "shape"),
        ("unknown_name", None, "unknown"),
        ("-BLOCK", -256, "literal"),
    ],
)
def test_resolver_values(module, expr: str, value: object, kind: str) -> None:
    node = ast.parse(expr, mode="eval").body
    got = Resolver(module).resolve(node, 10_000)
    assert (got.value, got.kind) == (value, kind)


def test_kernel_dependencies_follow_locals(module) -> None:
    kernel = module.kernels["k"]
    deps = kernel.name_deps("offs")
    assert deps.pids == frozenset({0}) and deps.arange and not deps.loaded
    assert kernel.pointer_params() == {"x_ptr"}


STYLED = [
    pytest.param(
        "import triton as tr\nimport triton.language as tl\n", "@tr.jit", "tl", "tr", id="triton-as-tr"
    ),
    pytest.param(
        "import triton\nfrom triton import jit\nimport triton.language as tl\n",
        "@jit",
        "tl",
        "triton",
        id="from-triton-import-jit",
    ),
    pytest.param(
        "import triton\nimport triton.language as lang\n",
        "@triton.jit",
        "lang",
        "triton",
        id="triton-language-as-lang",
    ),
]


@pytest.mark.parametrize(("imports", "decorator", "tl", "tr"), STYLED)
def test_tier0_reads_kernels_and_helper_launches_from_the_source_model(
    imports: str, decorator: str, tl: str, tr: str
) -> None:
    """The kernel, its constexpr and a launch in a module-level helper with the block passed by
    position, in each import style: the source model decides, tier 0 reads."""
    source = (
        f"import torch\n{imports}\n\n{decorator}\n"
        f"def k(x_ptr, n, BLOCK: {tl}.constexpr):\n"
        f"    offs = {tl}.program_id(0) * BLOCK + {tl}.arange(0, BLOCK)\n"
        f"    {tl}.store(x_ptr + offs, 1.0, mask=offs < n)\n\n\n"
        "def fill(x):\n"
        "    n = x.numel()\n"
        f"    k[({tr}.cdiv(n, 256),)](x, n, 256, num_warps=2)\n\n\n"
        "class ModelNew:\n    def forward(self, x):\n        fill(x)\n        return x\n"
    )
    module = parse_module(source)
    kernel = module.kernels["k"]
    assert kernel.constexprs == ["BLOCK"] and kernel.decorators == ["triton.jit"]
    assert [kernel.tl_name(c) for c in kernel.tl_calls("store")] == ["store"]
    (site,) = module.launches
    assert (site.kernel, site.function) == ("k", "fill")
    assert site.values["BLOCK"].value == 256 and site.options["num_warps"].value == 2


def _read_inputs(body: str) -> list[tuple[str, tuple[int | None, ...], str]]:
    module = parse_module(src("import torch\n\n\n" + src(body)))
    return [(t.function, t.shape, t.dtype) for t in module.inputs]


HELPER_INPUTS = [
    pytest.param(
        """
        def _make(m, k, dtype=torch.float16):
            return [torch.randn(m, k, dtype=dtype), torch.randn(k, dtype=dtype) / 8]


        def get_inputs():
            return _make(64, 32)
        """,
        [("get_inputs", (64, 32), "float16"), ("get_inputs", (32,), "float16")],
        id="dtype-default",
    ),
    pytest.param(
        """
        def _make(m, k, dtype=torch.float16):
            return [torch.randn(m, k, dtype=dtype)]


        def get_inputs():
            return _make(k=8, m=16, dtype=torch.bfloat16)
        """,
        [("get_inputs", (16, 8), "bfloat16")],
        id="keyword-dtype",
    ),
    pytest.param(
        """
        _CASES = [(4096, 1024), (128, 64)]


        def _make(rows, cols, dtype=torch.float32):
            return [torch.randn(rows, cols, dtype=dtype).half()]


        def get_inputs():
            return _make(*_CASES[0])


        def get_input_cases():
            return [_make(*case, dtype=torch.float32) for case in _CASES]
        """,
        [
            ("get_inputs", (4096, 1024), "float16"),
            ("get_input_cases", (4096, 1024), "float16"),
            ("get_input_cases", (128, 64), "float16"),
        ],
        id="star-over-a-literal-list",
    ),
    pytest.param(
        """
        def _tensor(n, dtype):
            return torch.rand(n, 2 * n, dtype=dtype)


        def _make(n, dtype=torch.bfloat16):
            return [_tensor(n * 4, dtype), torch.randint(0, n, (n,))]


        def get_inputs():
            return _make(16)
        """,
        [("get_inputs", (64, 128), "bfloat16"), ("get_inputs", (16,), "int64")],
        id="two-levels-deep",
    ),
    pytest.param(
        """
        def _make(m, k):
            m = m * 2
            return [torch.randn(m, k)]


        def get_inputs():
            m, k = 128, 64
            return _make(k, m)
        """,
        [("get_inputs", (None, 128), "float32")],
        id="arguments-read-in-the-caller-a-reassigned-parameter-unknown",
    ),
    pytest.param(
        """
        def _make(rows, cols, dtype=torch.float16):
            return [torch.randn(rows, cols, dtype=dtype)]


        def get_inputs():
            return _make(*read_shape())
        """,
        [("get_inputs", (None, None), "unknown")],
        id="star-over-an-unknown-sequence",
    ),
]


@pytest.mark.parametrize(("body", "expected"), HELPER_INPUTS)
def test_it_reads_inputs_built_by_module_level_helpers(body: str, expected: list) -> None:
    assert _read_inputs(body) == expected


def test_a_helper_input_has_the_line_of_its_constructor() -> None:
    source = src(
        """
        import torch


        def _make(n, dtype=torch.float16):
            x = torch.randn(n, n, dtype=dtype)
            return [x]


        def get_inputs():
            return _make(32)
        """
    )
    (tensor,) = parse_module(source).inputs
    assert tensor.line == source.splitlines().index("    x = torch.randn(n, n, dtype=dtype)") + 1
    assert (tensor.function, tensor.shape, tensor.dtype) == ("get_inputs", (32, 32), "float16")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            """
            def _make(n):
                return [torch.randn(n)] + (_make(n // 2) if n > 1 else [])


            def get_inputs():
                return _make(16)
            """,
            id="self-recursive",
        ),
        pytest.param(
            """
            def _a(n):
                return [torch.randn(n)] + _b(n // 2)


            def _b(n):
                return _a(n) if n > 1 else []


            def get_inputs():
                return _a(16)
            """,
            id="mutually-recursive",
        ),
    ],
)
def test_a_recursive_helper_is_read_once(body: str) -> None:
    assert _read_inputs(body) == [("get_inputs", (16,), "float32")]


def test_helpers_are_followed_three_calls_deep() -> None:
    body = """
    def _d4(n):
        return torch.randn(n, 4)


    def _d3(n):
        return [torch.randn(n, 3), _d4(n)]


    def _d2(n):
        return _d3(n)


    def _d1(n):
        return _d2(n)


    def get_inputs():
        return _d1(8)
    """
    assert _read_inputs(body) == [("get_inputs", (8, 3), "float32")]


def test_a_cast_of_arithmetic_on_a_constructor_is_the_inputs_dtype() -> None:
    """liger's and flag_gems' norm weights: ``(1 + 0.1 * torch.randn(hidden)).to(dtype)``."""
    body = """
    def _make(rows, hidden, dtype=torch.bfloat16):
        return [torch.randn(rows, hidden, dtype=dtype), (1 + 0.1 * torch.randn(hidden)).to(dtype)]


    def get_inputs():
        return _make(8, 64) + [-(torch.rand(4) * 3).half(), torch.randn(4) * 2]
    """
    assert sorted(_read_inputs(body)) == [
        ("get_inputs", (4,), "float16"),
        ("get_inputs", (4,), "float32"),
        ("get_inputs", (8, 64), "bfloat16"),
        ("get_inputs", (64,), "bfloat16"),
    ]
