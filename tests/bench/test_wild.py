"""bench/wild: the extractor, the shims, the first-conversion rewriter and the built corpus.

The extractor and the rewriter run on a small synthetic wheel built here (no network); the
whole-corpus test runs only where the pinned wheels are in bench/wild/.cache (`build.py fetch`).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import textwrap
import zipfile
from pathlib import Path

import pytest

from bench.wild import wheels
from bench.wild.convert import Config, Tuning, convert_source, inspect_tuning
from bench.wild.extract import ExtractError, LibraryRules, Shim, extract, free_globals
from bench.wild.features import features
from bench.wild.libs import GEMS, _expand_gen
from bench.wild.spec import HARNESS_MARK, Kernel, render
from diagnosis.validation import validate_module_source

ROOT = Path(__file__).resolve().parents[2]

TOY = {
    "toylib/__init__.py": "",
    "toylib/utils.py": """
        import functools

        import triton
        from packaging.version import Version


        def compare(v):
            return Version(v) > Version("1.0")


        def calculate_settings(n):
            return triton.next_power_of_2(n), 4


        def libentry():
            import sqlalchemy  # the real one caches launches in a database

            return sqlalchemy.wrap
    """,
    "toylib/device.py": """
        import subprocess

        IS_XPU = "xpu" in subprocess.run(["probe"], capture_output=True).stdout.decode()
    """,
    "toylib/lang.py": """
        import triton
        import triton.language as tl


        @triton.jit
        def program_id(axis):
            return tl.program_id(axis).to(tl.int64)


        @triton.jit
        def twice(x):
            return x * 2


        @triton.jit
        def unused_helper(x):
            return x
    """,
    "toylib/ops/__init__.py": "",
    "toylib/ops/add.py": """
        import torch
        import triton
        from triton import language as tl

        from toylib import lang as tle
        from toylib.utils import calculate_settings as settings, libentry
        from .. import device

        if device.IS_XPU:
            MAX_BLOCK = 256
        else:
            MAX_BLOCK = 65536


        @libentry()
        @triton.jit
        def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr = 1024):
            pid = tle.program_id(0)
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
            tl.store(out_ptr + offs, tle.twice(x) + tl.load(y_ptr + offs, mask=mask), mask=mask)


        def add(x, y):
            out = torch.empty_like(x)
            n = x.numel()
            block, num_warps = settings(min(n, MAX_BLOCK, 128))
            grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
            add_kernel[grid](x, y, out, n, BLOCK=block, num_warps=num_warps)
            return out


        def not_needed():
            import requests

            return requests
    """,
}

TOY_RULES = LibraryRules(
    shims=(Shim("toylib.utils", "libentry", "def libentry():\n    return lambda fn: fn", "caches launches"),),
    branches={"device.IS_XPU": False},
)


def _wheel(tmp_path: Path, files: dict[str, str], name: str = "toylib-1.0-py3-none-any.whl") -> Path:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, textwrap.dedent(text).lstrip("\n"))
    return path


@pytest.fixture
def toy(tmp_path: Path) -> wheels.WheelSource:
    return wheels.WheelSource(_wheel(tmp_path, TOY), "toylib")


def _bound(code: str) -> set[str]:
    import ast

    names = set()
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            names |= {f"{t.value.id}.{t.attr}" for t in node.targets if isinstance(t, ast.Attribute)}
    return names


# --- the closure -------------------------------------------------------------------------------------


def test_the_closure_takes_what_the_launch_function_uses_and_nothing_else(toy: wheels.WheelSource) -> None:
    ex = extract(toy, TOY_RULES, "toylib.ops.add", ["add"])
    code = ex.code()
    bound = _bound(code)
    assert {
        "add",
        "add_kernel",
        "calculate_settings",
        "settings",
        "MAX_BLOCK",
        "program_id",
        "twice",
        "tle",
    } <= bound
    assert {"tle.program_id", "tle.twice"} <= bound  # the module alias becomes a namespace of what is used
    assert not {"compare", "not_needed", "unused_helper", "IS_XPU"} & bound
    assert "packaging" not in code and "requests" not in code and "subprocess" not in code
    assert "MAX_BLOCK = 65536" in code and "MAX_BLOCK = 256" not in code  # the branch the rules chose
    assert dict(ex.sources)["toylib/ops/add.py"] and dict(ex.sources)["toylib/lang.py"]


def test_statements_come_out_as_the_library_wrote_them(toy: wheels.WheelSource) -> None:
    code = extract(toy, TOY_RULES, "toylib.ops.add", ["add"]).code()
    original = textwrap.dedent(TOY["toylib/ops/add.py"])
    for block in ("def add(x, y):", "@libentry()\n@triton.jit\ndef add_kernel("):
        start = original.index(block)
        end = original.index("\n\n\n", start)
        assert original[start:end] in code
    assert "settings = calculate_settings" in code  # `import ... as settings` becomes an alias


def test_a_shim_replaces_the_definition_and_says_why(toy: wheels.WheelSource) -> None:
    ex = extract(toy, TOY_RULES, "toylib.ops.add", ["add"])
    assert "sqlalchemy" not in ex.code()
    assert "def libentry():\n    return lambda fn: fn" in ex.code()
    assert ex.shims == (("toylib.utils.libentry", "caches launches"),)


@pytest.mark.parametrize(
    ("rules", "module", "name", "fragment"),
    [
        pytest.param(LibraryRules(branches={"device.IS_XPU": False}), "toylib.ops.add", "add", "sqlalchemy",
                     id="third-party-import-without-shim"),
        pytest.param(LibraryRules(shims=TOY_RULES.shims), "toylib.ops.add", "add", "if device.IS_XPU",
                     id="undecided-module-level-if"),
        pytest.param(TOY_RULES, "toylib.utils", "compare", "packaging", id="entry-needs-third-party"),
        pytest.param(TOY_RULES, "toylib.ops.add", "missing", "not defined", id="undefined-entry"),
    ],
)  # fmt: skip
def test_the_closure_refuses_what_it_cannot_bring(
    toy: wheels.WheelSource, rules: LibraryRules, module: str, name: str, fragment: str
) -> None:
    with pytest.raises(ExtractError, match=fragment.replace(".", r"\.")):
        extract(toy, rules, module, [name])


def test_two_definitions_of_one_name_are_refused(tmp_path: Path) -> None:
    files = {
        "clash/__init__.py": "",
        "clash/a.py": "import triton\n\n\ndef helper():\n    return 1\n",
        "clash/b.py": "from clash.a import helper as h\n\n\ndef helper():\n    return h() + 1\n",
    }
    source = wheels.WheelSource(_wheel(tmp_path, files, "clash-1.0-py3-none-any.whl"), "clash")
    with pytest.raises(ExtractError, match="two definitions"):
        extract(source, LibraryRules(), "clash.b", ["helper"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("def f(x):\n    return g(x) + x\n", {"g"}, id="body-global"),
        pytest.param(
            "@deco(C)\ndef f(x=D):\n    y = 1\n    return y\n", {"deco", "C", "D"}, id="decorator-and-default"
        ),
        pytest.param("X = {k: v for k, v in items()}\n", {"items"}, id="comprehension-locals"),
        pytest.param("def f():\n    def g():\n        return h\n    return g\n", {"h"}, id="nested-function"),
    ],
)
def test_free_globals(text: str, expected: set[str]) -> None:
    assert free_globals(text) == expected


# --- flag_gems' runtime shim ----------------------------------------------------------------------------

GEMS_TOY = {
    "flag_gems/__init__.py": "",
    "flag_gems/runtime/__init__.py": "def get_tuned_config(op):\n    raise RuntimeError('reads YAML')\n",
    "flag_gems/runtime/backend/__init__.py": "",
    "flag_gems/runtime/backend/_nvidia/__init__.py": "",
    "flag_gems/runtime/backend/_nvidia/hopper/tune_configs.yaml": "mm:\n  - META: {BLOCK: 64}\n",
    "flag_gems/runtime/backend/_nvidia/tune_configs.yaml": """
        rowsum:
          - META:
              BLOCK_N: 256
          - META:
              BLOCK_N: 1024
            num_warps: 8
        gen_op:
          - gen: true
            param_map:
              META:
                BLOCK_M: block_m
              num_warps: warps
            block_m: [1, 2]
            warps: [4, 8]
    """,
    "flag_gems/runtime/backend/_nvidia/heuristics_config_utils.py": """
        def rows_heur_block_m(args):
            return 4


        HEURISTICS_CONFIGS = {
            "rowsum": {
                "BLOCK_M": rows_heur_block_m,
                "num_warps": lambda args: 4,
            },
        }
    """,
    "flag_gems/ops/__init__.py": "",
    "flag_gems/ops/rowsum.py": """
        import triton
        import triton.language as tl

        from flag_gems import runtime


        @triton.autotune(configs=runtime.get_tuned_config("rowsum"), key=["N"])
        @triton.heuristics(runtime.get_heuristic_config("rowsum"))
        @triton.jit
        def rowsum_kernel(x, out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            pass


        def rowsum(x):
            rowsum_kernel[(1,)](x, x, 1, 1)
    """,
}


def test_the_flag_gems_runtime_shim_holds_the_yaml_configs_and_the_heuristics(tmp_path: Path) -> None:
    source = wheels.WheelSource(_wheel(tmp_path, GEMS_TOY, "flag_gems-0-py3-none-any.whl"), "flag_gems")
    code = extract(source, GEMS, "flag_gems.ops.rowsum", ["rowsum"]).code()
    assert "triton.Config({'BLOCK_N': 256}, num_warps=4, num_stages=2, num_ctas=1)" in code
    assert "triton.Config({'BLOCK_N': 1024}, num_warps=8, num_stages=2, num_ctas=1)" in code
    assert '"rowsum": {\n        "BLOCK_M": rows_heur_block_m,' in code
    assert "def rows_heur_block_m(args):" in code  # the heuristic's function comes from the wheel
    assert "reads YAML" not in code
    path = tmp_path / "rowsum_standalone.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("rowsum_standalone", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the module runs standalone
    assert [c.kwargs for c in module.runtime.get_tuned_config("rowsum")] == [
        {"BLOCK_N": 256},
        {"BLOCK_N": 1024},
    ]


def test_a_gen_entry_expands_in_the_loaders_order() -> None:
    entry = {"gen": True, "param_map": {"META": {"BLOCK_M": "block_m"}, "num_warps": "warps"},
             "block_m": [1, 2], "warps": [4, 8]}  # fmt: skip
    got = [(c["META"]["BLOCK_M"], c["num_warps"]) for c in _expand_gen(entry)]
    # ConfigLoader pops a stack: the last value of each field comes first
    assert got == [(2, 8), (2, 4), (1, 8), (1, 4)]


# --- generated modules ------------------------------------------------------------------------------------

TOY_KERNEL = Kernel(
    "toy", "add", "toylib.ops.add", ("add",), "2x + y element-wise.", "x, y", "return 2 * x + y",
    "return add(x, y)", "n", "return [torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)]",
    ((1 << 20,), (1 << 22,), (1 << 24,), (3 << 20,), (5 << 20,)), ((1000,), (37,)),
)  # fmt: skip
TOY_PIN = wheels.Pin("toy", "toylib", "1.0", "toylib-1.0-py3-none-any.whl", "0" * 64, "toylib")


def test_a_generated_module_passes_upload_validation(toy: wheels.WheelSource) -> None:
    text = render(TOY_KERNEL, 1, extract(toy, TOY_RULES, "toylib.ops.add", ["add"]), TOY_PIN)
    result = validate_module_source(text, "01_toy_add.py", 256 * 1024)
    assert result.ok, result.errors
    assert set(result.jit_functions) == {"program_id", "twice", "add_kernel"}
    assert text.index(HARNESS_MARK) > text.index("def add(x, y):")


def test_a_generated_module_is_correct_under_the_interpreter(toy: wheels.WheelSource, tmp_path: Path) -> None:
    from tests.engine.rules_cases import harness as h

    path = tmp_path / "01_toy_add.py"
    path.write_text(render(TOY_KERNEL, 1, extract(toy, TOY_RULES, "toylib.ops.add", ["add"]), TOY_PIN))
    result = h.interp_check([path])[str(path)]
    assert result["ok"], result["message"]


@pytest.mark.gpu
def test_a_generated_module_is_correct_compiled_on_the_gpu(toy: wheels.WheelSource, tmp_path: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from bench.wild.check import _check_suite

    path = tmp_path / "01_toy_add.py"
    path.write_text(render(TOY_KERNEL, 1, extract(toy, TOY_RULES, "toylib.ops.add", ["add"]), TOY_PIN))
    result = _check_suite().check_module(path, 600, device="cuda", timed_cases=True)
    assert result["ok"], result["message"]
    assert result["cases"] == 2 + 5  # the verify cases, then the five timed ones


def test_the_harness_refuses_a_name_the_library_binds(toy: wheels.WheelSource) -> None:
    clash = Kernel(**{**TOY_KERNEL.__dict__, "helpers": "def add_kernel():\n    pass\n"})
    with pytest.raises(ExtractError, match="add_kernel"):
        render(clash, 1, extract(toy, TOY_RULES, "toylib.ops.add", ["add"]), TOY_PIN)


@pytest.mark.parametrize(
    ("library", "expected"),
    [
        pytest.param("import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x, B: tl.constexpr = 4):\n"
                     "    pass\ndef f(x):\n    grid = lambda meta: (1,)\n    k[grid](x, x, x, num_warps=4)\n",
                     {"autotune", "constexpr defaults", "grid lambda", "positional args", "warps at launch"}, id="liger-like"),
        pytest.param("import triton\n@libentry()\n@triton.heuristics({})\n@triton.jit\ndef k(x):\n    pass\n"
                     "def f(x):\n    k[(1,)](x=x)\n", {"heuristics", "library decorator", "keyword args"}, id="gems-like"),
    ],
)  # fmt: skip
def test_features(library: str, expected: set[str]) -> None:
    assert set(features(library + HARNESS_MARK + "\n")) == expected


# --- the first-conversion rewriter ------------------------------------------------------------------------

CONVERT_CASES = [
    pytest.param(
        '''
        @triton.autotune(
            configs=[triton.Config({"BLOCK_N": b}, num_warps=w) for b in [64, 128, 1024] for w in [4, 8]],
            key=["N"],
        )
        @triton.jit
        def k(x, N, BLOCK_N: tl.constexpr):
            pass


        def launch(x, N):
            grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)
            k[grid](
                x,
                N,
            )
        ''',
        {"k": Tuning((Config({"BLOCK_N": 64}, False), Config({"BLOCK_N": 128}, False),
                      Config({"BLOCK_N": 1024}, False)), ())},
        {"-@triton.autotune(", '-    configs=[triton.Config({"BLOCK_N": b}, num_warps=w) for b in [64, 128, 1024] for w in [4, 8]],',
         '-    key=["N"],', "-)", "+        BLOCK_N=128,"},
        id="autotune-removed-block-at-launch",
    ),
    pytest.param(
        '''
        @triton.heuristics({"BLOCK": lambda a: 4096, "EVEN": lambda a: a["n"] % a["BLOCK"] == 0, "num_warps": lambda a: 8})
        @triton.jit
        def k(x, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            pass


        def launch(x):
            k[(1,)](x, x.numel())
        ''',
        {"k": Tuning(None, ("BLOCK", "EVEN", "num_warps"))},
        {'-@triton.heuristics({"BLOCK": lambda a: 4096, "EVEN": lambda a: a["n"] % a["BLOCK"] == 0, "num_warps": lambda a: 8})',
         '+@triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})',
         "-    k[(1,)](x, x.numel())", "+    k[(1,)](x, x.numel(), BLOCK=128)"},
        id="heuristic-block-fixed-flag-kept-warps-dropped",
    ),
    pytest.param(
        '''
        @triton.jit
        def k(x, n, BLOCK: tl.constexpr):
            pass


        def launch(x):
            BLOCK, num_warps = triton.next_power_of_2(x.shape[-1]), 8
            k[(1,)](x, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
            k[(1,)](
                x,
                x.numel(),
                BLOCK=BLOCK,
                num_warps=num_warps,
                num_stages=2,
            )
        ''',
        {},
        {"-    k[(1,)](x, x.numel(), BLOCK=BLOCK, num_warps=num_warps)", "+    k[(1,)](x, x.numel(), BLOCK=BLOCK)",
         "-        num_warps=num_warps,", "-        num_stages=2,"},
        id="launch-options-removed-host-block-kept",
    ),
    pytest.param(
        '''
        @triton.jit
        def k(x, BLOCK: tl.constexpr, num_warps: tl.constexpr):
            pass


        def launch(x, num_warps):
            k[(1,)](x, BLOCK=128, num_warps=num_warps, num_stages=3)
        ''',
        {},
        {"-    k[(1,)](x, BLOCK=128, num_warps=num_warps, num_stages=3)", "+    k[(1,)](x, BLOCK=128, num_warps=num_warps)"},
        id="a-num_warps-parameter-is-an-argument",
    ),
    pytest.param(
        '''
        @triton.jit
        def k(x, BLOCK_N: tl.constexpr = 4096):
            pass


        def launch(x):
            kwargs = {"BLOCK_N": 2048, "num_stages": 4, "num_warps": 1}
            k[(1,)](x, **kwargs)
        ''',
        {},
        {'-    kwargs = {"BLOCK_N": 2048, "num_stages": 4, "num_warps": 1}', '+    kwargs = {"BLOCK_N": 2048}'},
        id="options-in-a-splatted-dict",
    ),
    pytest.param(
        '''
        @triton.heuristics({"num_warps": lambda a: 8})
        @triton.jit
        def k(x):
            pass


        def launch(x):
            k[(1,)](x)
        ''',
        {"k": Tuning(None, ("num_warps",))},
        {'-@triton.heuristics({"num_warps": lambda a: 8})'},
        id="empty-heuristics-decorator-removed",
    ),
    pytest.param(
        '''
        @triton.autotune(configs=get_configs(), key=["M"])
        @triton.jit
        def k(x, M, BLOCK_M: tl.constexpr):
            pass


        def launch(x):
            k[(1,)](x, 1)
        ''',
        {"k": Tuning((Config({"BLOCK_M": 256}, True), Config({"BLOCK_M": 32}, True)), ())},
        {'-@triton.autotune(configs=get_configs(), key=["M"])', '+@triton.autotune(configs=[c for c in (get_configs()) if c.kwargs == {\'BLOCK_M\': 256}][:1], key=["M"])'},
        id="pre-hook-configs-kept-as-one",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("before", "tuning", "changed"), CONVERT_CASES)
def test_the_first_conversion_changes_only_the_launch_choices(
    before: str, tuning: dict, changed: set[str]
) -> None:
    source = textwrap.dedent(before).lstrip("\n")
    after, _ = convert_source(source, tuning)
    diff = {
        line
        for line in difflib.unified_diff(source.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    }
    assert diff == changed


def test_the_conversion_reads_configs_and_heuristics_by_importing(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent('''
        import triton
        import triton.language as tl


        @triton.heuristics({"EVEN": lambda a: True})
        @triton.autotune(configs=[triton.Config({"BT": bt}) for bt in (16, 64)], key=["T"])
        @triton.jit
        def k(x, T, BT: tl.constexpr, EVEN: tl.constexpr):
            pass
    '''))  # fmt: skip
    assert inspect_tuning(path) == {
        "k": Tuning((Config({"BT": 16}, False), Config({"BT": 64}, False)), ("EVEN",))
    }


# --- the pinned wheels and the whole corpus ----------------------------------------------------------------


def test_a_cached_wheel_with_another_digest_is_refused(tmp_path: Path) -> None:
    pin = wheels.PINS[0]
    (tmp_path / pin.filename).write_bytes(b"not the release")
    with pytest.raises(wheels.WheelError, match="sha256"):
        wheels.wheel_path(pin, tmp_path)


def _cached() -> bool:
    try:
        for pin in wheels.PINS:
            wheels.wheel_path(pin)
    except wheels.WheelError:
        return False
    return True


needs_wheels = pytest.mark.skipif(
    not _cached(), reason="the pinned wheels are not in bench/wild/.cache (python bench/wild/build.py fetch)"
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bench.wild.build import FIRST, RELEASED, build
    from bench.wild.convert import convert_dir

    out = tmp_path_factory.mktemp("wild")
    build(out)
    convert_dir(out / RELEASED, out / FIRST)
    return out


@needs_wheels
def test_the_corpus_builds_at_least_40_modules_from_three_libraries_and_all_validate(corpus: Path) -> None:
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert not manifest["failed"]
    modules = sorted((corpus / "released").glob("[0-9][0-9]_*.py"))
    assert len(modules) >= 40 and len(modules) == len(manifest["modules"])
    assert {info["lib"] for info in manifest["modules"].values()} == {"liger", "gems", "fla"}
    for variant in ("released", "first_conversion"):
        for path in sorted((corpus / variant).glob("[0-9][0-9]_*.py")):
            result = validate_module_source(path.read_bytes(), path.name, 256 * 1024)
            assert result.ok, (variant, path.name, result.errors)
    assert "ERROR" not in (corpus / "first_conversion" / "CONVERSION.md").read_text()


@needs_wheels
def test_the_first_conversion_has_no_autotune_left_but_where_a_pre_hook_needs_it(corpus: Path) -> None:
    import ast

    kept = []
    for path in sorted((corpus / "first_conversion").glob("[0-9][0-9]_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            for decorator in getattr(node, "decorator_list", []):
                name = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if name.endswith(("autotune", "libtuner", "fla_cache_autotune")):
                    assert "][:1]" in ast.unparse(decorator), (path.name, node.name)
                    kept.append(path.name)
    assert kept == [p.name for p in (corpus / "first_conversion").glob("[0-9][0-9]_gems_mm.py")]


SLOW_MODULES = ("liger_rms_norm", "gems_softmax", "fla_l2norm")


@needs_wheels
@pytest.mark.slow
@pytest.mark.parametrize("stem", SLOW_MODULES)
def test_three_modules_are_correct_under_the_interpreter_released_and_converted(
    corpus: Path, stem: str
) -> None:
    from bench.wild.check import check_one

    for variant in ("released", "first_conversion"):
        (path,) = (corpus / variant).glob(f"[0-9][0-9]_{stem}.py")
        outcome = check_one(path, timeout=600)
        assert outcome.status in ("PASS", "PASS-COMPAT"), (variant, outcome)


def test_every_rules_rewrite_of_a_module_is_written_once_for_the_check(tmp_path: Path) -> None:
    """`build.py rewrites` writes each transform's distinct rewrite of each module under a name
    check_dir reads (`NN_<op>__<transform>.py`) and clears what an earlier run left."""
    from bench.wild.check import write_rewrites
    from tests.engine.test_rules_split_scan import COLUMN_STYLE

    corpus = tmp_path / "released"
    corpus.mkdir()
    (corpus / "01_few_scan.py").write_text((ROOT / "tests/engine/rules_cases/few_scan.py").read_text())
    (corpus / "02_column_scan.py").write_text(COLUMN_STYLE)  # a strided walk: tiled, then split
    out = tmp_path / "rewrites"
    out.mkdir()
    (out / "99_stale__gone.py").write_text("")
    assert write_rewrites(corpus, out) == len(list(out.glob("*.py")))
    names = {p.name for p in out.glob("*.py")}
    assert {"01_few_scan__split_carried_scan.py", "01_few_scan__autotune_launch_config.py"} <= names
    assert {"02_column_scan__tile_strided_walk.py", "02_column_scan__coalesce_then_launch_config.py"} <= names
    assert "99_stale__gone.py" not in names
    assert len({p.read_text() for p in out.glob("*.py")}) == len(names)
