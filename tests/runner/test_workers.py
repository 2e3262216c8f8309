"""runner.workers: workers say which device kinds they serve; the forms offer only those.

On a machine without a GPU the upload form offered CUDA, and the run failed after 4 s with
"Device time 4.0 s" (issue 17). A worker now beats for the kinds this host has, and a kind
nobody beat for recently is marked on the forms and refused."""

from __future__ import annotations

from datetime import timedelta

import dramatiq
import pytest
from django.urls import reverse
from django.utils import timezone
from dramatiq.brokers.stub import StubBroker

from diagnosis.forms import RunForm, UploadForm
from diagnosis.models import DiagnosisRun
from runner import embedded, workers
from runner.models import WorkerHeartbeat
from tests.conftest import GOOD_SOURCE

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_workers():
    """No worker at all (the suite's conftest gives every test a live cpu worker)."""
    WorkerHeartbeat.objects.all().delete()


@pytest.fixture
def no_gpu(settings, monkeypatch):
    """This host has no accelerator, whatever the machine the tests run on has."""
    settings.KERNELOPT_WORKER_DEVICES = []
    monkeypatch.setattr(
        workers, "DEVICE_NODES", {"cuda": ("/nonexistent/nvidiactl",), "npu": ("/nonexistent/dm",)}
    )


@pytest.mark.parametrize(
    ("declared", "nodes", "expected"),
    [
        pytest.param([], {}, {"cpu"}, id="no-device-nodes"),
        pytest.param([], {"cuda": ("/dev/null",)}, {"cpu", "cuda"}, id="nvidia-node-present"),
        pytest.param(["cuda"], {}, {"cuda"}, id="declared"),
    ],
)
def test_a_host_serves_cpu_and_the_accelerators_whose_device_node_exists(
    settings, monkeypatch, declared, nodes, expected
):
    settings.KERNELOPT_WORKER_DEVICES = declared
    monkeypatch.setattr(
        workers, "DEVICE_NODES", {"cuda": ("/nonexistent",), "npu": ("/nonexistent",), **nodes}
    )
    assert workers.present_kinds() == expected


def test_a_kind_is_live_until_its_last_beat_is_older_than_the_window(no_workers, settings):
    settings.KERNELOPT_WORKER_LIVE_SECONDS = 90
    now = timezone.now()
    workers.beat({"cuda": "cuda"}, host="gpu-1", pid=7, now=now - timedelta(seconds=60))
    workers.beat({"npu": "npu"}, host="npu-1", pid=8, now=now - timedelta(seconds=120))
    presence = workers.presence(now)
    assert (presence.live("cuda"), presence.live("npu"), presence.live("cpu")) == (True, False, False)
    assert presence.absence("cuda") == ""
    assert presence.absence("cpu") == "no worker has been seen for cpu"
    assert presence.absence("npu").startswith("no worker has been seen for npu since ")


def test_a_beat_updates_its_row_and_a_clean_shutdown_removes_it(no_workers):
    workers.beat({"cpu": "cpu"}, host="h", pid=1, now=timezone.now() - timedelta(hours=1))
    workers.beat({"cpu": "cpu"}, host="h", pid=1)
    assert WorkerHeartbeat.objects.count() == 1 and workers.presence().live("cpu")
    assert workers.forget(["cpu"], host="h", pid=2) == 0  # another process's row stays
    assert workers.forget(["cpu"], host="h", pid=1) == 1
    assert not workers.presence().live("cpu")


def test_a_booting_worker_beats_for_the_kinds_this_host_has_and_forgets_them_on_shutdown(no_workers, no_gpu):
    from runner.tasks import ACTORS

    broker = StubBroker()
    presence = workers.WorkerPresence(interval=3600)
    broker.add_middleware(presence)
    previous = dramatiq.get_broker()
    saved = {kind: actor.broker for kind, actor in ACTORS.items()}
    try:
        for actor in ACTORS.values():
            actor.broker = broker
            broker.declare_actor(actor)
        worker = dramatiq.Worker(
            broker, queues={ACTORS["cpu"].queue_name, ACTORS["cuda"].queue_name}, worker_timeout=50
        )
        worker.start()
        try:
            rows = set(WorkerHeartbeat.objects.values_list("queue", "kind"))
            assert rows == {(ACTORS["cpu"].queue_name, "cpu")}  # it consumes cuda, but has no GPU
        finally:
            worker.stop()
        assert not WorkerHeartbeat.objects.exists()
    finally:
        for kind, actor in ACTORS.items():
            actor.broker = saved[kind]
        dramatiq.set_broker(previous)
        broker.close()


def test_the_embedded_worker_consumes_only_the_kinds_this_host_has(no_gpu, settings):
    from runner import tasks

    settings.KERNELOPT_DEVICES = ["cpu", "cuda", "npu"]
    assert embedded.embedded_queues(tasks) == {tasks.ACTORS["cpu"].queue_name}
    settings.KERNELOPT_DEVICES = ["cuda"]  # nothing offered is here: what is offered, as before
    assert embedded.embedded_queues(tasks) == {tasks.ACTORS["cuda"].queue_name}


# --- the forms ------------------------------------------------------------------------------


def test_the_forms_mark_a_kind_without_a_worker_and_do_not_offer_it(owner, settings):
    settings.KERNELOPT_DEVICES = ["cuda", "cpu"]
    form = UploadForm(owner)
    html = str(form["device"])
    assert '<option value="cuda" disabled>CUDA GPU (no worker has been seen for cuda)</option>' in html
    assert form["device"].initial == "cpu"  # the first kind a worker serves, not the first offered


@pytest.mark.parametrize("form_class", [RunForm, UploadForm], ids=["run", "upload"])
def test_a_kind_without_a_worker_is_refused_with_the_reason(owner, team, settings, form_class):
    settings.KERNELOPT_DEVICES = ["cpu", "cuda"]
    data = {
        "device": "cuda",
        "target": "sm_90",
        "round_budget": 3,
        "source": GOOD_SOURCE,
        "name": "k",
        "team": team.pk,
    }
    form = form_class(owner, data, prefix=None)
    assert not form.is_valid()
    assert form.errors.as_data()["device"][0].code == "no-worker"
    assert form.errors["device"] == [
        "no worker has been seen for cuda: a run queued there would only wait; choose cpu."
    ]


def test_with_no_worker_at_all_the_form_says_to_start_one(owner, no_workers, settings):
    settings.KERNELOPT_DEVICES = ["cpu"]
    form = RunForm(owner, {"device": "cpu", "target": "sm_90", "round_budget": 3})
    assert not form.is_valid()
    assert "start a worker for it (make worker QUEUES=cpu)" in form.errors["device"][0]


def test_an_upload_for_a_kind_without_a_worker_stores_nothing(client, owner, team, settings):
    settings.KERNELOPT_DEVICES = ["cpu", "cuda"]
    client.force_login(owner)
    data = {
        "device": "cuda",
        "target": "sm_90",
        "round_budget": 3,
        "source": GOOD_SOURCE,
        "name": "k",
        "team": team.pk,
    }
    response = client.post(reverse("kernel-upload"), data)
    assert response.status_code == 400
    assert "no worker has been seen for cuda" in response.content.decode()
    assert not DiagnosisRun.objects.exists()


def test_a_queued_run_says_no_worker_serves_its_kind(client, owner, run):
    client.force_login(owner)
    DiagnosisRun.objects.filter(pk=run.pk).update(device="cuda")
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert "Waiting: no worker has been seen for cuda; the run starts when one does." in page
