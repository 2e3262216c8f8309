"""Every rule's rewrite of every code-style row (the STYLES tables of the test_rules_* modules:
modules written as Triton's tutorials, liger-kernel and flag-gems write them, in every import
style) is correct under the interpreter, with every autotune config."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from diagnosis.engine.evidence import Family
from tests.engine.rules_cases import harness as h
from tests.engine.rules_cases import styles as st

pytestmark = pytest.mark.slow  # about 3.5 minutes of interpreter on 2 cores

MODULES = (
    "test_rules_launch_config",
    "test_rules_single_pass",
    "test_rules_hints",
    "test_rules_pipelining",
    "test_rules_swizzle",
    "test_rules_dot_precision",
    "test_rules_block_reduction",
    "test_rules_hoist",
    "test_rules_fusion",
)


def style_tables() -> list[tuple[str, Family, list]]:
    out = []
    for name in MODULES:
        module = importlib.import_module(f"tests.engine.{name}")
        out.append((name, module.FAMILY, [p.values[0] for p in module.STYLES]))
    return out


@pytest.mark.parametrize("module", MODULES)
def test_every_style_rewrite_is_correct_under_the_interpreter(module: str, tmp_path: Path) -> None:
    ((_, family, cases),) = [t for t in style_tables() if t[0] == module]
    ids = [p.id for p in importlib.import_module(f"tests.engine.{module}").STYLES]
    paths = []
    for case, case_id in zip(cases, ids, strict=True):
        rw = st.rewrite(family, case)
        path = tmp_path / f"{case_id.replace('-', '_')}.py"
        path.write_text(st.for_interpreter(rw.source))
        paths.append(path)
    results = h.interp_check(paths, jobs=2)
    failed = {p.stem: results[str(p)]["message"][-1500:] for p in paths if not results[str(p)]["ok"]}
    assert not failed, failed
