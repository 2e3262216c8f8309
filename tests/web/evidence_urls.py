"""The project's URLs plus a stand-in at the evidence viewer's name (`run-evidence`), which the
"evidence" branch adds: pages must link to it once it exists, and render without it."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import path

from kernelopt_site.urls import urlpatterns as site_urls


def evidence_stand_in(request, pk: int) -> HttpResponse:
    return HttpResponse(f"evidence of run {pk}")


urlpatterns = [
    path("runs/<int:pk>/evidence/", evidence_stand_in, name="run-evidence"),
    *site_urls,
]
