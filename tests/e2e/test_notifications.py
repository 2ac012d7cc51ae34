"""Notification sinks end to end: a run that asks for an approval, changes health and
stops reaches webhook receivers on loopback in each format, once per message; a receiver
that is down delays only its messages, and an operator restart neither loses nor repeats
one."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from goalkeeper.controller.api import KubeApi, Permanent
from tests.e2e.harness import (
    GROUP,
    VERSION,
    Cluster,
    OperatorProcess,
    wait_until,
    write_token_kubeconfig,
)
from tests.e2e.test_approvals import awaiting
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

TOKEN = "T0KEN-e2e-7f3a"  # in every receiver's path: it must show up nowhere else
APPROVAL_WINDOW = "3s"


class Receiver:
    """A webhook on 127.0.0.1 recording each request; it answers 503 while `down`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.down = False
        self.got: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.refused = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    if receiver.down:
                        receiver.refused += 1
                        status = 503
                    else:
                        receiver.got.append((dict(self.headers), json.loads(body)))
                        status = 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/{TOKEN}/{name}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def messages(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        with self._lock:
            return list(self.got)

    def ids(self) -> list[str]:
        return [h.get("ce-id") or b.get("id") or _slack_id(b) for h, b in self.messages()]

    def kinds(self) -> list[str]:
        return [_kind(h, b) for h, b in self.messages()]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _slack_id(body: dict[str, Any]) -> str:
    return str(body.get("text", "")).rsplit("_id ", 1)[-1].rstrip("_")


def _kind(headers: dict[str, str], body: dict[str, Any]) -> str:
    if "ce-type" in headers:
        return headers["ce-type"].rsplit(".", 1)[-1]
    if "kind" in body:
        return str(body["kind"])
    text = str(body.get("text", ""))
    for word, kind in (("Stopped", "stop"), ("Approval", "approval"), ("Health", "health")):
        if text.startswith(f"*{word}"):
            return kind
    return "?"


@pytest.fixture
def receivers() -> Iterator[dict[str, Receiver]]:
    made = {fmt: Receiver(fmt) for fmt in ("generic", "slack", "cloudevents")}
    yield made
    for receiver in made.values():
        receiver.close()


def sinks(cluster: Cluster, receivers: dict[str, Receiver]) -> None:
    """Secret goalkeeper-notifications with one URL per receiver, and a sink for each."""
    data = {fmt: base64.b64encode(r.url.encode()).decode() for fmt, r in receivers.items()}
    cluster.core.create_namespaced_secret(
        cluster.ns,
        client.V1Secret(metadata=client.V1ObjectMeta(name="goalkeeper-notifications"), data=data),
    )
    for fmt in receivers:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NotificationSink",
            "metadata": {"name": fmt},
            "spec": {"format": fmt, "urlKey": fmt},
        }
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, cluster.ns, "notificationsinks", body
        )


def all_arrived(receiver: Receiver, runs: int = 1) -> bool:
    return receiver.kinds().count("stop") >= runs


