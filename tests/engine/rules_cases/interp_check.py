"""Check rewritten kernel modules under the Triton interpreter, once per autotune config.

Usage (TRITON_INTERPRET=1 must be set): python interp_check.py FILE [FILE ...]

`bench/check_suite.py` does the comparison (Model vs ModelNew on get_verify_inputs). Under the
interpreter an autotuner cannot benchmark, and on the GPU it may pick any config, so every
`@triton.autotune` kernel here is run with config 0, then config 1, ... (the whole module is
checked again for each index, kernels with fewer configs use their last one). Prints one
JSON line per file: {"file", "ok", "configs", "message"}.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MARKER = "INTERP_CHECK "


def main(files: list[str]) -> int:
    spec = importlib.util.spec_from_file_location("check_suite", ROOT / "bench" / "check_suite.py")
    check_suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_suite)
    launches = check_suite._patch_interpreter()
    check_suite._patch_interpreter = lambda: launches  # patch once, not once per module

    from triton.runtime.autotuner import Autotuner

    state = {"index": 0, "most": 1}

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        state["most"] = max(state["most"], len(self.configs))
        config = self.configs[min(state["index"], len(self.configs) - 1)]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        return self.fn.run(*args, **kwargs, **config.all_kwargs())

    Autotuner.run = run
    takes_seed = "seed" in inspect.signature(check_suite._check_in_child).parameters

    def check(path: Path) -> dict:
        return check_suite._check_in_child(path, 0) if takes_seed else check_suite._check_in_child(path)

    failed = 0
    for f in files:
        state["index"], state["most"] = 0, 1
        result = {"file": f, "ok": True, "configs": 0, "message": ""}
        while state["index"] < state["most"]:
            r = check(Path(f))
            result["configs"] = state["index"] + 1
            if not r["ok"]:
                result["ok"] = False
                result["message"] = f"config {state['index']}: {r['message']}"
                break
            state["index"] += 1
        failed += not result["ok"]
        print(MARKER + json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
