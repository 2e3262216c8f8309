"""The sandbox's own guarantees: who the child is, what it sees, its limits, its directories.

Every job here runs through the real sandbox (bubblewrap, cgroups, seccomp) as the worker
runs it. Tests that need root or bubblewrap say so and skip without them.
"""

from __future__ import annotations

import ast
import concurrent.futures
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from runner.execute import Executor
from runner.protocol import JobRequest, JobResponse
from runner.sandbox import (
    ENV_DENY,
    GiB,
    Limits,
    SandboxResponse,
    child_python,
    pid_namespace_for,
    rlimits_for,
    run_job,
    scrubbed_env,
    workdirs,
)
from runner.sandbox.cgroups import JobCgroup
from tests.runner import procs

MODULES = Path(__file__).resolve().parent.parent / "modules"
ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT or shutil.which("bwrap") is None, reason="needs root and bwrap")


def _request(module: str, job: str = "validate", device: str = "cpu", **kwargs: object) -> JobRequest:
    return JobRequest(job=job, module=str(MODULES / module), device=device, **kwargs)  # type: ignore[arg-type]


def _seen_env(response: SandboxResponse) -> dict[str, str]:
    """The environment hostile_env.py put into its error message."""
    message = response.error.message  # type: ignore[union-attr]
    return ast.literal_eval(message[message.index("{") :])


def _probe(response: SandboxResponse) -> dict:
    line = next(x for x in response.stderr_tail.splitlines() if x.startswith("PROBE "))
    return json.loads(line[len("PROBE ") :])


def _templated(tmp_path: Path, module: str, **values: object) -> str:
    text = (MODULES / module).read_text()
    for name, value in values.items():
        text = text.replace(f"{name} = 0", f"{name} = {value!r}").replace(
            f'{name} = ""', f"{name} = {value!r}"
        )
    target = tmp_path / module
    target.write_text(text)
    return str(target)


# ---------------------------------------------------------------- who the child is, what it sees


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[SandboxResponse, Path]:
    """One job of sandbox_probe.py, with a root-owned 0600 file bound into its sandbox."""
    tmp = tmp_path_factory.mktemp("probe")
    secret = tmp / "root-only.txt"
    secret.write_text("ROOT-ONLY-CANARY")
    secret.chmod(0o600)
    module = _templated(tmp, "sandbox_probe.py", SECRET_FILE=str(secret))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELOPT_SANDBOX_BIND", str(secret))
        return run_job(JobRequest(job="validate", module=module)), secret


@needs_root
def test_the_child_is_an_unprivileged_uid_with_no_capabilities(probe: tuple[SandboxResponse, Path]) -> None:
    response, _ = probe
    facts = _probe(response)
    uid = facts["resuid"][0]
    assert facts["resuid"] == [uid] * 3 and facts["resgid"] == [uid] * 3 and facts["groups"] == []
    assert uid >= workdirs.DEFAULT_UID_BASE
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(facts[cap], 16) == 0, (cap, facts[cap])
    assert facts["NoNewPrivs"] == "1"
    assert facts["Seccomp"] == "2"
    assert response.user.startswith(f"uid {uid} (job slot ") and response.user.endswith("no capabilities")
    assert response.seccomp.startswith("filter (")


@needs_root
def test_a_root_only_file_bound_in_stays_unreadable(probe: tuple[SandboxResponse, Path]) -> None:
    facts = _probe(probe[0])
    assert facts["secret"] == 13  # EACCES: the uid is unprivileged on the host too
    assert "ROOT-ONLY-CANARY" not in probe[0].dumps()


@needs_root
def test_the_child_sees_its_own_file_system_and_processes(probe: tuple[SandboxResponse, Path]) -> None:
    response, _ = probe
    facts = _probe(response)
    assert response.filesystem == "private (bubblewrap)"
    assert response.network == "isolated" and response.processes == "isolated"
    assert not {"run", "var", "home", "srv", "sys", "boot", "mnt"} & set(facts["root"])
    assert set(facts["etc"]) <= {"passwd", "group", "nsswitch.conf", "hosts", "ld.so.cache", "ld.so.conf",
                                 "ld.so.conf.d", "alternatives", "localtime", "os-release", "gai.conf"}  # fmt: skip
    assert "shadow" not in facts["etc"]
    # pid 1 is bubblewrap's init, 2 the drop step become the child; nothing of the host
    assert facts["pids"][:2] == [1, 2] and len(facts["pids"]) < 10
    assert facts["NSpid"].split()[-1] == "2"
    assert facts["hostname"] == "kernelopt-job"
    assert facts["cwd"].startswith("/tmp/kernelopt-job-") and facts["cwd"].endswith("/home")
    assert facts["home_mode"] == "0o700" and facts["umask"] == 0o077
    assert facts["own_module"] in (13, 30)  # EACCES / EROFS: the module is a read-only copy
    links = " ".join(facts["fds"].values())
    assert "kernelopt-seccomp" not in links and "kernelopt-sandbox-file" not in links


