"""The npu backend's import path (runner.backends.npu) as far as it goes without an NPU.

torch-npu 2.13.0 (the release for torch 2.13) lies in .venv-ascend/torch-npu, off sys.path
(`make ascend`); these tests put it on the child's path the way an NPU node puts CANN's Python
packages there (KERNELOPT_CHILD_PYTHONPATH). Without CANN, torch loads torch_npu inside
`import torch` and fails on CANN's libhccl.so: the job must say so as a device error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.backends.npu import parse_msprof_op_summary, root_cause
from runner.execute import Executor

MODULES = Path(__file__).resolve().parents[1] / "modules"


@pytest.fixture(scope="module")
def torch_npu_dir(ascend_python: str) -> str:
    path = Path(ascend_python).parent.parent / "torch-npu"
    if not (path / "torch_npu" / "__init__.py").is_file():
        pytest.fail(f"torch-npu is not installed in {path} (run `make ascend`)")
    return str(path)


@pytest.mark.slow
def test_torch_npu_without_cann_is_a_device_error_naming_the_missing_library(
    ascend_python: str, torch_npu_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELOPT_CHILD_PYTHONPATH", torch_npu_dir)
    outcome = Executor("npu", python=ascend_python).verify(str(MODULES / "correct_add.py"), seeds=(0,))
    assert not outcome.ok and outcome.error.kind == "device_error"
    assert "torch_npu" in outcome.error.message and "libhccl.so" in outcome.error.message


@pytest.mark.slow
def test_an_npu_job_without_torch_npu_is_a_device_error_in_the_ascend_environment(ascend_python: str) -> None:
    outcome = Executor("npu", python=ascend_python).verify(str(MODULES / "correct_add.py"), seeds=(0,))
    assert not outcome.ok and outcome.error.kind == "device_error"
    assert "No module named 'torch_npu'" in outcome.error.message


def test_root_cause_is_the_innermost_exception_of_the_chain() -> None:
    try:
        try:
            raise ImportError("libhccl.so: cannot open shared object file")
        except ImportError as inner:
            raise RuntimeError("Failed to load the backend extension: torch_npu") from inner
    except RuntimeError as outer:
        assert root_cause(outer) == "ImportError: libhccl.so: cannot open shared object file"


def test_msprof_op_summary_rows_are_parsed_and_bad_rows_skipped() -> None:
    text = "Op Name,Task Duration(us)\nadd_kernel,12.5\nbad,\nother,x\n"
    assert parse_msprof_op_summary(text) == [("add_kernel", 12.5)]
