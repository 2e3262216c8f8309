"""Login throttling hooks for django-axes: the client address behind proxies, the lockout page.

axes counts failed logins per user name and client address (settings: AXES_*); these two
callables are the parts that depend on how this deployment is reached.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or the one the outermost trusted proxy recorded.

    With KERNELOPT_PROXY_COUNT = n > 0, each of the n proxies appends the address it was
    reached from to X-Forwarded-For, so the n-th entry from the right is the client as the
    outermost proxy saw it; entries further left were sent by the client and prove nothing.
    With 0 (no proxy) the header is ignored: anyone could write it.
    """
    count = settings.KERNELOPT_PROXY_COUNT
    remote = request.META.get("REMOTE_ADDR") or None
    if count <= 0:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [part for part in forwarded if part]
    if len(forwarded) < count:
        # Reached without passing every proxy (or a proxy that does not append): the peer
        # address is all that can be trusted.
        return remote
    return forwarded[-count]


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict | None = None
) -> HttpResponse:
    """429 with a page that says how many failures locked the login and for how long."""
    minutes = settings.KERNELOPT_LOGIN_COOLOFF_MINUTES
    response = render(
        request,
        "registration/lockout.html",
        {"failure_limit": settings.AXES_FAILURE_LIMIT, "cooloff_minutes": minutes},
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    return response
