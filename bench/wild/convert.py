"""Rewrite a released corpus module the way a first, naive conversion would launch its kernels.

What changes (libcst, so every other byte of the file stays as it was):
- `@triton.autotune` (and the libraries' wrappers of it) is removed; the kernel is launched with
  one of its configs' block values, the config nearest a small fixed block (128 elements for one
  block dimension, 32 x 32 for two, 32 x 32 x 32 for three). A config with a pre_hook (flag_gems'
  TMA matmul sets descriptor block shapes in it) cannot be dropped: the autotuner is kept with the
  first config that has those blocks.
- `@triton.heuristics` entries that choose a block size become that fixed small block (128, or 32
  per dimension when a kernel has two or more), entries that choose num_warps/num_stages go;
  entries that derive flags (ONE_TILE_PER_CTA, IS_VARLEN, ...) stay, they follow from the blocks.
- `num_warps=`, `num_stages=`, `num_ctas=` are removed from every launch (Triton's defaults), also
  from a dict literal splatted into a launch.
- Block sizes the host code computes (`BLOCK_SIZE = triton.next_power_of_2(n)` for a one-block row)
  stay: such a kernel is only correct with them.

The block values are passed as keyword arguments at each launch site of the kernel. Which configs
and heuristics a kernel has is read by importing the module (on CPU, nothing is launched).
"""

from __future__ import annotations

import importlib.util
import math
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas")
_BLOCK_NAME = re.compile(r"^(BLOCK|TILE)\w*$|^B[A-Z]?$")
_TARGET_PER_DIM = {1: 128, 2: 32, 3: 32}  # elements per block dimension, by number of dimensions


class ConvertError(Exception):
    """A module whose launches the converter cannot rewrite (a kernel with no launch site it can see)."""


def is_block_name(name: str) -> bool:
    return bool(_BLOCK_NAME.match(name))


@dataclass(frozen=True)
class Config:
    kwargs: dict[str, int]
    has_pre_hook: bool


@dataclass(frozen=True)
class Tuning:
    """What a kernel gets from the autotuner and heuristics wrapped around it (read at import)."""

    configs: tuple[Config, ...] | None  # None: no autotuner
    heuristics: tuple[str, ...]  # the keys the heuristics set


