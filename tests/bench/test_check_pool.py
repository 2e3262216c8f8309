"""bench/check_pool.py: many modules checked in a few long-lived children give check_suite's
verdicts; a module that kills its child or hangs fails alone."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VEC_ADD = ROOT / "tests" / "engine" / "rules_cases" / "vec_add.py"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_pool = _load("check_pool")
check_suite = _load("check_suite")


def _write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def test_it_gives_the_verdicts_of_a_fresh_child_per_module(tmp_path: Path) -> None:
    good = _write(tmp_path, "good.py", VEC_ADD.read_text())
    wrong = _write(tmp_path, "wrong.py", VEC_ADD.read_text().replace("x + y, mask=mask", "x - y, mask=mask"))
    arrived = []
    pooled = check_pool.check_modules([good, wrong], jobs=1, on_result=lambda f, r: arrived.append(f))
    assert sorted(arrived) == sorted(pooled) == sorted(str(p.resolve()) for p in (good, wrong))
    for path in (good, wrong):
        alone = check_suite.check_module(path)
        mine = pooled[str(path.resolve())]
        assert (mine["ok"], mine["cases"], mine["max_err"], mine["message"]) == (
            alone["ok"],
            alone["cases"],
            alone["max_err"],
            alone["message"],
        )
    assert pooled[str(good.resolve())]["ok"] and not pooled[str(wrong.resolve())]["ok"]


def test_a_module_that_kills_its_child_fails_alone(tmp_path: Path) -> None:
    crash = _write(
        tmp_path,
        "crash.py",
        VEC_ADD.read_text().replace("        return out", "        import os\n        os._exit(3)"),
    )
    good = _write(tmp_path, "good.py", VEC_ADD.read_text())
    results = check_pool.check_modules([crash, good], jobs=1)
    assert not results[str(crash.resolve())]["ok"]
    assert results[str(crash.resolve())]["message"].startswith("child exited with 3 and no result")
    assert results[str(good.resolve())]["ok"], results[str(good.resolve())]["message"]


def test_a_module_that_hangs_times_out(tmp_path: Path) -> None:
    hang = _write(
        tmp_path,
        "hang.py",
        VEC_ADD.read_text().replace("        return out", "        import time\n        time.sleep(600)"),
    )
    results = check_pool.check_modules([hang], jobs=1, timeout=5)
    assert results[str(hang.resolve())]["message"] == "timed out after 5 s"