def test_the_wall_clock_kills_the_whole_process_tree() -> None:
    # 10 s: the child must start python and torch and import the module (which forks the
    # grandchild) inside the limit; with 3 s a loaded 2-core CI machine killed it before that
    response = run_job(_request("hostile_import_fork.py"), limits=Limits(wall_s=10))
    assert response.error is not None and response.error.kind == "timeout"
    assert 10 <= response.wall_s < 25
    assert procs.gone(procs.token_of(response.stderr_tail))


def test_the_cpu_time_limit_ends_a_busy_child() -> None:
    response = run_job(_request("hostile_import_loop.py"), limits=Limits(wall_s=30, cpu_s=1, quick_s=30))
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


def test_a_missing_bubblewrap_is_a_sandbox_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_BWRAP", "/nonexistent/bwrap")
    response = run_job(_request("correct_add.py"))
    assert response.error is not None and response.error.kind == "sandbox_error"
    assert "/nonexistent/bwrap" in response.error.message


def test_without_bubblewrap_on_purpose_every_field_says_not_isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_SANDBOX", "none")
    response = run_job(_request("correct_add.py"))
    assert response.ok, response.error
    for status in (response.network, response.processes, response.user, response.filesystem):
        assert status == "not isolated (KERNELOPT_SANDBOX=none)"
    assert response.seccomp.startswith("not applied")


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
    assert not Path(seen["HOME"]).parent.exists()
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
        pytest.param("KERNELOPT_SANDBOX_BIND", False, id="sandbox-settings"),
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


