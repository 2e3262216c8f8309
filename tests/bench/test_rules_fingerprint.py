"""bench/rules_fingerprint.py's replay of a benchmark's rounds on the initial version: the rules that act only on
the device's evidence (tier 1-3 findings) are fingerprinted through what a round recorded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bench.rules_fingerprint import replayed
from diagnosis.engine.serialize import finding_json
from tests.engine.test_rules_split_loop import BATCHED_MEAN, few_programs


def results(tmp_path: Path, source: str, findings: list[dict], later: list[dict] = ()) -> Path:
    """A results JSON of one operator that ran `source` as tmp_path's `mean.py`, which holds
    BATCHED_MEAN now: round 1 with `findings`, then the `later` rounds."""
    (tmp_path / "mean.py").write_text(BATCHED_MEAN)
    sha = hashlib.sha256(source.encode()).hexdigest()
    first = {"index": 1, "parent_sha256": sha, "hypothesis": {"family": "launch_config"}, "findings": findings}
    op = {"name": "mean", "file": "/device/checkout/mean.py", "initial_sha256": sha, "rounds": [first, *later]}
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


def test_later_rounds_on_the_initial_version_are_replayed_and_others_not(tmp_path: Path) -> None:
    """Round 2 after a round without a gain ran on the initial version again: replayed with its
    own findings. Round 3 ran on a version round 2 wrote: not the module here, not replayed."""
    sha = hashlib.sha256(BATCHED_MEAN.encode()).hexdigest()
    told = [finding_json(few_programs("colsum_kernel"))]
    later = [
        {"index": 2, "parent_sha256": sha, "hypothesis": None, "findings": told},
        {"index": 3, "parent_sha256": "0" * 64, "hypothesis": None, "findings": told},
    ]
    out = replayed(results(tmp_path, BATCHED_MEAN, [finding_json(few_programs("another_kernel"))], later))
    assert out[f"{tmp_path}/mean.py :: round 1 of run.json[0]"] is None
    second = out[f"{tmp_path}/mean.py :: round 2 of run.json[0]"]
    assert second is not None and json.loads(second)[2] == "launch_config"
    assert not any("round 3" in key for key in out)


def test_a_round_whose_findings_name_no_kernel_here_has_no_candidate(tmp_path: Path) -> None:
    out = replayed(results(tmp_path, BATCHED_MEAN, [finding_json(few_programs("another_kernel"))]))
    assert out == {f"{tmp_path}/mean.py :: round 1 of run.json[0]": None}


def test_a_module_that_changed_since_the_run_is_not_replayed(tmp_path: Path, capsys) -> None:
    out = replayed(results(tmp_path, BATCHED_MEAN + "\n# edited\n", [finding_json(few_programs("colsum_kernel"))]))
    assert out == {}
    assert "not the module run.json ran" in capsys.readouterr().err
