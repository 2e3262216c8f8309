"""Hostile and broken modules: each ends as a clean, named failure; nothing leaks; we survive.

Every module runs in the real sandbox (`runner.sandbox.run_job`), with secrets set in this
process's environment, a decoy worker process (started with the same secrets in its
environment and a canary in its memory), a TCP listener on 127.0.0.1, a var/ directory with a
secret key and a SQLite database, and another run's module under /tmp/kernelopt-loop-*, for
the whole table. The jobs run three at a time (they mostly wait on interpreter start-up).

The escape classes of issue 16 each have a module `hostile_<class>.py` that reports what it
reached on a `HOSTILE {json}` line; each row says what the report must show (the attack
refused) and the side-effect tests check the targets from outside. The classes that apply on
a GPU node (/proc, network, capabilities, device files) also run as cuda jobs: on a CPU machine
they exercise the cuda sandbox profile, on the H200 they run beside a real device.
"""

from __future__ import annotations

import concurrent.futures
import errno
import hashlib
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from diagnosis.engine.executor import VerifyOutcome
from runner.execute import Executor
from runner.protocol import JobRequest
from runner.sandbox import GiB, Limits, SandboxResponse, run_job
from tests.runner import procs

Answer = SandboxResponse | VerifyOutcome  # a verify row's answer is the gate's outcome

MODULES = Path(__file__).resolve().parent.parent / "modules"
ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "DATABASE_URL": "postgres://kernelopt:hunter2-DBSECRET@db.internal/kernelopt",
    "BROKER_URL": "amqp://guest:BROKERSECRET@rabbit.internal//",
    "SECRET_KEY": "django-insecure-SECRETKEYVALUE",
    "OPENAI_API_KEY": "sk-OPENAISECRETVALUE",
    "AWS_SECRET_ACCESS_KEY": "AWSSECRETVALUE",
    "CUDA_API_TOKEN": "ALLOWLISTEDPREFIXSECRET",  # matches an allowed prefix, still a credential
}
SECRET_KEY_CANARY = "SECRETKEYCANARY-" + "k" * 40
EPERM, EACCES, ENOENT = errno.EPERM, errno.EACCES, errno.ENOENT
Report = dict


def refused(*codes: int) -> Callable[[object], bool]:
    return lambda value: value in codes


@dataclass(frozen=True)
class Hostile:
    module: str
    job: str
    kind: str
    limits: Limits | None = None
    device: str = "cpu"
    # what the module's HOSTILE report must show: the attack failed
    check: Callable[[Report], bool] | None = None

    @property
    def key(self) -> str:
        return f"{self.module}@{self.device}"


def _every(report: Report, codes: tuple[int, ...]) -> bool:
    return bool(report) and all(value in codes for value in report.values())


