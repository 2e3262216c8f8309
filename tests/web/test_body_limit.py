"""Request bodies over KERNELOPT_MAX_REQUEST_BYTES get 413 before anything reads them.

Three bands with the default limits (module limit L = 256 KiB, request limit 4 L + 64 KiB):
a file a little over L gets the form's own error naming its size; a body over the request
limit gets 413 from its Content-Length alone, anonymous or signed in, on any URL; a body
without a Content-Length is cut off one byte past the limit. The live tests send a 300 MB
Content-Length over a real socket, to Django's server and to gunicorn, and time the answer.
"""

from __future__ import annotations

import io
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import override_settings
from django.urls import reverse

from diagnosis.models import DiagnosisRun, Kernel, KernelVersion
from kernelopt_site.middleware import CappedInput, RequestBodyTooLarge, declared_length

ROOT = Path(__file__).resolve().parents[2]
KIB = 1024
L = 256 * KIB  # the default KERNELOPT_MAX_UPLOAD_BYTES
CAP = 4 * L + 64 * KIB  # the default KERNELOPT_MAX_REQUEST_BYTES
HUGE = 300 * 1024 * 1024


def _counts() -> tuple[int, int, int]:
    return Kernel.objects.count(), KernelVersion.objects.count(), DiagnosisRun.objects.count()


@pytest.fixture
def no_enqueue(monkeypatch):
    monkeypatch.setattr("diagnosis.forms.enqueue_run", lambda run_id, device: None)


# --- the test client ------------------------------------------------------------------------


def test_the_default_limits_are_the_documented_ones():
    assert settings.KERNELOPT_MAX_UPLOAD_BYTES == L
    assert settings.KERNELOPT_MAX_REQUEST_BYTES == CAP
    # Everything under the request limit is parsed in memory: no field refused, no file spooled.
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == settings.FILE_UPLOAD_MAX_MEMORY_SIZE == CAP


def test_the_limit_comes_before_every_middleware_that_can_read_the_body():
    order = settings.MIDDLEWARE
    limit = order.index("kernelopt_site.middleware.RequestBodyLimitMiddleware")
    assert order[:limit] == ["django.middleware.security.SecurityMiddleware", "csp.middleware.CSPMiddleware"]


