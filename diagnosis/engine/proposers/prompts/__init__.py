"""The LLM prompt's templates, versioned: `v1/system.txt` and `v1/user.txt`.

A template is `string.Template` text (`$name` placeholders, so the braces of code and format
strings need no escaping) filled by `diagnosis.engine.proposers.prompt`. A change to what the
model is told is a new directory (v2/, ...) and a new VERSION, never an edit in place: every
round records the version it was asked with, so answers stay comparable across runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

VERSION = "v1"
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Templates:
    version: str
    system: Template
    user: Template


@cache
def load(version: str = VERSION) -> Templates:
    """The templates of `version`; KeyError when there is no such version."""
    folder = HERE / version
    if not (folder / "system.txt").is_file():
        raise KeyError(f"no prompt templates for version {version!r} under {HERE}")
    return Templates(
        version=version,
        system=Template((folder / "system.txt").read_text()),
        user=Template((folder / "user.txt").read_text()),
    )
