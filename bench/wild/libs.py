"""Per-library rules for the extractor: the shims and the module-level branches that run on CUDA.

Each shim stands in for something the library computes at import time from the machine it runs
on (device probes, vendor dispatch, config files) or a wrapper that only changes how a kernel
is launched; its `reason` goes into the generated module. The values are the ones the library
arrives at on an H200 (sm_90) with triton 3.6 and torch on CUDA.
"""

from __future__ import annotations

import ast
import copy

import yaml

from bench.wild.extract import ExtractError, LibraryRules, Shim
from bench.wild.wheels import WheelSource

# --- liger-kernel ------------------------------------------------------------------------------

LIGER = LibraryRules(
    shims=(
        Shim(
            "liger_kernel.utils",
            "infer_device",
            'def infer_device():\n    return "cuda"',
            "probes torch for the device kind; the corpus targets CUDA (the interpreter check runs the "
            "same code path on CPU tensors)",
        ),
        Shim(
            "liger_kernel.utils",
            "infer_device_arch",
            'def infer_device_arch(device_id: int = 0) -> str:\n    return "hopper"',
            "reads the GPU's compute capability; an H200 (sm_90) is 'hopper' in liger's table",
        ),
        Shim(
            "liger_kernel.utils",
            "is_npu_available",
            "def is_npu_available() -> bool:\n    return False",
            "imports transformers to probe for an Ascend NPU",
        ),
        Shim(
            "liger_kernel.ops.utils",
            "set_large_grf_mode",
            'def set_large_grf_mode(kernel_args: dict):\n    kernel_args["grf_mode"] = "256"',
            "XPU-only; compares package versions with `packaging`. With triton >= 3.6 it sets this",
        ),
    ),
    branches={
        "compare_version('triton', operator.ge, '3.0.0') and not is_npu_available()": True,
        "infer_device() == 'xpu'": False,
        "infer_device() == 'npu'": False,
    },
)

# --- flag-gems -----------------------------------------------------------------------------------

_GEMS_NVIDIA = "flag_gems/runtime/backend/_nvidia"
_GEMS_HEURISTICS = "flag_gems.runtime.backend._nvidia.heuristics_config_utils"
# read only when USE_FLAGTUNE=1 (`configs=runtime.ops_get_configs(...) if os.environ.get("USE_FLAGTUNE")
# == "1" else runtime.get_tuned_config(...)`); the default path never calls them
_GEMS_FLAGTUNE = ("ops_get_configs", "get_expand_config")
# ConfigLoader's defaults for a config entry that does not set them (configloader.py)
_GEMS_CONFIG_DEFAULTS = {"num_stages": 2, "num_warps": 4, "num_ctas": 1}