# Issue 16's escape classes: module, job, the error kind, what its report must show.
ESCAPES = {
    "proc-environ": Hostile("hostile_proc_environ.py", "validate", "import_error",
                            check=lambda r: r["found"] == 0),
    "proc-mem-read": Hostile("hostile_proc_mem.py", "validate", "import_error",
                             check=lambda r: r["found"] is False and r.get("error") in (ENOENT, EACCES, EPERM)),
    "proc-mem-write": Hostile("hostile_write_mem.py", "validate", "import_error",
                              check=lambda r: r["written"] is False),
    "setns-worker-net": Hostile("hostile_setns.py", "validate", "import_error",
                                check=lambda r: not r["connected"] and r["setns_self"] == EPERM),
    "db-unix-sockets": Hostile("hostile_db_sockets.py", "validate", "import_error",
                               check=lambda r: all(v == ENOENT for v in r["postgres"] + r["mariadb"])),
    "etc-shadow": Hostile("hostile_shadow.py", "validate", "import_error",
                          check=lambda r: _every(r, (ENOENT, EACCES))),
    "var-secret-key-and-sqlite": Hostile("hostile_var_secrets.py", "validate", "import_error",
                                         check=lambda r: _every(r, (ENOENT, EACCES))),
    "write-the-database": Hostile("hostile_write_db.py", "validate", "import_error",
                                  check=lambda r: r["written"] is False),
    "pth-in-the-venv": Hostile("hostile_pth.py", "validate", "import_error",
                               check=lambda r: r["planted"] == [] and bool(r["errors"])),
    "another-runs-module": Hostile("hostile_other_run.py", "validate", "import_error",
                                   check=lambda r: r["tampered"] == [] and r["seen"] == []),
    "forked-children-over-the-memory-cap": Hostile(
        "hostile_fork_memory.py", "validate", "oom", Limits(memory_bytes=1 * GiB, quick_s=60)
    ),
    "fork-bomb": Hostile("hostile_fork_bomb.py", "validate", "import_error", Limits(pids=64, quick_s=60),
                         check=lambda r: r["forked"] < 64 and r["error"] == errno.EAGAIN),
    "ptrace": Hostile("hostile_ptrace.py", "validate", "import_error",
                      check=lambda r: r["attach"] == EPERM and r["traceme"] == EPERM),
    "mount": Hostile("hostile_mount.py", "validate", "import_error", check=lambda r: r["mount"] == EPERM),
    "unshare": Hostile("hostile_unshare.py", "validate", "import_error", check=lambda r: _every(r, (EPERM,))),
    "kernel-modules": Hostile("hostile_kernel_module.py", "validate", "import_error",
                              check=lambda r: _every(r, (EPERM,))),
    "inet-netlink-packet-sockets": Hostile("hostile_sockets.py", "validate", "import_error",
                                           check=lambda r: _every(r, (EPERM,))),
    "syscalls-through-a-foreign-abi": Hostile("hostile_foreign_abi.py", "validate", "crashed"),
    "raw-device-files": Hostile("hostile_device_files.py", "validate", "import_error",
                                check=lambda r: r["opened"] == []),
    "hang-at-import-answered-within-60s": Hostile("hostile_import_sleep.py", "verify", "timeout"),
    "hang-in-get_inputs-answered-within-60s": Hostile("hostile_inputs_sleep.py", "verify", "timeout"),
}  # fmt: skip
# What applies on a GPU node too: /proc, network, capabilities and the filter, device files.
ON_DEVICE = ("proc-environ", "proc-mem-read", "proc-mem-write", "setns-worker-net", "db-unix-sockets",
             "etc-shadow", "ptrace", "mount", "unshare", "kernel-modules", "inet-netlink-packet-sockets",
             "raw-device-files")  # fmt: skip

TABLE = [
    pytest.param(
        Hostile("hostile_import_loop.py", "validate", "timeout", Limits(wall_s=5)),
        id="infinite-loop-at-import",
    ),
    pytest.param(
        # it spins a core until the wall clock ends it: 15 s (30 before) still leaves a loaded CI
        # machine time to reach forward, which starts the grandchild the test looks for
        Hostile("hostile_forward_loop.py", "verify", "timeout", Limits(wall_s=15)),
        id="infinite-loop-in-forward",
    ),
    pytest.param(Hostile("hostile_os_system.py", "verify", "no_triton_launch"), id="os-system-forges-stdout"),
    pytest.param(Hostile("hostile_env.py", "validate", "import_error"), id="reads-environment-secrets"),
    pytest.param(Hostile("hostile_socket.py", "validate", "import_error"), id="opens-a-socket"),
    pytest.param(Hostile("hostile_sys_exit.py", "verify", "exception"), id="sys-exit"),
    pytest.param(Hostile("hostile_segfault.py", "verify", "crashed"), id="segfault"),
    pytest.param(Hostile("hostile_alloc.py", "verify", "oom"), id="10GB-allocation"),
    pytest.param(Hostile("hostile_stdout_garbage.py", "validate", "bad_output"), id="garbage-on-stdout"),
    pytest.param(Hostile("broken_syntax.txt", "validate", "syntax_error"), id="syntax-error"),
    pytest.param(Hostile("broken_missing.py", "validate", "missing_name"), id="missing-ModelNew"),
    pytest.param(Hostile("broken_forward_error.py", "verify", "exception"), id="forward-raises"),
    pytest.param(Hostile("broken_wrong.py", "verify", "incorrect"), id="wrong-answer"),
    pytest.param(Hostile("broken_nan.py", "verify", "nan_mismatch"), id="nans"),
    pytest.param(Hostile("broken_shape.py", "verify", "shape_mismatch"), id="wrong-shape"),
    pytest.param(
        Hostile("broken_partial_write.py", "verify", "incorrect|nan_mismatch"), id="half-written-output"
    ),
    pytest.param(Hostile("broken_ignores_input.py", "verify", "constant_output"), id="output-ignores-input"),
    pytest.param(
        Hostile("broken_calls_reference.py", "verify", "no_triton_launch"), id="calls-the-reference"
    ),
    *(pytest.param(case, id=name) for name, case in ESCAPES.items()),
    *(
        pytest.param(Hostile(**{**vars(ESCAPES[name]), "device": "cuda"}), id=f"{name}-as-a-cuda-job")
        for name in ON_DEVICE
    ),
]


