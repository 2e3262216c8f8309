"""Check the benchmark suite's kernel modules under the Triton CPU interpreter.

Usage: python bench/check_suite.py [-j N] [--compat] [--device cuda [--timed-cases]] [files...]
       (default: every bench/suite/NN_*.py)

Each module is checked in a fresh subprocess with TRITON_INTERPRET=1 in its environment:
it is imported by path, `Model` and `ModelNew` are built from `get_init_inputs()`, `Model`'s
state dict is loaded into `ModelNew`, and both run on every `get_verify_inputs()` case. Torch is
seeded with --seed (default 0) before the inputs are made and before each model is built. Outputs must agree in shape, dtype, NaN/Inf positions and value
(torch.allclose). `get_input_cases()` must return exactly 5 lists whose first has the same
shapes as `get_inputs()`; those big cases are built but never run on CPU.

Tolerances (rtol = atol): fp16/bf16 outputs 2e-2; fp32 outputs 2e-3 when the module's kernels
reduce (tl.dot, tl.sum, tl.max, tl.cumsum, atomics ...), 1e-4 otherwise; integer and bool
outputs must be equal.

`--compat` makes the interpreter do what the compiler does where triton 3.6's interpreter
differs (TRITON_NOTES.md): a float scalar argument arrives as an fp32 scalar (so `eps.to(...)`
works), libdevice calls (`triton.language.extra[.cuda].libdevice`: rsqrt, tanh, pow, erf, ...)
run as their numpy equivalents, `@triton.autotune` runs its first config (it cannot
benchmark without a device), a jit helper's constexpr parameter arrives as a tl.constexpr,
`and`/`or`/`not` on tensors are element-wise (the interpreter took Python's, for which a block
tensor is simply true), and host code asking torch.cuda for the device's properties gets an
H200's. Off by default; bench/wild's check uses it for the modules the
plain interpreter cannot run.

`--device cuda` runs the same comparison compiled on the GPU (TRITON_INTERPRET=0 in the child),
and `--timed-cases` also compares on the five timed cases there (they are too big for the
interpreter). `--meta-cases` builds the timed cases on torch's meta device: their count and
shapes are checked without allocating them.

Only the standard library, torch, triton and numpy are used, so it runs wherever the sandbox
child runs. Prints one line per module and exits non-zero if any module fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

SUITE_DIR = Path(__file__).resolve().parent / "suite"
RESULT_MARKER = "CHECK_SUITE_RESULT "
N_CASES = 5
REDUCTION_MARKERS = re.compile(
    r"tl\.(dot|sum|max|min|argmax|argmin|cumsum|cumprod|reduce|associative_scan|atomic_\w+)\s*\("
)
DEFAULT_TIMEOUT_S = 600


def suite_files(suite_dir: Path = SUITE_DIR) -> list[Path]:
    """The suite's module files, in order (NN_name.py)."""
    return sorted(p for p in suite_dir.glob("*.py") if re.match(r"\d\d_\w+\.py$", p.name))


def check_module(
    path: str | os.PathLike,
    timeout: float = DEFAULT_TIMEOUT_S,
    seed: int = 0,
    *,
    compat: bool = False,
    device: str = "cpu",
    timed_cases: bool = False,
    meta_cases: bool = False,
) -> dict:
    """Check one module in a fresh subprocess (interpreter mode on cpu) and return its result.

    The result is a dict with keys: name, ok, max_err, cases, seconds, message.
    """
    path = Path(path).resolve()
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1" if device == "cpu" else "0"
    flags = (
        ["--device", device] + (["--compat"] if compat else []) + (["--timed-cases"] if timed_cases else [])
    )
    flags += ["--meta-cases"] if meta_cases else []
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--seed",
                str(seed),
                *flags,
                "--child",
                str(path),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {
            "name": path.stem,
            "ok": False,
            "max_err": None,
            "cases": 0,
            "seconds": time.monotonic() - start,
            "message": f"timed out after {timeout:.0f} s",
        }
    seconds = time.monotonic() - start
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            result = json.loads(line[len(RESULT_MARKER) :])
            result["seconds"] = seconds
            return result
    tail = (proc.stdout + proc.stderr)[-3000:]
    return {
        "name": path.stem,
        "ok": False,
        "max_err": None,
        "cases": 0,
        "seconds": seconds,
        "message": f"child exited with {proc.returncode} and no result:\n{tail}",
    }


