"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1, for the LLM proposer's tests.

A real HTTP server (`http.server` in a thread) speaking `POST /v1/chat/completions` the way the
hosted API, vLLM, llama.cpp's server and Ollama do: a JSON chat completion with `choices` and
`usage`. Each test scripts its replies (`StandIn.script(Reply(...), ...)`, one per request, in
order) or answers through a function of the request (`StandIn.respond`): status codes and
headers (a 429 with Retry-After, a 503), delays (past the client's timeout), bodies (a good
rewrite, a cheat, prose, broken JSON) and the usage tokens the server reports. The real `openai`
client talks to it; nothing is mocked on the client's side. Every request is kept
(`StandIn.requests`) with its headers, so a test can check what was sent, and that the key
travelled only in the Authorization header.

Use the `llm_standin` fixture (import it into the test module).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

PATH = "/v1/chat/completions"


@dataclass
class Reply:
    """One scripted answer."""

    content: str = ""  # the assistant message
    status: int = 200
    delay_s: float = 0.0  # wait this long before answering (a timeout when past the client's)
    prompt_tokens: int | None = None  # None: characters / 4 of the request's messages
    completion_tokens: int | None = None  # None: characters / 4 of `content`
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"retry-after-ms": "20"}
    raw: bytes | None = None  # sent as the body instead of a chat completion (malformed replies)
    usage: bool = True  # False: no "usage" object, as some servers do
    error: str = "scripted failure"  # the error message of a non-200 reply


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict
    at: float  # time.monotonic() when it arrived

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict]:
        return list(self.body.get("messages") or [])

    @property
    def prompt(self) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.messages)

    @property
    def prompt_chars(self) -> int:
        """Characters of the messages' contents, as the proposer counts a prompt's size."""
        return sum(len(str(m.get("content", ""))) for m in self.messages)

    @property
    def user(self) -> str:
        return next((str(m["content"]) for m in self.messages if m.get("role") == "user"), "")


class StandIn:
    """The server and its script; `url` is the base URL the client is given (ends in /v1)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.respond: Callable[[Request], Reply] | None = None  # used when the script is empty
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def script(self, *replies: Reply) -> StandIn:
        self.replies.extend(replies)
        return self

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.replies:
                return self.replies.popleft()
        if self.respond is not None:
            return self.respond(request)
        return Reply(status=500, error=f"stand-in: no scripted reply left for request {len(self.requests)}")

    def start(self) -> StandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                request = Request(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                )
                if self.path != PATH:
                    standin.requests.append(request)
                    self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode(), {})
                    return
                reply = standin._next(request)
                if reply.delay_s and standin._closing.wait(reply.delay_s):
                    return
                if reply.raw is not None:
                    self._send(reply.status, reply.raw, reply.headers)
                elif reply.status != 200:
                    error = {"error": {"message": reply.error, "type": "server_error", "code": reply.status}}
                    self._send(reply.status, json.dumps(error).encode(), reply.headers)
                else:
                    self._send(200, json.dumps(_completion(request, reply)).encode(), reply.headers)

            def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _completion(request: Request, reply: Reply) -> dict:
    prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else len(request.prompt) // 4
    completion_tokens = (
        reply.completion_tokens if reply.completion_tokens is not None else len(reply.content) // 4
    )
    out = {
        "id": f"chatcmpl-standin-{len(request.prompt)}",
        "object": "chat.completion",
        "created": 1_790_000_000,
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": reply.finish_reason,
            }
        ],
    }
    if reply.usage:
        out["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return out


def answer(
    module: str,
    *,
    family: str = "launch_config",
    addresses: tuple[str, ...] = (),
    rationale: str = "a larger block moves more bytes per program",
) -> str:
    """An answer in the format the prompt asks for."""
    return (
        f"FAMILY: {family}\nADDRESSES: {', '.join(addresses)}\nRATIONALE: {rationale}\n"
        f"```python\n{module.rstrip()}\n```\n"
    )


def module_in(prompt: str) -> str:
    """The module a prompt carries, without its line numbers (so a responder can rewrite it)."""
    body = prompt[prompt.index("## The module") :]
    start = body.index("```\n") + 4
    end = body.index("\n```", start)
    # each line is f"{n:4d}| {text}": six characters of prefix below line 10000
    return "\n".join(line[6:] for line in body[start:end].split("\n")) + "\n"


def family_in(prompt: str) -> str:
    """The family a prompt's task names ("" when it names none)."""
    marker = "one rewrite of family `"
    if marker not in prompt:
        return ""
    rest = prompt[prompt.index(marker) + len(marker) :]
    return rest[: rest.index("`")]


def codes_in(prompt: str) -> list[str]:
    """The finding codes a prompt lists for its family (the ones an answer should cite)."""
    head = prompt.find("## Findings")
    if head < 0:
        return []
    section = prompt[head : prompt.find("\n## ", head + 1)]
    codes = [
        line[3 : line.index("]")] for line in section.splitlines() if line.startswith("- [") and "]" in line
    ]
    return list(dict.fromkeys(codes))


@pytest.fixture
def llm_standin() -> Iterator[StandIn]:
    standin = StandIn().start()
    try:
        yield standin
    finally:
        standin.stop()
