"""The tools on their own: redaction, bounds, refusals, file and HTTP reads, act mutations,
the mutation set and the HTTP egress checks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.support.step_fakes import (
    FakeKube,
    config_map,
    deployment,
    failed_job,
    pod,
    secret,
)

from goalkeeper.step.fence import RESULT_MAX_CHARS
from goalkeeper.step.kube import KubeError
from goalkeeper.step.redact import LAST_APPLIED, REDACTED, redact
from goalkeeper.step.render import describe, patched_view
from goalkeeper.step.tools import (
    RESTARTED_AT,
    StepTools,
    ToolConfig,
    act_toolset,
    observe_toolset,
)

FID = "abad1deaabad1dea"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make(kube: FakeKube | None = None, **config: object) -> StepTools:
    return StepTools(
        kube or FakeKube([deployment()]),
        ToolConfig(fence_id=FID, namespace="shop", **config),  # type: ignore[arg-type]
        clock=lambda: NOW,
    )


def local(**config: object) -> StepTools:
    """Tools that may reach the 127.0.0.1 test servers."""
    return make(http_allowed_hosts=("127.0.0.1",), **config)


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


def test_get_leaves_out_bookkeeping_and_fields_at_their_defaults() -> None:
    served = deployment()
    served["metadata"]["annotations"] = {
        LAST_APPLIED: '{"kind":"Deployment","spec":{"replicas":2}}',
        "team": "shop",
    }
    template = served["spec"]["template"]
    template["metadata"]["creationTimestamp"] = None
    template["spec"] = {
        "containers": [
            {
                "name": "web",
                "image": "example.invalid/web:2",
                "resources": {},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": 60,
        "enableServiceLinks": False,
        "serviceAccount": "web",
        "serviceAccountName": "web",
    }
    out = make(FakeKube([served])).k8s_get("Deployment", "web")
    for noise in (
        "managedFields",
        LAST_APPLIED,
        "creationTimestamp: null",
        "resources: {}",
        "/dev/termination-log",
        "ClusterFirst",
        "default-scheduler",
        "securityContext",
        "serviceAccount:",
    ):
        assert noise not in out, noise
    # what differs from a default, or is not a default at all, stays
    for kept in (
        "team: shop",
        "image: example.invalid/web:2",
        "terminationMessagePolicy: FallbackToLogsOnError",
        "terminationGracePeriodSeconds: 60",
        "enableServiceLinks: false",
        "serviceAccountName: web",
        "creationTimestamp: '2026-01-01T00:00:00Z'",
        "readyReplicas: 2",
    ):
        assert kept in out, kept


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
    out = local().http_get(f"{target}/progress")
    assert "HTTP 200 GET" in out and '"completed": 21' in out


def test_http_get_stops_at_the_size_limit(target: str) -> None:
    out = local(http_max_bytes=10_000).http_get(f"{target}/big")
    assert "body cut at 10000 bytes" in out
    assert len(out) <= RESULT_MAX_CHARS


def test_http_only_http_schemes() -> None:
    assert local().http_get("file:///etc/passwd").startswith("ERROR:")


def test_http_request_sends_a_write_the_mutation_set_names(target: str) -> None:
    tools = local(mutation_set=(f"{target}/resume",))
    out = tools.http_request(f"{target}/resume", method="POST", body="go")
    assert "HTTP 201 POST" in out
    assert f"\ngo\n<<<END_UNTRUSTED_TARGET_DATA id={FID}>>>" in out
    assert tools.refusals == []


def test_rollout_restart_stamps_the_pod_template() -> None:
    kube = FakeKube([deployment()])
    out = make(kube, mutation_set=("deployments/web",)).k8s_rollout_restart("Deployment", "web")
    annotations = kube.objects[("Deployment", "shop", "web")]["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert annotations == {RESTARTED_AT: "2026-03-01T12:00:00Z"}
    assert "restarted" in out


def test_scale_apply_delete() -> None:
    kube = FakeKube([deployment()])
    tools = act_tools(kube, "deployments/web", "configmaps/c")
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
    assert off.run_command(["echo", "hi"]).startswith("REFUSED:")
    on = StepTools(
        FakeKube(),
        ToolConfig(
            fence_id=FID, namespace="shop", allow_commands=True, mutation_set=("command:echo",)
        ),
        runner=runner,
    )
    assert "run_command" in act_toolset(on).tools
    assert "run_command" not in observe_toolset(on).tools
    assert "exit code 0" in on.run_command(["echo", "hi"])
    assert ran == [["echo", "hi"]]
    # a command the mutation set does not name is refused before it starts
    refused = on.run_command(["rm", "-rf", "/data"])
    assert refused.startswith("REFUSED: command:rm is not in the action's mutation set")
    assert ran == [["echo", "hi"]]
    assert on.refusals == ["run_command command:rm"]


def test_toolsets() -> None:
    tools = make(http_allowed_hosts=("ci.example",), file_roots=("/data",))
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
    # Without an allowed host or a file root those tools could only refuse: not offered.
    bare = make()
    assert set(observe_toolset(bare).tools) == observe - {"http_get", "read_file"}
    assert set(act_toolset(bare).tools) == act - {"http_get", "read_file", "http_request"}
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
    opted_in = make(extra_verbs=("create", "delete"))
    assert set(act_toolset(opted_in).tools) - set(act_toolset(bare).tools) == {"k8s_rerun_job"}


# --- the mutation set -------------------------------------------------------------------


# Every write verb: these tests are about what the mutation set covers.
EVERY_VERB = ("create", "update", "delete")


def act_tools(kube: FakeKube, *mutation_set: str) -> StepTools:
    return make(kube, mutation_set=mutation_set, extra_verbs=EVERY_VERB)


@pytest.mark.parametrize(
    ("call", "refused"),
    [
        (lambda t: t.k8s_delete("Deployment", "web"), "k8s_delete would delete deployments/web"),
        (
            lambda t: t.k8s_create(config_map("c", {"a": "1"})),
            "k8s_create would create configmaps/c",
        ),
        (
            lambda t: t.k8s_apply(config_map("c", {"a": "1"})),
            "k8s_apply would create configmaps/c",
        ),
        (
            lambda t: t.k8s_replace(deployment()),
            "k8s_replace would update deployments/web",
        ),
    ],
)
def test_by_default_an_act_step_only_patches_what_its_set_names(
    call: Callable[[StepTools], str], refused: str
) -> None:
    kube = FakeKube([deployment(), config_map("c", {"a": "0"})])
    tools = make(kube, mutation_set=("deployments/web", "configmaps/c"))
    out = call(tools)
    assert out.startswith(f"REFUSED: {refused};"), out
    assert kube.writes() == []
    assert "spec.replicas is now 3" in tools.k8s_scale("Deployment", "web", 3)
    assert "patched" in tools.k8s_patch("ConfigMap", "c", {"data": {"a": "2"}})


class FinalizingKube(FakeKube):
    """A deleted object keeps its name for `busy` create attempts, as one with finalizers."""

    def __init__(self, objects: list[dict[str, Any]], busy: int) -> None:
        super().__init__(objects)
        self.busy = busy

    def create(self, manifest: dict[str, Any], *, namespace: str | None) -> Any:
        if self.busy:
            self.busy -= 1
            self.calls.append(("create", (manifest, namespace)))
            raise KubeError(409, 'HTTP 409: AlreadyExists jobs "export" already exists')
        return super().create(manifest, namespace=namespace)


def test_rerun_job_creates_the_ended_job_again_from_its_stored_spec() -> None:
    kube = FinalizingKube([failed_job()], busy=2)
    slept: list[float] = []
    tools = StepTools(
        kube,
        ToolConfig(
            fence_id=FID, namespace="shop", mutation_set=("jobs/export",), extra_verbs=EVERY_VERB
        ),
        sleep=slept.append,
    )
    out = tools.k8s_rerun_job("export")
    assert "re-ran Job export: the failed Job was deleted and created again" in out, out
    sent = [call[0] for call in kube.writes() if call[0] in ("delete", "create")]
    assert sent == ["delete", "create", "create", "create"]
    assert slept == [1.0, 1.0]  # waited while the old name was still held
    again = kube.objects[("Job", "shop", "export")]
    assert again["metadata"]["labels"] == {"team": "billing"}
    assert again["metadata"]["annotations"] == {"owner": "billing"}
    assert "selector" not in again["spec"] and "status" not in again
    assert again["spec"]["template"]["metadata"]["labels"] == {"app": "export"}
    assert again["spec"]["template"]["spec"] == failed_job()["spec"]["template"]["spec"]


def test_rerun_job_refuses_a_running_job_and_one_outside_the_set() -> None:
    running = failed_job()
    running["status"] = {"active": 1}
    kube = FakeKube([running, failed_job("other")])
    tools = act_tools(kube, "jobs/export")
    assert tools.k8s_rerun_job("export").startswith("ERROR: Job export has not finished")
    refused = tools.k8s_rerun_job("other")
    assert refused.startswith("REFUSED: jobs/other is not in the action's mutation set"), refused
    assert kube.writes() == []
    # Without the opt-in to delete and create, the tool would only refuse: not offered.
    patch_only = make(kube, mutation_set=("jobs/export",))
    assert "k8s_rerun_job" not in act_toolset(patch_only).tools
    assert patch_only.k8s_rerun_job("export").startswith("REFUSED: k8s_rerun_job would create")


def test_a_job_is_not_deleted_alone_where_it_can_be_rerun() -> None:
    kube = FakeKube([failed_job()])
    tools = act_tools(kube, "jobs/export")
    out = tools.k8s_delete("Job", "export")
    assert out.startswith("REFUSED: to re-run Job export, call k8s_rerun_job"), out
    assert kube.writes() == []
    # for good, it goes through k8s_raw
    tools.k8s_raw_write("/apis/batch/v1/namespaces/shop/jobs/export", "DELETE")
    assert [call[0] for call in kube.writes()] == ["request"]
    # where Jobs cannot be re-run, k8s_delete is only the verb check's
    patch_only = make(kube, mutation_set=("jobs/export",))
    assert patch_only.k8s_delete("Job", "export").startswith(
        "REFUSED: k8s_delete would delete jobs/export"
    )


def test_writes_to_named_objects_go_through() -> None:
    kube = FakeKube([deployment(), config_map("build-progress", {"done": "3"})])
    tools = act_tools(kube, "Deployment/web", "configmaps/build-*")
    assert "spec.replicas is now 3" in tools.k8s_scale("Deployment", "web", 3)
    assert "patched" in tools.k8s_patch("ConfigMap", "build-progress", {"data": {"done": "4"}})
    assert "applied" in tools.k8s_apply(config_map("build-extra", {"a": "1"}))
    assert tools.refusals == []


@pytest.mark.parametrize(
    ("call", "label"),
    [
        (
            lambda t: t.k8s_patch("ConfigMap", "settings", {"data": {"a": "2"}}),
            "configmaps/settings",
        ),
        (lambda t: t.k8s_delete("Deployment", "api"), "deployments/api"),
        (lambda t: t.k8s_scale("Deployment", "web", 0, namespace="prod"), "prod/deployments/web"),
        (lambda t: t.k8s_rollout_restart("StatefulSet", "web"), "statefulsets/web"),
        (lambda t: t.k8s_apply(config_map("other", {})), "configmaps/other"),
        (lambda t: t.k8s_create(config_map("other", {})), "configmaps/other"),
        (lambda t: t.k8s_replace(config_map("settings", {})), "configmaps/settings"),
        (
            lambda t: t.k8s_raw_write("/api/v1/namespaces/shop/configmaps/settings", "PATCH", {}),
            "configmaps/settings",
        ),
        (
            lambda t: t.k8s_raw_write(
                "/api/v1/namespaces/shop/configmaps", "POST", config_map("x", {})
            ),
            "configmaps/x",
        ),
        (lambda t: t.k8s_raw_write("/api/v1/namespaces/shop/pods", "DELETE"), "pods/*"),
        (
            lambda t: t.k8s_raw_write("/apis/apps/v1/namespaces/shop/deployments/api/scale", "PUT"),
            "deployments/api (scale)",
        ),
        (lambda t: t.k8s_raw_write("/api/v1/nodes/n1", "PATCH", {}), "nodes/n1"),
    ],
)
def test_writes_outside_the_mutation_set_are_refused_before_sending(
    call: Callable[[StepTools], str], label: str
) -> None:
    kube = FakeKube([deployment(), deployment("api"), config_map("settings", {"a": "1"})])
    tools = act_tools(kube, "deployments/web", "jobs/build")
    out = call(tools)
    assert out == (
        f"REFUSED: {label} is not in the action's mutation set (deployments/web, jobs/build); "
        "nothing was sent. Change only what the action names, or report outcome blocked."
    )
    assert kube.writes() == []
    assert len(tools.refusals) == 1 and tools.refusals[0].endswith(label)


def test_an_empty_mutation_set_refuses_every_write() -> None:
    kube = FakeKube([deployment()])
    out = make(kube).k8s_scale("Deployment", "web", 1)
    assert "is not in the action's mutation set (none named)" in out
    assert kube.writes() == []


def test_subresources_of_a_named_object_are_covered() -> None:
    kube = FakeKube([deployment()])
    tools = act_tools(kube, "deployments.apps/web")
    out = tools.k8s_raw_write(
        "/apis/apps/v1/namespaces/shop/deployments/web/scale", "PATCH", {"spec": {"replicas": 4}}
    )
    assert out.startswith("<<<UNTRUSTED_TARGET_DATA") and "Success" in out
    tools.k8s_raw_write("/apis/apps/v1/namespaces/shop/deployments/web/status", "PATCH", {})
    assert [c[1][1] for c in kube.writes()] == [
        "/apis/apps/v1/namespaces/shop/deployments/web/scale",
        "/apis/apps/v1/namespaces/shop/deployments/web/status",
    ]


def test_a_group_in_the_entry_must_match() -> None:
    kube = FakeKube([deployment()])
    out = act_tools(kube, "deployments.extensions/web").k8s_scale("Deployment", "web", 1)
    assert out.startswith("REFUSED:")


def test_a_pod_is_covered_by_its_named_controller() -> None:
    kube = FakeKube(
        [
            pod("build-x1", owner=("batch/v1", "Job", "build")),
            pod("other-x1", owner=("batch/v1", "Job", "other")),
            pod("lonely"),
        ]
    )
    tools = act_tools(kube, "jobs/build")
    assert "deleted Pod build-x1" in tools.k8s_delete("Pod", "build-x1")
    assert tools.k8s_delete("Pod", "other-x1").startswith("REFUSED: pods/other-x1")
    assert tools.k8s_delete("Pod", "lonely").startswith("REFUSED: pods/lonely")
    # the manifest's own ownerReferences do not count: only the live pod's
    forged = pod("new-pod", owner=("batch/v1", "Job", "build"))
    assert tools.k8s_create(forged).startswith("REFUSED: pods/new-pod")
    assert [c[1][2] for c in kube.writes()] == ["build-x1"]


def test_raw_write_paths_must_be_plain() -> None:
    kube = FakeKube([deployment()])
    tools = act_tools(kube, "deployments/web")
    for path in (
        "/apis/apps/v1/namespaces/shop/deployments/web/../../configmaps/x",
        "/apis/apps/v1/namespaces/shop/deployments/web%2F..%2Fx",
        "/healthz/x",
    ):
        assert tools.k8s_raw_write(path, "DELETE").startswith("ERROR:"), path
    assert kube.writes() == []
    # reads need no entry
    assert "Success" in tools.k8s_raw_write("/api/v1/namespaces/shop/configmaps", "GET")


def test_http_writes_need_an_entry_for_their_url(target: str) -> None:
    tools = local(mutation_set=(f"{target}/api",))
    assert "HTTP 201 POST" in tools.http_request(f"{target}/api/resume", "POST", body="go")
    refused = tools.http_request(f"{target}/admin", "DELETE")
    assert refused.startswith(f"REFUSED: DELETE {target}/admin is not in the action's mutation")
    assert tools.http_request(f"{target}/apiary", "POST").startswith("REFUSED:")
    assert "HTTP 200 GET" in tools.http_request(f"{target}/progress")  # reads need none
    assert tools.refusals == [
        f"http_request DELETE {target}/admin",
        f"http_request POST {target}/apiary",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/shop/services/http:web:80/proxy/metrics",
        "/api/v1/nodes/n1/proxy/metrics",
        "/api/v1/namespaces/shop/pods/p/exec?command=sh",
        "/api/v1/namespaces/shop/pods/p/portforward",
    ],
)
def test_raw_requests_do_not_tunnel_through_the_api_server(path: str) -> None:
    kube = FakeKube()
    assert make(kube).k8s_raw(path).startswith("ERROR:")
    assert make(kube, mutation_set=("pods/p",)).k8s_raw_write(path, "POST").startswith("ERROR:")
    assert kube.calls == []


def test_a_patch_answers_with_the_patched_fields_as_they_are_now() -> None:
    # The act verifies from this answer: the patched values and the state line, not the
    # whole object again.
    web = deployment()
    web["spec"]["template"]["metadata"]["annotations"] = {"team": "storefront"}
    kube = FakeKube([web])
    tools = act_tools(kube, "Deployment/web")
    out = tools.k8s_patch("Deployment", "web", {"spec": {"replicas": 4, "paused": False}})
    lead, _, body = out.partition("\n")
    assert lead.startswith("patched; Deployment shop/web:"), lead
    assert "spec.replicas: 4" in body and "spec.paused: false" in body
    assert "storefront" not in out, "fields the patch did not touch are left out"
    containers = {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "w:2"}]}}}}
    listed = tools.k8s_patch("Deployment", "web", containers)
    assert "spec.template.spec.containers:" in listed and "image: w:2" in listed


def test_a_json_patch_shows_the_fields_its_paths_name() -> None:
    web = deployment()
    web["spec"]["template"]["spec"] = {"containers": [{"name": "web", "image": "w:3"}]}
    ops = [
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "w:3"},
        {"op": "add", "path": "/metadata/labels~1x", "value": "1"},
    ]
    shown = patched_view(web, ops)
    assert "spec.template.spec.containers:" in shown and "image: w:3" in shown
    assert "metadata.labels/x: null" in shown
    assert patched_view(web, [{"op": "test"}]) == describe(web), "an unclear path shows it all"