class GemsRuntime:
    """flag_gems.runtime as the kernels use it: `get_tuned_config(op)` and `get_heuristic_config(op)`.

    The real module builds triton.Config lists from the wheel's YAML and reads heuristics from a
    vendor module when it is imported. This stand-in holds the entries of the ops that the
    extracted code names, built the way ConfigLoader builds them on an sm_90 device (the hopper
    file first, then the nvidia one; `gen:` entries expanded in the loader's order), with the
    heuristics' functions extracted from the wheel.
    """

    module = "flag_gems"
    name = "runtime"
    reason = (
        "flag_gems.runtime loads tune_configs.yaml (the _nvidia/hopper file first on sm_90) and "
        "_nvidia/heuristics_config_utils.py at import; here, the entries of the ops used, as literals"
    )

    def __init__(self) -> None:
        self._tuned: dict[str, str] = {}
        self._heuristics: dict[str, str] = {}
        self._yaml: tuple[dict, dict] | None = None
        self._flagtune: set[str] = set()

    def collect(self, node: ast.AST, alias: str, wheel: WheelSource) -> list[tuple[str, str]]:
        deps: list[tuple[str, str]] = []
        calls = {id(n.func): n for n in ast.walk(node) if isinstance(n, ast.Call)}
        for n in ast.walk(node):
            if not (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == alias):
                continue
            call = calls.get(id(n))
            op = call.args[0].value if call and call.args and isinstance(call.args[0], ast.Constant) else None
            if n.attr in _GEMS_FLAGTUNE:
                self._flagtune.add(n.attr)
                continue
            if n.attr not in ("get_tuned_config", "get_heuristic_config") or not isinstance(op, str):
                raise ExtractError(f"flag_gems runtime use `{ast.unparse(call or n)}` has no shim")
            if n.attr == "get_tuned_config":
                self._tuned.setdefault(op, self._configs(wheel, op))
            elif op not in self._heuristics:
                text, names = self._heuristic(wheel, op)
                self._heuristics[op] = text
                deps += [(_GEMS_HEURISTICS, name) for name in names]
        return deps

    def render(self) -> tuple[str, tuple[str, ...]]:
        lines = ['runtime = types.ModuleType("flag_gems.runtime")']
        if self._tuned:
            lines.append("runtime._tuned_configs = {")
            for op, configs in self._tuned.items():
                lines.append(f'    "{op}": [\n{configs}\n    ],')
            lines += ["}", "runtime.get_tuned_config = runtime._tuned_configs.__getitem__"]
        if self._heuristics:
            lines.append("runtime._heuristic_configs = {")
            lines += [f'    "{op}": {text},' for op, text in self._heuristics.items()]
            lines += ["}", "runtime.get_heuristic_config = runtime._heuristic_configs.__getitem__"]
        if self._flagtune:
            lines += [
                "",
                "",
                "def _flagtune_only(*args, **kwargs):",
                '    raise NotImplementedError("flag_gems\' USE_FLAGTUNE=1 config expansion is not part of this module")',
            ]
            lines += [f"runtime.{attr} = _flagtune_only" for attr in sorted(self._flagtune)]
        return "\n".join(lines), ("import types", "import triton")

    def _configs(self, wheel: WheelSource, op: str) -> str:
        if self._yaml is None:
            hopper = yaml.safe_load(wheel.read(f"{_GEMS_NVIDIA}/hopper/tune_configs.yaml")) or {}
            nvidia = yaml.safe_load(wheel.read(f"{_GEMS_NVIDIA}/tune_configs.yaml")) or {}
            self._yaml = (hopper, nvidia)
        hopper, nvidia = self._yaml
        entries = hopper.get(op, nvidia.get(op))
        if entries is None:
            raise ExtractError(f"flag_gems has no tuned config for {op!r}")
        configs: list[dict] = []
        for entry in entries:
            if "gen" in entry:
                configs += _expand_gen(entry)
            else:
                config = dict(_GEMS_CONFIG_DEFAULTS)
                config.update({k: entry[k] for k in _GEMS_CONFIG_DEFAULTS if k in entry})
                configs.append({"META": entry["META"], **config})
        return "\n".join(
            f"        triton.Config({c['META']!r}, num_warps={c['num_warps']}, num_stages={c['num_stages']}, "
            f"num_ctas={c['num_ctas']}),"
            for c in configs
        )

    def _heuristic(self, wheel: WheelSource, op: str) -> tuple[str, list[str]]:
        module = _GEMS_HEURISTICS
        source = wheel.source(module)
        tree = ast.parse(source)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "HEURISTICS_CONFIGS" for t in node.targets
            ):
                assert isinstance(node.value, ast.Dict)
                for key, value in zip(node.value.keys, node.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == op:
                        text = ast.get_source_segment(source, value, padded=False) or ""
                        names = sorted({n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - {"args"})
                        return text, names
        raise ExtractError(f"flag_gems has no heuristics config for {op!r}")


def _expand_gen(entry: dict) -> list[dict]:
    """A `gen: true` entry as ConfigLoader.to_gen_config expands it (same order: a stack, last value first)."""
    param_map = entry["param_map"]
    plan: list[tuple[str, object, str]] = []
    meta = param_map["META"]
    if isinstance(meta, dict):
        plan += [(k, v, "meta_field") for k, v in meta.items()]
    else:
        plan.append(("META", meta, "meta_block"))
    plan += [(k, v, "config_field") for k, v in param_map.items() if k != "META"]

    def values(source: object) -> list:
        if isinstance(source, list | tuple):
            return list(source)
        if isinstance(source, int):
            return [source]
        return entry[source]

    out: list[dict] = []
    stack = [({"META": {}, **_GEMS_CONFIG_DEFAULTS}, 0)]
    while stack:
        config, step = stack.pop()
        if step == len(plan):
            out.append(config)
            continue
        key, source, kind = plan[step]
        for value in values(source):
            new = copy.deepcopy(config)
            if kind == "meta_field":
                new["META"][key] = value
            elif kind == "meta_block":
                new["META"] = copy.deepcopy(value)
            else:
                new[key] = value
            stack.append((new, step + 1))
    return out


_TORCH_DEVICE_FN = """\
class _TorchDeviceFn:
    def __getattr__(self, name):
        return getattr(torch.cuda, name)

    @staticmethod
    def device(device):
        device = torch.device(device)
        return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


torch_device_fn = _TorchDeviceFn()"""

_LIBTUNER = """\
def libtuner(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=25, rep=100, use_cuda_graph=False, do_bench=None, strategy="default",
             policy="default"):
    return triton.autotune(configs, key, prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                           restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook)"""

GEMS = LibraryRules(
    shims=(
        Shim(
            "*",
            "logger",
            "logger = logging.getLogger(__name__)",
            "each flag_gems module makes its own logger (two spellings); one logger for the generated module",
            imports=("import logging",),
        ),
        Shim(
            "flag_gems.utils.libentry",
            "libentry",
            "def libentry():\n    return lambda fn: fn",
            "LibEntry wraps a kernel in a launcher that caches its specialization keys to cut launch "
            "overhead; here the kernel is Triton's own JITFunction",
        ),
        Shim(
            "flag_gems.utils.libentry",
            "libtuner",
            _LIBTUNER,
            "LibTuner is Triton's autotuner with the key bucketed by `strategy` ('log': powers of two) "
            "and its choices stored in an SQL database (sqlalchemy); here Triton's autotuner on the "
            "exact key, with the same configs",
        ),
        Shim(
            "flag_gems.runtime",
            "torch_device_fn",
            _TORCH_DEVICE_FN,
            "the vendor's torch device module (torch.cuda on NVIDIA), chosen at import by probing the "
            "device; its device() context also accepts the CPU tensors of the interpreter check",
            imports=("import contextlib", "import torch"),
        ),
        Shim(
            "flag_gems.runtime",
            "device",
            'device = types.SimpleNamespace(name="cuda", vendor_name="nvidia")',
            "DeviceDetector probes the machine at import (nvidia-smi); these are its answers on an H200",
            imports=("import types",),
        ),
        Shim(
            "flag_gems.utils.triton_lang_helper",
            "tl_extra_shim",
            "tl_extra_shim = triton.language.extra.cuda.libdevice",
            "the vendor's libdevice module, imported by name at import time; on NVIDIA it is this one",
            imports=("import triton",),
        ),
    ),
    factories=(GemsRuntime,),
)

# --- fla-core ------------------------------------------------------------------------------------

_FLA_FLAGS = {
    "IS_AMD": False,
    "IS_INTEL": False,
    "IS_NPU": False,
    "IS_NVIDIA": True,
    "IS_NVIDIA_HOPPER": True,
    "IS_NVIDIA_BLACKWELL": False,
    "IS_TF32_SUPPORTED": True,
    "IS_TMA_SUPPORTED": True,
}

FLA = LibraryRules(
    shims=(
        Shim(
            "fla.backends",
            "dispatch",
            "def dispatch(entry_point):\n    return entry_point",
            "routes a call to a registered alternative backend; with none installed the decorated "
            "Triton function runs",
        ),
        Shim(
            "fla.ops.utils.cache",
            "fla_cache_autotune",
            "fla_cache_autotune = triton.autotune",
            "Triton's autotuner that first looks up configs cached under fla/configs; with "
            "FLA_CACHE_MODE unset (the default) it autotunes like triton.autotune",
            imports=("import triton",),
        ),
        *(
            Shim(
                "fla.utils.hardware",
                flag,
                f"{flag} = {value}",
                "probes the device at import; its value on an H200",
            )
            for flag, value in _FLA_FLAGS.items()
        ),
        Shim(
            "fla.utils.hardware",
            "device",
            'device = "cuda"',
            "the device kind found at import (triton's driver)",
        ),
        Shim(
            "fla.utils.hardware",
            "device_torch_lib",
            "device_torch_lib = torch.cuda",
            "getattr(torch, device) for the device found at import",
            imports=("import torch",),
        ),
    ),
    branches={
        "os.environ.get('FLA_USE_FAST_OPS', '0') == '1'": False,
        "IS_NVIDIA_BLACKWELL": False,
        "check_pytorch_version('2.4')": True,
        "device == 'cpu'": False,
        # annotations are evaluated in the generated module (no postponed annotations), so the
        # names imported only for type checkers must be there
        "TYPE_CHECKING": True,
    },
)

RULES: dict[str, LibraryRules] = {"liger": LIGER, "gems": GEMS, "fla": FLA}
