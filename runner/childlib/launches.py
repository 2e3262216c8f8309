"""Record every Triton launch made while user code runs, with the specialization the JIT
would apply, optionally without executing anything.

Runs inside the sandbox child: imports only the standard library, torch and triton.

Why: tiers 2 and 3 compile each kernel ahead of time and must reproduce the exact
specialization of the real launch (16-byte alignment and divisibility by 16 of pointers and
integers, integers equal to 1 turned into constants), or their IR is not the IR that runs.
On a machine without a GPU, `JITFunction.run` fails at `driver.active`; replacing it for the
duration of one `forward` lets the wrapper code run on CPU tensors while each launch is
recorded instead (TRITON_NOTES.md, "Capturing a launch on CPU"). These are internal APIs of
triton 3.6.0; tests/runner/test_launches.py pins them.

triton-ascend 3.2.0 (the npu-target compile environment, .venv-ascend) has the same
`create_function_from_signature` with another result (bound args, signature types followed by
specialization keys, constexpr values, other values, excess kwargs) and no `_pack_args`: its
`JITFunction.run` derives the signature, an `AttrsDescriptor` and the constants from those, which
`_describe_32` does the same way. Either way the record holds the 3.6 form of the attributes,
`{(param_index,): [[name, value]]}`; the npu compile turns it back into a descriptor
(runner.childlib.ascend). tests/runner/test_ascend.py pins the 3.2 side.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import make_backend
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction, create_function_from_signature

from runner.childlib.precompile import precompile
from runner.childlib.timing import eager_dispatch

try:  # the interpreter module imports numpy; present in every triton 3.x wheel
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover
    InterpretedFunction = None  # type: ignore[assignment,misc]

DEFAULT_TARGET = GPUTarget("cuda", 90, 32)


def parse_target(text: str | None) -> GPUTarget:
    """'sm_90' / 'sm_80' / 'gfx942' / 'npu:Ascend910B3' -> GPUTarget. None -> sm_90."""
    if not text:
        return DEFAULT_TARGET
    if text.startswith("sm_"):
        digits = text[3:].rstrip("a")
        return GPUTarget("cuda", int(digits), 32)
    if text.startswith("gfx"):
        return GPUTarget("hip", text, 64)
    if text.startswith("npu:"):
        return GPUTarget("npu", text[4:], 0)
    raise ValueError(f"unknown target {text!r}: expected sm_XX, gfxNNN or npu:NAME")


@functools.lru_cache(maxsize=8)
def _backend(target: GPUTarget):
    return make_backend(target)


def _describing_backend(target: GPUTarget):
    """The backend whose specialization rules describe a launch for `target`.

    A cpu run for an npu target verifies under CUDA triton's interpreter, which has no npu
    backend (make_backend raises "0 compatible backends"); only the compile job, under
    triton-ascend, needs the npu one. The rules the record keeps (16-byte alignment, divisibility
    by 16, integers equal to 1) are the same in both, so the default target describes it there.
    """
    try:
        return _backend(target)
    except RuntimeError:
        if target == DEFAULT_TARGET:
            raise
        return _backend(DEFAULT_TARGET)


_shadows: dict[int, JITFunction] = {}


def _as_jit(fn: Any) -> JITFunction:
    """The JITFunction behind a launched kernel (the interpreter wraps the same Python function)."""
    if isinstance(fn, JITFunction):
        return fn
    inner = getattr(fn, "fn", None)
    if inner is None:
        raise TypeError(f"not a Triton kernel: {fn!r}")
    shadow = _shadows.get(id(inner))
    if shadow is None:
        shadow = _shadows[id(inner)] = JITFunction(inner)
    return shadow


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "value"):  # tl.constexpr
        return _jsonable(value.value)
    return str(value)


@dataclass
class ArgInfo:
    name: str
    kind: str  # tensor, int, float, bool, none, constexpr, other
    type: str  # Triton signature type: '*fp32', 'i32', 'constexpr', ...
    value: Any = None  # scalars and constexprs
    dtype: str | None = None
    shape: list[int] | None = None
    stride: list[int] | None = None
    divisible_16: bool = False  # tt.divisibility = 16 (bytes for pointers, value for ints)
    equal_1: bool = False  # specialised into a constant


@dataclass
class Launch:
    """One kernel launch as the JIT saw it, plus what ASTSource needs to recompile it."""

    kernel: str
    def_line: int  # line of the `def` in the uploaded file
    filename: str
    grid: tuple[int, int, int]
    args: list[ArgInfo]
    num_warps: int
    num_stages: int
    options: dict[str, Any]
    autotune_configs: int = 0  # number of configs when launched through @triton.autotune
    case: int | None = None
    # Live objects for an ahead-of-time compile in this same process (not serialised).
    jit: Any = field(default=None, repr=False)
    signature: dict[str, str] = field(default_factory=dict, repr=False)
    constexprs: dict[Any, Any] = field(default_factory=dict, repr=False)
    attrs: dict[Any, Any] = field(default_factory=dict, repr=False)
    compile_options: dict[str, Any] = field(default_factory=dict, repr=False)  # for triton.compile

    @property
    def key(self) -> tuple:
        """Launches with the same key compile to the same binary."""
        return (
            self.kernel,
            tuple(sorted(self.signature.items())),
            tuple(sorted((str(k), str(v)) for k, v in self.constexprs.items())),
            tuple(sorted((str(k), str(v)) for k, v in self.attrs.items())),
            self.num_warps,
            self.num_stages,
        )

    def chosen_config(self) -> str | None:
        """For a launch through @triton.autotune: the config the autotuner chose, e.g.
        'matmul_kernel: BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3'; else None."""
        if self.autotune_configs <= 1:
            return None
        consts = [f"{a.name}={a.value}" for a in self.args if a.kind == "constexpr"]
        return f"{self.kernel}: " + ", ".join([*consts, f"num_warps={self.num_warps}", f"num_stages={self.num_stages}"])

    def info(self) -> dict[str, Any]:
        """The fields of `diagnosis.engine.profile.LaunchInfo` (tier 1's view of a launch)."""
        return {"kernel": self.kernel, "grid": list(self.grid), "num_warps": self.num_warps,
                "num_stages": self.num_stages}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "def_line": self.def_line,
            "grid": list(self.grid),
            "programs": self.grid[0] * self.grid[1] * self.grid[2],
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "autotune_configs": self.autotune_configs,
            "case": self.case,
            "args": [a.__dict__ for a in self.args],
        }


