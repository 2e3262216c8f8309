"""A URL conf for the body-limit tests: one view that reads wsgi.input directly.

Django reads no body that comes without a Content-Length, so only such a direct reader meets
the capped stream; this view stands for any future one.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def read_raw(request: HttpRequest) -> HttpResponse:
    how = request.GET.get("how", "read")
    stream = request.META["wsgi.input"]
    if how == "lines":
        size = sum(len(line) for line in stream)
    elif how == "chunks":
        size = 0
        while chunk := stream.read(1000):
            size += len(chunk)
    else:
        size = len(stream.read())
    return HttpResponse(str(size), content_type="text/plain")


urlpatterns = [path("raw/", read_raw), path("", include("kernelopt_site.urls"))]
