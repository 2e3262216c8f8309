"""The admin: every model is registered and its pages render; artefacts show sizes, never the blob."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from diagnosis import models

pytestmark = pytest.mark.django_db

MODELS = [
    models.Team,
    models.Kernel,
    models.KernelVersion,
    models.DiagnosisRun,
    models.Round,
    models.Finding,
    models.Artefact,
    models.Proposal,
    models.Review,
    models.Pattern,
    models.BenchImport,
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_model_has_a_working_changelist(admin_client, model, proposal, artefact):
    assert admin.site.is_registered(model)
    url = reverse(f"admin:diagnosis_{model._meta.model_name}_changelist")
    assert admin_client.get(url).status_code == 200


def test_artefact_admin_shows_sizes_not_the_blob(admin_client, artefact):
    listing = admin_client.get(reverse("admin:diagnosis_artefact_changelist")).content.decode()
    assert "double_kernel.ptx" in listing
    change = admin_client.get(reverse("admin:diagnosis_artefact_change", args=[artefact.pk])).content.decode()
    assert 'name="data"' not in change
    assert str(artefact.size) in change


def test_team_admin_edits_members_and_reviewers(admin_client, team):
    page = admin_client.get(reverse("admin:diagnosis_team_change", args=[team.pk])).content.decode()
    assert 'name="members"' in page and 'name="reviewers"' in page


def test_worker_heartbeats_are_listed(admin_client):
    from runner.models import WorkerHeartbeat

    assert admin.site.is_registered(WorkerHeartbeat)
    assert admin_client.get(reverse("admin:runner_workerheartbeat_changelist")).status_code == 200
