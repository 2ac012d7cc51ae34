"""The step's result write through an API server that is restarting, shedding load or
dropping connections: a small HTTP server on loopback answers as such an API server would,
and the step's own Kubernetes backend talks to it over real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from kubernetes import client
from tests.support.cluster_fixtures import REPO

from goalkeeper.step.cli import write_window
from goalkeeper.step.kube import (
    FINAL_REFUSAL,
    KubeBackend,
    KubeError,
    rbac_denied,
    retry_pause,
    transient,
    write_step_status,
)
from goalkeeper.step.settings import load_identity

NS, NAME = "team", "m-act-3"
FINAL = {
    "phase": "Succeeded",
    "pod": {"name": "m-act-3-abcde", "uid": "u-1"},
    "result": {"outcome": "succeeded", "evidence": "replicas 3", "changed": []},
    "error": None,
    "errorKind": None,
    "finishedAt": "2026-01-01T10:01:00Z",
}
REFUSED = (
    'monitorsteps.goalkeeper.dev "m-act-3" is forbidden: ValidatingAdmissionPolicy '
    "'goalkeeper-step-results' denied request: The step's result is final; its status "
    "cannot change after Succeeded or Failed."
)


@dataclass
class FakeApiServer:
    """Answers each request with the next scripted answer: `"reset"` closes the connection
    without a word, `"apply-reset"` takes a status patch in and then closes the connection
    (the answer is lost), `"final"` refuses a patch once the status is final, as the
    step-results admission policy does, `("rbac", 403)` refuses as RBAC does before an API
    server that has just started has loaded its roles, an int answers that status, and
    `"ok"` (also what an empty script answers) applies a patch or reads the MonitorStep."""

    script: deque[Any] = field(default_factory=deque)
    status: dict[str, Any] = field(default_factory=dict)
    requests: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self) -> ThreadingHTTPServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.answer(self, None)

            def do_PATCH(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                fake.answer(self, json.loads(self.rfile.read(length) or b"null"))

        return ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def answer(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        with self.lock:
            self.requests.append((handler.command, body))
            step = self.script.popleft() if self.script else "ok"
            if step in ("apply-reset", "ok") and body is not None:
                self.status = {**self.status, **body["status"]}
            if step == "final" and self.status.get("phase") not in ("Succeeded", "Failed"):
                step = "ok"
            held = {"metadata": {"name": NAME}, "status": self.status}
        if step in ("reset", "apply-reset"):
            handler.close_connection = True
            handler.connection.close()
            return
        if step == "final":
            code, doc = 403, {"kind": "Status", "reason": "Forbidden", "message": REFUSED}
        elif isinstance(step, tuple):
            code, doc = 403, {"kind": "Status", "reason": "Forbidden", "message": RBAC_REFUSAL}
        elif isinstance(step, int):
            code, doc = step, {"kind": "Status", "reason": "Busy", "message": f"answer {step}"}
        else:
            code, doc = 200, held
        data = json.dumps(doc).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def patches(self) -> list[Any]:
        return [body for method, body in self.requests if method == "PATCH"]


@pytest.fixture
def fake() -> Iterator[tuple[FakeApiServer, KubeBackend]]:
    server = FakeApiServer()
    http = server.serve()
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    config = client.Configuration(host=f"http://127.0.0.1:{http.server_address[1]}")
    config.retries = False  # every try is the step's own
    api = client.ApiClient(configuration=config)
    try:
        yield server, KubeBackend(api, timeout=5)
    finally:
        api.close()
        http.shutdown()
        http.server_close()


def write(backend: KubeBackend, status: dict[str, Any], seconds: float = 30.0) -> list[float]:
    """Write `status` with `seconds` of patience, sleeping for real; the pauses taken."""
    pauses: list[float] = []
    write_step_status(
        backend,
        NS,
        NAME,
        status,
        deadline=time.monotonic() + seconds,
        on_retry=lambda _attempt, _exc, pause: pauses.append(pause),
    )
    return pauses


def test_the_result_lands_through_resets_5xx_and_429(fake: Any) -> None:
    server, backend = fake
    server.script.extend(["reset", 503, 429])
    pauses = write(backend, FINAL)
    assert server.status["phase"] == "Succeeded"
    assert server.status["result"] == FINAL["result"]
    # the same document each time, so a write that got through is recognised as its own
    assert server.patches() == [{"status": FINAL}] * 4
    assert pauses == [retry_pause(n) for n in range(3)]


def test_a_write_whose_answer_was_lost_is_not_written_twice(fake: Any) -> None:
    server, backend = fake
    server.script.extend(["apply-reset", "final"])
    write(backend, FINAL)
    assert [method for method, _ in server.requests] == ["PATCH", "PATCH", "GET"]
    assert server.status["finishedAt"] == FINAL["finishedAt"]


def test_a_different_final_result_is_refused_as_before(fake: Any) -> None:
    server, backend = fake
    server.status = {**FINAL, "phase": "Failed", "result": None, "error": "someone else's"}
    server.script.append("final")
    with pytest.raises(KubeError) as refused:
        write(backend, FINAL)
    assert refused.value.status == 403 and FINAL_REFUSAL in str(refused.value)
    assert server.status["error"] == "someone else's"


def test_the_write_gives_up_at_the_deadline(fake: Any) -> None:
    server, backend = fake
    server.script.extend([503] * 100)
    begin = time.monotonic()
    with pytest.raises(KubeError) as failed:
        write(backend, FINAL, seconds=1.0)
    assert failed.value.status == 503
    assert time.monotonic() - begin < 5.0
    assert 2 <= len(server.patches()) < 10


RBAC_REFUSAL = (
    'monitorsteps.goalkeeper.dev "m-act-3" is forbidden: User '
    '"system:serviceaccount:team:goalkeeper-actor" cannot patch resource "monitorsteps/status" '
    'in API group "goalkeeper.dev" in the namespace "team"'
)


def test_rbac_that_refuses_just_after_a_restart_is_given_a_moment(fake: Any) -> None:
    """A kube-apiserver that has just started refuses with RBAC's 403 until its roles are
    loaded: the write lands once they are."""
    server, backend = fake
    server.script.extend(["reset", ("rbac", 403), ("rbac", 403)])
    write(backend, FINAL)
    assert server.status["phase"] == "Succeeded" and len(server.patches()) == 4


def test_rbac_that_keeps_refusing_stands_after_the_warmup(fake: Any) -> None:
    server, backend = fake
    server.script.extend([("rbac", 403)] * 50)
    begin = time.monotonic()
    with pytest.raises(KubeError) as refused:
        write_step_status(backend, NS, NAME, FINAL, deadline=begin + 30, warmup=0.5)
    assert refused.value.status == 403 and time.monotonic() - begin < 5


def test_a_refusal_is_not_tried_again(fake: Any) -> None:
    server, backend = fake
    server.script.append(404)
    with pytest.raises(KubeError) as failed:
        write(backend, FINAL)
    assert failed.value.status == 404 and len(server.requests) == 1


def test_which_failures_are_worth_another_try() -> None:
    assert transient(KubeError(0, "ConnectionRefusedError: [Errno 111] Connection refused"))
    assert transient(KubeError(429, "HTTP 429: TooManyRequests"))
    assert transient(KubeError(503, "HTTP 503: ServiceUnavailable"))
    assert transient(KubeError(403, "HTTP 403: Forbidden not yet ready to handle request"))
    assert not transient(KubeError(403, f"HTTP 403: Forbidden {REFUSED}"))
    assert not transient(KubeError(404, "HTTP 404: NotFound"))
    assert not transient(KubeError(403, f"HTTP 403: Forbidden {RBAC_REFUSAL}"))
    assert rbac_denied(KubeError(403, f"HTTP 403: Forbidden {RBAC_REFUSAL}"))
    assert not rbac_denied(KubeError(403, f"HTTP 403: Forbidden {REFUSED}"))
    assert not transient(KubeError(422, "HTTP 422: Invalid"))


def test_the_refusal_recognised_is_the_policys_own() -> None:
    policy, _binding = yaml.safe_load_all(
        (REPO / "config" / "admission" / "step-results.yaml").read_text()
    )
    messages = [v.get("message", "") for v in policy["spec"]["validations"]]
    assert any(FINAL_REFUSAL in message for message in messages)


def test_the_write_window_is_the_jobs_deadline_less_a_margin() -> None:
    assert write_window(60) == 54.0
    assert write_window(30) == 25.0
    assert write_window(900) == 870.0
    assert write_window(None) == 570.0
    env = {"GOALKEEPER_STEP_NAME": NAME, "GOALKEEPER_STEP_NAMESPACE": NS}
    assert load_identity({**env, "GOALKEEPER_STEP_DEADLINE_SECONDS": "60"}).deadline_seconds == 60
    assert load_identity({**env, "GOALKEEPER_STEP_DEADLINE_SECONDS": "x"}).deadline_seconds is None
    assert load_identity(env).deadline_seconds is None
