"""The code-style features of a corpus module's library part, for the corpus table.

These are the ways other projects write kernels and launches that kernelopt must read: where
the launch is, how its arguments are passed, where the grid and the block sizes come from.
"""

from __future__ import annotations

import ast

from bench.wild.spec import HARNESS_MARK


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_launch(node: ast.AST) -> bool:
    """`kernel[grid](...)`."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)


def features(source: str) -> list[str]:
    """Sorted feature labels of the code above the harness line."""
    library = source.split(HARNESS_MARK)[0]
    tree = ast.parse(library)
    found: set[str] = set()
    jit_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            names = [_decorator_name(d) for d in node.decorator_list]
            if any(n.endswith("jit") for n in names):
                jit_names.add(node.name)
                if any(n.endswith(("autotune", "libtuner")) for n in names):
                    found.add("autotune")
                if any(n.endswith("heuristics") for n in names):
                    found.add("heuristics")
                if len(names) > 1 and not all(
                    n.endswith(("jit", "autotune", "heuristics", "libtuner")) for n in names
                ):
                    found.add("library decorator")
                jit = node.decorator_list[-1]
                if isinstance(jit, ast.Call) and any(k.arg == "do_not_specialize" for k in jit.keywords):
                    found.add("do_not_specialize")
                args = node.args
                defaults = args.defaults
                constexpr_with_default = [
                    a
                    for a, d in zip(args.args[len(args.args) - len(defaults) :], defaults, strict=True)
                    if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
                ]
                if constexpr_with_default:
                    found.add("constexpr defaults")
        if isinstance(node, ast.AnnAssign) and "constexpr" in ast.unparse(node.annotation):
            found.add("constexpr globals")
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            if any(isinstance(t, ast.Name) and t.id == "grid" for t in node.targets):
                found.add("grid lambda")
        if isinstance(node, ast.FunctionDef) and node.name == "grid":
            found.add("grid function")
        if isinstance(node, ast.ImportFrom | ast.Import) and "libdevice" in ast.unparse(node):
            found.add("libdevice")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "ModuleType"
        ):
            found.add("module alias")
    launches = [n for n in ast.walk(tree) if _is_launch(n)]
    for launch in launches:
        assert isinstance(launch, ast.Call)
        if len(launch.args) >= 3:
            found.add("positional args")
        elif launch.keywords and not launch.args:
            found.add("keyword args")
        if any(k.arg is None for k in launch.keywords):
            found.add("launch **kwargs")
        if any(k.arg in ("num_warps", "num_stages") for k in launch.keywords):
            found.add("warps at launch")
        if isinstance(launch.func, ast.Subscript) and isinstance(launch.func.slice, ast.Lambda):
            found.add("grid lambda")
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if any(_is_launch(n) for n in ast.walk(cls)):
            found.add("launch in a class method")
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    called |= {
        n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    launched = {ast.unparse(n.func.value) for n in launches if isinstance(n.func, ast.Subscript)}
    if jit_names & called - launched:
        found.add("jit helpers")
    if len(launched) > 1:
        found.add("several kernels")
    return sorted(found)