@pytest.mark.parametrize(
    ("device", "processes", "setting", "expected"),
    [
        pytest.param("cpu", "auto", "", True, id="cpu"),
        pytest.param("cuda", "auto", "", True, id="cuda-by-default"),
        pytest.param("npu", "auto", "", True, id="npu-by-default"),
        pytest.param("cuda", "auto", "cpu", False, id="cuda-switched-off"),
        pytest.param("cpu", "auto", "cpu", True, id="cpu-with-the-switch"),
        pytest.param("cuda", "on", "cpu", True, id="limits-on-wins"),
        pytest.param("cpu", "off", "", False, id="limits-off-wins"),
    ],
)
def test_the_pid_namespace_switch(
    device: str, processes: str, setting: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELOPT_SANDBOX_PID_NAMESPACE", setting or "on")
    assert pid_namespace_for(_request("x.py", device=device), Limits(processes=processes)) is expected


def test_the_address_space_limit_applies_on_cpu_only() -> None:
    limits = Limits(address_space_bytes=4 << 30)
    assert rlimits_for(_request("x.py", device="cpu"), limits, own_uid=True)["RLIMIT_AS"] == 4 << 30
    assert "RLIMIT_AS" not in rlimits_for(_request("x.py", device="cuda"), limits, own_uid=True)


def test_the_task_rlimit_is_set_only_for_a_uid_of_the_jobs_own() -> None:
    limits = Limits(pids=77)
    assert rlimits_for(_request("x.py"), limits, own_uid=True)["RLIMIT_NPROC"] == 77
    assert "RLIMIT_NPROC" not in rlimits_for(_request("x.py"), limits, own_uid=False)


def test_limits_have_defaults_per_job_and_device() -> None:
    assert Limits.for_job("validate", "cpu").wall_s == 60
    assert Limits.for_job("verify", "cpu").wall_s == 300
    assert Limits.for_job("verify", "cuda").wall_s == 600
    assert Limits.for_job("time", "cuda", wall_s=5).wall_s == 5
    assert Limits(wall_s=10).cpu_seconds == 50
    assert Limits.for_job("verify", "cpu").memory_bytes == 8 * GiB
    assert Limits.for_job("verify", "cuda").memory_bytes == Limits.DEVICE_MEMORY_BYTES
    assert Limits.for_job("verify", "cpu").quick_s < 60
    # one hand-off file may hold as much as the job holds in memory (a 1.05 GB embedding table)
    assert Limits.for_job("verify", "cpu").fsize_bytes == 8 * GiB
    assert Limits.for_job("verify", "cuda").fsize_bytes == Limits.DEVICE_MEMORY_BYTES


def test_the_child_interpreter_is_configurable_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_PYTHON_NPU", "/opt/ascend/venv/bin/python")
    monkeypatch.delenv("KERNELOPT_PYTHON", raising=False)
    assert child_python("npu") == "/opt/ascend/venv/bin/python"
    assert child_python("cpu") == sys.executable


@needs_root
def test_the_response_says_which_caps_applied() -> None:
    response = run_job(_request("hostile_env.py"), limits=Limits(memory_bytes=3 * GiB, pids=300))
    assert response.memory.startswith("cgroup v") and "3.0 GiB" in response.memory
    assert response.tasks.startswith("cgroup v") and "300 tasks" in response.tasks
    assert response.peak_memory_bytes and response.peak_memory_bytes > 50 << 20  # torch was imported


def test_a_sandbox_response_round_trips_as_a_job_response() -> None:
    response = run_job(_request("broken_missing.py"))
    again = JobResponse.loads(response.dumps())
    assert again.ok is False and again.error is not None
    assert again.error.kind == "missing_name" and again.job == "validate"


@needs_root
def test_concurrent_jobs_run_as_different_uids(tmp_path: Path) -> None:
    module = _templated(tmp_path, "sandbox_probe.py", SECRET_FILE="/nonexistent")
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        responses = list(pool.map(lambda _: run_job(JobRequest(job="validate", module=module)), range(3)))
    uids = {_probe(r)["resuid"][0] for r in responses}
    assert len(uids) == 3


# ---------------------------------------------------------------- processes


def test_the_child_cannot_signal_the_workers_processes(tmp_path: Path) -> None:
    decoy = subprocess.Popen(["sleep", "60"])
    try:
        module = _templated(tmp_path, "hostile_kill.py", DECOY_PID=decoy.pid)
        response = run_job(JobRequest(job="validate", module=module))
        assert response.processes == "isolated"
        assert response.error is not None and "kill failed" in response.error.message
        assert decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()


@pytest.mark.parametrize("processes", ["on", pytest.param("off", marks=needs_root)])
def test_grandchildren_that_leave_the_session_die_with_the_job(processes: str) -> None:
    # off: no PID namespace (a cuda job with KERNELOPT_SANDBOX_PID_NAMESPACE=cpu); the job's
    # cgroup and the slot's uid still end it
    response = run_job(_request("hostile_setsid_escape.py"), limits=Limits(processes=processes))
    assert response.error is not None and response.error.kind == "import_error"
    assert procs.gone(procs.token_of(response.stderr_tail))


def test_a_job_dies_with_the_worker_that_started_it(tmp_path: Path) -> None:
    """A worker killed mid-run must not leave its job running beside the run's next attempt."""
    token = f"kernelopt-grandchild-{uuid.uuid4().hex}"
    module = tmp_path / "sleeper.py"
    module.write_text(
        textwrap.dedent(f"""
        import subprocess, sys, time
        import torch.nn as nn
        import triton

        @triton.jit
        def k(x):
            pass

        # a process of the job the test can find on the host by its command line
        subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(120)", {token!r}])
        time.sleep(120)

        class Model(nn.Module):
            pass

        class ModelNew(nn.Module):
            pass

        def get_inputs():
            return []

        def get_init_inputs():
            return []
    """)
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f'''
            from runner.protocol import JobRequest
            from runner.sandbox import Limits, run_job
            run_job(JobRequest("validate", {str(module)!r}, device="cpu"), limits=Limits(wall_s=120, quick_s=120))
        ''')],
        cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not procs.living(token):
            assert time.monotonic() < deadline, "the job never started"
            assert worker.poll() is None, "the worker ended early"
            time.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert procs.gone(token, timeout=10), "the job outlived its worker"
    finally:
        if worker.poll() is None:
            worker.kill()


# ---------------------------------------------------------------- quick answers for hangs


@pytest.mark.parametrize(
    ("module", "job", "phase"),
    [
        pytest.param("hostile_import_sleep.py", "verify", "importing the module", id="import"),
        # the gate's reference job draws the inputs (a verify job gets them from the worker)
        pytest.param("hostile_inputs_sleep.py", "reference", "get_inputs()", id="get_inputs"),
        pytest.param("hostile_inputs_sleep.py", "compile", "get_inputs()", id="get_inputs-of-a-compile"),
    ],
)
def test_a_hang_in_a_quick_phase_is_answered_at_its_deadline(module: str, job: str, phase: str) -> None:
    response = run_job(
        _request(module, job=job, target="sm_90", seeds=[0]), limits=Limits(wall_s=120, quick_s=4)
    )
    assert response.error is not None and response.error.kind == "timeout"
    assert phase in response.error.message
    assert response.wall_s < 60