def inspect_tuning(path: Path) -> dict[str, Tuning]:
    """Import the module (on CPU, nothing runs) and read each kernel's autotuner and heuristics."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    name = f"_wild_convert_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    out: dict[str, Tuning] = {}
    for value in vars(module).values():
        configs: tuple[Config, ...] | None = None
        keys: list[str] = []
        obj = value
        while isinstance(obj, Autotuner | Heuristics):
            if isinstance(obj, Autotuner):
                configs = tuple(Config(dict(c.kwargs), c.pre_hook is not None) for c in obj.configs)
            else:
                keys += list(obj.values)
            obj = obj.fn
        if isinstance(obj, JITFunction) and (configs is not None or keys):
            out[obj.fn.__name__] = Tuning(configs, tuple(keys))
    return out


def choose_config(configs: tuple[Config, ...]) -> int:
    """The config whose blocks are nearest the fixed small block (first of equals)."""

    def distance(config: Config) -> float:
        blocks = [v for k, v in config.kwargs.items() if is_block_name(k) and isinstance(v, int) and v > 0]
        if not blocks:
            return 0.0
        target = _TARGET_PER_DIM.get(len(blocks), 32) ** len(blocks)
        return abs(math.log2(math.prod(blocks)) - math.log2(target))

    return min(range(len(configs)), key=lambda i: (distance(configs[i]), i))


@dataclass
class KernelPlan:
    """What the conversion does to one kernel."""

    kernel: str
    fixed: dict[str, int] = field(default_factory=dict)  # passed at every launch
    drop_heuristics: set[str] = field(default_factory=set)
    remove_autotune: bool = False
    keep_config: dict[str, int] | None = None  # the autotuner stays, reduced to this config (pre_hook)


def plan(tuning: dict[str, Tuning]) -> dict[str, KernelPlan]:
    plans: dict[str, KernelPlan] = {}
    for kernel, t in tuning.items():
        p = plans[kernel] = KernelPlan(kernel)
        if t.configs is not None:
            index = choose_config(t.configs)
            if any(c.has_pre_hook for c in t.configs):
                p.keep_config = dict(t.configs[index].kwargs)
            else:
                p.remove_autotune = True
                p.fixed.update(t.configs[index].kwargs)
        heuristic_blocks = [k for k in t.heuristics if is_block_name(k)]
        per_dim = 128 if len(heuristic_blocks) == 1 else 32
        for key in t.heuristics:
            if key in LAUNCH_OPTIONS:
                p.drop_heuristics.add(key)
            elif is_block_name(key):
                p.drop_heuristics.add(key)
                p.fixed[key] = per_dim
    return plans


@dataclass
class Report:
    """The before/after of one module, one row of the conversion table."""

    name: str
    autotune_removed: list[str] = field(default_factory=list)
    autotune_kept: list[str] = field(default_factory=list)
    heuristics_fixed: list[str] = field(default_factory=list)
    blocks: dict[str, dict[str, int]] = field(default_factory=dict)
    launches: int = 0
    options_removed: int = 0
    error: str = ""


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Call):
        node = node.func
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
    return ".".join(reversed(parts))


def _is_autotune(decorator: cst.Decorator) -> bool:
    last = _dotted(decorator.decorator).split(".")[-1]
    return "autotune" in last or last == "libtuner"


def _is_heuristics(decorator: cst.Decorator) -> bool:
    return _dotted(decorator.decorator).split(".")[-1] == "heuristics"


def _string_key(element: cst.BaseDictElement) -> str | None:
    if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
        return element.key.evaluated_value if isinstance(element.key.evaluated_value, str) else None
    return None


def _drop_entries(d: cst.Dict, drop: set[str]) -> tuple[cst.Dict, list[str]]:
    """The dict without the entries keyed by `drop` (string keys), and the keys it dropped."""
    kept: list[cst.BaseDictElement] = []
    dropped: list[str] = []
    for element in d.elements:
        key = _string_key(element)
        if key is not None and key in drop:
            dropped.append(key)
        else:
            kept.append(element)
    if kept and dropped and kept[-1] is not d.elements[-1]:  # the last entry went: keep its comma layout
        kept[-1] = kept[-1].with_changes(comma=d.elements[-1].comma)
    return d.with_changes(elements=kept), dropped


class _Rewriter(cst.CSTTransformer):
    def __init__(self, plans: dict[str, KernelPlan], params: dict[str, list[str]], report: Report) -> None:
        self.plans = plans
        self.params = params  # every jit kernel's parameter names
        self.report = report
        self.runtime_heuristics: dict[str, set[str]] = {}  # flag_gems shim: op -> keys to drop
        self.splat_names: list[set[str]] = [set()]  # per function: names splatted into launches
        self.launched: set[str] = set()

    # kernels ---------------------------------------------------------------------------------

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        p = self.plans.get(updated.name.value)
        if p is None:
            return updated
        decorators = []
        for decorator in updated.decorators:
            if _is_autotune(decorator):
                if p.remove_autotune:
                    self.report.autotune_removed.append(p.kernel)
                    continue
                if p.keep_config is not None:
                    decorator = decorator.with_changes(
                        decorator=_one_config(decorator.decorator, p.keep_config)
                    )
                    blocks = ", ".join(f"{k}={v}" for k, v in p.keep_config.items())
                    self.report.autotune_kept.append(f"{p.kernel} ({blocks})")
            elif _is_heuristics(decorator) and p.drop_heuristics:
                decorator = self._heuristics(decorator, p)
                if decorator is None:
                    continue
            decorators.append(decorator)
        if p.fixed:
            self.report.blocks[p.kernel] = dict(p.fixed)
        return updated.with_changes(decorators=decorators)

    def _heuristics(self, decorator: cst.Decorator, p: KernelPlan) -> cst.Decorator | None:
        call = decorator.decorator
        if not isinstance(call, cst.Call) or not call.args:
            return decorator
        value = call.args[0].value
        if isinstance(value, cst.Dict):
            new, dropped = _drop_entries(value, p.drop_heuristics)
            self.report.heuristics_fixed += [f"{p.kernel}.{k}" for k in dropped]
            if not new.elements:
                return None
            return decorator.with_changes(
                decorator=call.with_changes(args=[call.args[0].with_changes(value=new)])
            )
        op = _runtime_heuristic_op(value)
        if op is not None:  # the dict is flag_gems' runtime shim's entry for `op`
            self.runtime_heuristics.setdefault(op, set()).update(p.drop_heuristics)
            self.report.heuristics_fixed += [f"{p.kernel}.{k}" for k in sorted(p.drop_heuristics)]
        return decorator

    # launches --------------------------------------------------------------------------------

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.splat_names.append(set())

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        if not (isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name)):
            return updated
        kernel = func.value.value
        if kernel not in self.params:
            return updated
        self.launched.add(kernel)
        self.report.launches += 1
        args = []
        for arg in updated.args:
            # liger's sparsemax kernel has a `num_warps: tl.constexpr` parameter: an argument, not an option
            option = arg.keyword is not None and arg.keyword.value in LAUNCH_OPTIONS
            if option and arg.keyword.value not in self.params[kernel]:
                self.report.options_removed += 1
                continue
            if arg.star == "**" and isinstance(arg.value, cst.Name):
                self.splat_names[-1].add(arg.value.value)
            args.append(arg)
        if args and args[-1] is not updated.args[-1]:  # the last argument went: keep its comma layout
            args[-1] = args[-1].with_changes(comma=updated.args[-1].comma)
        p = self.plans.get(kernel)
        if p is not None and p.fixed:
            params = self.params[kernel]
            positional = sum(1 for a in args if a.keyword is None and not a.star)
            given = {a.keyword.value for a in args if a.keyword is not None} | set(params[:positional])
            for name, value in p.fixed.items():
                if name not in given:
                    args = _append_kwarg(args, name, value)
        return updated.with_changes(args=args)

    def leave_FunctionDef_splats(self, updated: cst.FunctionDef) -> cst.FunctionDef:
        names = self.splat_names.pop()
        if not names:
            return updated
        transformer = _SplatOptions(names)
        new = updated.visit(transformer)
        self.report.options_removed += transformer.removed
        assert isinstance(new, cst.FunctionDef)
        return new

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        if not self.runtime_heuristics:
            return updated
        return updated.visit(_RuntimeHeuristics(self.runtime_heuristics))


class _SplatOptions(cst.CSTTransformer):
    """`kwargs = {"BLOCK_N": 2048, "num_warps": 1}` then `kernel[grid](..., **kwargs)`: drop the options."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.removed = 0

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        target = updated.targets[0].target if len(updated.targets) == 1 else None
        if (
            isinstance(target, cst.Name)
            and target.value in self.names
            and isinstance(updated.value, cst.Dict)
        ):
            new, dropped = _drop_entries(updated.value, set(LAUNCH_OPTIONS))
            self.removed += len(dropped)
            return updated.with_changes(value=new)
        return updated


