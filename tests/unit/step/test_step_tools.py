"""The tools on their own: redaction, bounds, refusals, file and HTTP reads, act mutations."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.support.step_fakes import FakeKube, deployment, secret

from goalkeeper.step.fence import RESULT_MAX_CHARS
from goalkeeper.step.tools import (
    REDACTED,
    RESTARTED_AT,
    StepTools,
    ToolConfig,
    act_toolset,
    observe_toolset,
    redact,
)

FID = "abad1deaabad1dea"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make(kube: FakeKube | None = None, **config: object) -> StepTools:
    return StepTools(
        kube or FakeKube([deployment()]),
        ToolConfig(fence_id=FID, namespace="shop", **config),  # type: ignore[arg-type]
        clock=lambda: NOW,
    )


def test_redact_secret_object_list_and_raw_secret_list() -> None:
    s = secret()
    one = redact(s)
    assert one["data"] == {"password": REDACTED}
    assert one["stringData"] == {"token": REDACTED}
    assert (
        one["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        == REDACTED
    )
    assert s["data"]["password"] == "aHVudGVyMg=="  # the input is not modified
    raw_list = {"kind": "SecretList", "items": [{k: v for k, v in s.items() if k != "kind"}]}
    assert redact(raw_list)["items"][0]["data"] == {"password": REDACTED}
    other = {"kind": "ConfigMap", "data": {"a": "b"}}
    assert redact(other) == other


def test_list_of_secrets_shows_keys_only() -> None:
    tools = make(FakeKube([secret()]))
    out = tools.k8s_list("Secret")
    assert "shop/db" in out and "password" in out
    assert "aHVudGVyMg==" not in out and "s3cr3t-token" not in out


def test_list_summary_lines() -> None:
    out = make(FakeKube([deployment("a"), deployment("b", replicas=0)])).k8s_list("Deployment")
    assert "2 Deployment item(s)" in out
    assert "- shop/a age=" in out and "ready=2/2" in out
    assert "ready=0/0" in out


def test_results_are_bounded_and_logs_keep_their_end() -> None:
    kube = FakeKube()
    kube.logs_text[("shop", "p")] = "".join(f"line {i}\n" for i in range(100_000))
    out = make(kube).pod_logs("p")
    assert len(out) <= RESULT_MAX_CHARS
    assert "line 99999" in out and "line 0\n" not in out
    assert "truncated" in out and "tail_lines" in out


def test_unknown_kind_needs_an_api_version() -> None:
    out = make().k8s_get("Widget", "w")
    assert out.startswith("ERROR: api_version is required")


def test_api_errors_are_fenced() -> None:
    out = make().k8s_get("Deployment", "missing")
    assert "404" in out and out.startswith("<<<UNTRUSTED_TARGET_DATA")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "patch"])
def test_generic_read_tool_refuses_mutating_verbs(method: str) -> None:
    kube = FakeKube()
    tools = make(kube)
    out = tools.k8s_raw("/api/v1/namespaces/shop/pods/p", method=method)
    assert out.startswith("REFUSED:")
    assert kube.calls == []


def test_read_file_only_inside_the_roots(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "progress.json").write_text('{"done": 21, "total": 27}')
    (tmp_path / "outside.txt").write_text("secret")
    tools = make(file_roots=(str(vol),))
    ok = tools.read_file(str(vol / "progress.json"))
    assert '"done": 21' in ok and ok.startswith("<<<UNTRUSTED_TARGET_DATA")
    assert tools.read_file(str(vol / ".." / "outside.txt")).startswith("ERROR:")
    (vol / "link").symlink_to(tmp_path / "outside.txt")
    assert tools.read_file(str(vol / "link")).startswith("ERROR:")
    assert "progress.json" in tools.read_file(str(vol))
    assert make().read_file(str(vol / "progress.json")).startswith("ERROR: no mounted volumes")


@pytest.fixture
def target() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"x" * 500_000 if self.path == "/big" else b'{"completed": 21, "total": 27}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length)
            self.send_response(201)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_http_get_reads_a_target_endpoint(target: str) -> None:
    out = make().http_get(f"{target}/progress")
    assert "HTTP 200 GET" in out and '"completed": 21' in out


def test_http_get_stops_at_the_size_limit(target: str) -> None:
    out = make(http_max_bytes=10_000).http_get(f"{target}/big")
    assert "body cut at 10000 bytes" in out
    assert len(out) <= RESULT_MAX_CHARS


def test_http_only_http_schemes() -> None:
    assert make().http_get("file:///etc/passwd").startswith("ERROR:")


def test_http_request_sends_other_methods_in_act(target: str) -> None:
    out = make().http_request(f"{target}/resume", method="POST", body="go")
    assert "HTTP 201 POST" in out
    assert f"\ngo\n<<<END_UNTRUSTED_TARGET_DATA id={FID}>>>" in out


def test_rollout_restart_stamps_the_pod_template() -> None:
    kube = FakeKube([deployment()])
    out = make(kube).k8s_rollout_restart("Deployment", "web")
    annotations = kube.objects[("Deployment", "shop", "web")]["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert annotations == {RESTARTED_AT: "2026-03-01T12:00:00Z"}
    assert "restarted" in out


def test_scale_apply_delete() -> None:
    kube = FakeKube([deployment()])
    tools = make(kube)
    assert "spec.replicas is now 5" in tools.k8s_scale("Deployment", "web", 5)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    assert "applied" in tools.k8s_apply(cm)
    assert kube.objects[("ConfigMap", "shop", "c")]["data"] == {"a": "1"}
    assert tools.k8s_apply({"kind": "ConfigMap"}).startswith("ERROR: manifest needs")
    assert "deleted" in tools.k8s_delete("ConfigMap", "c")


def test_commands_only_when_allowed() -> None:
    ran: list[list[str]] = []

    def runner(argv: list[str], timeout: float) -> tuple[int, str]:
        ran.append(argv)
        return 0, "ok"

    off = StepTools(FakeKube(), ToolConfig(fence_id=FID, namespace="shop"), runner=runner)
    assert "run_command" not in act_toolset(off).tools
    assert off.run(["echo", "hi"]).startswith("REFUSED:")
    on = StepTools(
        FakeKube(), ToolConfig(fence_id=FID, namespace="shop", allow_commands=True), runner=runner
    )
    assert "run_command" in act_toolset(on).tools
    assert "run_command" not in observe_toolset(on).tools
    assert "exit code 0" in on.run(["echo", "hi"])
    assert ran == [["echo", "hi"]]


def test_toolsets() -> None:
    tools = make()
    observe = set(observe_toolset(tools).tools)
    act = set(act_toolset(tools).tools)
    assert observe == {
        "k8s_get",
        "k8s_list",
        "pod_logs",
        "k8s_events",
        "k8s_raw",
        "http_get",
        "read_file",
    }
    assert act - observe == {
        "k8s_apply",
        "k8s_create",
        "k8s_replace",
        "k8s_patch",
        "k8s_delete",
        "k8s_scale",
        "k8s_rollout_restart",
        "http_request",
    }
