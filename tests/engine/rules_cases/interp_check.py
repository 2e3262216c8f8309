"""Check rewritten kernel modules under the Triton interpreter, once per distinct autotune config.

Usage (TRITON_INTERPRET=1 must be set): python interp_check.py FILE [FILE ...]
or python interp_check.py --serve (paths on stdin, one per line: bench/check_suite.run_pool).

`bench/check_suite.py` does the comparison (Model vs ModelNew on get_verify_inputs). Under the
interpreter an autotuner cannot benchmark, and on the GPU it may pick any config, so every
`@triton.autotune` kernel here is run with each of its configs: the whole module is checked
again for each index, kernels with fewer configs use their last one. Prints one JSON line per
file: {"file", "ok", "configs", "runs", "merged", "seconds", "message"}; `configs` is the most
configs any autotuner of the file has (all of them were checked), `runs` how many times the
module was checked.

Configs the interpreter cannot tell apart are checked once. Under the interpreter a launch sees
only the kernel's own parameters: GridExecutor.__call__ drops every keyword that is not one
(triton 3.6, runtime/interpreter.py: `kwargs = {k: v ... if k in argspec.args}`), before the
grid function is called with the bound parameters, and nothing in the interpreter reads
num_warps, num_stages, num_ctas or maxnreg. So two configs of one autotuner whose values for
the kernel's parameters are equal run the same code on the same data, provided nothing else
reads the config: (a) it has no pre_hook (that is called with all of the config's values),
(b) the autotuner wraps the interpreted kernel directly (a @triton.heuristics in between is
handed the launch options too), (c) the module's host code never reads `best_config`, the one
place this run exposes which config it took: a read is caught (a property on Autotuner) and the
file is checked again with every config, merging nothing. Block sizes and every other
constexpr stay distinct: they change the masks and the trip counts.

The get_input_cases() check (config-independent host code run before any kernel) is made on a
file's first run only, on torch's meta device (check_suite's `meta`: the same check of count,
shapes and dtypes without allocating the big cases).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MARKER = "INTERP_CHECK "


class Selection:
    """Which config each autotuner takes on the current run of a file."""

    def __init__(self) -> None:
        self.merge = True
        self.start()

    def start(self) -> None:
        self.index = 0  # the run: each autotuner takes its index-th distinct config (or its last)
        self.most = 1  # the most distinct configs an autotuner of this file has
        self.configs = 1  # the most configs an autotuner of this file has
        self.best_config_read = False
        self.chosen: dict[str, str] = {}  # kernel -> the config it took on this run


def interpreter_key(tuner, config, interpreted_type) -> tuple | None:
    """What the interpreter can see of `config` (see the module docstring); None when that
    cannot be bounded, so the config is never merged with another."""
    if config.pre_hook is not None or not isinstance(tuner.fn, interpreted_type):
        return None
    params = set(tuner.fn.arg_names)
    key = tuple(sorted((k, v) for k, v in config.all_kwargs().items() if k in params))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def distinct_configs(tuner, merge: bool, interpreted_type) -> list:
    """The autotuner's configs, the first of each group the interpreter cannot tell apart."""
    if not merge:
        return list(tuner.configs)
    seen, out = set(), []
    for config in tuner.configs:
        key = interpreter_key(tuner, config, interpreted_type)
        if key is None or key not in seen:
            out.append(config)
        if key is not None:
            seen.add(key)
    return out


def load_check_pool():
    spec = importlib.util.spec_from_file_location("check_pool", ROOT / "bench" / "check_pool.py")
    check_pool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_pool)
    return check_pool


def install(state: Selection):
    """Patch the interpreter (check_suite's launch counter and bf16 dot, once) and the
    autotuner; returns check_suite."""
    check_pool = load_check_pool()
    check_suite = check_pool.load_check_suite()

    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        configs = distinct_configs(self, state.merge, InterpretedFunction)
        state.most = max(state.most, len(configs))
        state.configs = max(state.configs, len(self.configs))
        config = configs[min(state.index, len(configs) - 1)]
        self.__dict__["_interp_best_config"] = config
        state.chosen[getattr(self.fn, "__name__", "?")] = str(config)
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        return self.fn.run(*args, **kwargs, **config.all_kwargs())

    def read_best_config(self):
        state.best_config_read = True
        return self.__dict__.get("_interp_best_config")

    def write_best_config(self, value) -> None:
        self.__dict__["_interp_best_config"] = value

    Autotuner.run = run
    Autotuner.best_config = property(read_best_config, write_best_config)
    return check_suite


def check_file(path: Path, state: Selection, check_suite) -> dict:
    start = time.monotonic()
    result = {"file": str(path), "ok": True, "configs": 0, "runs": 0, "merged": state.merge, "message": ""}
    state.start()
    while state.index < state.most:
        state.chosen = {}
        r = check_suite._check_in_child(path, 0, shape_cases=state.index == 0, meta_cases=True)
        result["runs"] += 1
        if not r["ok"]:
            result["ok"] = False
            chosen = "; ".join(f"{k}: {v}" for k, v in sorted(state.chosen.items()))
            result["message"] = f"config {state.index} ({chosen or 'no autotuned launch'}): {r['message']}"
            break
        state.index += 1
    result["configs"] = state.configs if result["ok"] else state.index + 1
    result["seconds"] = round(time.monotonic() - start, 2)
    return result


def check(path: Path, state: Selection, check_suite) -> dict:
    state.merge = True
    result = check_file(path, state, check_suite)
    if state.best_config_read:
        state.merge = False
        result = check_file(path, state, check_suite)
    return result


def main(argv: list[str]) -> int:
    state = Selection()
    check_suite = install(state)
    if argv == ["--serve"]:
        return load_check_pool().serve(lambda path: check(path, state, check_suite), MARKER)
    failed = 0
    for f in argv:
        result = check(Path(f), state, check_suite)
        failed += not result["ok"]
        print(MARKER + json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
