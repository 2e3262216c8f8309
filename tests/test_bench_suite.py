"""The benchmark suite (bench/suite): 37 kernel modules in the upload format.

Static checks parse each file (never import it); the interpreter checks run
bench/check_suite.py's `check_module` on each file, which checks it in a fresh
TRITON_INTERPRET=1 subprocess. Those subprocesses are started together, a few at a time, when the
first interpreter check runs, so the whole file takes about a minute on two cores.
"""

import ast
import concurrent.futures
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE_DIR = ROOT / "bench" / "suite"
CHECK_SUITE = ROOT / "bench" / "check_suite.py"
FILES = sorted(p for p in SUITE_DIR.glob("*.py") if re.match(r"\d\d_\w+\.py$", p.name))
REQUIRED_CLASSES = ("Model", "ModelNew")
REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs", "get_input_cases", "get_verify_inputs")
CATEGORY_RE = re.compile(r"^category:\s*(\w+)\s*$", re.MULTILINE)
MAX_PARALLEL_CHECKS = 4


def _load_check_suite():
    spec = importlib.util.spec_from_file_location("bench_check_suite", CHECK_SUITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_suite = _load_check_suite()


def _category(path: Path) -> str | None:
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    match = CATEGORY_RE.search(docstring)
    return match.group(1) if match else None


def _is_triton_jit(decorator: ast.expr) -> bool:
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    return (
        isinstance(decorator, ast.Attribute)
        and decorator.attr == "jit"
        and isinstance(decorator.value, ast.Name)
        and decorator.value.id == "triton"
    )


def _params():
    return [pytest.param(path, id=path.stem) for path in FILES]


def test_suite_has_37_modules_19_single_18_fused():
    assert len(FILES) == 37, [p.name for p in FILES]
    assert [p.name[:2] for p in FILES] == [f"{i:02d}" for i in range(1, 38)]
    categories = {p.stem: _category(p) for p in FILES}
    single = [name for name, cat in categories.items() if cat == "single"]
    fused = [name for name, cat in categories.items() if cat == "fused"]
    assert len(single) == 19, single
    assert len(fused) == 18, fused
    # single operators come first (01-19), fused sequences after (20-37)
    assert single == [p.stem for p in FILES[:19]]


def test_check_suite_finds_the_same_files():
    assert check_suite.suite_files() == FILES


@pytest.mark.parametrize("path", _params())
def test_module_structure(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    docstring = ast.get_docstring(tree)
    assert docstring, "module docstring missing"
    assert _category(path) in ("single", "fused"), "docstring needs a 'category: single|fused' line"
    assert "first conversion" in docstring.lower(), "docstring should describe the first conversion"

    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for name in REQUIRED_CLASSES:
        assert name in classes, f"class {name} missing"
    for name in REQUIRED_FUNCTIONS:
        assert name in functions, f"function {name} missing"
    kernels = [
        name for name, node in functions.items() if any(_is_triton_jit(d) for d in node.decorator_list)
    ]
    assert kernels, "no @triton.jit function"

    source = path.read_text()
    assert ".cuda(" not in source and "manual_seed" not in source
    assert not re.search(r"device\s*=\s*['\"]", source), "hard-coded device"


@pytest.fixture(scope="session")
def interpreter_results(request):
    """Start the interpreter checks of every selected module at once (a few in parallel)."""
    selected = [
        item.callspec.params["path"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_interpreter_check" and hasattr(item, "callspec")
    ]
    workers = max(1, min(MAX_PARALLEL_CHECKS, os.cpu_count() or 1))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
    futures = {path: pool.submit(check_suite.check_module, path) for path in selected}

    def result(path):
        if path not in futures:
            futures[path] = pool.submit(check_suite.check_module, path)
        return futures[path].result()

    yield result
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", _params())
def test_interpreter_check(path, interpreter_results):
    result = interpreter_results(path)
    assert result["ok"], check_suite.format_result(result)