def _describe(jit: JITFunction, target: GPUTarget, args: tuple, kwargs: dict) -> tuple:
    backend = _describing_backend(target)
    if not hasattr(jit, "_pack_args"):
        return _describe_32(jit, backend, args, kwargs)
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args, specialization, options)
    return bound_args, options, signature, constexprs, attrs


def _describe_32(jit: JITFunction, backend: Any, args: tuple, kwargs: dict) -> tuple:
    """`_describe` for triton 3.2 (triton-ascend): what its JITFunction.run hands to ASTSource."""
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    bound_args, sig_and_spec, _, _, _ = binder(*args, **kwargs)
    options = backend.parse_options(kwargs)
    values = tuple(bound_args.values())
    names = [p.name for p in jit.params if not p.is_constexpr]
    # the binder's first len(names) entries are the types, the rest specialization keys
    types = sig_and_spec[: len(names)]
    signature = {n: ("*i8" if t == "none" else t) for n, t in zip(names, types, strict=True)}
    descriptor = backend.get_attrs_descriptor(jit.params, values)
    constant_nums = descriptor.get_constants()  # param index -> 1 for integers equal to 1
    constexprs = {
        p.name: v
        for v, p in zip(values, jit.params, strict=True)
        if p.is_constexpr or p.num in constant_nums or v is None
    }
    attrs = {(num,): [list(a) for a in props] for num, props in descriptor.get_fn_attrs().items()}
    return bound_args, options, signature, constexprs, attrs


