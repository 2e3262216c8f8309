"""Artefacts and rounds name the source they belong to (Artefact.source_sha256,
Round.parent_sha256), so a run stores each artefact once per source version and the evidence
viewer groups rounds by the source they diagnosed. Old rows are filled in: a round from its
parent version, else from the parent source of its proposals; an artefact from its round, else
(an artefact of the whole run) from the run's version. Old duplicate artefacts are kept; the
pages show each once."""

import hashlib

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def backfill(apps, schema_editor):
    Round = apps.get_model("diagnosis", "Round")
    Artefact = apps.get_model("diagnosis", "Artefact")
    KernelVersion = apps.get_model("diagnosis", "KernelVersion")
    Proposal = apps.get_model("diagnosis", "Proposal")
    DiagnosisRun = apps.get_model("diagnosis", "DiagnosisRun")

    Round.objects.filter(parent_version__isnull=False).update(
        parent_sha256=Subquery(
            KernelVersion.objects.filter(pk=OuterRef("parent_version_id")).values("sha256")[:1]
        )
    )
    orphans = Round.objects.filter(parent_sha256="").values_list("id", flat=True)
    for round_id in orphans.iterator():
        source = (
            Proposal.objects.filter(round_id=round_id)
            .exclude(parent_source="")
            .values_list("parent_source", flat=True)
            .first()
        )
        if source:
            Round.objects.filter(id=round_id).update(
                parent_sha256=hashlib.sha256(source.encode()).hexdigest()
            )
    Artefact.objects.filter(round__isnull=False).update(
        source_sha256=Subquery(Round.objects.filter(pk=OuterRef("round_id")).values("parent_sha256")[:1])
    )
    run_sha = DiagnosisRun.objects.filter(pk=OuterRef("run_id")).values("version__sha256")[:1]
    Artefact.objects.filter(source_sha256="").update(source_sha256=Subquery(run_sha))


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="artefact",
            name="source_sha256",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="round",
            name="parent_sha256",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddIndex(
            model_name="artefact",
            index=models.Index(fields=["run", "source_sha256", "kind"], name="artefact_run_source_kind"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
