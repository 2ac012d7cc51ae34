"""A scripted OpenAI-compatible Chat Completions server on loopback, for tests.

The server answers `POST /v1/chat/completions` (and `/chat/completions`) from a script: a
queue of replies that tests fill in advance. Each reply is a tool-call turn, a final
structured answer (a call of the `final_result` output tool), plain text, an HTTP error, or
a callable that builds one of those from the request body. Every request body is recorded,
every successful reply reports token usage, `fail_next(n)` makes the next `n` requests
answer with an HTTP error before the script carries on, and `refuse_all()` makes every
request answer with one (an outage) until `answer_again()`.

It binds 127.0.0.1 on a free port and runs in a background thread, so it serves a step run
in-process or as a subprocess alike::

    with ModelServer() as server:
        server.script(ToolCalls([call("k8s_get", kind="Deployment", name="web")]),
                      Final({"outcome": "succeeded", "evidence": "..."}))
        env["GOALKEEPER_MODEL_BASE_URL"] = server.base_url
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any

__all__ = [
    "Call",
    "Final",
    "HttpError",
    "ModelServer",
    "Reply",
    "Text",
    "ToolCalls",
    "call",
]


@dataclass(frozen=True)
class Call:
    """One tool call inside a reply."""

    name: str
    arguments: dict[str, Any] | str  # a str is sent as-is (for malformed-JSON tests)


def call(name: str, /, **arguments: Any) -> Call:
    return Call(name, arguments)


@dataclass(frozen=True)
class ToolCalls:
    """An assistant turn that calls one or more tools."""

    calls: list[Call]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class Final:
    """The final structured answer: a call of the output tool (default `final_result`)."""

    answer: dict[str, Any]
    tool_name: str = "final_result"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class Text:
    """A plain text assistant turn."""

    content: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class HttpError:
    """An HTTP error answer (no usage)."""

    status: int = 500
    message: str = "scripted server error"


Reply = ToolCalls | Final | Text | HttpError
Responder = Callable[[dict[str, Any]], Reply]


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]  # names lowercased
    body: dict[str, Any]
    status: int = 0  # the status the server answered with
    at: float = field(default_factory=time.monotonic)


class ModelServer:
    """A scripted Chat Completions server; see the module docstring."""

    def __init__(
        self,
        *,
        model: str = "scripted-model",
        prompt_tokens: int = 100,
        completion_tokens: int = 20,
        default: Responder | None = None,
        api_key: str | None = None,
    ) -> None:
        self.model = model
        # When set, a request without this bearer key is refused, as a provider would.
        self.api_key = api_key
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.default = default
        self.requests: list[RecordedRequest] = []
        self._script: deque[Reply | Responder] = deque()
        self._failures: deque[HttpError] = deque()
        self._outage: HttpError | None = None
        self._lock = threading.Lock()
        self._ids = count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> ModelServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload = server._answer(self.path, headers, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status >= 500 or status == 429:
                    # keep SDK-level retries (if any) fast
                    self.send_header("retry-after-ms", "10")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The base URL an OpenAI client takes (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ------------------------------------------------------------------------

    def script(self, *replies: Reply | Responder) -> ModelServer:
        with self._lock:
            self._script.extend(replies)
        return self

    def fail_next(self, n: int, status: int = 500, message: str = "scripted failure") -> None:
        with self._lock:
            self._failures.extend(HttpError(status, message) for _ in range(n))

    def refuse_all(self, status: int = 503, message: str = "the service is unavailable") -> None:
        """An outage: every request answers with this HTTP error until `answer_again()`;
        the script and `fail_next` wait meanwhile."""
        with self._lock:
            self._outage = HttpError(status, message)

    def answer_again(self) -> None:
        with self._lock:
            self._outage = None

    @property
    def refused(self) -> list[RecordedRequest]:
        """The requests answered with an HTTP error."""
        return [r for r in self.requests if r.status >= 400]

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    @property
    def completed(self) -> list[RecordedRequest]:
        """The requests answered with a 200."""
        return [r for r in self.requests if r.status == 200]

    # --- answering ------------------------------------------------------------------------

    def _answer(
        self, path: str, headers: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        record = RecordedRequest(path=path, headers=headers, body=body)
        with self._lock:
            self.requests.append(record)
            if not path.rstrip("/").endswith("/chat/completions"):
                reply: Reply | Responder = HttpError(404, f"unknown path {path}")
            elif self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
                reply = HttpError(401, "invalid API key")
            elif self._outage is not None:
                reply = self._outage
            elif self._failures:
                reply = self._failures.popleft()
            elif self._script:
                reply = self._script.popleft()
            elif self.default is not None:
                reply = self.default
            else:
                reply = HttpError(500, "the script is exhausted")
        if not isinstance(reply, ToolCalls | Final | Text | HttpError):
            reply = reply(body)
        status, payload = self._render(reply, body)
        record.status = status
        return status, payload

    def _usage(self, reply: ToolCalls | Final | Text) -> dict[str, int]:
        prompt = self.prompt_tokens if reply.prompt_tokens is None else reply.prompt_tokens
        completion = (
            self.completion_tokens if reply.completion_tokens is None else reply.completion_tokens
        )
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _render(self, reply: Reply, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if isinstance(reply, HttpError):
            return reply.status, {
                "error": {"message": reply.message, "type": "server_error", "code": None}
            }
        n = next(self._ids)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "tool_calls"
        if isinstance(reply, Text):
            message["content"] = reply.content
            finish = "stop"
        else:
            calls: Iterable[Call] = (
                reply.calls
                if isinstance(reply, ToolCalls)
                else [Call(reply.tool_name, reply.answer)]
            )
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.arguments
                        if isinstance(c.arguments, str)
                        else json.dumps(c.arguments),
                    },
                }
                for i, c in enumerate(calls)
            ]
        return 200, {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(reply),
        }

    # --- helpers for assertions -----------------------------------------------------------

    @staticmethod
    def tool_results(body: dict[str, Any]) -> list[str]:
        """The contents of the `tool` messages in one request body."""
        return [
            m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in body.get("messages", [])
            if m.get("role") == "tool"
        ]

    @staticmethod
    def system_messages(body: dict[str, Any]) -> list[Any]:
        return [
            m.get("content")
            for m in body.get("messages", [])
            if m.get("role") in ("system", "developer")
        ]