def _arg_info(name: str, value: Any, sig_type: str, attrs_for_arg: list) -> ArgInfo:
    divisible = any(a[0] == "tt.divisibility" and a[1] >= 16 for a in attrs_for_arg)
    info = ArgInfo(name=name, kind="other", type=str(sig_type), divisible_16=divisible)
    # triton 3.2 keeps an integer equal to 1 in the signature and marks it tt.equal_to
    info.equal_1 = any(a[0] == "tt.equal_to" and a[1] == 1 for a in attrs_for_arg)
    if hasattr(value, "data_ptr") and hasattr(value, "shape"):
        info.kind = "tensor"
        info.dtype = str(value.dtype).removeprefix("torch.")
        info.shape = list(value.shape)
        info.stride = list(value.stride())
    elif sig_type == "constexpr":
        info.kind = "constexpr"
        info.value = _jsonable(value)
        info.equal_1 = value == 1 and isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(value, bool):
        info.kind, info.value = "bool", value
    elif isinstance(value, int):
        info.kind, info.value = "int", value
    elif isinstance(value, float):
        info.kind, info.value = "float", value
    elif value is None:
        info.kind = "none"
    return info


def _canonical_grid(grid: Any, bound_args: dict) -> tuple[int, int, int]:
    if callable(grid):
        grid = grid(bound_args)
    grid = tuple(int(g) for g in grid)
    return (grid + (1, 1, 1))[:3]  # type: ignore[return-value]


class Perturber:
    """The launch-dependence probe of the gate: after each launch, every tensor argument whose
    contents the kernel changed gets those elements perturbed (floats moved by 0.5-1.5 times
    |value| + 1, either sign; integers and bools with their lowest bit flipped), so that an
    output the Triton kernels really compute changes, and one PyTorch computes beside a decoy
    launch does not (runner/childlib/verify.py). Only the changed elements move: data the
    kernel merely read stays as it was.
    """

    SEED = 0x5EED

    def __init__(self, synchronize: Any) -> None:
        self.synchronize = synchronize
        self.buffers = 0  # tensor arguments a launch changed, and that were perturbed
        self.elements = 0
        self._generators: dict[str, Any] = {}

    def around(self, launch: Any, args: tuple, kwargs: dict) -> Any:
        tensors = _tensor_args(args, kwargs)
        before = [t.clone() for t in tensors]
        result = launch()
        self.synchronize()
        for t, old in zip(tensors, before, strict=True):
            bits = _BITS.get(t.element_size())
            if bits is None or t.is_complex():
                continue
            view = t.view(bits)
            mask = old.view(bits) != view
            n = int(mask.sum())
            if n:
                view[mask] = self._moved(t, view[mask])
                self.buffers += 1
                self.elements += n
        return result

    def _moved(self, t: Any, bits: Any) -> Any:
        import torch

        if t.dtype == torch.bool or not t.is_floating_point():
            return bits ^ 1
        gen = self._generators.get(str(t.device))
        if gen is None:
            gen = self._generators[str(t.device)] = torch.Generator(device=t.device).manual_seed(self.SEED)
        value = bits.view(t.dtype).float()
        size = torch.rand(value.shape, generator=gen, device=t.device) + 0.5
        sign = torch.where(torch.rand(value.shape, generator=gen, device=t.device) < 0.5, -1.0, 1.0)
        return (value + sign * size * (value.abs() + 1.0)).to(t.dtype).view(bits.dtype)


@contextlib.contextmanager
def filled_allocations() -> Iterator[None]:
    """Every `torch.empty*` made while the block runs comes back filled (floats with NaN,
    integers with -1, bools with True), not with what freed memory held.

    For the perturbation run: the Perturber counts a tensor as written when a launch changed
    its contents, and an output buffer recycled from the earlier run of the same forward can
    already hold the very bits the kernel writes (softmax over one column is all ones), which
    would read as a launch that wrote nothing. Poisoning freed blocks (Backend.poison) makes
    that unlikely; filling every fresh allocation makes it impossible, except where a kernel
    writes exactly the fill value everywhere.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    empties = {
        torch.ops.aten.empty.memory_format,
        torch.ops.aten.empty_like.default,
        torch.ops.aten.empty_strided.default,
        torch.ops.aten.new_empty.default,
        torch.ops.aten.new_empty_strided.default,
    }

    @eager_dispatch
    class Fill(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func in empties and isinstance(out, torch.Tensor) and not out.is_complex():
                # a layout fill_ does not take (sparse, quantized) stays as allocated
                with contextlib.suppress(RuntimeError, TypeError, NotImplementedError):
                    if out.dtype == torch.bool:
                        out.fill_(True)
                    else:
                        out.fill_(float("nan") if out.is_floating_point() else -1)
            return out

    with Fill():
        yield


def _bits_dtypes() -> dict[int, Any]:
    import torch

    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


_BITS = _bits_dtypes()


def _tensor_args(args: tuple, kwargs: dict) -> list[Any]:
    """The distinct tensors among a launch's arguments."""
    import torch

    seen: set[int] = set()
    out = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and id(value) not in seen:
            seen.add(id(value))
            out.append(value)
    return out


