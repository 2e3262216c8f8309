"""The benchmark suite (bench/suite): 37 kernel modules in the upload format.

Static checks parse each file (never import it); the interpreter checks run
bench/check_pool.py's `check_modules` on the selected files: a few TRITON_INTERPRET=1
children, started when the first interpreter check runs, each checking one module after another.
Under pytest-xdist (--dist loadfile) this file runs on one worker, so they are started once.
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
CHECK_POOL = ROOT / "bench" / "check_pool.py"
FILES = sorted(p for p in SUITE_DIR.glob("*.py") if re.match(r"\d\d_\w+\.py$", p.name))
REQUIRED_CLASSES = ("Model", "ModelNew")
REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs", "get_input_cases", "get_verify_inputs")
CATEGORY_RE = re.compile(r"^category:\s*(\w+)\s*$", re.MULTILINE)
MAX_PARALLEL_CHECKS = 4


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_suite = _load("bench_check_suite", CHECK_SUITE)
check_pool = _load("bench_check_pool", CHECK_POOL)


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
    """Check every selected module at once, in a few long-lived interpreter children
    (check_pool.check_modules: torch and triton imported once per child, not per module)."""
    selected = [
        item.callspec.params["path"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_interpreter_check" and hasattr(item, "callspec")
    ]
    workers = max(1, min(MAX_PARALLEL_CHECKS, os.cpu_count() or 1))
    done: dict[str, concurrent.futures.Future] = {
        str(p.resolve()): concurrent.futures.Future() for p in selected
    }

    def arrived(path: str, result: dict) -> None:
        done.setdefault(path, concurrent.futures.Future()).set_result(result)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    batch = pool.submit(check_pool.check_modules, selected, workers, on_result=arrived)

    def result(path):
        key = str(path.resolve())
        if key not in done:  # not among the selected items: checked alone
            return check_suite.check_module(path)
        future = done[key]
        concurrent.futures.wait([future, batch], return_when=concurrent.futures.FIRST_COMPLETED)
        if not future.done():
            batch.result()  # the batch ended without this module's result: raise what stopped it
            raise AssertionError(f"no result for {path}")
        return future.result()

    yield result
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", _params())
def test_interpreter_check(path, interpreter_results):
    result = interpreter_results(path)
    assert result["ok"], check_suite.format_result(result)
