"""Check the benchmark suite's kernel modules under the Triton CPU interpreter.

Usage: python bench/check_suite.py [-j N] [files...]   (default: every bench/suite/NN_*.py)

Each module is checked in a fresh subprocess with TRITON_INTERPRET=1 in its environment:
it is imported by path, `Model` and `ModelNew` are built from `get_init_inputs()`, `Model`'s
state dict is loaded into `ModelNew`, and both run on every `get_verify_inputs()` case. Torch is
seeded with --seed (default 0) before the inputs are made and before each model is built. Outputs must agree in shape, dtype, NaN/Inf positions and value
(torch.allclose). `get_input_cases()` must return exactly 5 lists whose first has the same
shapes as `get_inputs()`; those big cases are built but never run on CPU.

Tolerances (rtol = atol): fp16/bf16 outputs 2e-2; fp32 outputs 2e-3 when the module's kernels
reduce (tl.dot, tl.sum, tl.max, tl.cumsum, atomics ...), 1e-4 otherwise; integer and bool
outputs must be equal.

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


def check_module(path: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT_S, seed: int = 0) -> dict:
    """Check one module in a fresh interpreter-mode subprocess and return its result.

    The result is a dict with keys: name, ok, max_err, cases, seconds, message.
    """
    path = Path(path).resolve()
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1"
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--seed", str(seed), "--child", str(path)],
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


def _patch_interpreter() -> dict:
    """Count kernel launches, and make the interpreter's tl.dot accept bfloat16 operands.

    Triton 3.6's interpreter stores bfloat16 as uint16 and np.matmul's the bit patterns in
    tl.dot (triton-lang/triton#11584, fix not merged); GPUs compute a bf16 dot in fp32. The
    patch converts bf16 operands to fp32 first, which is exact.
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


def _check_shape_cases(module, seed: int) -> None:
    """get_input_cases() gives N_CASES lists, the first shaped like get_inputs(); built on CPU
    (they are what the GPU harness times) but never run here."""
    import torch

    torch.manual_seed(seed)
    cases = module.get_input_cases()
    if not isinstance(cases, list) or len(cases) != N_CASES:
        raise AssertionError(f"get_input_cases() must return a list of {N_CASES} lists")
    if not all(isinstance(c, list) for c in cases):
        raise AssertionError("every entry of get_input_cases() must be a list")
    main_sig = _signature(module.get_inputs())
    if main_sig != _signature(cases[0]):
        raise AssertionError(
            f"get_inputs() {main_sig} does not match get_input_cases()[0] {_signature(cases[0])}"
        )


def _check_in_child(path: Path, seed: int, *, shape_cases: bool = True) -> dict:
    """Check one module in this (TRITON_INTERPRET=1) process. shape_cases=False leaves out the
    get_input_cases() check, for a caller that already made it on the same file and seed: it runs
    before any kernel and reads nothing else, so it cannot come out differently."""
    result = {"name": path.stem, "ok": False, "max_err": None, "cases": 0, "message": ""}
    if os.environ.get("TRITON_INTERPRET") != "1":
        result["message"] = "TRITON_INTERPRET=1 is not set in the child's environment"
        return result
    try:
        launches = _patch_interpreter()
        import torch

        source = path.read_text()
        reduces = bool(REDUCTION_MARKERS.search(source))

        spec = importlib.util.spec_from_file_location(f"suite_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        if shape_cases:
            _check_shape_cases(module, seed)

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

        worst = 0.0
        for k, inputs in enumerate(verify):
            if not isinstance(inputs, list):
                raise AssertionError(f"verify case {k} is not a list")
            with torch.no_grad():
                ref = ref_model(*_clone(inputs))
                before = launches["count"]
                new = new_model(*_clone(inputs))
                if launches["count"] == before:
                    raise AssertionError(f"verify case {k}: ModelNew.forward launched no Triton kernel")
            try:
                worst = max(worst, _compare(ref, new, reduces))
            except AssertionError as exc:
                raise AssertionError(f"verify case {k} {_signature(inputs)}: {exc}") from None
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
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        result = _check_in_child(Path(args.child), args.seed)
        print(RESULT_MARKER + json.dumps(result), flush=True)
        return 0

    files = [Path(f) for f in args.files] or suite_files()
    if not files:
        print("no modules to check", file=sys.stderr)
        return 2
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(check_module, f, args.timeout, args.seed) for f in files]
        for future in futures:
            result = future.result()
            failed += not result["ok"]
            print(format_result(result), flush=True)
    print(f"{len(files) - failed}/{len(files)} modules pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