class Recorder:
    def __init__(self, target: GPUTarget, execute: bool, perturber: Perturber | None = None) -> None:
        self.target = target
        self.execute = execute
        self.perturber = perturber
        self.launches: list[Launch] = []
        self.case: int | None = None
        self._autotune_configs = 0
        self.paused = 0  # > 0 while the autotuner benchmarks: those launches are not the forward's

    def record(self, fn: Any, args: tuple, kwargs: dict, grid: Any) -> Launch:
        jit = _as_jit(fn)
        kwargs = dict(kwargs)
        kwargs.setdefault("debug", False)
        bound_args, options, signature, constexprs, attrs = _describe(jit, self.target, args, kwargs)
        arg_infos = []
        for i, (name, value) in enumerate(bound_args.items()):
            arg_attrs = attrs.get((i,), [])
            # triton 3.2's signature leaves constexprs out (3.6 types them 'constexpr')
            sig_type = signature.get(name, "constexpr" if name in constexprs else "?")
            arg_infos.append(_arg_info(name, value, sig_type, arg_attrs))
        code = jit.fn.__code__
        launch = Launch(
            kernel=jit.fn.__name__,
            def_line=code.co_firstlineno + _decorator_lines(jit.fn),
            filename=code.co_filename,
            grid=_canonical_grid(grid, bound_args),
            args=arg_infos,
            num_warps=options.num_warps,
            num_stages=options.num_stages,
            options={k: _jsonable(v) for k, v in options.__dict__.items()},
            autotune_configs=self._autotune_configs,
            case=self.case,
            jit=jit,
            signature=signature,
            constexprs=constexprs,
            attrs=attrs,
            compile_options=dict(options.__dict__),
        )
        self.launches.append(launch)
        return launch


def _decorator_lines(fn: Any) -> int:
    """co_firstlineno points at the first decorator; findings want the `def` line."""
    try:
        lines, _ = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return 0
    for offset, text in enumerate(lines):
        if text.lstrip().startswith(("def ", "async def ")):
            return offset
    return 0


@contextlib.contextmanager
def record_launches(
    *, execute: bool, target: GPUTarget | None = None, perturber: Perturber | None = None
) -> Iterator[Recorder]:
    """Patch Triton's launch path for the duration of the block.

    execute=True: launches still run (on a device, or under TRITON_INTERPRET=1) and are recorded.
    execute=False: nothing runs; outputs of the wrapped forward are garbage and only the
    records count. Autotuned kernels then launch with their first config (benchmarking needs
    a device); the record says how many configs there were.
    perturber: with execute=True, what each recorded launch wrote is perturbed after it ran.
    """
    recorder = Recorder(target or DEFAULT_TARGET, execute, perturber)

    def launch(run: Any, fn: Any, args: tuple, grid: Any, warmup: Any, kwargs: dict) -> Any:
        def go() -> Any:
            return run(fn, *args, grid=grid, warmup=warmup, **kwargs)

        if recorder.perturber is not None and not warmup and not recorder.paused:
            return recorder.perturber.around(go, args, kwargs)
        return go()

    orig_jit_run = JITFunction.run
    orig_tune_run = Autotuner.run
    # triton 3.2's InterpretedFunction launches through __getitem__ alone (no `run` to patch)
    orig_interp_run = getattr(InterpretedFunction, "run", None)

    def jit_run(self, *args, grid, warmup, **kwargs):
        if not warmup and not recorder.paused:
            recorder.record(self, args, kwargs, grid)
        if execute:
            return launch(orig_jit_run, self, args, grid, warmup, kwargs)
        return None

    def interp_run(self, *args, grid, warmup, **kwargs):
        if not warmup and not recorder.paused:
            recorder.record(self, args, kwargs, grid)
        if execute:
            return launch(orig_interp_run, self, args, grid, warmup, kwargs)
        return None

    def tune_run(self, *args, **kwargs):
        recorder._autotune_configs = len(self.configs)
        try:
            if execute and len(self.configs) > 1 and not _interpreting(self):
                return _run_unrecorded_benchmarks(self, orig_tune_run, recorder, args, kwargs)
            self.nargs = dict(zip(self.arg_names, args, strict=False))
            config = self.prune_configs(kwargs)[0]
            if config.pre_hook is not None and execute:
                config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
            self.best_config = config
            return self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            recorder._autotune_configs = 0

    JITFunction.run = jit_run
    Autotuner.run = tune_run
    if orig_interp_run is not None:
        InterpretedFunction.run = interp_run
    try:
        yield recorder
    finally:
        JITFunction.run = orig_jit_run
        Autotuner.run = orig_tune_run
        if orig_interp_run is not None:
            InterpretedFunction.run = orig_interp_run


