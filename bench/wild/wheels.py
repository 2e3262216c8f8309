"""The pinned library wheels: download them into the cache, check their digests, read their sources.

The corpus must be the same on every build, so each wheel is pinned by version and by the
sha256 of the file PyPI serves; a cached file with another digest is refused, never used.
Sources are read from the zip itself: the libraries are never installed or imported (several
probe for a GPU at import time).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"


class WheelError(Exception):
    """A pinned wheel is missing, could not be downloaded, or is not the file that was pinned."""


@dataclass(frozen=True)
class Pin:
    """One library release: what pip is asked for and what the file must hash to."""

    lib: str  # the short name used in module names (NN_<lib>_<op>.py)
    project: str  # the PyPI project
    version: str
    filename: str
    sha256: str
    package: str  # the top-level import package inside the wheel


PINS: tuple[Pin, ...] = (
    Pin(
        "liger",
        "liger-kernel",
        "0.8.5",
        "liger_kernel-0.8.5-py3-none-any.whl",
        "60789cd576af073ab9b192b570d2597fd0cdad489cd62fb44fb16256d43754c9",
        "liger_kernel",
    ),
    Pin(
        "gems",
        "flag-gems",
        "5.0.2",
        "flag_gems-5.0.2-py3-none-any.whl",
        "d7c5a6121bf2d3f7daddde43bfa7cae739de6cb5b294dcfe7ae6173045c35552",
        "flag_gems",
    ),
    Pin(
        "fla",
        "fla-core",
        "0.6.0",
        "fla_core-0.6.0-py3-none-any.whl",
        "b0708b70e0b119cd58a0a5146ea56cb175cef6ed969d8ac60267e3e077ce3ebd",
        "fla",
    ),
)


def pin_for(lib: str) -> Pin:
    for pin in PINS:
        if pin.lib == lib:
            return pin
    raise KeyError(lib)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def wheel_path(pin: Pin, cache: Path = CACHE) -> Path:
    """The cached wheel, checked against its pin; WheelError when absent or different."""
    path = cache / pin.filename
    if not path.is_file():
        raise WheelError(f"{pin.filename} is not in {cache}; run `python bench/wild/build.py fetch`")
    actual = sha256_of(path)
    if actual != pin.sha256:
        raise WheelError(f"{path} has sha256 {actual}, the pin is {pin.sha256}; delete it and fetch again")
    return path


def fetch(pins: tuple[Pin, ...] = PINS, cache: Path = CACHE, extra: Sequence[str] = ()) -> list[Path]:
    """Download every pinned wheel that is not cached yet (pip, no dependencies), then check all.
    `extra`: more pip arguments (the interpreter and platforms a binary wheel is built for)."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [p for p in pins if not (cache / p.filename).is_file()]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *extra, "-d", str(cache)]
        cmd += [f"{p.project}=={p.version}" for p in missing]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise WheelError(
                f"pip download failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
    return [wheel_path(p, cache) for p in pins]


class WheelSource:
    """The Python modules of one wheel, by dotted name, read from the zip without installing it."""

    def __init__(self, path: Path, package: str) -> None:
        self.path = path
        self.package = package
        self._files: dict[str, str] = {}  # dotted module name -> member path in the zip
        self._packages: set[str] = set()
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                if not member.endswith(".py") or not member.startswith(package + "/"):
                    continue
                parts = member[: -len(".py")].split("/")
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                    self._packages.add(".".join(parts))
                self._files[".".join(parts)] = member
        self._text: dict[str, str] = {}

    def has_module(self, name: str) -> bool:
        return name in self._files

    def is_package(self, name: str) -> bool:
        return name in self._packages

    def member(self, name: str) -> str:
        """The file inside the wheel that holds module `name` (for the generated modules' notes)."""
        return self._files[name]

    def source(self, name: str) -> str:
        if name not in self._text:
            with zipfile.ZipFile(self.path) as zf:
                self._text[name] = zf.read(self._files[name]).decode("utf-8")
        return self._text[name]

    def read(self, member: str) -> str:
        """Any text file of the wheel (the YAML config files flag_gems reads at import)."""
        with zipfile.ZipFile(self.path) as zf:
            return zf.read(member).decode("utf-8")

    def owns(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".")
