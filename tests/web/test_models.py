"""Model behaviour the pages rely on: artefact compression, version dedup and numbering."""

from __future__ import annotations

import hashlib
import zlib

import pytest
from django.db import IntegrityError, transaction

from diagnosis.forms import next_version_number
from diagnosis.models import Artefact, KernelVersion

pytestmark = pytest.mark.django_db


def test_artefact_round_trips_compressed_text_with_digest(run):
    text = "ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];\n" * 500 + "é unicode\n"
    artefact = Artefact.build(run=run, kind="ptx", name="k.ptx", text=text)
    artefact.save()
    stored = Artefact.objects.get(pk=artefact.pk)
    assert stored.text == text
    assert stored.size == len(text.encode())
    assert stored.compressed_size == len(bytes(stored.data)) < stored.size
    assert zlib.decompress(bytes(stored.data)).decode() == text
    assert stored.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_the_same_source_cannot_be_stored_twice_in_one_kernel(version):
    with pytest.raises(IntegrityError), transaction.atomic():
        KernelVersion.objects.create(
            kernel=version.kernel, number=2, source=version.source, sha256=version.sha256
        )


def test_the_same_source_may_exist_in_another_kernel(version, team, owner):
    from diagnosis.models import Kernel

    other = Kernel.objects.create(team=team, name="copy", owner=owner)
    KernelVersion.objects.create(kernel=other, number=1, source=version.source, sha256=version.sha256)


def test_version_numbers_count_up_per_kernel(version):
    assert next_version_number(version.kernel) == 2
    KernelVersion.objects.create(
        kernel=version.kernel, number=2, source="x", sha256=KernelVersion.digest("x")
    )
    assert next_version_number(version.kernel) == 3


def test_version_numbers_are_unique_per_kernel(version):
    with pytest.raises(IntegrityError), transaction.atomic():
        KernelVersion.objects.create(
            kernel=version.kernel, number=1, source="y", sha256=KernelVersion.digest("y")
        )


def test_tests_run_on_postgres():
    from django.db import connection

    assert connection.vendor == "postgresql"


def test_the_run_device_choices_are_the_registered_kinds():
    from diagnosis.engine import devices
    from diagnosis.models import DiagnosisRun

    assert DiagnosisRun.Device.choices == [(k.name, k.label) for k in devices.KINDS.values()]


def test_the_models_need_no_migration_the_tree_does_not_have():
    """Choices built from the engine's registries must stay what the migrations say."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("makemigrations", "diagnosis", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
