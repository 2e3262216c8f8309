"""Phase accounting in the child, and the device lock that lets jobs share one device."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from runner.childlib.phases import DEVICE_LOCK_ENV
from runner.execute import Executor, device_seconds

MODULES = Path(__file__).resolve().parent.parent / "modules"
HOLD_S = 4.0


def _hold(lock: Path, seconds: float) -> None:
    """Take the lock now, as another job on the device would, and let go after `seconds`."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(seconds, os.close, args=(fd,)).start()


def test_a_job_waits_for_the_device_and_the_wait_is_not_device_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "gpu0.lock"
    monkeypatch.setenv(DEVICE_LOCK_ENV, str(lock))
    executor = Executor("cpu")
    _hold(lock, HOLD_S)
    started = time.monotonic()
    outcome = executor.verify(str(MODULES / "correct_add.py"), seeds=(0,), time=False)
    assert outcome.passed, outcome.error
    assert time.monotonic() - started >= HOLD_S
    cost = executor.costs[-1]
    # it waited for the holder (less its own start-up and imports, which overlap the hold)...
    assert cost.phases["wait"] >= HOLD_S - cost.phases["import"] - cost.phases["load"] - 1.0
    assert {"import", "load", "build", "candidate"} <= set(cost.phases)
    # ...and on a device those seconds would not be counted as held
    assert device_seconds("cuda", cost.wall_s, cost.phases) == pytest.approx(cost.wall_s - cost.phases["wait"])
    assert device_seconds("cpu", cost.wall_s, cost.phases) == 0.0


def test_jobs_that_use_no_device_do_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / "gpu0.lock"
    monkeypatch.setenv(DEVICE_LOCK_ENV, str(lock))
    executor = Executor("cpu")
    _hold(lock, 30.0)
    started = time.monotonic()
    outcome = executor.validate(str(MODULES / "correct_add.py"))
    assert outcome.ok, outcome.error
    assert time.monotonic() - started < 20.0
    assert "wait" not in executor.costs[-1].phases


def test_without_the_variable_nothing_is_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_LOCK_ENV, raising=False)
    executor = Executor("cpu")
    outcome = executor.verify(str(MODULES / "correct_add.py"), seeds=(0,), time=False)
    assert outcome.passed and "wait" not in executor.costs[-1].phases