class _RuntimeHeuristics(cst.CSTTransformer):
    """Drop keys from `runtime._heuristic_configs = {"op": {...}}` (the flag_gems runtime shim)."""

    def __init__(self, drop: dict[str, set[str]]) -> None:
        self.drop = drop

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        target = updated.targets[0].target if len(updated.targets) == 1 else None
        if not (isinstance(target, cst.Attribute) and target.attr.value == "_heuristic_configs"):
            return updated
        if not isinstance(updated.value, cst.Dict):
            return updated
        elements = []
        for element in updated.value.elements:
            key = _string_key(element)
            if (
                key in self.drop
                and isinstance(element, cst.DictElement)
                and isinstance(element.value, cst.Dict)
            ):
                element = element.with_changes(value=_drop_entries(element.value, self.drop[key])[0])
            elements.append(element)
        return updated.with_changes(value=updated.value.with_changes(elements=elements))


def _runtime_heuristic_op(value: cst.BaseExpression) -> str | None:
    if isinstance(value, cst.Call) and _dotted(value.func) == "runtime.get_heuristic_config" and value.args:
        arg = value.args[0].value
        if isinstance(arg, cst.SimpleString) and isinstance(arg.evaluated_value, str):
            return arg.evaluated_value
    return None


def _one_config(call: cst.BaseExpression, blocks: dict[str, int]) -> cst.BaseExpression:
    """`@autotune(configs=X, ...)` -> `@autotune(configs=[c for c in X if c.kwargs == {...}][:1], ...)`.

    By value, not by index: a config list can depend on the device (flag_gems' TMA configs are
    filtered by the GPU's shared memory), the first config with these blocks is the same one.
    """
    assert isinstance(call, cst.Call)
    args = []
    for i, arg in enumerate(call.args):
        is_configs = (arg.keyword is not None and arg.keyword.value == "configs") or (
            i == 0 and arg.keyword is None
        )
        if is_configs:
            configs = cst.Module([]).code_for_node(arg.value)
            value = cst.parse_expression(f"[c for c in ({configs}) if c.kwargs == {blocks!r}][:1]")
            arg = arg.with_changes(value=value)
        args.append(arg)
    return call.with_changes(args=args)