def test_slow_user_code_outside_the_quick_phases_keeps_the_wall_limit() -> None:
    executor = Executor("cpu", limits=Limits(wall_s=120, quick_s=1))
    outcome = executor.verify(str(MODULES / "slow_forward.py"), seeds=(0,), time=False)
    assert outcome.ok and outcome.passed, outcome.error
    assert [c.job for c in executor.costs] == ["reference", "verify"]
    assert executor.costs[-1].wall_s > 1.5  # ModelNew.forward sleeps 1.5 s per call in the verify job


# ---------------------------------------------------------------- the worker and the run's directories


def test_a_job_leaves_the_worker_non_dumpable() -> None:
    import ctypes

    run_job(_request("broken_missing.py"))
    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


def test_loading_the_actors_makes_a_worker_non_dumpable() -> None:
    code = (
        "import ctypes, django; django.setup(); import runner.tasks; "
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kernelopt_site.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1:] == ["0"], out.stderr[-2000:]


def test_a_run_directory_is_made_private_and_claimed_for_the_job(tmp_path: Path) -> None:
    run_dir = Path(workdirs.tempfile.mkdtemp(prefix="kernelopt-loop-"))
    try:
        run_dir.chmod(0o755)
        module = run_dir / "parent.py"
        module.write_text((MODULES / "correct_add.py").read_text())
        response = run_job(
            JobRequest(job="validate", module=str(module)), triton_cache_dir=run_dir / "triton-cache"
        )
        assert response.ok, response.error
        assert run_dir.stat().st_mode & 0o777 == 0o700
        # old enough to be swept were it not claimed; the default grace, not 0: a sweep of /tmp
        # with no grace would remove the young, not yet claimed directories of other tests' loops
        # (xdist runs them beside this one)
        old = time.time() - 3600
        os.utime(run_dir, (old, old))
        assert str(run_dir) not in workdirs.sweep_run_dirs(tmp=run_dir.parent)
        assert run_dir.exists()  # held by this process
    finally:
        workdirs.release(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)


def _holder(path: Path) -> subprocess.Popen:
    """Another process holding a shared claim on `path`, as a live worker does."""
    code = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
        "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(path / workdirs.LOCK_NAME)], stdout=subprocess.PIPE
    )
    assert holder.stdout and holder.stdout.readline() == b"held\n"
    return holder


def test_the_sweep_removes_the_run_directories_of_dead_workers_only(tmp_path: Path) -> None:
    dead, alive, young, foreign = (
        tmp_path / f"kernelopt-loop-{name}" for name in ("dead", "alive", "young", "x")
    )
    other = tmp_path / "unrelated"
    for path in (dead, alive, young, other):
        path.mkdir()
        (path / "mod.py").write_text("x = 1\n")
    foreign.symlink_to(other)
    holder = _holder(alive)
    victim = _holder(dead)
    victim.kill()  # a worker killed with SIGKILL: its lock goes with it
    victim.wait()
    old = time.time() - 3600
    for path in (dead, alive):
        os.utime(path, (old, old))
    try:
        removed = workdirs.sweep_run_dirs(tmp=tmp_path, grace_s=600)
        assert removed == [str(dead)]
        assert alive.exists() and young.exists() and other.exists() and foreign.is_symlink()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.django_db