def format_result(result: dict) -> str:
    status = "PASS" if result["ok"] else "FAIL"
    err = "-" if result.get("max_err") is None else f"{result['max_err']:.3g}"
    line = (
        f"{status} {result['name']:<28} max_err={err:<10} verify_cases={result.get('cases', 0)} "
        f"({result.get('seconds', 0.0):.1f} s)"
    )
    if not result["ok"]:
        line += "\n    " + result["message"].replace("\n", "\n    ")
    return line


# --------------------------------------------------------------------------------------------
# child side: runs with TRITON_INTERPRET=1 already in the environment


def _patch_interpreter(compat: bool = False) -> dict:
    """Count kernel launches, and make the interpreter's tl.dot accept bfloat16 operands.

    Triton 3.6's interpreter stores bfloat16 as uint16 and np.matmul's the bit patterns in
    tl.dot (triton-lang/triton#11584, fix not merged); GPUs compute a bf16 dot in fp32. The
    patch converts bf16 operands to fp32 first, which is exact. `compat`: see _patch_compat.
    """
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    launches = {"count": 0}
    original_run = interpreter.InterpretedFunction.run

    def counting_run(self, *args, **kwargs):
        if not kwargs.get("warmup"):
            launches["count"] += 1
        return original_run(self, *args, **kwargs)

    interpreter.InterpretedFunction.run = counting_run

    original_dot = interpreter.InterpreterBuilder.create_dot

    def bf16_to_fp32(handle):
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        data = (handle.data.astype(np.uint32) << 16).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original_dot(self, bf16_to_fp32(a), bf16_to_fp32(b), d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot
    _memoize_types()
    _memoize_builtin_names()
    if compat:
        _patch_compat()
    return launches


def _memoize_types() -> None:
    """Build each block type, tensor shape type and numpy dtype once instead of on every op.

    The interpreter runs triton.language's front end for every op of every program: each op
    makes `block_type`s and tensors whose shape is a `tl.tuple` with a `tuple_type` whose name is
    formatted from its values, and `_get_np_dtype` builds a 20-entry dict per call. A profile of
    a K = 2048 GEMM module spent about a third of its time there. Each is a pure function of its
    arguments (the element type and the shape's integers; the dtype), so equal arguments get an
    equal result from the cache: `block_type`'s attributes are copied, with a fresh `shape` tuple
    and the caller's own element type object; a tensor's shape tuple is made fresh with the
    cached type of that shape; nothing cached is handed out to be mutated. Anything else (a
    symbolic shape, an unhashable dtype) takes triton's own path.
    """
    import math

    import triton.language.core as core
    from triton.runtime import interpreter

    if getattr(core.tensor.__init__, "memoized", False):
        return

    def ints(shape) -> tuple[int, ...] | None:
        values = shape.values if isinstance(shape, core.tuple) else shape
        if not isinstance(values, (list, tuple)):
            return None
        out = []
        for v in values:
            v = v.value if type(v) is core.constexpr else v
            if type(v) is not int:
                return None
            out.append(v)
        return tuple(out)

    block_init = core.block_type.__init__
    blocks: dict[tuple, tuple] = {}

    def block_type_init(self, element_ty, shape) -> None:
        key = ints(shape)
        if key is None or not isinstance(element_ty, core.dtype):
            return block_init(self, element_ty, shape)
        k = (type(element_ty), str(element_ty), key)
        cached = blocks.get(k)
        if cached is None:
            block_init(self, element_ty, shape)
            blocks[k] = (self.shape.type, self.numel, self.name)
            return None
        shape_type, self.numel, self.name = cached
        self.element_ty = element_ty
        self.shape = core.tuple(list(key), shape_type)
        return None

    shape_types: dict[tuple[int, ...], object] = {}

    def tensor_init(self, handle, type) -> None:
        # triton 3.6's tensor.__init__ (base_value has no __init__), with the shape's type cached
        self.handle = handle
        shape = type.shape if type.is_block() else ()
        self.numel = core.constexpr(math.prod(shape))
        self.type = type
        self.dtype = type.scalar
        values = [core.constexpr(s) for s in shape]
        key = ints(shape)
        shape_type = shape_types.get(key) if key is not None else None
        if shape_type is None:
            shape_type = core._type_for_tuple_values(values)
            if key is not None:
                shape_types[key] = shape_type
        self.shape = core.tuple(values, shape_type)

    np_dtype = interpreter._get_np_dtype
    np_dtypes: dict = {}

    def get_np_dtype(tt_dtype):
        try:
            return np_dtypes[tt_dtype]
        except KeyError:
            found = np_dtypes[tt_dtype] = np_dtype(tt_dtype)
            return found
        except TypeError:
            return np_dtype(tt_dtype)

    tensor_init.memoized = True
    core.block_type.__init__ = block_type_init
    core.tensor.__init__ = tensor_init
    interpreter._get_np_dtype = get_np_dtype


def _memoize_builtin_names() -> None:
    """Find each triton.language module's builtins once instead of at every launch.

    The interpreter wraps every builtin of tl, tl.math and the rest for each kernel launch, and
    finds them each time with `inspect.getmembers` (a sorted dir() and a getattr of every
    member): a quarter of a small module's time (the suite's matvec under its 13 configs: 2.1 of
    7.8 s). The launch's patch scope puts every member back when the launch ends, so each launch
    finds the same names; the members themselves are still read at each launch, and one that is
    no longer a builtin is left alone, as triton leaves it.
    """
    import inspect

    import triton.language.core as core
    from triton.runtime import interpreter

    if getattr(interpreter._patch_builtin, "memoized", False):
        return
    found: dict[int, tuple[object, tuple[str, ...]]] = {}  # id(module) -> (module, builtin names)

    def patch_builtin(pkg, builder, scope) -> None:
        entry = found.get(id(pkg))
        if entry is None or entry[0] is not pkg:
            names = tuple(name for name, member in inspect.getmembers(pkg) if core.is_builtin(member))
            entry = found[id(pkg)] = (pkg, names)
        for name in entry[1]:
            member = getattr(pkg, name)
            if core.is_builtin(member):
                interpreter._patch_attr(pkg, name, member, builder, scope)

    patch_builtin.memoized = True
    interpreter._patch_builtin = patch_builtin


# libdevice symbols (without __nv_, fast_ and the fp32 suffix f) -> numpy; what --compat runs
def _libdevice_numpy() -> dict:
    import math

    import numpy as np

    def c_round(x):  # C round(): halves away from zero (np.round rounds them to even)
        return np.sign(x) * np.floor(np.abs(x) + 0.5)

    return {
        "rsqrt": lambda x: 1 / np.sqrt(x),
        "sqrt": np.sqrt,
        "exp": np.exp,
        "exp2": np.exp2,
        "exp10": lambda x: np.power(10.0, x),
        "expm1": np.expm1,
        "log": np.log,
        "log2": np.log2,
        "log10": np.log10,
        "log1p": np.log1p,
        "tanh": np.tanh,
        "sin": np.sin,
        "cos": np.cos,
        "tan": np.tan,
        "asin": np.arcsin,
        "acos": np.arccos,
        "atan": np.arctan,
        "sinh": np.sinh,
        "cosh": np.cosh,
        "asinh": np.arcsinh,
        "acosh": np.arccosh,
        "atanh": np.arctanh,
        "erf": np.vectorize(math.erf, otypes=[np.float64]),
        "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
        "pow": np.power,
        "powi": np.power,
        "fmod": np.fmod,
        "floor": np.floor,
        "ceil": np.ceil,
        "trunc": np.trunc,
        "round": c_round,
        "rint": np.rint,
        "nearbyint": np.rint,
        "fabs": np.abs,
        "abs": np.abs,
        "fmin": np.fmin,
        "fmax": np.fmax,
        "isnan": np.isnan,
        "isinf": np.isinf,
        "finite": np.isfinite,
        "isfinite": np.isfinite,
        "signbit": np.signbit,
        "copysign": np.copysign,
        "atan2": np.arctan2,
        "hypot": np.hypot,
        "cbrt": np.cbrt,
        "div_rn": np.divide,
        "fdiv_rn": np.divide,
        "fdivide": np.divide,
        "rcp": lambda x: 1 / x,
        "frcp_rn": lambda x: 1 / x,
        "fma": lambda a, b, c: a * b + c,
        "sqrt_rn": np.sqrt,
        "fsqrt_rn": np.sqrt,
    }


def _patch_compat() -> None:
    """Run what the compiler accepts and triton 3.6's interpreter does not (see the module doc).

    Float scalars: the JIT specializes a Python float argument as fp32; the interpreter passes
    the float through, so `eps.to(tl.float32)` fails. libdevice: the interpreter neither routes
    the generic `triton.language.extra.libdevice` stubs to a backend nor implements
    extern_elementwise; here both libdevice modules' functions get the interpreter's semantic and
    each extern symbol its numpy function (computed in the argument's precision).
    """
    import inspect

    import numpy as np
    import triton.language as tl
    import triton.language.extra.cuda.libdevice as cuda_libdevice
    import triton.language.extra.libdevice as libdevice
    from triton.runtime import interpreter

    original_cvt = interpreter._implicit_cvt

    def implicit_cvt(arg):
        if type(arg) is float:
            return tl.tensor(
                interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32
            )
        return original_cvt(arg)

    interpreter._implicit_cvt = implicit_cvt

    numpy_of = _libdevice_numpy()

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        name = symbol.removeprefix("__nv_").removeprefix("fast_")
        fn = numpy_of.get(name) or (numpy_of.get(name[:-1]) if name.endswith("f") else None)
        if fn is None:
            raise NotImplementedError(f"libdevice {symbol} has no numpy equivalent in --compat")
        scalar = getattr(retType, "scalar", retType)
        result = np.asarray(fn(*[a.data for a in argList]))
        return interpreter.TensorHandle(result.astype(interpreter._get_np_dtype(scalar)), scalar)

    interpreter.InterpreterBuilder.create_extern_elementwise = create_extern_elementwise

    class _GlobalsAttrs:  # a kernel's globals seen through setattr/getattr, for the patch scope
        def __init__(self, namespace: dict) -> None:
            object.__setattr__(self, "_namespace", namespace)

        def __getattr__(self, name):
            try:
                return self._namespace[name]
            except KeyError:
                raise AttributeError(name) from None

        def __setattr__(self, name, value):
            self._namespace[name] = value

        def __delattr__(self, name):
            del self._namespace[name]

    original_patch_lang = interpreter._patch_lang
    stub_modules = (libdevice.__name__, cuda_libdevice.__name__)
    builtins = {name: m for name, m in inspect.getmembers(cuda_libdevice) if tl.core.is_builtin(m)}

    def patch_lang(fn):
        scope = original_patch_lang(fn)
        semantic = interpreter.TritonSemantic(interpreter.interpreter_builder)

        def bound(member):
            return lambda *args, **kwargs: member(
                *args, **{k: v for k, v in kwargs.items() if k != "_semantic"}, _semantic=semantic
            )

        for name, member in builtins.items():
            scope.set_attr(libdevice, name, bound(member))
            scope.set_attr(cuda_libdevice, name, bound(member))
        namespace = _GlobalsAttrs(fn.__globals__)
        for name, value in list(fn.__globals__.items()):
            if inspect.isfunction(value) and value.__module__ in stub_modules and value.__name__ in builtins:
                scope.set_attr(namespace, name, bound(builtins[value.__name__]))
        return scope

    interpreter._patch_lang = patch_lang

    # The autotuner benchmarks its configs on a device, which the interpreter does not have:
    # run the first config (on the GPU any may win; the GPU check covers that).
    from triton.runtime.autotuner import Autotuner

    def first_config_run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        return self.fn.run(*args, **kwargs, **config.all_kwargs())

    Autotuner.run = first_config_run

    # A @triton.jit helper's constexpr parameter, and any dtype passed to a helper, is a
    # tl.constexpr in compiled code (`dtype.value` works); the interpreter passes the bare value.
    signatures: dict = {}
    original_call = interpreter.InterpretedFunction.__call__

    def constexpr_call(self, *args, **kwargs):
        if self.fn not in signatures:
            sig = inspect.signature(self.fn)
            names = [p.name for p in sig.parameters.values() if _is_constexpr(p.annotation)]
            signatures[self.fn] = (sig, names)
        sig, names = signatures[self.fn]
        if names or any(isinstance(a, tl.dtype) for a in (*args, *kwargs.values())):
            bound = sig.bind_partial(*args, **kwargs)
            for name, value in bound.arguments.items():
                if (name in names or isinstance(value, tl.dtype)) and not isinstance(value, tl.constexpr):
                    bound.arguments[name] = tl.constexpr(value)
            args, kwargs = bound.args, bound.kwargs
        return original_call(self, *args, **kwargs)

    interpreter.InterpretedFunction.__call__ = constexpr_call

    # `a and b` / `a or b` / `not a` on tensors: the compiler lowers them to logical_and /
    # logical_or / __not__; the interpreter runs Python's operators, so a block tensor is truthy:
    # `m_row and m_col` is m_col (flag_gems writes masks like that: rows past the end were then
    # stored to) and `not (tgt == ignore)` is False.
    import ast

    class BoolOpTransformer(interpreter.ASTTransformer):
        def visit_Assign(self, node):  # the base class rewrites the value without visiting it
            node.value = self.visit(node.value)
            return super().visit_Assign(node)

        def visit_UnaryOp(self, node):  # `not mask`: the compiler's __not__ is element-wise
            self.generic_visit(node)
            if not isinstance(node.op, ast.Not):
                return node
            return ast.Call(
                func=ast.Name(id="_kernelopt_not", ctx=ast.Load()), args=[node.operand], keywords=[]
            )

        def visit_BoolOp(self, node):
            self.generic_visit(node)
            helper = "_kernelopt_bool_and" if isinstance(node.op, ast.And) else "_kernelopt_bool_or"
            thunks = [
                ast.Lambda(args=ast.arguments([], [], None, [], [], None, []), body=v)
                for v in node.values[1:]
            ]
            return ast.Call(
                func=ast.Name(id=helper, ctx=ast.Load()), args=[node.values[0], *thunks], keywords=[]
            )

    def bool_op(method: str, short_circuit_on: bool):
        def combine(first, *thunks):
            value = first
            for thunk in thunks:
                if isinstance(value, tl.tensor):
                    value = getattr(value, method)(thunk())
                elif bool(value) is short_circuit_on:
                    return value
                else:
                    value = thunk()
            return value

        return combine

    interpreter._kernelopt_not = lambda value: value.__not__() if isinstance(value, tl.tensor) else not value
    interpreter._kernelopt_bool_and = bool_op("logical_and", False)
    interpreter._kernelopt_bool_or = bool_op("logical_or", True)
    interpreter.FunctionRewriter.ast_transformer = BoolOpTransformer()
    interpreter.InterpretedFunction.rewritten_fn.clear()

    # Host code that sizes grids by the GPU (torch.cuda.get_device_properties(...).multi_processor_count)
    # sees an H200 when there is no CUDA device.
    import types

    import torch

    if not torch.cuda.is_available():
        h200 = types.SimpleNamespace(
            name="NVIDIA H200",
            major=9,
            minor=0,
            multi_processor_count=132,
            total_memory=150_754_820_096,
            L2_cache_size=52_428_800,
            warp_size=32,
            max_threads_per_multi_processor=2048,
            regs_per_multiprocessor=65536,
            shared_memory_per_block_optin=232_448,
        )
        torch.cuda.get_device_properties = lambda device=None: h200
        torch.cuda.get_device_capability = lambda device=None: (9, 0)
        torch.cuda.current_device = lambda: 0


def _is_constexpr(annotation) -> bool:
    import triton.language as tl

    if annotation is tl.constexpr:
        return True
    return isinstance(annotation, str) and annotation.split(".")[-1] == "constexpr"


def _patch_launch_counter() -> dict:
    """Count compiled kernel launches (the --device cuda counterpart of the interpreter's counter)."""
    from triton.runtime.jit import JITFunction

    launches = {"count": 0}
    original_run = JITFunction.run

    def counting_run(self, *args, **kwargs):
        if not kwargs.get("warmup"):
            launches["count"] += 1
        return original_run(self, *args, **kwargs)

    JITFunction.run = counting_run
    return launches


def _tolerance(dtype, reduces: bool):
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return 2e-2
    if dtype.is_floating_point:
        return 2e-3 if reduces else 1e-4
    return 0.0


def _flatten(out):
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    raise TypeError(f"unsupported output type {type(out).__name__}")


def _clone(inputs):
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _signature(inputs):
    import torch

    return [
        ("tensor", tuple(x.shape), str(x.dtype))
        if isinstance(x, torch.Tensor)
        else ("scalar", type(x).__name__)
        for x in inputs
    ]


def _compare(ref, new, reduces: bool) -> float:
    """Max abs error over the outputs; raises AssertionError on any mismatch."""
    import torch

    refs, news = _flatten(ref), _flatten(new)
    if len(refs) != len(news):
        raise AssertionError(f"Model returned {len(refs)} tensors, ModelNew {len(news)}")
    worst = 0.0
    for i, (r, n) in enumerate(zip(refs, news, strict=True)):
        if r.shape != n.shape:
            raise AssertionError(f"output {i}: shape {tuple(n.shape)}, expected {tuple(r.shape)}")
        if r.dtype != n.dtype:
            raise AssertionError(f"output {i}: dtype {n.dtype}, expected {r.dtype}")
        r, n = r.detach().cpu(), n.detach().cpu()
        tol = _tolerance(r.dtype, reduces)
        if tol == 0.0:
            bad = int((r != n).sum())
            if bad:
                raise AssertionError(f"output {i}: {bad} of {r.numel()} values differ (exact match required)")
            continue
        rf, nf = r.float(), n.float()
        if not torch.equal(torch.isnan(rf), torch.isnan(nf)):
            raise AssertionError(f"output {i}: NaN positions differ")
        if not torch.allclose(nf, rf, rtol=tol, atol=tol, equal_nan=True):
            finite = torch.isfinite(rf) & torch.isfinite(nf)
            err = (nf - rf).abs()[finite]
            worst_here = float(err.max()) if err.numel() else float("inf")
            raise AssertionError(
                f"output {i}: not allclose at rtol=atol={tol:g} (max abs err {worst_here:.3g}, "
                f"{int((~finite & ~torch.isnan(rf)).sum())} non-finite mismatches)"
            )
        finite = torch.isfinite(rf)
        if finite.any():
            worst = max(worst, float((nf - rf).abs()[finite].max()))
    return worst


def _check_shape_cases(module, seed: int, *, meta: bool = False) -> list:
    """get_input_cases() gives N_CASES lists, the first shaped like get_inputs(); built (they are
    what the GPU harness times) but never run here. `meta`: shapes and dtypes only, nothing
    allocated (a few seconds of CPU less per module for the suite's big cases); where torch's
    meta device cannot build them (an op with a data-dependent result), they are built for real,
    so the check is the same either way. Returns the cases."""
    import torch

    torch.manual_seed(seed)
    built = None
    if meta:
        try:
            with torch.device("meta"):
                built = module.get_input_cases(), module.get_inputs()
        except (NotImplementedError, RuntimeError):
            torch.manual_seed(seed)
    cases, main_inputs = built if built is not None else (module.get_input_cases(), module.get_inputs())
    if not isinstance(cases, list) or len(cases) != N_CASES:
        raise AssertionError(f"get_input_cases() must return a list of {N_CASES} lists")
    if not all(isinstance(c, list) for c in cases):
        raise AssertionError("every entry of get_input_cases() must be a list")
    main_sig = _signature(main_inputs)
    if main_sig != _signature(cases[0]):
        raise AssertionError(
            f"get_inputs() {main_sig} does not match get_input_cases()[0] {_signature(cases[0])}"
        )
    return cases


def _check_in_child(
    path: Path,
    seed: int,
    *,
    compat: bool = False,
    device: str = "cpu",
    timed_cases: bool = False,
    meta_cases: bool = False,
    shape_cases: bool = True,
) -> dict:
    """Check one module in this process (TRITON_INTERPRET=1 on cpu). shape_cases=False leaves out
    the get_input_cases() check, for a caller that already made it on the same file and seed: it
    runs before any kernel and reads nothing else, so it cannot come out differently (timed_cases
    builds them anyway, to run them)."""
    result = {"name": path.stem, "ok": False, "max_err": None, "cases": 0, "message": ""}
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        result["message"] = "TRITON_INTERPRET=1 is not set in the child's environment"
        return result
    try:
        if device != "cpu":
            launches = _patch_launch_counter()
        else:  # tests/engine/rules_cases/interp_check.py replaces _patch_interpreter with a no-argument one
            launches = _patch_interpreter(compat) if compat else _patch_interpreter()
        import torch

        source = path.read_text()
        reduces = bool(REDUCTION_MARKERS.search(source))

        spec = importlib.util.spec_from_file_location(f"suite_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        cases = None
        if shape_cases or timed_cases:
            cases = _check_shape_cases(module, seed, meta=meta_cases and not timed_cases)
        if not timed_cases:
            del cases

        torch.manual_seed(seed)
        verify = module.get_verify_inputs()
        if not isinstance(verify, list) or not 2 <= len(verify) <= 4:
            raise AssertionError("get_verify_inputs() must return a list of 2 to 4 input lists")

        init = module.get_init_inputs()
        torch.manual_seed(seed)
        ref_model = module.Model(*init).eval()
        torch.manual_seed(seed)
        new_model = module.ModelNew(*init).eval()
        new_model.load_state_dict(ref_model.state_dict())
        on = torch.device(device)
        ref_model.to(on)
        new_model.to(on)

        worst = 0.0
        for k, inputs in enumerate(verify + (cases if timed_cases else [])):
            label = f"verify case {k}" if k < len(verify) else f"timed case {k - len(verify)}"
            if not isinstance(inputs, list):
                raise AssertionError(f"{label} is not a list")
            inputs = [x.to(on) if isinstance(x, torch.Tensor) else x for x in inputs]
            with torch.no_grad():
                ref = ref_model(*_clone(inputs))
                before = launches["count"]
                new = new_model(*_clone(inputs))
                if launches["count"] == before:
                    raise AssertionError(f"{label}: ModelNew.forward launched no Triton kernel")
            try:
                worst = max(worst, _compare(ref, new, reduces))
            except AssertionError as exc:
                raise AssertionError(f"{label} {_signature(inputs)}: {exc}") from None
            result["cases"] = k + 1
        result["ok"] = True
        result["max_err"] = worst
    except AssertionError as exc:
        result["message"] = f"AssertionError: {exc}"
    except Exception as exc:  # report everything else with its traceback, errors inside kernels too
        result["message"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-6)}"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="module files (default: the whole suite)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="modules checked in parallel")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per module")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for inputs and models")
    parser.add_argument(
        "--compat",
        action="store_true",
        help="float scalars as fp32 and libdevice in numpy under the interpreter",
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cpu: the Triton interpreter; cuda: compiled, on the GPU",
    )
    parser.add_argument(
        "--timed-cases", action="store_true", help="also compare on the five timed cases (for --device cuda)"
    )
    parser.add_argument(
        "--meta-cases",
        action="store_true",
        help="build the timed cases on the meta device (their shapes, without allocating)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        result = _check_in_child(
            Path(args.child),
            args.seed,
            compat=args.compat,
            device=args.device,
            timed_cases=args.timed_cases,
            meta_cases=args.meta_cases,
        )
        print(RESULT_MARKER + json.dumps(result), flush=True)
        return 0

    files = [Path(f) for f in args.files] or suite_files()
    if not files:
        print("no modules to check", file=sys.stderr)
        return 2
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(
                check_module,
                f,
                args.timeout,
                args.seed,
                compat=args.compat,
                device=args.device,
                timed_cases=args.timed_cases,
                meta_cases=args.meta_cases,
            )
            for f in files
        ]
        for future in futures:
            result = future.result()
            failed += not result["ok"]
            print(format_result(result), flush=True)
    print(f"{len(files) - failed}/{len(files)} modules pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