def assert_once_each(receiver: Receiver) -> None:
    ids = receiver.ids()
    assert len(ids) == len(set(ids)), (receiver.name, ids)


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT=APPROVAL_WINDOW)
def test_each_format_gets_the_approval_request_the_health_change_and_the_stop_once(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    receivers: dict[str, Receiver],
    control_plane: Any,
) -> None:
    sinks(cluster, receivers)
    awaiting(cluster, model, operator)
    wait_until(cluster.stopped, 60, "the approval window to end", operator.logs)
    for receiver in receivers.values():
        wait_until(lambda r=receiver: all_arrived(r), 60, f"{receiver.name}'s stop", operator.logs)
    uid = cluster.monitor()["metadata"]["uid"]  # type: ignore[index]
    expected = None
    for receiver in receivers.values():
        assert_once_each(receiver)
        kinds = receiver.kinds()
        assert kinds.count("approval") == 1 and kinds.count("stop") == 1, kinds
        assert "health" in kinds and set(kinds) == {"approval", "health", "stop"}, kinds
        ids = receiver.ids()
        assert all(i.startswith(f"{uid}/") for i in ids), ids
        expected = expected or sorted(ids)
        assert sorted(ids) == expected, (receiver.name, ids)

    (_, approval) = next(m for m in receivers["generic"].messages() if m[1]["kind"] == "approval")
    assert f"goalkeeper approve build -n {cluster.ns}" in approval["text"]
    (_, stop) = next(m for m in receivers["generic"].messages() if m[1]["kind"] == "stop")
    assert "paidActionNotApproved" in stop["summary"] and "What to do:" in stop["text"]
    ce_headers, ce_body = next(m for m in receivers["cloudevents"].messages())
    assert ce_headers["ce-specversion"] == "1.0"
    assert ce_headers["ce-source"].endswith(f"/namespaces/{cluster.ns}/monitors/build")
    assert ce_body["monitor"]["uid"] == uid
    slack = receivers["slack"].messages()[0][1]
    assert set(slack) == {"text", "unfurl_links", "unfurl_media"}
    assert f"Monitor {cluster.ns}/build" in slack["text"]

    # Each sink says its messages arrive; the URLs are nowhere but the Secret.
    for fmt in receivers:
        sink = cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, cluster.ns, "notificationsinks", fmt
        )
        ready = sink["status"]["conditions"][0]
        assert ready["type"] == "Ready" and ready["status"] == "True", sink["status"]
        assert TOKEN not in json.dumps(sink)
    events = json.dumps([e.to_dict() for e in cluster.events()], default=str)
    assert TOKEN not in json.dumps(cluster.monitor()) and TOKEN not in events
    assert TOKEN not in operator.logs()
    print(control_plane.kubectl("get", "notificationsinks", "-n", cluster.ns).stdout)
    # The record of a delivery names the Monitor's uid: the API server refuses it for a
    # Monitor that now stands under the name with another uid.
    before = cluster.status()["notices"]["delivered"]
    with pytest.raises(Permanent) as refused:
        asyncio.run(KubeApi(cluster.api).record_delivered(cluster.ns, "build", "x", "generic", 99))
    assert refused.value.status == 422 and cluster.status()["notices"]["delivered"] == before


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT=APPROVAL_WINDOW)
def test_a_receiver_down_delays_only_its_messages_and_a_kill_loses_and_repeats_none(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    receivers: dict[str, Receiver],
) -> None:
    generic = receivers["generic"]
    generic.down = True
    sinks(cluster, {"generic": generic})
    awaiting(cluster, model, operator)
    # The run ends on time while its receiver refuses every message.
    wait_until(cluster.stopped, 60, "the approval window to end", operator.logs)
    wait_until(lambda: generic.refused >= 1, 60, "a delivery attempt", operator.logs)
    assert generic.messages() == []

    # An operator killed meanwhile still has them to send: recorded in status.
    operator.kill()
    operator.start()
    generic.down = False
    wait_until(lambda: all_arrived(generic), 120, "the messages after the outage", operator.logs)
    assert_once_each(generic)
    first_run = set(generic.ids())
    wait_until(
        lambda: (
            cluster.status().get("notices", {}).get("delivered", {}).get("generic")
            == cluster.status()["notices"]["seq"]
        ),
        30,
        "the deliveries to be recorded",
        operator.logs,
    )

    # Delivered and recorded: a restarted operator sends the next run's news, and only that
    # (a sink receives in order, so the next run's stop comes after any repeat would).
    operator.restart_with()
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitors", "build", {"spec": {"maxChecks": 5}}
    )
    wait_until(lambda: all_arrived(generic, runs=2), 120, "the second run's stop", operator.logs)
    assert_once_each(generic)
    later = set(generic.ids()) - first_run
    assert later and all("/run2-" in i for i in later), later


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT=APPROVAL_WINDOW)
def test_a_sink_writer_who_cannot_read_the_secret_sends_nothing(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    receivers: dict[str, Receiver],
    control_plane: Any,
    tmp_path: Path,
) -> None:
    """Mallory may write sinks and read Monitors, not Secrets: a sink she writes naming the
    team's webhook posts nothing there; the API server refuses a bad format naming it."""
    generic = receivers["generic"]
    data = {"team": base64.b64encode(generic.url.encode()).decode()}
    cluster.core.create_namespaced_secret(
        cluster.ns,
        client.V1Secret(metadata=client.V1ObjectMeta(name="goalkeeper-notifications"), data=data),
    )
    control_plane.kubectl(
        "create", "role", "sink-writer", "-n", cluster.ns,
        "--verb=get,list,watch,create,update,patch", "--resource=notificationsinks.goalkeeper.dev",
        check=True,
    )  # fmt: skip
    control_plane.kubectl(
        "create", "role", "monitor-reader", "-n", cluster.ns, "--verb=get,list",
        "--resource=monitors.goalkeeper.dev", check=True,
    )  # fmt: skip
    control_plane.kubectl("create", "serviceaccount", "mallory", "-n", cluster.ns, check=True)
    for role in ("sink-writer", "monitor-reader"):
        control_plane.kubectl(
            "create", "rolebinding", f"mallory-{role}", f"--role={role}",
            f"--serviceaccount={cluster.ns}:mallory", "-n", cluster.ns, check=True,
        )  # fmt: skip
    path = tmp_path / "mallory.kubeconfig"
    write_token_kubeconfig(cluster.api, control_plane.kubeconfig, cluster.ns, "mallory", path)
    mallory = client.CustomObjectsApi(config.new_client_from_config(str(path)))

    def sink(fmt: str) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NotificationSink",
            "metadata": {"name": "borrowed"},
            "spec": {"format": fmt, "urlKey": "team", "send": ["stop", "approval"]},
        }

    with pytest.raises(ApiException) as refused:
        mallory.create_namespaced_custom_object(
            GROUP, VERSION, cluster.ns, "notificationsinks", sink("email")
        )
    assert refused.value.status == 422 and "spec.format" in refused.value.body
    made = mallory.create_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "notificationsinks", sink("generic")
    )
    me = f"system:serviceaccount:{cluster.ns}:mallory"
    assert made["metadata"]["annotations"]["goalkeeper.dev/author"] == me

    awaiting(cluster, model, operator)
    wait_until(cluster.stopped, 60, "the approval window to end", operator.logs)

    def refusal() -> str | None:
        found = cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, cluster.ns, "notificationsinks", "borrowed"
        )
        conditions = (found.get("status") or {}).get("conditions") or []
        return conditions[0]["message"] if conditions else None

    message = wait_until(refusal, 60, "the sink's refusal", operator.logs)
    assert f"{me} may not get secrets/goalkeeper-notifications in {cluster.ns}" in message
    assert generic.messages() == [] and generic.refused == 0
