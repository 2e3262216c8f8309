"""The sandbox on a CUDA node: CUDA and Triton start inside it, and the child is still confined.

Marked `gpu`; skipped where torch sees no CUDA device. Run on the H200 with bubblewrap
unpacked (runner/sandbox/device_setup.sh). `test_cuda_starts_inside_a_pid_namespace` decides
KERNELOPT_SANDBOX_PID_NAMESPACE: where it fails, set it to `cpu` on the node (CUDA jobs then run
without a PID namespace; their fresh /proc still shows other processes' files only as root's).
`test_which_sandbox_profiles_start_cuda` prints which /sys profile and PID-namespace setting
let CUDA start, to choose KERNELOPT_SANDBOX_SYS from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from diagnosis.engine.executor import VerifyOutcome
from runner.execute import Executor
from runner.protocol import JobRequest
from runner.sandbox import Limits, run_job

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

MODULES = Path(__file__).resolve().parent.parent / "modules"


def _verify(processes: str = "auto", tmp: Path | None = None) -> VerifyOutcome:
    """The gate on a CUDA module (its reference job, then its verify job), both jobs under
    the PID-namespace setting `processes`."""
    limits = {job: Limits.for_job(job, "cuda", processes=processes) for job in ("reference", "verify")}
    executor = Executor("cuda", limits=limits, cache_dir=tmp)
    try:
        return executor.verify(str(MODULES / "gpu_vadd.py"), seeds=[0], time=False)
    finally:
        executor.close()


def test_cuda_starts_inside_a_pid_namespace(tmp_path: Path) -> None:
    """Decides KERNELOPT_SANDBOX_PID_NAMESPACE (on: the default; cpu: where this fails)."""
    response = _verify("on", tmp_path)
    print(f"\n[pid namespace on] ok={response.ok} error={response.error} wall={response.wall_s}")
    assert response.processes == "isolated"
    assert response.ok and response.passed, response.error_text


def test_cuda_starts_without_a_pid_namespace(tmp_path: Path) -> None:
    response = _verify("off", tmp_path)
    assert response.processes == "not isolated (disabled)"
    assert response.ok and response.passed, response.error_text


def test_the_cuda_child_is_unprivileged_and_sees_only_the_nvidia_devices(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        (MODULES / "sandbox_probe.py").read_text().replace('SECRET_FILE = ""', 'SECRET_FILE = "/etc/shadow"')
    )
    response = run_job(JobRequest(job="validate", module=str(module), device="cuda"))
    line = next(x for x in response.stderr_tail.splitlines() if x.startswith("PROBE "))
    facts = json.loads(line[len("PROBE ") :])
    print(f"\n[cuda probe] user={response.user} seccomp={response.seccomp} memory={response.memory} "
          f"tasks={response.tasks} processes={response.processes} root={facts['root']}")  # fmt: skip
    assert facts["resuid"][0] != 0 and facts["CapEff"] == "0000000000000000" and facts["Seccomp"] == "2"
    assert facts["secret"] == 2  # /etc/shadow is not there at all
    assert "run" not in facts["root"] and "var" not in facts["root"]


def test_which_sandbox_profiles_start_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A table for the notes: /sys profile x PID namespace -> does a Triton verify job pass."""
    table = {}
    for sys_mode in ("none", "devices", "all"):
        for processes in ("on", "off"):
            monkeypatch.setenv("KERNELOPT_SANDBOX_SYS", sys_mode)
            response = _verify(processes, tmp_path / f"{sys_mode}-{processes}")
            table[f"sys={sys_mode} pid={processes}"] = (
                "passed" if response.ok and response.passed else
                f"{response.error.kind if response.error else '?'}: {(response.error.message if response.error else '')[:160]}"
            )  # fmt: skip
    print("\n[cuda sandbox profiles] " + json.dumps(table, indent=1))
    assert table["sys=devices pid=on"] == "passed" or table["sys=devices pid=off"] == "passed", table


def test_the_sandbox_costs_little_per_cuda_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Wall seconds of the same verify job with and without the sandbox (median of 3 each)."""
    import statistics

    walls: dict[str, list[float]] = {"bwrap": [], "none": []}
    for i in range(6):
        mode = ("bwrap", "none")[(i + i // 2) % 2]
        monkeypatch.setenv("KERNELOPT_SANDBOX", mode)
        response = _verify("auto", tmp_path / "cache")  # one cache: the compile is paid once
        assert response.ok, (mode, response.error)
        walls[mode].append(response.wall_s)
    medians = {mode: statistics.median(v) for mode, v in walls.items()}
    print(f"\n[cuda verify job wall] {json.dumps(walls)} medians {medians}")
    assert medians["bwrap"] < 1.2 * medians["none"] + 0.5