def test_the_stale_run_sweep_cleans_run_directories(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from runner.dispatch import requeue_stale

    monkeypatch.setattr(workdirs.tempfile, "gettempdir", lambda: str(tmp_path))
    left = tmp_path / "kernelopt-job-left-by-a-dead-worker"
    (left / "home").mkdir(parents=True)
    old = time.time() - 3600
    os.utime(left, (old, old))
    report = requeue_stale()
    assert report.removed_dirs == [str(left)]
    assert not left.exists()


@needs_root
def test_the_job_cgroup_of_a_dead_worker_is_swept() -> None:
    from runner.sandbox import cgroups

    group = JobCgroup.create(f"{cgroups.PREFIX}999999999-0", memory_bytes=GiB, tasks=10)
    assert group.created, (group.memory_status, group.tasks_status)
    removed = cgroups.sweep()
    assert set(map(str, group.created)) <= set(removed)
    assert not any(path.exists() for path in group.created)


def test_a_slot_is_held_by_one_job_at_a_time() -> None:
    with workdirs.job_slot() as first, workdirs.job_slot() as second:
        assert first.uid != second.uid
        lock = (
            Path(workdirs.tempfile.gettempdir())
            / f"kernelopt-slots-{os.geteuid()}"
            / f"slot-{first.index}.lock"
        )
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


# ---------------------------------------------------------------- the bubblewrap command line


def _binds(device: str, sys_mode: str, env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(the arguments, destination -> the option that put it there) of one job's command."""
    from runner.sandbox import bwrap

    interp = bwrap.Interpreter(sys.executable, (sys.prefix, sys.base_prefix))
    cmd = bwrap.build(
        bwrap="/usr/bin/bwrap", device=device, interp=interp, home="/tmp/kernelopt-job-x/home",
        cache="/tmp/kernelopt-loop-y/triton-cache", files=[str(MODULES / "correct_add.py")], uid=2000000001,
        gid=2000000001, pid_namespace=True, seccomp_fd=None, env=env or {"PATH": "/usr/bin"}, sys_mode=sys_mode,
    )  # fmt: skip
    cmd.close()
    dests: dict[str, str] = {}
    args = cmd.args
    for i, arg in enumerate(args):
        if arg in ("--ro-bind", "--bind", "--dev-bind", "--symlink"):
            dests[args[i + 2]] = arg
        elif arg in ("--tmpfs", "--dir", "--proc", "--dev", "--ro-bind-data"):
            dests[args[i + 2] if arg == "--ro-bind-data" else args[i + 1]] = arg
    return args, dests


@pytest.mark.parametrize(
    ("device", "sys_mode", "bound", "not_bound"),
    [
        pytest.param("cpu", "none", [], ["/sys", "/sys/devices"], id="cpu-no-sys"),
        pytest.param("cuda", "devices", ["/sys/devices", "/sys/bus", "/sys/module"], ["/sys", "/sys/fs", "/sys/kernel"],
                     id="cuda-device-model-only"),
        pytest.param("cuda", "all", ["/sys"], [], id="cuda-all-of-sys"),
    ],
)  # fmt: skip
def test_sys_is_bound_only_for_a_device_job(
    device: str, sys_mode: str, bound: list[str], not_bound: list[str]
) -> None:
    _, dests = _binds(device, sys_mode)
    for path in bound:
        assert dests.get(path) == "--ro-bind", path
    for path in not_bound:
        assert dests.get(path) in (None, "--dir"), path  # at most an empty parent of a bind


def test_the_command_binds_no_home_state_or_project_root() -> None:
    # directories that exist (a missing one would not be bound anyway)
    env = {"PATH": f"/root:/home:/var/lib:/srv:{ROOT}:/usr/bin", "LD_LIBRARY_PATH": "/run"}
    args, dests = _binds("cpu", "none", env)
    for dest, option in dests.items():
        if option in ("--ro-bind", "--bind"):
            assert not dest.startswith(("/home", "/var", "/run", "/srv")) and dest != "/root", dest
            assert dest != str(ROOT) and not dest.startswith(str(ROOT / "var")), dest
    assert (
        dests["/tmp/kernelopt-job-x/home"] == "--bind"
        and dests["/tmp/kernelopt-loop-y/triton-cache"] == "--bind"
    )
    assert dests[str(MODULES / "correct_add.py")] == "--ro-bind-data"  # a copy, read-only
    assert dests["/etc/passwd"] == "--ro-bind-data" and "/etc/shadow" not in dests
    # the tmpfs first: what is bound below /tmp comes after it; parents are made 0755
    assert args.index("/tmp") < args.index("/tmp/kernelopt-job-x/home")
    made = [args[i + 3] for i, a in enumerate(args) if a == "--perms" and args[i + 2] == "--dir"]
    assert "/tmp/kernelopt-loop-y" in made and all(args[args.index(p) - 2] == "0755" for p in made)


def test_a_cuda_job_gets_the_nvidia_device_files_only() -> None:
    import glob

    _, dests = _binds("cuda", "devices")
    nvidia = {p for p in glob.glob("/dev/nvidia*") if not p.startswith("/dev/nvidia-modeset")}
    assert {d for d, option in dests.items() if option == "--dev-bind"} == nvidia
    _, on_cpu = _binds("cpu", "none")
    assert not [d for d, option in on_cpu.items() if option == "--dev-bind"]