class Listener:
    """A TCP server on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.connections.append(conn.recv(100))
                except OSError:
                    self.connections.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


# A process that stands for the worker: the secrets in its environment since its exec (what
# /proc/<pid>/environ shows), a canary in its memory, and an answer to "is it intact?".
DECOY = """
import hashlib, sys, uuid
# one contiguous copy of the canary in memory (a temporary with the same bytes would be a
# second place for a write to land): the prefix and the hex filled into it in place
canary = bytearray(48)
canary[:16] = bytes(reversed(b"-YRANACMEMREKROW"))
canary[16:] = uuid.uuid4().hex.encode()
digest = hashlib.sha256(canary).digest()
print("ready", flush=True)
for _ in sys.stdin:
    print("intact" if hashlib.sha256(canary).digest() == digest else "changed", flush=True)
"""


class Decoy:
    def __init__(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **SECRETS}
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", DECOY],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout and self.proc.stdout.readline() == "ready\n"
        self.pid = self.proc.pid

    def intact(self) -> bool:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write("?\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline() == "intact\n"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@dataclass
class Targets:
    listener: Listener
    decoy: Decoy
    var_dir: Path
    victim: Path
    victim_sha: str
    pth_name: str
    own_run_dir: Path


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    tmp = tmp_path_factory.mktemp("hostile-targets")
    var_dir = tmp / "var"
    var_dir.mkdir()
    (var_dir / "secret_key").write_text(SECRET_KEY_CANARY)
    db = sqlite3.connect(var_dir / "kernelopt.sqlite3")
    db.execute("create table reviewers (team text, username text)")
    db.execute("insert into reviewers values ('demo', 'demo')")
    db.commit()
    db.close()
    victim_dir = Path(tempfile.mkdtemp(prefix="kernelopt-loop-victim-"))
    victim = victim_dir / "candidate.py"
    victim.write_text("# another run's module\n")
    own_run_dir = Path(tempfile.mkdtemp(prefix="kernelopt-loop-hostile-"))
    listener, decoy = Listener(), Decoy()
    try:
        yield Targets(listener, decoy, var_dir, victim, _sha(victim), f"kernelopt-hostile-{uuid.uuid4().hex}",
                      own_run_dir)  # fmt: skip
    finally:
        listener.close()
        decoy.close()
        for path in (victim_dir, own_run_dir):
            subprocess.run(["rm", "-rf", str(path)], check=False)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _prepare(case: Hostile, tmp: Path, targets: Targets) -> str:
    source = MODULES / case.module
    text = source.read_text()
    if case.module == "hostile_socket.py":
        text = text.replace("PORT = 0", f"PORT = {targets.listener.port}")
    values = {
        "worker_pid": os.getpid(),
        "decoy_pid": targets.decoy.pid,
        "port": targets.listener.port,
        "canaries": [*SECRETS.values(), SECRET_KEY_CANARY],
        "var_dirs": [str(targets.var_dir), str(ROOT / "var")],
        "name": targets.pth_name,
        "root": str(ROOT),
        "megabytes": 400,
        "runs": os.path.join(tempfile.gettempdir(), "kernelopt-loop-*", "*.py"),
    }
    text = text.replace("TARGETS = {}", f"TARGETS = {values!r}")
    # a module of a run lives in that run's directory, as the round loop writes it
    folder = targets.own_run_dir if case.module.startswith("hostile_") else tmp
    target = folder / f"{case.device}-{case.module.replace('.txt', '.py')}"
    target.write_text(text)
    return str(target)


@pytest.fixture(scope="module")
def outcomes(targets: Targets, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Answer]:
    """Run the whole table once, with secrets in our environment. A verify row goes through the
    whole gate (`Executor.verify`: its reference job, its verify job and the worker's comparison);
    the other rows are one sandboxed job each. The rows that end at a time limit start first, on
    two threads more than the three that keep the CPUs busy: the two hangs wait out the quick limit
    (40 s) asleep, which would otherwise hold two of three threads idle."""
    tmp = tmp_path_factory.mktemp("hostile")
    cases = sorted((p.values[0] for p in TABLE), key=lambda case: case.kind != "timeout")

    def run(case: Hostile) -> tuple[str, Answer]:
        path = _prepare(case, tmp, targets)
        if case.job == "verify":
            executor = Executor(case.device, limits=case.limits)
            return case.key, executor.verify(path, seeds=(0,), time=False)
        request = JobRequest(job=case.job, module=path, device=case.device, seeds=[0])
        return case.key, run_job(request, limits=case.limits or Limits.for_job(case.job, case.device))

    with pytest.MonkeyPatch.context() as mp:
        for name, value in SECRETS.items():
            mp.setenv(name, value)
        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
            return dict(pool.map(run, cases))


def _text(answer: Answer) -> str:
    """Everything an answer says, stderr included (where a leaked secret would show)."""
    if isinstance(answer, VerifyOutcome):
        return repr(answer)
    return answer.dumps() + answer.stderr_tail


def _stderr(answer: Answer) -> str:
    if isinstance(answer, VerifyOutcome):
        return answer.error.stderr_tail if answer.error else ""
    return answer.stderr_tail


def _report(response: Answer) -> Report:
    line = next((x for x in _stderr(response).splitlines() if x.startswith("HOSTILE ")), None)
    assert line is not None, (response.error, _stderr(response)[-1500:])
    return json.loads(line[len("HOSTILE ") :])


@pytest.mark.parametrize("case", TABLE)
def test_it_ends_as_a_clean_named_failure(case: Hostile, outcomes: dict[str, Answer]) -> None:
    response = outcomes[case.key]
    assert not response.ok
    assert response.error is not None
    assert re.fullmatch(case.kind, response.error.kind), (response.error.kind, response.error.message)
    assert response.error.message
    everything = _text(response)
    for value in (*SECRETS.values(), SECRET_KEY_CANARY):
        assert value not in everything
    if case.check is not None:
        report = _report(response)
        assert case.check(report), report


def test_the_test_process_is_alive_and_its_secrets_are_unchanged(
    outcomes: dict[str, Answer],
) -> None:
    assert outcomes  # the table ran
    assert os.getpid() > 0
    for name in SECRETS:
        assert os.environ.get(name) != "changed"


def test_the_worker_memory_was_not_written(outcomes: dict[str, Answer], targets: Targets) -> None:
    assert outcomes
    assert targets.decoy.intact()


def test_no_connection_reached_the_worker(outcomes: dict[str, Answer], targets: Targets) -> None:
    response = outcomes["hostile_socket.py@cpu"]
    assert response.network == "isolated"
    assert targets.listener.connections == []
    assert "network error" in response.error.message  # type: ignore[union-attr]


def test_the_database_file_and_the_other_run_are_unchanged(
    outcomes: dict[str, Answer], targets: Targets
) -> None:
    assert outcomes
    rows = (
        sqlite3.connect(targets.var_dir / "kernelopt.sqlite3").execute("select * from reviewers").fetchall()
    )
    assert rows == [("demo", "demo")]
    assert _sha(targets.victim) == targets.victim_sha


def test_nothing_was_planted_where_later_pythons_would_run_it(
    outcomes: dict[str, Answer], targets: Targets
) -> None:
    report = _report(outcomes["hostile_pth.py@cpu"])
    planted = [Path(p) for p in [*report["planted"], *report["errors"]] if Path(p).exists()]
    for path in planted:  # should a run on an unsandboxed tree get this far: leave nothing behind
        path.unlink()
    assert planted == []


def test_the_fork_bomb_was_stopped_at_the_jobs_task_cap(outcomes: dict[str, Answer]) -> None:
    response = outcomes["hostile_fork_bomb.py@cpu"]
    assert response.tasks.startswith("cgroup") or response.tasks.startswith("RLIMIT_NPROC")
    assert "refused at the job's cap of 64 tasks" in _stderr(response) or response.tasks.startswith("RLIMIT")


def test_the_memory_cap_holds_for_the_children_together(outcomes: dict[str, Answer]) -> None:
    response = outcomes["hostile_fork_memory.py@cpu"]
    assert response.memory.startswith("cgroup")
    assert "memory cap (1.0 GiB)" in response.error.message  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name", ["hang-at-import-answered-within-60s", "hang-in-get_inputs-answered-within-60s"]
)
def test_a_hang_is_answered_within_a_minute_with_the_default_limits(
    name: str, outcomes: dict[str, Answer]
) -> None:
    response = outcomes[ESCAPES[name].key]
    assert response.wall_s < 60
    assert Limits.for_job("verify", "cpu").wall_s > 60  # the job's own limit is longer


def test_the_module_saw_a_scrubbed_environment(outcomes: dict[str, Answer]) -> None:
    message = outcomes["hostile_env.py@cpu"].error.message  # type: ignore[union-attr]
    assert "'PATH'" in message and "'HOME'" in message  # it did print what it saw
    for name in SECRETS:
        assert f"'{name}'" not in message


def test_a_forged_response_on_stdout_goes_to_stderr(outcomes: dict[str, Answer]) -> None:
    response = outcomes["hostile_os_system.py@cpu"]
    assert isinstance(response, VerifyOutcome)
    assert "FORGED_BY_OS_SYSTEM" in _stderr(response)
    assert "forged" not in json.dumps([c.label for c in response.cases]) and not response.passed
    assert "FORGED" not in response.error.message  # type: ignore[union-attr]


def test_the_wall_clock_kills_the_grandchildren_too(outcomes: dict[str, Answer]) -> None:
    response = outcomes["hostile_forward_loop.py@cpu"]
    assert procs.gone(procs.token_of(_stderr(response)))


@pytest.mark.parametrize(
    ("module", "marker"),
    [
        pytest.param("broken_syntax.txt", "def get_inputs(:", id="syntax-error-line"),
        pytest.param("hostile_sys_exit.py", "sys.exit(3)", id="sys-exit-line"),
        pytest.param("broken_forward_error.py", "_ = [0][n]", id="forward-error-line"),
        pytest.param("hostile_env.py", "raise RuntimeError", id="import-error-line"),
    ],
)
def test_the_error_names_the_line_of_the_uploaded_file(
    module: str, marker: str, outcomes: dict[str, Answer]
) -> None:
    lines = (MODULES / module).read_text().splitlines()
    expected = next(i for i, text in enumerate(lines, start=1) if marker in text)
    assert outcomes[f"{module}@cpu"].error.line == expected  # type: ignore[union-attr]