_NONE = object()

# How long the autotuner times each config, in place of Triton's 25 ms of warm-up and 100 ms of
# repetitions (`triton.testing.do_bench`'s defaults): the autotuner only ranks configs, by the
# median of the repetitions, and the gate times the winner on its own (runner.childlib.timing).
AUTOTUNE_WARMUP_MS = 10
AUTOTUNE_REP_MS = 30
AUTOTUNE_BENCH = functools.partial(triton.testing.do_bench, warmup=AUTOTUNE_WARMUP_MS, rep=AUTOTUNE_REP_MS)


def _run_unrecorded_benchmarks(tuner: Autotuner, run: Any, recorder: Recorder, args: tuple, kwargs: dict) -> Any:
    """The autotuner's own run, with the launches of its benchmarking left unrecorded, its
    configs compiled side by side before its first benchmark (runner.childlib.precompile) and
    each config timed for AUTOTUNE_REP_MS where the kernel's author did not choose a benchmark.

    Why unrecorded: recording a launch costs far more CPU time than the launch itself (it binds
    the signature and reads the source), and the autotuner times each config with back-to-back
    launches, so with every launch recorded the recorder's overhead decided which config won.
    In the H200 benchmark of 2026-11-30 the autotuned rewrite of 13_sum_dim1 measured 0.227 ms
    on a case where its parent took 0.125 ms; the same rewrite autotuned outside the recorder
    (scratch probe, same machine) took 0.052 ms against the parent's 0.120 ms.
    Only the forward's own launch, with the chosen config, is recorded.
    """
    own = {name: tuner.__dict__.get(name, _NONE) for name in ("_bench", "prune_configs", "do_bench")}
    bench, prune = tuner._bench, tuner.prune_configs
    to_compile: list[Any] = []  # the configs about to be benchmarked, until the first benchmark

    def quiet_bench(*a: Any, config: Any, **kw: Any) -> Any:
        if to_compile:  # benchmarking starts (no cached timings): compile them all first
            precompile(tuner, a, kw, to_compile)  # warm-ups: nothing recorded, nothing runs
            to_compile.clear()
        recorder.paused += 1
        try:
            return bench(*a, config=config, **kw)
        finally:
            recorder.paused -= 1

    def pruned(kw: dict) -> Any:
        configs = prune(kw)
        to_compile[:] = configs if len(configs) > 1 else []
        return configs

    tuner._bench, tuner.prune_configs = quiet_bench, pruned
    if getattr(tuner, "_do_bench", _NONE) is None:  # triton 3.6: no do_bench, warmup or rep of its own
        tuner.__dict__["do_bench"] = AUTOTUNE_BENCH
    try:
        return run(tuner, *args, **kwargs)
    finally:
        for name, value in own.items():
            if value is _NONE:
                tuner.__dict__.pop(name, None)
            else:
                tuner.__dict__[name] = value


def _interpreting(tuner: Autotuner) -> bool:
    """Under TRITON_INTERPRET=1 there is no device to benchmark configs on: use the first."""
    base = tuner.fn
    while isinstance(base, (Autotuner, triton.runtime.autotuner.Heuristics)):
        base = base.fn
    return InterpretedFunction is not None and isinstance(base, InterpretedFunction)
