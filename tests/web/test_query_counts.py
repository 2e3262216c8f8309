"""The pages this branch touched cost the same number of queries whatever they show: the run
page's states and folded rounds, the forms' worker presence, and the history lists' deep pages
(diagnosis.paging: count, the page's keys, the page's rows)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from diagnosis.models import DiagnosisRun, Kernel, Pattern
from tests.web.test_history_views import _populate

pytestmark = pytest.mark.django_db

HTMX_STATUS = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run-status"}

PAGES = [
    pytest.param(lambda d: (reverse("kernel-upload"), {}), id="upload-form"),
    pytest.param(
        lambda d: (reverse("version-detail", args=[d["version"].pk]), {}), id="version-with-run-form"
    ),
    pytest.param(lambda d: (reverse("run-detail", args=[d["queued"].pk]), {}), id="queued-run"),
    pytest.param(lambda d: (reverse("run-detail", args=[d["run"].pk]), {}), id="run-with-rounds"),
    pytest.param(lambda d: (reverse("run-detail", args=[d["queued"].pk]), HTMX_STATUS), id="status-poll"),
    pytest.param(lambda d: (reverse("kernel-list") + "?page=2", {}), id="kernel-list-page-2"),
    pytest.param(lambda d: (reverse("run-list") + "?page=2", {}), id="run-list-page-2"),
    pytest.param(lambda d: (reverse("finding-list") + "?page=2", {}), id="finding-list-page-2"),
    pytest.param(lambda d: (reverse("proposal-list") + "?page=2", {}), id="proposal-list-page-2"),
    pytest.param(lambda d: (reverse("kernel-list") + "?code=code_2", {}), id="kernel-list-by-code"),
]
MAX_QUERIES = 16  # measured: 5 to 14 (the session and user included; the run page's evidence sections)


@pytest.mark.parametrize("url", PAGES)
def test_query_counts_do_not_grow_with_rows(client, reviewer, owner, team, url):
    client.force_login(reviewer)
    counts = []
    for n in (3, 30):
        Kernel.objects.all().delete() if n == 30 else None
        Pattern.objects.all().delete()
        data = _populate(team, owner, reviewer, n)
        data["queued"] = DiagnosisRun.objects.create(version=data["version"], device="cuda")
        address, headers = url(data)
        with CaptureQueriesContext(connection) as captured:
            assert client.get(address, **headers).status_code == 200
        counts.append(len(captured))
    assert counts[0] == counts[1] and counts[1] <= MAX_QUERIES, counts
