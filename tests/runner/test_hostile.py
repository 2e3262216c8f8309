"""Hostile and broken modules: each ends as a clean, named failure; nothing leaks; we survive.

Every module runs in the real sandbox (`runner.sandbox.run_job`, device=cpu), with secrets set
in this process's environment and a TCP listener open on 127.0.0.1 for the whole table. The
jobs run three at a time (they mostly wait on interpreter start-up and wall-clock limits).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.protocol import JobRequest
from runner.sandbox import Limits, SandboxResponse, run_job

MODULES = Path(__file__).resolve().parent.parent / "modules"
SECRETS = {
    "DATABASE_URL": "postgres://kernelopt:hunter2-DBSECRET@db.internal/kernelopt",
    "BROKER_URL": "amqp://guest:BROKERSECRET@rabbit.internal//",
    "SECRET_KEY": "django-insecure-SECRETKEYVALUE",
    "OPENAI_API_KEY": "sk-OPENAISECRETVALUE",
    "AWS_SECRET_ACCESS_KEY": "AWSSECRETVALUE",
    "CUDA_API_TOKEN": "ALLOWLISTEDPREFIXSECRET",  # matches an allowed prefix, still a credential
}


@dataclass(frozen=True)
class Hostile:
    module: str
    job: str
    kind: str
    limits: Limits | None = None


TABLE = [
    pytest.param(
        Hostile("hostile_import_loop.py", "validate", "timeout", Limits(wall_s=5)),
        id="infinite-loop-at-import",
    ),
    pytest.param(
        Hostile("hostile_forward_loop.py", "verify", "timeout", Limits(wall_s=10)),
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


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def _prepare(case: Hostile, tmp: Path, port: int) -> str:
    source = MODULES / case.module
    if case.module == "hostile_socket.py":
        target = tmp / "hostile_socket.py"
        target.write_text(source.read_text().replace("PORT = 0", f"PORT = {port}"))
        return str(target)
    if case.module.endswith(".txt"):
        target = tmp / case.module.replace(".txt", ".py")
        target.write_text(source.read_text())
        return str(target)
    return str(source)


@pytest.fixture(scope="module")
def outcomes(listener: Listener, tmp_path_factory: pytest.TempPathFactory) -> dict[str, SandboxResponse]:
    """Run the whole table once, three at a time, with secrets in our environment."""
    tmp = tmp_path_factory.mktemp("hostile")
    cases = [p.values[0] for p in TABLE]

    def run(case: Hostile) -> tuple[str, SandboxResponse]:
        request = JobRequest(job=case.job, module=_prepare(case, tmp, listener.port), device="cpu", seeds=[0])
        return case.module, run_job(request, limits=case.limits or Limits.for_job(case.job, "cpu"))

    with pytest.MonkeyPatch.context() as mp:
        for name, value in SECRETS.items():
            mp.setenv(name, value)
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            return dict(pool.map(run, cases))


@pytest.mark.parametrize("case", TABLE)
def test_it_ends_as_a_clean_named_failure(case: Hostile, outcomes: dict[str, SandboxResponse]) -> None:
    response = outcomes[case.module]
    assert not response.ok
    assert response.error is not None
    assert re.fullmatch(case.kind, response.error.kind), (response.error.kind, response.error.message)
    assert response.error.message
    everything = response.dumps() + response.stderr_tail
    for value in SECRETS.values():
        assert value not in everything


def test_the_test_process_is_alive_and_its_secrets_are_unchanged(
    outcomes: dict[str, SandboxResponse],
) -> None:
    assert outcomes  # the table ran
    assert os.getpid() > 0
    for name in SECRETS:
        assert os.environ.get(name) != "changed"


def test_the_module_saw_a_scrubbed_environment(outcomes: dict[str, SandboxResponse]) -> None:
    message = outcomes["hostile_env.py"].error.message  # type: ignore[union-attr]
    assert "'PATH'" in message and "'HOME'" in message  # it did print what it saw
    for name in SECRETS:
        assert f"'{name}'" not in message


def test_no_connection_reached_the_parent(outcomes: dict[str, SandboxResponse], listener: Listener) -> None:
    response = outcomes["hostile_socket.py"]
    if response.network != "isolated":
        pytest.skip(f"no network namespace on this machine: {response.network}")
    assert listener.connections == []
    assert "network error" in response.error.message  # type: ignore[union-attr]


def test_a_forged_response_on_stdout_goes_to_stderr(outcomes: dict[str, SandboxResponse]) -> None:
    response = outcomes["hostile_os_system.py"]
    assert "FORGED_BY_OS_SYSTEM" in response.stderr_tail
    assert "forged" not in json.dumps(response.result)
    assert "FORGED" not in response.error.message  # type: ignore[union-attr]


def test_the_wall_clock_kills_the_grandchildren_too(outcomes: dict[str, SandboxResponse]) -> None:
    response = outcomes["hostile_forward_loop.py"]
    match = re.search(r"GRANDCHILD_PID=(\d+)", response.stderr_tail)
    assert match, response.stderr_tail[-500:]
    assert not Path(f"/proc/{match.group(1)}").exists() or _is_zombie(int(match.group(1)))


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


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
    module: str, marker: str, outcomes: dict[str, SandboxResponse]
) -> None:
    lines = (MODULES / module).read_text().splitlines()
    expected = next(i for i, text in enumerate(lines, start=1) if marker in text)
    assert outcomes[module].error.line == expected  # type: ignore[union-attr]