def _append_kwarg(args: list[cst.Arg], name: str, value: int) -> list[cst.Arg]:
    """Add `name=value` after the last argument, with the call's own comma layout."""
    new = cst.Arg(
        value=cst.Integer(str(value)),
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )
    if not args:
        return [new]
    last = args[-1]
    if len(args) >= 2 and last.comma is not cst.MaybeSentinel.DEFAULT:
        # multi-line call with a trailing comma: the new argument takes the last one's comma
        new = new.with_changes(comma=last.comma)
        return [*args[:-1], last.with_changes(comma=args[-2].comma), new]
    if last.comma is not cst.MaybeSentinel.DEFAULT:
        return [*args, new]
    return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new]


def _jit_params(module: cst.Module) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and any(
            _dotted(d.decorator).endswith("jit") for d in stmt.decorators
        ):
            params[stmt.name.value] = [p.name.value for p in stmt.params.params]
    return params


class _Transformer(_Rewriter):
    """_Rewriter with the per-function splat pass wired into leave_FunctionDef."""

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        updated = super().leave_FunctionDef(original, updated)
        return self.leave_FunctionDef_splats(updated)


def convert_source(source: str, tuning: dict[str, Tuning], name: str = "") -> tuple[str, Report]:
    """The first-conversion source and what changed. Raises ConvertError for an unlaunched plan."""
    module = cst.parse_module(source)
    report = Report(name)
    plans = plan(tuning)
    rewriter = _Transformer(plans, _jit_params(module), report)
    new = module.visit(rewriter)
    unlaunched = [k for k, p in plans.items() if p.fixed and k not in rewriter.launched]
    for kernel in unlaunched:
        # launched elsewhere (through another name): such kernels are not on the modules' paths
        report.blocks.pop(kernel, None)
    return new.code, report


def convert_file(src: Path, dst: Path) -> Report:
    tuning = inspect_tuning(src)
    text, report = convert_source(src.read_text(), tuning, src.stem)
    header = (
        f"# first_conversion of ../released/{src.name}: written by bench/wild/convert.py (autotune removed, blocks\n"
        "# fixed small, num_warps/num_stages left to Triton's defaults); the rest is the released module.\n"
    )
    dst.write_text(header + text)
    return report


def format_report(reports: list[Report]) -> str:
    lines = [
        "| module | autotune removed | heuristics fixed/removed | blocks at launch | launches | options removed |",
        "|---|---|---|---|---|---|",
    ]
    for r in reports:
        if r.error:
            lines.append(f"| {r.name} | ERROR: {r.error} | | | | |")
            continue
        removed = ", ".join(r.autotune_removed + [f"{k}: kept, one config" for k in r.autotune_kept]) or "-"
        heur = ", ".join(r.heuristics_fixed) or "-"
        blocks = (
            "; ".join(f"{k}: " + ", ".join(f"{n}={v}" for n, v in b.items()) for k, b in r.blocks.items())
            or "-"
        )
        lines.append(f"| {r.name} | {removed} | {heur} | {blocks} | {r.launches} | {r.options_removed} |")
    return "\n".join(lines)


def convert_dir(src: Path, dst: Path, only: str | None = None) -> str:
    """Convert every released module; writes dst/CONVERSION.md and returns the table."""
    if dst.exists() and not only:  # no module of an earlier build survives
        shutil.rmtree(dst)
    dst.mkdir(parents=True, exist_ok=True)
    reports = []
    for path in sorted(src.glob("[0-9][0-9]_*.py")):
        if only and not re.search(only, path.name):
            continue
        try:
            reports.append(convert_file(path, dst / path.name))
        except (ConvertError, cst.ParserSyntaxError) as exc:
            reports.append(Report(path.stem, error=str(exc)))
    table = format_report(reports)
    (dst / "CONVERSION.md").write_text("# first_conversion: what changed\n\n" + table + "\n")
    return table
