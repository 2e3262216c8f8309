"""bench/web_scale.py seeds a team's history and requests every page it times (tiny sizes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from diagnosis.models import Artefact, DiagnosisRun, Finding, Kernel

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_web_scale", ROOT / "bench" / "web_scale.py")
web_scale = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(web_scale)  # type: ignore[union-attr]


def test_it_seeds_the_sizes_asked_for_and_every_page_answers():
    sizes = {"kernels": 4, "runs": 8, "findings": 32, "artefacts": 16}
    web_scale.seed(sizes)
    assert web_scale.seeded(sizes)
    assert (Kernel.objects.count(), DiagnosisRun.objects.count(), Finding.objects.count(), Artefact.objects.count()) == (
        4, 8, 32, 16,
    )  # fmt: skip
    rows = web_scale.measure(1)  # asserts a 200 for each page
    assert {r["page"] for r in rows} >= {"kernel list", "run", "findings, page 2000", "review queue"}
    assert all(0 < r["queries"] <= 16 for r in rows), rows  # the run page with its evidence sections: 14


def test_the_scale_database_is_a_separate_one():
    assert (
        web_scale.scale_url("postgres://u@h:5432/kernelopt_states")
        == "postgres://u@h:5432/kernelopt_states_webscale"
    )
