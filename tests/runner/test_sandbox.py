"""The sandbox's own guarantees: limits, environment, temporary directories, network status."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from runner.protocol import JobRequest, JobResponse
from runner.sandbox import (
    ENV_DENY,
    Limits,
    SandboxResponse,
    _trampoline_config,
    child_python,
    run_job,
    scrubbed_env,
)

MODULES = Path(__file__).resolve().parent.parent / "modules"


def _request(module: str, job: str = "validate", device: str = "cpu") -> JobRequest:
    return JobRequest(job=job, module=str(MODULES / module), device=device)


def _seen_env(response: SandboxResponse) -> dict[str, str]:
    """The environment hostile_env.py put into its error message."""
    message = response.error.message  # type: ignore[union-attr]
    return ast.literal_eval(message[message.index("{") :])


def test_the_wall_clock_kills_the_whole_process_group() -> None:
    # 10 s: the child must start python and torch and import the module (which forks the
    # grandchild) inside the limit; with 3 s a loaded 2-core CI machine killed it before that
    response = run_job(_request("hostile_import_fork.py"), limits=Limits(wall_s=10))
    assert response.error is not None and response.error.kind == "timeout"
    assert 10 <= response.wall_s < 25
    pid = int(re.search(r"GRANDCHILD_PID=(\d+)", response.stderr_tail).group(1))  # type: ignore[union-attr]
    # SIGKILL is delivered at once but a process takes a moment to exit: on a loaded CI machine
    # the grandchild was seen still in state R (exiting) right after run_job returned
    deadline = time.monotonic() + 5.0
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_the_cpu_time_limit_ends_a_busy_child() -> None:
    response = run_job(_request("hostile_import_loop.py"), limits=Limits(wall_s=30, cpu_s=1))
    assert response.error is not None and response.error.kind == "timeout"
    assert "CPU" in response.error.message
    assert response.wall_s < 20


def test_stdout_over_the_cap_is_bad_output() -> None:
    response = run_job(_request("hostile_stdout_flood.py"), limits=Limits(stdout_bytes=256 * 1024))
    assert response.error is not None and response.error.kind == "bad_output"
    assert "256" in response.error.message or "262144" in response.error.message


def test_a_missing_interpreter_is_a_sandbox_error() -> None:
    response = run_job(_request("correct_add.py"), python="/nonexistent/python3")
    assert response.error is not None and response.error.kind == "sandbox_error"


def test_the_child_sees_a_scrubbed_environment_and_its_own_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://x:PWVALUE@h/db")
    monkeypatch.setenv("KERNELOPT_ANYTHING", "internal")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    cache = tmp_path / "shared-cache"
    response = run_job(_request("hostile_env.py"), triton_cache_dir=cache)
    seen = _seen_env(response)
    assert "DATABASE_URL" not in seen and "KERNELOPT_ANYTHING" not in seen
    assert seen["CUDA_VISIBLE_DEVICES"] == "0"
    assert seen["TRITON_INTERPRET"] == "1"
    assert seen["TRITON_CACHE_DIR"] == str(cache)
    assert seen["TRITON_CACHE_AUTOTUNING"] == "1"  # autotune timings kept in that shared cache
    assert seen["HOME"] == seen["TMPDIR"]
    assert not Path(seen["HOME"]).exists()  # removed after the job
    assert cache.is_dir()  # the caller's cache stays


def test_a_workdir_given_by_the_caller_is_kept(tmp_path: Path) -> None:
    response = run_job(_request("hostile_env.py"), workdir=tmp_path / "job")
    seen = _seen_env(response)
    assert seen["HOME"] == str(tmp_path / "job")
    assert (tmp_path / "job" / "triton-cache").is_dir()


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        pytest.param("PATH", True, id="PATH"),
        pytest.param("LD_LIBRARY_PATH", True, id="LD_LIBRARY_PATH"),
        pytest.param("ASCEND_HOME_PATH", True, id="ASCEND_HOME_PATH"),
        pytest.param("NVIDIA_VISIBLE_DEVICES", True, id="NVIDIA_VISIBLE_DEVICES"),
        pytest.param("NCCL_NVLS_ENABLE", True, id="NCCL_NVLS_ENABLE"),
        pytest.param("LC_ALL", True, id="LC_ALL"),
        pytest.param("DATABASE_URL", False, id="DATABASE_URL"),
        pytest.param("BROKER_URL", False, id="BROKER_URL"),
        pytest.param("SECRET_KEY", False, id="SECRET_KEY"),
        pytest.param("OPENAI_API_KEY", False, id="OPENAI_API_KEY"),
        pytest.param("OPENAI_BASE_URL", False, id="OPENAI_BASE_URL"),
        pytest.param("AWS_ACCESS_KEY_ID", False, id="AWS_ACCESS_KEY_ID"),
        pytest.param("ASCEND_TOKEN", False, id="credential-under-an-allowed-prefix"),
        pytest.param("PYTHONPATH", False, id="PYTHONPATH-is-replaced"),
        pytest.param("DJANGO_SETTINGS_MODULE", False, id="DJANGO_SETTINGS_MODULE"),
    ],
)
def test_scrubbed_env(name: str, kept: bool) -> None:
    base = {name: "value-of-" + name}
    env = scrubbed_env("cuda", "verify", "/tmp/home", "/tmp/cache", base=base)
    assert (env.get(name) == "value-of-" + name) is kept


def test_scrubbed_env_sets_the_interpreter_for_cpu_jobs_only() -> None:
    assert scrubbed_env("cpu", "verify", "/h", "/c", base={})["TRITON_INTERPRET"] == "1"
    assert "TRITON_INTERPRET" not in scrubbed_env("cpu", "compile", "/h", "/c", base={})
    assert "TRITON_INTERPRET" not in scrubbed_env(
        "cuda", "verify", "/h", "/c", base={"TRITON_INTERPRET": "1"}
    )
    assert ENV_DENY.search("MY_API_KEY") and not ENV_DENY.search("CUDA_VISIBLE_DEVICES")


def test_the_pid_namespace_is_for_cpu_jobs_unless_asked_for() -> None:
    # CUDA does not initialise inside a PID namespace on the H200 machines (error 304).
    assert _trampoline_config(_request("x.py", device="cpu"), Limits())["processes"] == "on"
    assert _trampoline_config(_request("x.py", device="cuda"), Limits())["processes"] == "off"
    assert _trampoline_config(_request("x.py", device="npu"), Limits())["processes"] == "off"
    assert _trampoline_config(_request("x.py", device="cuda"), Limits(processes="on"))["processes"] == "on"
    assert _trampoline_config(_request("x.py", device="cpu"), Limits(processes="off"))["processes"] == "off"


def test_the_address_space_limit_applies_on_cpu_only() -> None:
    limits = Limits(address_space_bytes=4 << 30)
    assert _trampoline_config(_request("x.py", device="cpu"), limits)["rlimits"]["RLIMIT_AS"] == 4 << 30
    assert "RLIMIT_AS" not in _trampoline_config(_request("x.py", device="cuda"), limits)["rlimits"]


def test_limits_have_defaults_per_job_and_device() -> None:
    assert Limits.for_job("validate", "cpu").wall_s == 60
    assert Limits.for_job("verify", "cpu").wall_s == 300
    assert Limits.for_job("verify", "cuda").wall_s == 600
    assert Limits.for_job("time", "cuda", wall_s=5).wall_s == 5
    assert Limits(wall_s=10).cpu_seconds == 50


def test_the_child_interpreter_is_configurable_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_PYTHON_NPU", "/opt/ascend/venv/bin/python")
    monkeypatch.delenv("KERNELOPT_PYTHON", raising=False)
    assert child_python("npu") == "/opt/ascend/venv/bin/python"
    assert child_python("cpu") == os.sys.executable  # type: ignore[attr-defined]


def test_the_response_says_whether_network_and_processes_were_isolated() -> None:
    response = run_job(_request("hostile_env.py"))
    for status in (response.network, response.processes):
        assert status == "isolated" or status.startswith("not isolated (")
    if os.geteuid() == 0:
        assert (response.network, response.processes) == ("isolated", "isolated")


def test_required_isolation_is_honoured_where_possible() -> None:
    response = run_job(_request("hostile_env.py"), limits=Limits(network="required"))
    if response.network == "isolated":
        assert response.error is not None and response.error.kind == "import_error"  # it ran
    else:
        assert response.error is not None and response.error.kind == "sandbox_error"


def test_a_sandbox_response_round_trips_as_a_job_response() -> None:
    response = run_job(_request("broken_missing.py"))
    again = JobResponse.loads(response.dumps())
    assert again.ok is False and again.error is not None
    assert again.error.kind == "missing_name" and again.job == "validate"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_child_cannot_signal_the_workers_processes(tmp_path: Path) -> None:
    decoy = subprocess.Popen(["sleep", "60"])
    try:
        module = tmp_path / "hostile_kill.py"
        module.write_text(
            (MODULES / "hostile_kill.py").read_text().replace("DECOY_PID = 0", f"DECOY_PID = {decoy.pid}")
        )
        response = run_job(JobRequest(job="validate", module=str(module)))
        if response.processes != "isolated":
            pytest.skip(f"no PID namespace here: {response.processes}")
        assert response.error is not None and "kill failed" in response.error.message
        assert decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()


def test_grandchildren_that_leave_the_session_die_with_the_job() -> None:
    response = run_job(_request("hostile_setsid_escape.py"))
    pid = int(re.search(r"ESCAPED_PID=(\d+)", response.stderr_tail).group(1))  # type: ignore[union-attr]
    try:
        if response.processes != "isolated":
            pytest.skip(f"no PID namespace here: {response.processes}")
        assert response.error is not None and response.error.kind == "import_error"
        for _ in range(50):  # the kernel tears the namespace down as its init exits
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_job_dies_with_the_worker_that_started_it(tmp_path: Path) -> None:
    """A worker killed mid-run must not leave its child running beside the run's next attempt."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    pidfile = tmp_path / "child.pid"
    module = tmp_path / "sleeper.py"
    module.write_text(textwrap.dedent(f'''
        import os, time
        import torch.nn as nn
        import triton
        import triton.language as tl

        @triton.jit
        def k(x):
            pass

        # /proc is the worker's mount: /proc/self names this process's pid on the host
        open({str(pidfile)!r}, "w").write(os.readlink("/proc/self"))
        time.sleep(120)

        class Model(nn.Module):
            pass

        class ModelNew(nn.Module):
            pass

        def get_inputs():
            return []

        def get_init_inputs():
            return []
    '''))
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f'''
            from runner.protocol import JobRequest
            from runner.sandbox import Limits, run_job
            run_job(JobRequest("validate", {str(module)!r}, device="cpu"), limits=Limits(wall_s=120))
        ''')],
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline, "the child never started"
            assert worker.poll() is None, "the worker ended early"
            time.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        child = int(pidfile.read_text())
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), f"the job's child ({child}) outlived its worker"
    finally:
        if worker.poll() is None:
            worker.kill()
