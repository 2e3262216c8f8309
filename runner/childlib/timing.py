"""Timing and work accounting inside the child: interleaved medians, bytes and FLOPs per case.

Runs only in the sandbox child (standard library, torch, triton). The child measures; the
parent decides (noise floor, speedup, suspect: `diagnosis.engine.verdict`; SOL:
`diagnosis.engine.sol`), because the child may not import `diagnosis`.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from runner.backends import Backend
from runner.childlib.hostile import draw_device, seeded_inputs, user_call
from runner.childlib.module import build_models, to_device
from runner.errors import JobFailed
from runner.protocol import JobRequest

NO_DEVICE = (
    "no device: device=cpu runs kernels through the Triton interpreter, whose times say "
    "nothing about a GPU; nothing was timed"
)


def flatten(value: Any) -> list[Any]:
    """The tensors of a forward's output (a tensor, or nested tuples / lists / dicts of them)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value, key=str) for t in flatten(value[k])]
    return []


def storage_key(t: Any) -> tuple[int, int]:
    """(address, bytes) of a tensor's storage: a view and its base share it."""
    try:
        return (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # meta tensors and the like
        return (id(t), t.numel() * t.element_size())


def tensor_bytes(tensors: Iterable[Any], gathered: Mapping[tuple[int, int], int] | None = None) -> int:
    """Bytes of distinct storages among `tensors` (a view and its base count once); a storage in
    `gathered` counts only the bytes index ops read of it (`Reads`), at most its size."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        key = storage_key(t)
        if key in seen and key[0] != 0:
            continue
        seen.add(key)
        size = t.numel() * t.element_size()
        total += min(size, gathered[key]) if gathered and key in gathered else size
    return total


# aten ops that read of their first argument only what their indices select: as many bytes
# as they return (an embedding table of 1 GB read for 8192 tokens moves 8192 rows, not 1 GB)
GATHERS = frozenset({"embedding", "index_select", "gather", "index", "take"})


class Reads:
    """What a forward's aten ops read: storages read whole, and bytes gathered from the others."""

    def __init__(self) -> None:
        self.whole: set[tuple[int, int]] = set()
        self.gathered: dict[tuple[int, int], int] = {}

    def rename(self, keys: Mapping[tuple[int, int], tuple[int, int]]) -> None:
        """Count what was read of copies (the keys) as read of their originals (the values)."""
        self.whole = {keys.get(k, k) for k in self.whole}
        gathered: dict[tuple[int, int], int] = {}
        for k, v in self.gathered.items():
            gathered[keys.get(k, k)] = gathered.get(keys.get(k, k), 0) + v
        self.gathered = gathered

    def only_gathered(self) -> dict[tuple[int, int], int]:
        """Storages that only index ops read, with the bytes they gathered."""
        return {k: v for k, v in self.gathered.items() if k not in self.whole and k[0] != 0}

    def mode(self) -> Any:
        """A dispatch mode that records into this object (views read nothing)."""
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        reads = self

        @eager_dispatch
        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                out = func(*args, **(kwargs or {}))
                if not func.is_view:
                    source = args[0] if args and func.overloadpacket.__name__ in GATHERS else None
                    for t in tree_leaves((args, kwargs or {})):
                        if not isinstance(t, torch.Tensor):
                            continue
                        key = storage_key(t)
                        if t is source:
                            got = sum(o.numel() * o.element_size() for o in flatten(out))
                            reads.gathered[key] = reads.gathered.get(key, 0) + got
                        else:
                            reads.whole.add(key)
                return out

        return _Mode()


def dominant_dtype(inputs: list[Any], outputs: list[Any]) -> str:
    """The floating dtype that holds most bytes among the inputs (else the outputs)."""
    import torch

    for group in (inputs, outputs):
        sizes: dict[str, int] = {}
        for t in group:
            if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
                name = str(t.dtype).removeprefix("torch.")
                sizes[name] = sizes.get(name, 0) + t.numel() * t.element_size()
        if sizes:
            return max(sizes, key=lambda k: sizes[k])
    return "float32"


def eager_dispatch(cls: type) -> type:
    """`cls`, a TorchDispatchMode subclass, without the import of torch._dynamo (about 1.2 s of
    a CPU job's 3, 3 s under FlopCounterMode) that its first dispatch triggers: torch wraps each
    subclass's `__torch_dispatch__` in `torch._disable_dynamo`, which imports dynamo on the first
    call unless the raw function already carries `__dynamo_disable`. The child runs everything
    eagerly, so there is nothing for dynamo to disable. Does nothing if torch changes."""
    raw = getattr(cls.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if raw is not None and not hasattr(raw, "__dynamo_disable"):
        setattr(raw, "__dynamo_disable", raw)
    return cls


def _skip_dynamo_import() -> None:
    """`eager_dispatch` for FlopCounterMode's modes (measured with torch 2.13: first use 3.15 s
    -> 0.02 s)."""
    import sys

    if "torch._dynamo" in sys.modules:
        return
    import torch.utils.flop_counter as flop_counter
    from torch.utils._python_dispatch import TorchDispatchMode

    for obj in vars(flop_counter).values():
        if isinstance(obj, type) and issubclass(obj, TorchDispatchMode) and obj is not TorchDispatchMode:
            eager_dispatch(obj)


def count_flops(fn: Callable[[], Any], reads: Reads | None = None) -> tuple[Any, int]:
    """Run `fn` under torch's FlopCounterMode: (its output, FLOPs of matmul-like ops); with
    `reads`, also record what its ops read.

    FlopCounterMode counts mm / bmm / addmm / convolution / attention only; element-wise and
    reduction work counts 0, which is right for SOL (those kernels are bandwidth-bound).
    """
    from contextlib import nullcontext

    from torch.utils.flop_counter import FlopCounterMode

    _skip_dynamo_import()
    with FlopCounterMode(display=False) as counter, reads.mode() if reads is not None else nullcontext():
        out = fn()
    return out, int(counter.get_total_flops())


def work_of_case(model: Any, inputs: list[Any], outputs: Any, reads: Reads | None = None) -> dict[str, Any]:
    """Bytes that must move (inputs + parameters + outputs, read or written once; of a tensor
    that the forward only indexed, what it gathered: `reads`) and the dtype."""
    import torch

    in_tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    state = [t for t in model.state_dict().values() if isinstance(t, torch.Tensor)]
    out_tensors = flatten(outputs)
    gathered = reads.only_gathered() if reads is not None else None
    return {
        "bytes": tensor_bytes(in_tensors + state, gathered) + tensor_bytes(out_tensors),
        "dtype": dominant_dtype(in_tensors, out_tensors),
    }


def interleaved(
    backend: Backend,
    fns: dict[str, Callable[[], Any]],
    *,
    rounds: int = 3,
    once: Iterable[str] = (),
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    discard: int = 1,
    max_rounds: int | None = None,
    settle: float = 0.05,
) -> dict[str, list[float]]:
    """Median time of each fn, round-robin for `rounds` rounds (names in `once`: first round only).

    Interleaving spreads clock and thermal drift over all contenders instead of charging it to
    whichever ran last; the spread between a contender's rounds is the noise floor.

    When a contender's rounds disagree by more than `settle` (`spread`), more rounds follow, up
    to `max_rounds` in all, until they agree. Why: in the H200 benchmark of 2026-11-30 two rounds
    of one GEMM case disagreed by 2x (another operator compiling on the host's CPUs slows a
    launch-bound forward), that spread became a 101 % noise floor, and a candidate measured
    1.8-2.4x faster on the large cases was rejected as noise. One slow round among four or more
    is then an outlier that `spread` (and the parent's floor) leave out.
    """
    once = set(once)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # compile / autotune outside the measurement
        fn()
    backend.synchronize()
    # `discard` untimed measurements of every contender first. Why: in the H200 benchmark the
    # parent's first timed round, right after compiling and autotuning, disagreed with its
    # second by 41 % on a GEMM (13 % on a batched one), and that spread became the noise floor
    # that rejected a candidate measured 1.3-2.7x faster elsewhere. Not yet measured with it.
    for _ in range(max(0, discard)):
        for fn in fns.values():
            backend.time(fn, warmup_ms=warmup_ms, rep_ms=rep_ms)
    for r in range(rounds):
        for name, fn in fns.items():
            if name in once and r > 0:
                continue
            times[name].append(backend.time(fn, warmup_ms=warmup_ms, rep_ms=rep_ms))
    repeated = [name for name in fns if name not in once]
    done = rounds
    while done < (max_rounds or rounds) and any(spread(times[n]) > settle for n in repeated):
        for name in repeated:
            times[name].append(backend.time(fns[name], warmup_ms=warmup_ms, rep_ms=rep_ms))
        done += 1
    return times


def spread(values: Sequence[float]) -> float:
    """Relative spread (max - min) / min of repeated medians; from four values on, the largest
    is left out: interference (another process on the CPUs, a clock dip) only ever makes a
    measurement slower, so one slow round among several is an outlier, not the noise.

    The same rule as `diagnosis.engine.verdict.noise_floor` (which the child may not import);
    tests/runner/test_timing.py checks that the two agree.
    """
    data = sorted(v for v in values if v is not None and v > 0)
    if len(data) >= 4:
        data = data[:-1]
    if len(data) < 2:
        return 0.0
    return (data[-1] - data[0]) / data[0]


def no_grad_call(model: Any, inputs: list[Any]) -> Callable[[], Any]:
    import torch

    def call() -> Any:
        with torch.no_grad():
            return model(*inputs)

    return call


def time_cases(
    req: JobRequest,
    backend: Backend,
    parent: types.ModuleType,
    candidate: types.ModuleType | None,
    *,
    indices: Sequence[int] | None = None,
    work: dict[int, dict[str, Any]] | None = None,
    paths: Sequence[str] = (),
) -> dict[str, Any]:
    """Median times per timed case of the module's ModelNew, the candidate's (when given) and
    the reference Model, in this one process, interleaved (see `interleaved`).

    Raw numbers only: `parent_ms` / `candidate_ms` hold one median per round (the spread of
    the parent's rounds is the noise floor the parent process computes). Without a candidate
    the module's own ModelNew is the one under test (`candidate_ms`) and `parent_ms` is None.
    On a backend that cannot time (cpu), says so instead of returning numbers.
    """
    if not backend.can_time:
        return {"timed": False, "reason": NO_DEVICE, "cases": []}
    opts = req.options
    rounds = max(2, int(opts.get("rounds", 3)))
    warmup_ms = float(opts.get("warmup_ms", 25.0))
    rep_ms = float(opts.get("rep_ms", 100.0))
    discard = int(opts.get("discard_rounds", 1))
    max_rounds = max(rounds, int(opts.get("max_rounds", 6)))
    settle = float(opts.get("settle_spread", 0.05))
    paths = list(paths) or [p for p in (req.module, req.candidate) if p]
    seed = req.seeds[0] if req.seeds else 0
    timed, _ = seeded_inputs(parent, seed, paths, draw_device(backend))
    if indices is None:
        indices = req.cases if req.cases is not None else range(len(timed))
    for i in indices:
        if not 0 <= i < len(timed):
            raise JobFailed(
                "bad_request", f"case {i} does not exist: the module has {len(timed)} input cases"
            )

    def build(new_module: types.ModuleType) -> tuple[Any, Any]:
        return build_models(parent, seed, backend.device, new_module=new_module)

    ref, under_test = user_call(
        lambda: build(candidate or parent), what="building Model / ModelNew", paths=paths
    )
    parent_new = None
    if candidate is not None:
        parent_new = user_call(lambda: build(parent), what="building the parent's ModelNew", paths=paths)[1]
    cases = []
    for i in indices:
        inputs = to_device(timed[i], backend.device)
        case_work = dict(work[i]) if work and i in work else None
        if case_work is None:
            reads = Reads()
            out, flops = user_call(
                lambda inputs=inputs, reads=reads: count_flops(no_grad_call(ref, inputs), reads),
                what="the reference Model.forward",
                paths=paths,
            )
            case_work = {**work_of_case(ref, inputs, out, reads), "flops": flops}
            del out
        fns: dict[str, Callable[[], Any]] = {}
        if parent_new is not None:
            fns["parent"] = no_grad_call(parent_new, inputs)
        fns["candidate"] = no_grad_call(under_test, inputs)
        fns["reference"] = no_grad_call(ref, inputs)
        times = user_call(
            lambda fns=fns: interleaved(
                backend,
                fns,
                rounds=rounds,
                once=("reference",),
                warmup_ms=warmup_ms,
                rep_ms=rep_ms,
                discard=discard,
                max_rounds=max_rounds,
                settle=settle,
            ),
            what=f"timing case {i}",
            paths=paths,
        )
        cases.append(
            {
                "index": i,
                "label": f"case {i}",
                "parent_ms": times.get("parent"),
                "candidate_ms": times["candidate"],
                "reference_ms": times["reference"],
                "bytes": int(case_work["bytes"]),
                "flops": int(case_work["flops"]),
                "dtype": str(case_work["dtype"]),
            }
        )
        del inputs, fns
        backend.empty_cache()
    return {"timed": True, "device": backend.device_info(), "rounds": rounds, "cases": cases}
