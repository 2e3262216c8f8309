"""Server paths out of stored and shown text: the IR, assembly, logs and messages a run keeps.

A compile names the module it read (`/tmp/kernelopt-loop-g83ianiq/v_65aabc8c202f3ebc.py`, or
a sandbox's job directory), Triton's own files under the worker's virtual environment
(`/work/main/.venv/lib/python3.11/site-packages/triton/language/standard.py`) and, in error
messages, the interpreter. None of that is the user's business, and it tells an outsider how
the server is laid out. `scrub_paths` rewrites them:

* the module being diagnosed (any `.py` under a temporary directory, and the loop's bare
  `v_<16 hex>.py` names that LLVM's `!DIFile` and PTX comments print) -> the upload's file name,
  so the IR's `loc` information still points at one file the viewer can match;
* anything below `site-packages/` or `dist-packages/` -> the path inside it
  (`triton/language/standard.py`);
* the project's own checkout -> a path relative to it;
* any other absolute path under a root a server keeps (temporary, home, system, project) ->
  its last component, or `.` for a temporary directory.

Line counts never change, so line numbers cited by findings stay valid. Plain Python.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

DEFAULT_MODULE_NAME = "kernel.py"

# `/tmp/kernelopt-loop-g83ianiq/v_65aabc8c202f3ebc.py`, `/work/main/.venv/bin/python`; the
# look-behind keeps `a/b` in a source excerpt and the `//` of PTX comments out.
_PATH = re.compile(r"(?<![\w.~/-])/(?:[\w.+@-]+/)*[\w.+@-]+/?")
# `v_65aabc8c202f3ebc.py`: the loop's name for a version it wrote (diagnosis.engine.loop._write)
_LOOP_MODULE = re.compile(r"(?<![\w/.-])v_[0-9a-f]{16}\.py\b")
_PACKAGES = ("/site-packages/", "/dist-packages/")
_STATIC_ROOTS = (
    "/tmp",
    "/var",
    "/root",
    "/home",
    "/work",
    "/usr",
    "/opt",
    "/srv",
    "/mnt",
    "/private",
    "/dev/shm",
    "/run",
    "/app",
    "/build",
    "/workspace",
    "/nix",
)
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


@lru_cache(maxsize=1)
def _roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(temporary roots, every root), longest first: this process's own prefixes included."""
    temp = {"/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir())}
    every = set(_STATIC_ROOTS) | temp
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.expanduser("~"), PROJECT_ROOT):
        if p and p != "/":
            every |= {p, os.path.realpath(p)}
    order = lambda s: tuple(sorted((r.rstrip("/") for r in s if r.strip("/")), key=len, reverse=True))  # noqa: E731
    return order(temp), order(every)


@lru_cache(maxsize=1)
def _interpreters() -> tuple[str, ...]:
    """This process's interpreter prefixes (a venv, the base Python), and the checkout's venvs."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    found |= {str(p) for p in Path(PROJECT_ROOT).glob(".venv*")}
    return tuple(sorted({os.path.realpath(p) for p in found} | found, key=len, reverse=True))


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def display_name(filename: str | None) -> str:
    """The name the module goes by in stored text: the upload's base name, else kernel.py."""
    base = os.path.basename((filename or "").strip())
    base = re.sub(r"[^\w.+-]", "_", base)
    return base if base.endswith(".py") and len(base) > 3 else DEFAULT_MODULE_NAME


def scrub_paths(text: str, module_name: str = DEFAULT_MODULE_NAME) -> str:
    """`text` with server paths replaced (see the module docstring); idempotent."""
    if not text or ("/" not in text and "v_" not in text):
        return text
    temp, every = _roots()
    # Text stored since paths are scrubbed holds none: substring tests (C speed) spare a
    # regex pass over a megabyte of PTX on every page view.
    if (
        not any(root in text for root in every)
        and not any(marker in text for marker in _PACKAGES)
        and not _LOOP_MODULE.search(text)
    ):
        return text

    def path(m: re.Match[str]) -> str:
        p = m.group(0)
        for marker in _PACKAGES:
            if marker in p:
                return p.split(marker, 1)[1]
        if not _under(p, every):
            return p
        trailing = p.endswith("/")
        bare = p.rstrip("/")
        # the checkout and its venvs before the temporary roots: a checkout may live under /tmp
        if _under(bare, _interpreters()):  # a venv may live in the checkout: not the project's files
            return os.path.basename(bare) or "."
        if _under(bare, (PROJECT_ROOT, os.path.realpath(PROJECT_ROOT))):
            for root in (PROJECT_ROOT, os.path.realpath(PROJECT_ROOT)):
                if bare == root:
                    return "."
                if bare.startswith(root + "/"):
                    rel = bare[len(root) + 1 :]
                    return rel + ("/" if trailing else "")
        if _under(bare, temp):
            return module_name if bare.endswith(".py") else "."
        return os.path.basename(bare) or "."

    text = _PATH.sub(path, text)
    return _LOOP_MODULE.sub(module_name, text)


def has_server_path(text: str) -> bool:
    """True when `text` still names a path under one of the roots (what tests look for)."""
    _, every = _roots()
    return any(_under(m.group(0).rstrip("/"), every) for m in _PATH.finditer(text or ""))
