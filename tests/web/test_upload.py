"""The upload pages: bad files store nothing and say why; good ones store and enqueue after commit."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.urls import reverse

from diagnosis.models import DiagnosisRun, Kernel, KernelVersion
from tests.conftest import GOOD_SOURCE, PROPOSED_SOURCE

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    """Records enqueue calls instead of sending them to a broker."""
    calls: list[tuple[int, str]] = []
    monkeypatch.setattr("diagnosis.forms.enqueue_run", lambda run_id, device: calls.append((run_id, device)))
    return calls


def _counts() -> tuple[int, int, int]:
    return Kernel.objects.count(), KernelVersion.objects.count(), DiagnosisRun.objects.count()


def _post_file(client, url, content: bytes, filename="kernel.py", **extra):
    data = {"device": "cpu", "target": "sm_90", "round_budget": 5, **extra}
    data["file"] = SimpleUploadedFile(filename, content, content_type="text/x-python")
    return client.post(url, data)


BAD_UPLOADS = [
    pytest.param(b"\x7fELF\x02\x01\x01\x00\x00binary", "line 1: this is a binary file", id="binary"),
    pytest.param(
        GOOD_SOURCE.replace("def get_inputs():", "def get_inputs(:").encode(),
        "line 27: syntax error",
        id="syntax",
    ),
    pytest.param(
        GOOD_SOURCE.replace("class ModelNew(", "class Other(").encode(),
        "whole file: the module does not define ModelNew",
        id="no-ModelNew",
    ),
    pytest.param(
        GOOD_SOURCE.replace("@triton.jit\n", "").encode(),
        "no function is decorated with @triton.jit",
        id="no-jit",
    ),
    pytest.param(
        GOOD_SOURCE.replace("def get_inputs():", "def make_inputs():").encode(),
        "the module does not define get_inputs",
        id="no-get_inputs",
    ),
    pytest.param(
        GOOD_SOURCE.replace(
            "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n",
            "def Model(x):\n    return x * 2\n",
        ).encode(),
        "line 7: Model must be a class",
        id="Model-as-function",
    ),
]


@pytest.mark.parametrize(("content", "expected"), BAD_UPLOADS)
def test_a_bad_upload_shows_the_problem_and_stores_nothing(client, owner, team, enqueued, content, expected):
    client.force_login(owner)
    before = _counts()
    response = _post_file(client, reverse("kernel-upload"), content, name="k", team=team.pk)
    assert response.status_code == 400
    assert expected in response.content.decode()
    assert _counts() == before
    assert enqueued == []


@override_settings(KERNELOPT_MAX_UPLOAD_BYTES=2048)
def test_an_oversized_upload_is_refused_before_it_is_read(client, owner, team, enqueued):
    client.force_login(owner)
    before = _counts()
    response = _post_file(client, reverse("kernel-upload"), b"#" * 4096, name="big", team=team.pk)
    assert response.status_code == 400
    assert "too large: 4096 bytes, the limit is 2048 bytes" in response.content.decode()
    assert _counts() == before


def test_a_valid_upload_stores_kernel_version_and_queued_run_and_enqueues_after_commit(
    client, owner, team, enqueued, django_capture_on_commit_callbacks
):
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = _post_file(
            client, reverse("kernel-upload"), GOOD_SOURCE.encode(), filename="double.py", team=team.pk
        )
        assert enqueued == []  # nothing is sent before the commit
    assert response.status_code == 302
    kernel = Kernel.objects.get()
    assert kernel.name == "double" and kernel.team == team and kernel.owner == owner
    version = kernel.versions.get()
    assert (version.number, version.source, version.filename) == (1, GOOD_SOURCE, "double.py")
    run = version.runs.get()
    assert (run.status, run.device, run.target, run.round_budget) == ("queued", "cpu", "sm_90", 5)
    assert response["Location"] == reverse("kernel-detail", args=[kernel.pk])
    assert len(callbacks) == 1
    callbacks[0]()
    assert enqueued == [(run.pk, "cpu")]


def test_pasted_source_works_like_a_file(client, owner, team, enqueued, django_capture_on_commit_callbacks):
    from runner.workers import beat

    beat({"cuda": "cuda"}, host="gpu-node")  # a GPU worker is live: the form offers cuda
    client.force_login(owner)
    data = {
        "source": GOOD_SOURCE,
        "name": "pasted",
        "team": team.pk,
        "device": "cuda",
        "target": "sm_80",
        "round_budget": 3,
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("kernel-upload"), data)
    assert response.status_code == 302
    run = DiagnosisRun.objects.get()
    assert run.version.kernel.name == "pasted" and run.device == "cuda" and run.target == "sm_80"
    assert enqueued == [(run.pk, "cuda")]


def test_a_file_and_pasted_source_together_are_refused(client, owner, team, enqueued):
    client.force_login(owner)
    response = _post_file(
        client, reverse("kernel-upload"), GOOD_SOURCE.encode(), source=GOOD_SOURCE, team=team.pk
    )
    assert response.status_code == 400
    assert "either a file or pasted source" in response.content.decode()
    assert _counts() == (0, 0, 0)


def test_uploading_to_a_team_the_user_is_not_in_is_refused(client, outsider, team, enqueued):
    client.force_login(outsider)
    response = _post_file(client, reverse("kernel-upload"), GOOD_SOURCE.encode(), team=team.pk)
    assert response.status_code == 400
    assert _counts() == (0, 0, 0)


def test_a_new_version_of_a_kernel_gets_the_next_number(
    client, owner, version, enqueued, django_capture_on_commit_callbacks
):
    client.force_login(owner)
    url = reverse("version-upload", args=[version.kernel.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = _post_file(client, url, PROPOSED_SOURCE.encode(), filename="double.py")
    assert response.status_code == 302
    new = version.kernel.versions.get(number=2)
    assert new.parent == version and new.origin == "upload"
    assert enqueued == [(new.runs.get().pk, "cpu")]


def test_uploading_the_same_source_again_reuses_the_version_and_says_so(
    client, owner, version, run, enqueued, django_capture_on_commit_callbacks
):
    client.force_login(owner)
    url = reverse("version-upload", args=[version.kernel.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = _post_file(client, url, GOOD_SOURCE.encode(), filename="again.py")
    assert KernelVersion.objects.count() == 1
    assert version.runs.count() == 2
    page = client.get(response["Location"]).content.decode()
    assert "identical to version 1" in page
    assert len(enqueued) == 1


def test_outsiders_cannot_add_versions(client, outsider, version, enqueued):
    client.force_login(outsider)
    url = reverse("version-upload", args=[version.kernel.pk])
    assert client.get(url).status_code == 404
    assert _post_file(client, url, PROPOSED_SOURCE.encode()).status_code == 404
    assert KernelVersion.objects.count() == 1


def test_the_upload_form_offers_the_configured_devices_and_default_target(client, owner, team):
    client.force_login(owner)
    with override_settings(KERNELOPT_DEVICES=["cuda", "npu"], KERNELOPT_DEFAULT_ARCH="sm_80"):
        page = client.get(reverse("kernel-upload")).content.decode()
    assert 'value="cuda"' in page and 'value="npu"' in page and 'value="cpu"' not in page
    assert 'value="sm_80"' in page


@override_settings(KERNELOPT_MAX_UPLOAD_BYTES=2048)
def test_a_request_far_over_the_limit_is_refused_without_parsing_it(client, owner, team, enqueued):
    client.force_login(owner)
    response = _post_file(
        client, reverse("kernel-upload"), b"#" * 20_000 + b"\n" * 60_000, name="huge", team=team.pk
    )
    assert response.status_code == 302 and response["Location"] == reverse("kernel-upload")
    page = client.get(response["Location"]).content.decode()
    assert "the upload is too large" in page and "the limit is 2048 bytes" in page
    assert _counts() == (0, 0, 0)
