"""Load an uploaded kernel module inside the child and build its two models.

Runs only inside the sandbox child (standard library, torch, triton, numpy).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

REQUIRED = ("Model", "ModelNew", "get_inputs", "get_init_inputs")


class ModuleLoadError(Exception):
    """The module could not be imported or lacks a required name; carries the line when known."""

    def __init__(self, kind: str, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.line = line


def load_module(path: str, name: str = "kernelopt_user_module") -> types.ModuleType:
    """Import the file at `path` under a fresh module name (so two files can live in one process)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleLoadError("import_error", f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's JIT looks functions' modules up here
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ModuleLoadError("syntax_error", f"syntax error: {exc.msg}", exc.lineno) from exc
    except (Exception, SystemExit) as exc:  # sys.exit() at import is an import failure, not an exit
        raise ModuleLoadError("import_error", f"importing the module raised {type(exc).__name__}: {exc}",
                              _user_line(exc, path)) from exc
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise ModuleLoadError("missing_name", f"the module does not define {', '.join(missing)}")
    return module


def _user_line(exc: BaseException, path: str) -> int | None:
    """The deepest traceback frame that is in the uploaded file."""
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def input_cases(module: types.ModuleType) -> list[list[Any]]:
    """The timed shape cases: get_input_cases() if defined, else [get_inputs()]."""
    if hasattr(module, "get_input_cases"):
        cases = [list(c) for c in module.get_input_cases()]
    else:
        cases = [list(module.get_inputs())]
    if not cases:
        raise ModuleLoadError("bad_inputs", "get_input_cases() returned no cases")
    return cases


def verify_cases(module: types.ModuleType) -> list[list[Any]]:
    """Extra correctness-only cases from get_verify_inputs(), if defined."""
    if hasattr(module, "get_verify_inputs"):
        return [list(c) for c in module.get_verify_inputs()]
    return []


def build_models(
    module: types.ModuleType, seed: int, device: Any, *, new_module: types.ModuleType | None = None
) -> tuple[Any, Any]:
    """Both models from the same seed; ModelNew gets Model's state dict (DESIGN.md section 1).

    `new_module`: take ModelNew from another file (a candidate revision), while Model and
    get_init_inputs stay the parent's, so a candidate cannot change what it is judged against.
    """
    import torch

    init = list(module.get_init_inputs())
    torch.manual_seed(seed)
    ref = module.Model(*init)
    torch.manual_seed(seed)
    new = (new_module or module).ModelNew(*init)
    state = ref.state_dict()
    if state:
        new.load_state_dict(state)
    return ref.to(device).eval(), new.to(device).eval()


def to_device(inputs: list[Any], device: Any) -> list[Any]:
    import torch

    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
