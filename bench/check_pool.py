"""Check many kernel modules under the Triton interpreter in a few long-lived children.

bench/check_suite.py checks each module in a fresh subprocess, so each pays for importing torch
and triton (about 2 CPU seconds). Here `jobs` children each check one module after another,
taking the next file when they finish: for the team's own modules (the suite and the rules'
rewrites of it, in the tests), which then share a process with the modules checked before them
in that child. A module that hangs or kills its child fails alone and the child is replaced.

    check_modules(paths, jobs)   check_suite's comparison on each file (results as check_module's)
    run_pool(command, ...)       the same dispatch for any child that speaks `serve`'s protocol
    Pool(command, env, marker)   run_pool whose children outlive one run (Pool.run, Pool.close)

Child: python bench/check_pool.py [--seed N] [--compat]   (reads paths on stdin, TRITON_INTERPRET=1 set)
Only the standard library here; the children need what check_suite's need.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CHECK_SUITE = Path(__file__).resolve().parent / "check_suite.py"
RESULT_MARKER = "CHECK_SUITE_RESULT "  # check_suite's
DEFAULT_TIMEOUT_S = 600


def check_modules(
    paths: list[str | os.PathLike],
    jobs: int = 1,
    timeout: float = DEFAULT_TIMEOUT_S,
    seed: int = 0,
    on_result: Callable[[str, dict], None] | None = None,
    *,
    compat: bool = False,
) -> dict[str, dict]:
    """check_suite's check of each file (seeded with `seed`; with `compat`, check_suite's
    --compat interpreter), in up to `jobs` children (see the module docstring). Returns
    check_suite.check_module's results keyed by the resolved path as a string; on_result(path,
    result) is called as each one comes."""
    files = [str(Path(f).resolve()) for f in paths]
    env = dict(os.environ, TRITON_INTERPRET="1")
    command = [sys.executable, str(Path(__file__).resolve()), "--seed", str(seed)] + (
        ["--compat"] if compat else []
    )
    results = {}

    def done(f: str, r: dict | str) -> None:
        if isinstance(r, str):
            r = {"name": Path(f).stem, "ok": False, "max_err": None, "cases": 0, "seconds": 0.0, "message": r}
        results[f] = r
        if on_result is not None:
            on_result(f, r)

    run_pool(command, files, jobs, timeout, env, RESULT_MARKER, on_result=done)
    return results


class _PoolChild:
    """One child of run_pool: its process, the file it is checking and what it printed."""

    def __init__(self, command: list[str], env: dict[str, str]):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr
        )
        self.path: str | None = None
        self.started = 0.0
        self.buffer = b""
        self.printed = b""  # what it printed besides result lines while checking self.path

    def send(self, path: str) -> bool:
        self.path, self.started, self.printed = path, time.monotonic(), b""
        try:
            self.proc.stdin.write(path.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return False
        return True

    def tail(self) -> str:
        self.stderr.seek(0)
        return (self.printed + self.stderr.read())[-3000:].decode(errors="replace")

    def close(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


def run_pool(
    command: list[str],
    paths: list[str],
    jobs: int,
    timeout: float,
    env: dict[str, str],
    marker: str,
    on_result: Callable[[str, dict | str], None] | None = None,
) -> dict[str, dict | str]:
    """Hand `paths` one at a time to up to `jobs` children running `command`, each of which reads
    a path per line on stdin and prints one `marker` + JSON line per path (see `serve`). The next
    path goes to whichever child finishes first. Returns each path's parsed result, or a string
    saying why there is none (the child timed out after `timeout` s on it, or died), and calls
    on_result(path, that) as each one comes. The children exit when it returns (`Pool` keeps them)."""
    pool = Pool(command, env, marker)
    try:
        return pool.run(paths, jobs, timeout, on_result)
    finally:
        pool.close()


class Pool:
    """run_pool's children, kept between runs: a caller that checks files in many batches (the
    rules tests, one batch per test) pays for a child's start (importing torch and triton, about
    2.5 CPU seconds) once, not once per batch. A child that timed out or died is replaced."""

    def __init__(self, command: list[str], env: dict[str, str], marker: str) -> None:
        self.command, self.env, self.marker = command, env, marker
        self.idle: list[_PoolChild] = []

    def run(
        self,
        paths: list[str],
        jobs: int,
        timeout: float,
        on_result: Callable[[str, dict | str], None] | None = None,
    ) -> dict[str, dict | str]:
        """run_pool's dispatch of `paths` over up to `jobs` children, idle ones first."""
        import selectors

        pending = list(paths)
        results: dict[str, dict | str] = {}
        children: list[_PoolChild] = []
        selector = selectors.DefaultSelector()

        def finish(path: str, result: dict | str) -> None:
            results[path] = result
            if on_result is not None:
                on_result(path, result)

        def retire(child: _PoolChild, kill: bool) -> None:
            selector.unregister(child.proc.stdout)
            children.remove(child)
            child.close(kill=kill)

        def dispatch(child: _PoolChild) -> None:
            path = pending.pop(0)
            if not child.send(path):
                child.proc.wait()
                finish(path, f"child exited with {child.proc.returncode} before it was given the file")
                retire(child, kill=True)

        def start() -> _PoolChild:
            child = self.idle.pop() if self.idle else _PoolChild(self.command, self.env)
            children.append(child)
            selector.register(child.proc.stdout, selectors.EVENT_READ, child)
            return child

        try:
            while pending or any(c.path for c in children):
                for child in [c for c in children if c.path is None]:
                    if pending:
                        dispatch(child)
                while pending and len(children) < max(1, jobs):
                    dispatch(start())
                busy = [c for c in children if c.path is not None]
                if not busy:
                    continue
                wait = max(0.0, min(c.started for c in busy) + timeout - time.monotonic())
                for key, _ in selector.select(wait):
                    self._read(key.data, finish, retire)
                now = time.monotonic()
                for child in [c for c in children if c.path is not None and now - c.started > timeout]:
                    finish(child.path, f"timed out after {timeout:.0f} s")
                    retire(child, kill=True)
        finally:
            for child in list(children):
                if child.path is None and child.proc.poll() is None:  # alive and done: kept
                    selector.unregister(child.proc.stdout)
                    children.remove(child)
                    self.idle.append(child)
                else:
                    retire(child, kill=True)
        return results

    def _read(self, child: _PoolChild, finish, retire) -> None:
        """What `child` printed: its result lines finish its file; the rest is kept for its tail."""
        data = os.read(child.proc.stdout.fileno(), 1 << 16)
        if not data:  # the child died (in the middle of its file, or between files)
            child.proc.wait()
            if child.path is not None:
                finish(
                    child.path, f"child exited with {child.proc.returncode} and no result:\n{child.tail()}"
                )
            retire(child, kill=False)
            return
        child.buffer += data
        *lines, child.buffer = child.buffer.split(b"\n")
        for line in lines:
            text = line.decode(errors="replace")
            if text.startswith(self.marker) and child.path is not None:
                result = json.loads(text[len(self.marker) :])
                result.setdefault("seconds", time.monotonic() - child.started)
                path, child.path = child.path, None
                finish(path, result)
            else:
                child.printed += line + b"\n"

    def close(self) -> None:
        for child in self.idle:
            child.close()
        self.idle = []


def serve(check, marker: str) -> int:
    """The child side of run_pool: check(path) -> result dict for each path read from stdin."""
    for line in sys.stdin:
        path = line.rstrip("\n")
        if path:
            print(marker + json.dumps(check(Path(path))), flush=True)
    return 0


def load_check_suite(compat: bool = False):
    """bench/check_suite.py as a module, its interpreter patches (`compat`: --compat's too)
    applied once for the process: a child checks many modules and must not wrap the wrapped
    launch counter again each time."""
    spec = importlib.util.spec_from_file_location("check_suite", CHECK_SUITE)
    check_suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_suite)
    launches = check_suite._patch_interpreter(compat)
    check_suite._patch_interpreter = lambda *args, **kwargs: launches
    return check_suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a check_modules child: module paths on stdin")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compat", action="store_true", help="check_suite's --compat interpreter")
    args = parser.parse_args(argv)
    check_suite = load_check_suite(args.compat)
    # the big timed cases on the meta device: the same check of their count, shapes and dtypes
    return serve(
        lambda path: check_suite._check_in_child(path, args.seed, compat=args.compat, meta_cases=True),
        RESULT_MARKER,
    )


if __name__ == "__main__":
    sys.exit(main())
