"""manage.py loaddemo: demo team and user, demo kernels with a queued run each, the committed
H200 results as measured runs, safe to repeat."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.test import RequestFactory

from diagnosis.management.commands import loaddemo
from diagnosis.models import DiagnosisRun, Kernel, KernelVersion, Team

pytestmark = pytest.mark.django_db


def _load(*args: str, results: bool = False) -> str:
    out = StringIO()
    extra = () if results else ("--no-results",)
    call_command("loaddemo", "--no-enqueue", *extra, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_it_creates_the_demo_user_team_kernels_and_queued_runs():
    output = _load("--no-suite")
    # The login throttle (axes) is the first backend and needs the request it counts against.
    request = RequestFactory().post("/login/")
    user = authenticate(request, username=loaddemo.DEMO_USER, password=loaddemo.DEMO_PASSWORD)
    assert user is not None
    team = Team.objects.get(name=loaddemo.DEMO_TEAM)
    assert team.members.filter(pk=user.pk).exists() and team.reviewers.filter(pk=user.pk).exists()
    demo_files = sorted(p.stem for p in loaddemo.DEMO_DIR.glob("*.py"))
    assert demo_files and sorted(Kernel.objects.values_list("name", flat=True)) == demo_files
    assert KernelVersion.objects.count() == len(demo_files)
    assert DiagnosisRun.objects.filter(status="queued").count() == len(demo_files)
    assert "http://127.0.0.1:8000/" in output
    assert f"{loaddemo.DEMO_USER} / {loaddemo.DEMO_PASSWORD}" in output


def test_running_it_twice_changes_nothing():
    _load("--no-suite")
    counts = (Kernel.objects.count(), KernelVersion.objects.count(), DiagnosisRun.objects.count())
    output = _load("--no-suite")
    assert (Kernel.objects.count(), KernelVersion.objects.count(), DiagnosisRun.objects.count()) == counts
    assert "already loaded" in output


def test_it_loads_default_suite_modules_when_present_and_tolerates_their_absence(tmp_path, monkeypatch):
    suite = tmp_path / "suite"
    suite.mkdir()
    good = (loaddemo.DEMO_DIR / "scaled_add.py").read_text()
    (suite / loaddemo.DEFAULT_SUITE[0]).write_text(good)
    (suite / "99_other.py").write_text(good)
    monkeypatch.setattr(loaddemo, "SUITE_DIR", suite)
    _load()
    names = set(Kernel.objects.values_list("name", flat=True))
    assert loaddemo.DEFAULT_SUITE[0].removesuffix(".py") in names
    assert "99_other" not in names
    _load("--suite")
    assert "99_other" in set(Kernel.objects.values_list("name", flat=True))


def test_invalid_modules_are_skipped_with_a_reason(tmp_path, monkeypatch):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "01_broken.py").write_text("def broken(:\n")
    monkeypatch.setattr(loaddemo, "SUITE_DIR", suite)
    err = StringIO()
    call_command("loaddemo", "--no-enqueue", "--no-results", "--suite", stdout=StringIO(), stderr=err)
    assert "01_broken.py: not loaded (line 1: syntax error" in err.getvalue()
    assert not Kernel.objects.filter(name="01_broken").exists()


def test_it_imports_the_committed_h200_table_onto_the_suite_kernels_once():
    output = _load(results=True)
    imported = DiagnosisRun.objects.filter(bench_import__isnull=False)
    assert imported.count() == 37 and "37 measured run(s) imported" in output
    assert set(imported.values_list("device", "status").distinct()) == {("cuda", "done")}
    # the suite modules loaddemo loads itself: their one version has the queued run and the H200 one
    for name in loaddemo.DEFAULT_SUITE:
        kernel = Kernel.objects.get(name=name.removesuffix(".py"))
        assert kernel.versions.count() == 1
        assert sorted(kernel.versions.get().runs.values_list("status", flat=True)) == ["done", "queued"]
    counts = (Kernel.objects.count(), KernelVersion.objects.count(), DiagnosisRun.objects.count())
    assert "37 already there" in _load(results=True)
    assert (Kernel.objects.count(), KernelVersion.objects.count(), DiagnosisRun.objects.count()) == counts
