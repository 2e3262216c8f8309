"""Request body limit: refuse oversized bodies with 413 before anything reads them.

Django's CSRF middleware reads `request.POST` on every POST, and the multipart parser spools
a file part to a temporary file once it passes FILE_UPLOAD_MAX_MEMORY_SIZE, so a size check in
a view comes too late: the body has been read (and written to disk) by then. This middleware
sits above every middleware that can touch the body (a test pins the order) and answers
from the headers alone when the declared Content-Length is over the limit. A body without a
Content-Length (chunked) is capped by wrapping the WSGI input stream: reading one byte past
the limit fails, and the response becomes the same 413.

Under ASGI, Django reads the whole body into a spooled temporary file before any middleware
runs, so kernelopt_site.asgi wraps the application in ASGIBodyLimit, which applies the same
limit to the declared length and to the body messages as they arrive.

The limit, KERNELOPT_MAX_REQUEST_BYTES, is read per request so that tests can change it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any, BinaryIO

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

_READ_CHUNK = 64 * 1024


class RequestBodyTooLarge(RequestDataTooBig):
    """A body without a declared length was read past KERNELOPT_MAX_REQUEST_BYTES.

    A RequestDataTooBig, so Django's own handling (a 400 and a `django.security` log line)
    applies wherever it is raised; the middleware then turns that response into a 413.
    """


class CappedInput:
    """A WSGI input stream that fails instead of returning more than `limit` bytes in all.

    It asks the underlying stream for at most one byte past the limit, so a hostile body
    costs at most `limit + 1` bytes of reading, never a spool.
    """

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._pos = 0
        self.exceeded = False

    def _allowed(self, size: int | None) -> int:
        if self.exceeded:
            raise RequestBodyTooLarge(f"request body over {self._limit} bytes")
        room = self._limit + 1 - self._pos
        return room if size is None or size < 0 else min(size, room)

    def _count(self, data: bytes) -> bytes:
        self._pos += len(data)
        if self._pos > self._limit:
            self.exceeded = True
            raise RequestBodyTooLarge(f"request body over {self._limit} bytes")
        return data

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            chunks = []
            while chunk := self.read(_READ_CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
        return self._count(self._stream.read(self._allowed(size)))

    def readline(self, size: int | None = -1) -> bytes:
        return self._count(self._stream.readline(self._allowed(size)))

    def readlines(self, hint: int = -1) -> list[bytes]:
        lines, total = [], 0
        while line := self.readline():
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                break
        return lines

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line


def declared_length(meta: dict) -> int | None:
    """The request's Content-Length, or None where there is none (chunked) or it is not a number."""
    raw = meta.get("CONTENT_LENGTH")
    try:
        length = int(raw) if raw not in (None, "") else None
    except ValueError:
        return None
    return length if length is not None and length >= 0 else None


def too_large_response(length: int | None, limit: int) -> HttpResponse:
    """The 413 page; rendered without the request, since no session or user has been loaded."""
    body = render_to_string(
        "413.html", {"length": length, "limit": limit, "upload_limit": settings.KERNELOPT_MAX_UPLOAD_BYTES}
    )
    return HttpResponse(body, status=413)


class RequestBodyLimitMiddleware:
    """413 for a body over KERNELOPT_MAX_REQUEST_BYTES, anonymous or signed in, before it is read."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.KERNELOPT_MAX_REQUEST_BYTES
        length = declared_length(request.META)
        if length is not None and length > limit:
            return too_large_response(length, limit)
        stream = request.META.get("wsgi.input")
        if stream is None:  # ASGI: Django has read the whole body before any middleware runs
            return self.get_response(request)
        # With a declared length within the limit the server's stream already ends there; the
        # wrapper matters for bodies without one, which only a direct reader of wsgi.input sees
        # (Django itself reads no body without a Content-Length).
        capped = CappedInput(stream, limit)
        request.META["wsgi.input"] = capped
        response = self.get_response(request)
        if capped.exceeded:
            return too_large_response(None, limit)
        return response


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ASGIBodyLimit:
    """The same limit in front of Django's ASGI handler, which reads the body before middleware.

    A declared length over the limit is answered before the body is received; a body that
    grows past it is cut off by telling Django the client disconnected (it drops the request
    and its spooled file), and the 413 is sent here.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.KERNELOPT_MAX_REQUEST_BYTES
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        length = declared_length({"CONTENT_LENGTH": headers.get(b"content-length", b"").decode("latin-1")})
        if length is not None and length > limit:
            await self._refuse(send, length, limit)
            return
        received = 0
        exceeded = False

        async def capped_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, capped_receive, send)
        if exceeded:
            await self._refuse(send, None, limit)

    @staticmethod
    async def _refuse(send: Send, length: int | None, limit: int) -> None:
        response = too_large_response(length, limit)
        headers = [(b"content-type", response["Content-Type"].encode("latin-1"))]
        headers += [(b"content-length", str(len(response.content)).encode()), (b"connection", b"close")]
        headers += [(b"x-content-type-options", b"nosniff")]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": response.content})
