"""bench/rules_fingerprint.py's replay of a benchmark's first rounds: the rules that act only on
the device's evidence (tier 1-3 findings) are fingerprinted through what a round recorded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bench.rules_fingerprint import replayed
from diagnosis.engine.serialize import finding_json
from tests.engine.test_rules_split_loop import BATCHED_MEAN, few_programs


def results(tmp_path: Path, source: str, findings: list[dict]) -> Path:
    """A results JSON of one operator that ran `source` as tmp_path's `mean.py`, which holds
    BATCHED_MEAN now."""
    (tmp_path / "mean.py").write_text(BATCHED_MEAN)
    op = {
        "name": "mean",
        "file": "/device/checkout/mean.py",
        "initial_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "rounds": [{"hypothesis": {"family": "launch_config"}, "findings": findings}],
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"meta": {"source": str(tmp_path)}, "operators": [op]}))
    return path


def test_round_one_is_replayed_with_the_findings_it_recorded(tmp_path: Path) -> None:
    """Tier 1's T1-FEW-PROGRAMS on the module's kernel (no tier-0 finding names it): the replay
    proposes a launch rewrite for it, which the module's own findings never would."""
    out = replayed(results(tmp_path, BATCHED_MEAN, [finding_json(few_programs("colsum_kernel"))]))
    key = f"{tmp_path}/mean.py :: round 1 of run.json"
    assert out[f"{key}[0]"] is not None
    source, _diff, family, _rationale, addressed = json.loads(out[f"{key}[0]"])
    assert (family, addressed) == ("launch_config", ["T1-FEW-PROGRAMS"])
    assert "@triton.autotune" in source and "@triton.autotune" not in BATCHED_MEAN


def test_a_round_whose_findings_name_no_kernel_here_has_no_candidate(tmp_path: Path) -> None:
    out = replayed(results(tmp_path, BATCHED_MEAN, [finding_json(few_programs("another_kernel"))]))
    assert out == {f"{tmp_path}/mean.py :: round 1 of run.json[0]": None}


def test_a_module_that_changed_since_the_run_is_not_replayed(tmp_path: Path, capsys) -> None:
    out = replayed(results(tmp_path, BATCHED_MEAN + "\n# edited\n", [finding_json(few_programs("colsum_kernel"))]))
    assert out == {}
    assert "not the module run.json ran" in capsys.readouterr().err