UPLOAD_SIZES = [
    pytest.param(L + 1, 400, id="just-over-the-module-limit-form-error"),
    pytest.param(L + 40 * KIB, 400, id="a-little-over-form-error"),
    pytest.param(2 * L + 80 * KIB, 302, id="over-twice-the-limit-the-upload-view-refuses"),
    pytest.param(CAP - 2 * KIB, 302, id="just-under-the-request-limit-the-upload-view-refuses"),
    pytest.param(CAP + 1, 413, id="just-over-the-request-limit-413"),
    pytest.param(5 * 1024 * KIB, 413, id="5MiB-413"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("size", "status"), UPLOAD_SIZES)
def test_an_oversized_upload_gets_the_form_error_or_413_by_its_size(
    client, owner, team, no_enqueue, size, status
):
    client.force_login(owner)
    data = {"name": "big", "team": team.pk, "device": "cpu", "target": "sm_90", "round_budget": 5}
    data["file"] = SimpleUploadedFile("big.py", b"#" * size, content_type="text/x-python")
    response = client.post(reverse("kernel-upload"), data)
    assert response.status_code == status
    body = response.content.decode()
    if status == 400:
        assert f"too large: {size} bytes, the limit is {L} bytes" in body
    elif status == 302:
        assert f"the limit is {L} bytes" in client.get(response["Location"]).content.decode()
    else:
        assert 'data-code="request-too-large"' in body and str(CAP) in body
        assert response.wsgi_request.META["wsgi.input"].read_started is False
    assert _counts() == (0, 0, 0)


REFUSED = [
    pytest.param("post", "login", False, id="anonymous-login"),
    pytest.param("post", "kernel-upload", False, id="anonymous-upload"),
    pytest.param("post", "kernel-upload", True, id="signed-in-upload"),
    pytest.param("post", "admin:login", False, id="anonymous-admin-login"),
    pytest.param("put", "kernel-list", True, id="signed-in-put"),
    pytest.param("get", "kernel-list", True, id="signed-in-get-with-a-body"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url", "signed_in"), REFUSED)
def test_a_body_over_the_request_limit_is_refused_unread_anywhere(
    client, owner, team, method, url, signed_in
):
    if signed_in:
        client.force_login(owner)
    body = b"x" * (CAP + 1)
    response = client.generic(method.upper(), reverse(url), body, content_type="application/octet-stream")
    assert response.status_code == 413
    assert response.wsgi_request.META["wsgi.input"].read_started is False
    # The 413 still carries the headers of the middleware above the limit.
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'self'" in response["Content-Security-Policy"]


@pytest.mark.django_db
@override_settings(KERNELOPT_MAX_REQUEST_BYTES=64 * KIB)
def test_a_form_over_the_limit_is_refused_before_csrf_reads_it():
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    response = strict.post(reverse("login"), {"username": "u", "password": "p" * (64 * KIB)})
    assert response.status_code == 413  # not CSRF's 403: the body was never parsed


# --- bodies without a Content-Length -------------------------------------------------------


class CountingStream(io.BytesIO):
    """What a WSGI server hands over for a chunked body: a stream of unknown length."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data = super().readline(size)
        self.bytes_read += len(data)
        return data


CHUNKED = [
    pytest.param("read", 1000, 200, id="read-within"),
    pytest.param("read", 4096, 200, id="read-exactly-at-the-limit"),
    pytest.param("read", 4097, 413, id="read-one-byte-over"),
    pytest.param("chunks", 10 * 4096, 413, id="chunks-over"),
    pytest.param("lines", 3000, 200, id="lines-within"),
    pytest.param("lines", 10 * 4096, 413, id="lines-over"),
]


@pytest.mark.django_db
@pytest.mark.urls("tests.web.raw_body_urls")
@override_settings(KERNELOPT_MAX_REQUEST_BYTES=4096)
@pytest.mark.parametrize(("how", "size", "status"), CHUNKED)
def test_a_body_without_a_length_is_cut_off_one_byte_past_the_limit(client, how, size, status):
    stream = CountingStream(b"line of a chunked body\n" * (size // 23) + b"x" * (size % 23))
    response = client.generic("POST", f"/raw/?how={how}", b"", **{"wsgi.input": stream, "CONTENT_LENGTH": ""})
    assert response.status_code == status
    if status == 200:
        assert response.content == str(size).encode()
    else:
        assert 'data-code="request-too-large"' in response.content.decode()
    assert stream.bytes_read <= 4096 + 1


CAPPED_READS = [
    pytest.param(lambda s: s.read(), 10, b"0123456789", id="read-all-within"),
    pytest.param(lambda s: s.read(4) + s.read(4) + s.read(4), 10, b"0123456789", id="reads-within"),
    pytest.param(lambda s: s.read(), 11, RequestBodyTooLarge, id="read-all-over"),
    pytest.param(lambda s: s.read(100), 11, RequestBodyTooLarge, id="one-large-read-over"),
    pytest.param(lambda s: s.readline(), 11, RequestBodyTooLarge, id="readline-over"),
    pytest.param(lambda s: b"".join(s.readlines()), 10, b"0123456789", id="readlines-within"),
]


@pytest.mark.parametrize(("op", "size", "expected"), CAPPED_READS)
def test_capped_input_returns_the_body_or_refuses_past_the_limit(op, size, expected):
    stream = CountingStream(b"0123456789abcdef"[:size])
    capped = CappedInput(stream, 10)
    if isinstance(expected, bytes):
        assert op(capped) == expected and not capped.exceeded
    else:
        with pytest.raises(expected):
            op(capped)
        assert capped.exceeded
        with pytest.raises(expected):  # and it stays refused
            capped.read(1)
    assert stream.bytes_read <= 11


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        pytest.param({"CONTENT_LENGTH": "123"}, 123, id="number"),
        pytest.param({"CONTENT_LENGTH": ""}, None, id="empty"),
        pytest.param({}, None, id="absent"),
        pytest.param({"CONTENT_LENGTH": "12x"}, None, id="not-a-number"),
        pytest.param({"CONTENT_LENGTH": "-5"}, None, id="negative"),
    ],
)
def test_declared_length_reads_the_header_or_says_there_is_none(meta, expected):
    assert declared_length(meta) == expected


# --- a real socket against live servers -------------------------------------------------------


@dataclass
class Probe:
    status: int | None  # None: no answer within the wait
    seconds: float  # from the end of the headers to the status line
    body_bytes_sent: int  # body bytes the client had sent when the answer came (or at the end)
    closed_after: float | None  # seconds after the answer until the server closed the connection
    spooled: set[str]  # files seen in `spool_dir` while the connection was open


def probe(
    host: str,
    port: int,
    path: str,
    *,
    cookie: str = "",
    wait: float = 8.0,
    trickle: int = 1024,
    watch_close: float = 0.0,
    spool_dir: Path | None = None,
) -> Probe:
    """POST a multipart body that claims 300 MB and trickles `trickle` bytes every 20 ms.

    A server that reads the body before it answers cannot answer before `wait` runs out; one
    that answers from the headers does so after a few KiB at most. `spool_dir` (the server's
    FILE_UPLOAD_TEMP_DIR) is watched while the connection is open: a spooled upload is removed
    as soon as its request ends.
    """
    spooled: set[str] = set()

    def look() -> None:
        if spool_dir is not None:
            spooled.update(p.name for p in spool_dir.iterdir())

    boundary = "kernelopt-probe"
    # Any well-formed CSRF cookie gets CsrfViewMiddleware as far as reading request.POST.
    cookies = "; ".join(c for c in (f"{settings.CSRF_COOKIE_NAME}={'a' * 32}", cookie) if c)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {HUGE}\r\n"
        f"Cookie: {cookies}\r\n\r\n"
    )
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.py"\r\n'
        "Content-Type: text/x-python\r\n\r\n"
    ).encode()
    sock = socket.create_connection((host, port), timeout=wait)
    try:
        sock.sendall(head.encode())
        start = time.monotonic()
        sock.sendall(part)
        sent, answer, status = len(part), b"", None
        while time.monotonic() - start < wait:
            look()
            readable, _, _ = select.select([sock], [], [], 0.02)
            if readable:
                answer += sock.recv(65536)
                if b"\r\n" in answer or not answer:
                    break
            else:
                sock.sendall(b"#" * trickle)
                sent += trickle
        look()
        seconds = time.monotonic() - start
        if match := re.match(rb"HTTP/1\.[01] (\d{3}) ", answer):
            status = int(match.group(1))
        closed_after = None
        if status is not None and watch_close:
            answered = time.monotonic()
            while time.monotonic() - answered < watch_close:
                try:
                    readable, _, _ = select.select([sock], [], [], 0.02)
                    if readable and not sock.recv(65536):
                        closed_after = time.monotonic() - answered
                        break
                    sock.send(b"#" * 1024)
                except (BrokenPipeError, ConnectionResetError):
                    closed_after = time.monotonic() - answered
                    break
        return Probe(status, seconds, sent, closed_after, spooled)
    finally:
        sock.close()


def _session_cookie(client, user) -> str:
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


LIVE = [
    pytest.param("login", False, id="anonymous-login"),
    pytest.param("kernel-upload", True, id="signed-in-upload"),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("url", "signed_in"), LIVE)
def test_the_live_server_answers_a_300MB_body_with_413_before_reading_it(
    live_server, client, owner, team, tmp_path, url, signed_in
):
    cookie = _session_cookie(client, owner) if signed_in else ""
    host, port = live_server.thread.host, live_server.thread.port
    with override_settings(FILE_UPLOAD_TEMP_DIR=str(tmp_path)):
        result = probe(host, port, reverse(url), cookie=cookie, spool_dir=tmp_path)
    assert result.status == 413
    assert result.seconds < 5.0
    assert result.body_bytes_sent < 256 * KIB < CAP  # answered from the header, not the body
    assert result.spooled == set()


@pytest.mark.django_db(transaction=True)
def test_the_probe_sees_a_server_that_parses_before_it_answers(live_server, tmp_path):
    """The control: with the limit lifted, CSRF parses the body, spools it and cannot answer."""
    host, port = live_server.thread.host, live_server.thread.port
    with override_settings(KERNELOPT_MAX_REQUEST_BYTES=2 * HUGE, FILE_UPLOAD_TEMP_DIR=str(tmp_path)):
        # 400 KiB/s: the parser reads 64 KiB chunks, so it needs a few of them to reach the file.
        result = probe(host, port, reverse("login"), wait=3.0, trickle=8 * KIB, spool_dir=tmp_path)
    assert result.status is None and result.body_bytes_sent > 512 * KIB
    assert result.spooled  # the multipart parser had opened a temporary file for the 300 MB part


@pytest.fixture(scope="module")
def gunicorn_server(django_db_setup, tmp_path_factory):
    """The deployment's server (README: gunicorn kernelopt_site.wsgi) on the test database."""
    db = connection.settings_dict
    log = tmp_path_factory.mktemp("gunicorn") / "log"
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "SECRET_KEY": settings.SECRET_KEY,
        "BROKER_URL": "stub://",
        "KERNELOPT_EMBEDDED_WORKER": "0",
    }
    if db["PASSWORD"]:
        env["DATABASE_URL"] = env["DATABASE_URL"].replace(f"{db['USER']}@", f"{db['USER']}:{db['PASSWORD']}@")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "kernelopt_site.wsgi", "-b", "127.0.0.1:0", "-w", "1"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        # The worker imports Django after the master logs its address; wait until it answers.
        port = int(match.group(1))
        while "Booting worker" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        yield "127.0.0.1", port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("url", "signed_in"), LIVE)
def test_gunicorn_answers_a_300MB_body_with_413_and_closes_the_connection(
    gunicorn_server, client, owner, team, url, signed_in
):
    import urllib.request

    host, port = gunicorn_server
    cookie = _session_cookie(client, owner) if signed_in else ""
    if signed_in:  # the cookie is a live session on that server too
        request = urllib.request.Request(f"http://{host}:{port}{reverse(url)}", headers={"Cookie": cookie})
        with urllib.request.urlopen(request, timeout=30) as page:
            assert page.status == 200 and b"Upload and queue a run" in page.read()
    result = probe(host, port, reverse(url), cookie=cookie, wait=30.0, watch_close=10.0)
    assert result.status == 413
    assert result.seconds < 10.0 and result.body_bytes_sent < 256 * KIB
    # gunicorn's sync worker closes after the answer (lingering 2 s at most for unread bytes):
    # the other 300 MB are never read.
    assert result.closed_after is not None and result.closed_after < 5.0


# --- ASGI: Django reads the body before middleware, so the limit wraps the application ---------


def _asgi(headers: list[tuple[bytes, bytes]], chunks) -> tuple[list[dict], int]:
    """Drive kernelopt_site.asgi.application with one POST; return what it sent and receive calls."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from kernelopt_site.asgi import application

    sent: list[dict] = []
    calls = 0
    body = iter(chunks)

    async def receive() -> dict:
        nonlocal calls
        calls += 1
        chunk = next(body, None)
        if chunk is None:
            await asyncio.sleep(3600)  # the client waits; only a disconnect ends this
        return {"type": "http.request", "body": chunk[0], "more_body": chunk[1]}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": reverse("login"),
        "raw_path": reverse("login").encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    # A loop of its own in a thread: Playwright's sync API may hold this thread's loop.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, asyncio.wait_for(application(scope, receive, send), timeout=60)).result()
    return sent, calls


def _forever(size: int):
    while True:
        yield b"#" * size, True


ASGI_CASES = [
    pytest.param([(b"content-length", str(HUGE).encode())], _forever(64 * KIB), 413, 0, id="declared-300MB"),
    pytest.param([], _forever(64 * KIB), 413, CAP // (64 * KIB) + 1, id="no-length-growing"),
    pytest.param(
        [(b"content-length", b"11")], [(b"username=u1", False)], 403, None, id="small-body-reaches-django"
    ),
]


@pytest.mark.parametrize(("headers", "chunks", "status", "calls"), ASGI_CASES)
def test_the_asgi_application_refuses_a_body_over_the_limit_as_it_arrives(headers, chunks, status, calls):
    sent, receive_calls = _asgi(headers, chunks)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == status
    # 413: the declared length is refused before one receive(); a growing body is cut off one
    # chunk past the limit. 403: an ordinary body goes to Django (CSRF refuses this one).
    if calls is not None:
        assert receive_calls == calls
