"""Notification sinks without a cluster: the reconciler records each message in the status
it writes, and the notifier posts it over real HTTP to a receiver on loopback, recording how
far each sink got; a fake API stands in for the cluster."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from tests.support.fake_api import FakeApi
from tests.support.observations import extraction, observation_dict
from tests.unit.controller.test_reconciler import NS, Clock, finish, new_api, status

from goalkeeper.controller import settings as operator_settings
from goalkeeper.controller.notify import (
    BACKOFF_MAX,
    CLUSTER_SINK,
    REFUSALS_BEFORE_SKIP,
    HttpDelivery,
    MonitorRef,
    Notifier,
    Sink,
    SinkRegistry,
    payload,
)
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings, SettingsError
from goalkeeper.controller.workqueue import WorkQueue
from goalkeeper.core.models import (
    SINK_SECRET,
    MonitorState,
    MonitorStatus,
    Notice,
    NoticeKind,
    Notices,
    NotificationSinkSpec,
    SinkFormat,
)
from goalkeeper.core.permissions import Permission

SECRET_PATH = "/hooks/T0KEN-abc123"


@dataclass
class Receiver:
    """A webhook on loopback: what it received, and the status it answers with."""

    answer: int = 200
    got: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    url: str = ""
    refuse: str = ""  # a kind of message answered 400 whatever the answer for others

    async def handle(self, request: web.Request) -> web.Response:
        if request.path != SECRET_PATH:
            return web.Response(status=404)
        if self.refuse and (await request.json()).get("kind") == self.refuse:
            return web.Response(status=400)
        if self.answer == 200:
            self.got.append((dict(request.headers), await request.json()))
        return web.Response(status=self.answer, text="receiver's own words: T0KEN-abc123")

    def ids(self) -> list[str]:
        return [body.get("id") or headers.get("ce-id", "") for headers, body in self.got]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post(SECRET_PATH, found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    found.url = f"http://127.0.0.1:{port}{SECRET_PATH}"
    yield found
    await runner.cleanup()


class Ticks:
    """The notifier's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def add_sink(api: FakeApi, name: str, url: str, *, fmt: str = "generic", **spec: Any) -> None:
    api.put(
        "Secret",
        {
            "metadata": {"name": SINK_SECRET, "namespace": NS},
            "data": {name: base64.b64encode(url.encode()).decode()},
        }
        if api.get("Secret", NS, SINK_SECRET) is None
        else _with_key(api, name, url),
    )
    api.put(
        "NotificationSink",
        {
            "metadata": {
                "name": name,
                "namespace": NS,
                "creationTimestamp": "2026-12-01T08:00:00Z",
                "annotations": {"goalkeeper.dev/author": "ops", "goalkeeper.dev/author-groups": ""},
            },
            "spec": {"format": fmt, "urlKey": name, **spec},
        },
    )


def _with_key(api: FakeApi, name: str, url: str) -> dict[str, Any]:
    secret = api.get("Secret", NS, SINK_SECRET)
    assert secret is not None
    secret["data"][name] = base64.b64encode(url.encode()).decode()
    return secret


def registry(api: FakeApi, cluster: Sink | None = None) -> SinkRegistry:
    found = SinkRegistry(cluster)
    found.replace_all(api.all("NotificationSink"))
    return found


MADE: list[Notifier] = []


@pytest.fixture(autouse=True)
async def close_sessions() -> AsyncIterator[None]:
    yield
    while MADE:
        await MADE.pop().delivery_closed()


def notifier(api: FakeApi, sinks: SinkRegistry, ticks: Ticks, url: str = "") -> Notifier:
    made = Notifier(api, sinks, HttpDelivery(timeout=5), cluster_url=url, clock=ticks)
    MADE.append(made)
    return made


def ops_may_read(api: FakeApi) -> None:
    api.grant(
        "ops",
        Permission("get", "", "secrets", NS, SINK_SECRET),
        Permission("list", "goalkeeper.dev", "monitors", NS),
    )


async def stopped_run(api: FakeApi, reconciler: Reconciler) -> None:
    """Extract, then an observation that finds the goal complete: the monitor stops."""
    await reconciler.reconcile(NS, "build")
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    finish(api, observation_dict("stop"))
    await reconciler.reconcile(NS, "build")
    assert status(api)["monitor"] == "stopped", status(api).get("stop")


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


async def test_a_stop_reaches_the_receiver_once_with_its_report_and_what_to_do(
    receiver: Receiver, ticks: Ticks
) -> None:
    api = new_api()
    add_sink(api, "team", receiver.url)
    ops_may_read(api)
    sinks = registry(api)
    sender = notifier(api, sinks, ticks)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    kept = status(api)["notices"]
    assert [item["kind"] for item in kept["items"]] == ["stop"], kept

    await sender.deliver(NS, "build")
    assert len(receiver.got) == 1
    headers, body = receiver.got[0]
    uid = api.get("Monitor", NS, "build")["metadata"]["uid"]  # type: ignore[index]
    assert body["id"] == f"{uid}/stopped" == headers["Idempotency-Key"]
    assert body["kind"] == "stop" and body["monitor"] == {
        "namespace": NS,
        "name": "build",
        "uid": uid,
    }
    assert "goalComplete" in body["summary"]
    assert "Report:" in body["text"] and "21 of 27 modules" in body["text"]
    assert status(api)["notices"]["delivered"] == {"team": 1}

    # Delivered and recorded: again, and from a restarted operator, nothing is sent twice.
    await sender.deliver(NS, "build")
    restarted = notifier(api, registry(api), ticks)
    await restarted.deliver(NS, "build")
    assert len(receiver.got) == 1
    sink = api.get("NotificationSink", NS, "team")
    assert sink is not None and sink["status"]["conditions"][0]["status"] == "True"


async def test_each_format_carries_the_same_stable_id() -> None:
    notice = Notice(
        seq=3,
        id="uid-1/approval-r1",
        kind=NoticeKind.approval,
        at=datetime(2026, 12, 1, tzinfo=UTC),
        summary="Approval requested",
        text="Answer request r1 with `goalkeeper approve build`.",
    )
    ref = MonitorRef(NS, "build", "uid-1")
    generic_headers, generic = payload(SinkFormat.generic, notice, ref)
    assert json.loads(generic)["id"] == generic_headers["Idempotency-Key"] == "uid-1/approval-r1"
    answer = f"goalkeeper approve build -n {NS}"
    assert answer in json.loads(generic)["text"]
    _, slack = payload(SinkFormat.slack, notice, ref)
    text = json.loads(slack)["text"]
    assert "Approval requested" in text and answer in text
    assert "uid-1/approval-r1" in text
    ce_headers, ce_body = payload(SinkFormat.cloudevents, notice, ref)
    assert ce_headers["ce-specversion"] == "1.0" and ce_headers["ce-id"] == "uid-1/approval-r1"
    assert ce_headers["ce-type"] == "dev.goalkeeper.monitor.approval"
    assert (
        ce_headers["ce-source"] == f"/apis/goalkeeper.dev/v1alpha1/namespaces/{NS}/monitors/build"
    )
    assert ce_headers["Content-Type"] == "application/json"
    assert json.loads(ce_body)["text"] == json.loads(generic)["text"]


async def test_a_receiver_that_is_down_delays_only_its_messages(
    receiver: Receiver, ticks: Ticks, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api = new_api()
    add_sink(api, "team", receiver.url, send=["stop", "report"])
    ops_may_read(api)
    sender = notifier(api, registry(api), ticks)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    receiver.answer = 503
    await stopped_run(api, reconciler)  # the monitor ran to its end meanwhile
    kinds = [item["kind"] for item in status(api)["notices"]["items"]]
    assert kinds == ["report", "stop"], kinds

    await sender.deliver(NS, "build")
    assert receiver.got == [] and "team" not in status(api)["notices"]["delivered"]
    sink = api.get("NotificationSink", NS, "team")
    assert sink is not None
    condition = sink["status"]["conditions"][0]
    assert condition["status"] == "False" and "HTTP 503" in condition["message"]
    # Within the backoff nothing is tried; after it, both arrive in order.
    receiver.answer = 200
    await sender.deliver(NS, "build")
    assert receiver.got == []
    ticks.now += 60
    await sender.deliver(NS, "build")
    assert [body["kind"] for _, body in receiver.got] == ["report", "stop"]
    assert status(api)["notices"]["delivered"] == {"team": 2}
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("goalkeeper")]
    logged = "\n".join(ours) + json.dumps(api.all("NotificationSink")) + json.dumps(status(api))
    assert "HTTP 503" in logged
    assert "T0KEN" not in logged and SECRET_PATH not in logged


async def test_delivered_messages_are_let_go_at_the_next_status_write(
    receiver: Receiver, ticks: Ticks
) -> None:
    api = new_api()
    add_sink(api, "team", receiver.url, send=["report"])
    ops_may_read(api)
    sender = notifier(api, registry(api), ticks)
    clock = Clock()
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=clock, sinks=sender
    )
    await reconciler.reconcile(NS, "build")
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    assert [i["kind"] for i in status(api)["notices"]["items"]] == ["report"]
    await sender.deliver(NS, "build")
    assert receiver.ids()[0].endswith("/check-1")
    clock.now += timedelta(minutes=10)
    await reconciler.reconcile(NS, "build", fresh=True)  # the timer's check
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build", fresh=True)
    # Check 1's report, taken by the one sink, is gone; check 2's waits.
    items = status(api)["notices"]["items"]
    assert [i["id"].rsplit("/", 1)[1] for i in items] == ["check-2"], items


async def test_a_sink_whose_writer_may_not_read_the_secret_sends_nothing(
    receiver: Receiver, ticks: Ticks
) -> None:
    api = new_api()
    add_sink(api, "team", receiver.url)
    api.grant("ops", Permission("list", "goalkeeper.dev", "monitors", NS))  # not the Secret
    sender = notifier(api, registry(api), ticks)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    await sender.deliver(NS, "build")
    assert receiver.got == [] and api.count("get_secret") == 0
    sink = api.get("NotificationSink", NS, "team")
    assert sink is not None
    message = sink["status"]["conditions"][0]["message"]
    assert f"ops may not get secrets/{SINK_SECRET} in {NS}" in message


async def test_a_namespace_without_sinks_records_nothing_and_the_cluster_sink_takes_it(
    receiver: Receiver, ticks: Ticks
) -> None:
    api = new_api()
    quiet = Reconciler(api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock())
    await stopped_run(api, quiet)
    assert status(api).get("notices") is None

    api = new_api()
    cluster = Sink("", "", NotificationSinkSpec(format=SinkFormat.slack))
    sender = notifier(api, registry(api, cluster), ticks, url=receiver.url)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    await sender.deliver(NS, "build")
    assert len(receiver.got) == 1 and "Stopped: goalComplete" in receiver.got[0][1]["text"]
    assert status(api)["notices"]["delivered"] == {CLUSTER_SINK: 1}


async def test_messages_wait_until_the_sinks_were_listed(ticks: Ticks) -> None:
    api = new_api()
    sender = Notifier(api, SinkRegistry(), HttpDelivery(), clock=ticks)
    assert sender.wants(NS) is None
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    assert status(api).get("notices") is None


def test_the_cluster_sink_setting_never_shows_its_url() -> None:
    loaded = operator_settings.load(
        {"GOALKEEPER_NOTIFY_URL": "https://hooks.example/T0KEN", "GOALKEEPER_NOTIFY_SEND": "stop"}
    )
    spec = loaded.cluster_sink()
    assert spec is not None and spec.send == [NoticeKind.stop]
    assert "T0KEN" not in repr(loaded) and "T0KEN" not in loaded.model_dump_json()
    with pytest.raises(SettingsError) as refused:
        operator_settings.load({"GOALKEEPER_NOTIFY_URL": "file:///T0KEN"})
    assert "GOALKEEPER_NOTIFY_URL" in str(refused.value) and "T0KEN" not in str(refused.value)
    assert operator_settings.load({}).cluster_sink() is None


async def test_many_pokes_run_one_delivery_at_a_time_per_monitor(
    receiver: Receiver, ticks: Ticks
) -> None:
    api = new_api()
    add_sink(api, "team", receiver.url)
    ops_may_read(api)
    sender = notifier(api, registry(api), ticks)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    running = asyncio.create_task(sender.run())
    try:
        for _ in range(20):
            sender.poke(NS, "build")
        async with asyncio.timeout(30):
            while status(api).get("notices", {}).get("delivered") != {"team": 1}:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert len(receiver.got) == 1


async def test_a_monitor_the_watch_shows_with_kept_messages_is_handed_to_the_notifier() -> None:
    """A restarted operator reconciles no waiting or stopped Monitor, yet what such a one
    keeps for its sinks is looked at: the watch's first list names it."""
    poked: list[tuple[str, str]] = []
    triggered: list[str] = []

    async def reconcile(namespace: str, name: str, fresh: bool = False) -> None:
        triggered.append(name)

    queue = WorkQueue(reconcile, resync_seconds=60, on_notices=lambda ns, n: poked.append((ns, n)))
    stopped = MonitorStatus(monitor=MonitorState.stopped)
    kept = stopped.model_copy(update={"notices": Notices(seq=1, items=[], delivered={})})
    notice = Notice(seq=1, id="u/stopped", kind=NoticeKind.stop, at=datetime.now(UTC),
                    summary="Stopped", text="t")  # fmt: skip
    pending = kept.model_copy(update={"notices": Notices(seq=1, items=[notice])})
    for name, shown in (("quiet", stopped), ("taken", kept), ("waiting", pending)):
        body = {"metadata": {"name": name, "resourceVersion": "5", "generation": 1},
                "status": shown.model_dump(mode="json")}  # fmt: skip
        queue.observe(NS, name, body)
    assert poked == [(NS, "waiting")] and triggered == []


async def test_a_receiver_down_for_several_retries_still_gets_every_monitors_messages(
    receiver: Receiver,
) -> None:
    """Two Monitors wait on one failing sink through several backoffs; both arrive once it
    answers again (a Monitor poked during a backoff keeps a retry of its own)."""
    api = new_api()
    add_sink(api, "team", receiver.url)
    ops_may_read(api)
    sender = Notifier(api, registry(api), HttpDelivery(timeout=5))
    MADE.append(sender)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    twin = api.get("Monitor", NS, "build")
    assert twin is not None
    twin["metadata"].update(name="build-2", uid="uid-twin")
    api.put("Monitor", twin)
    receiver.answer = 503
    running = asyncio.create_task(sender.run())
    try:
        sender.poke(NS, "build")
        sender.poke(NS, "build-2")
        async with asyncio.timeout(60):
            while api.count("patch_sink_status") < 1 or _attempts(api) < 6:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        receiver.answer = 200
        async with asyncio.timeout(90):
            while len(receiver.got) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert sorted(body["monitor"]["name"] for _, body in receiver.got) == ["build", "build-2"]


def _attempts(api: FakeApi) -> int:
    """Deliveries tried so far: each reads the sink's URL through its Secret or cache."""
    return sum(1 for method, _ in api.calls if method == "get_monitor")


async def test_a_malformed_url_fails_only_its_sink(receiver: Receiver, ticks: Ticks) -> None:
    api = new_api()
    add_sink(api, "broken", "http://[::1/x")
    add_sink(api, "team", receiver.url)
    ops_may_read(api)
    sender = notifier(api, registry(api), ticks)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    await sender.deliver(NS, "build")
    assert len(receiver.got) == 1
    broken = api.get("NotificationSink", NS, "broken")
    assert broken is not None
    message = broken["status"]["conditions"][0]["message"]
    assert "key broken of Secret goalkeeper-notifications is not an http or https URL" in message
    assert "::1" not in message


def test_slack_messages_keep_a_reports_markup_as_text() -> None:
    notice = Notice(
        seq=1,
        id="u/check-1",
        kind=NoticeKind.report,
        at=datetime(2026, 12, 1, tzinfo=UTC),
        summary="Report of check 1",
        text="<!channel> see <https://evil.example|goalkeeper approve> & more",
    )
    _, body = payload(SinkFormat.slack, notice, MonitorRef(NS, "build", "u"))
    sent = json.loads(body)
    assert "<!channel>" not in sent["text"] and "&lt;!channel&gt;" in sent["text"]
    assert "&amp; more" in sent["text"] and sent["unfurl_links"] is False


async def test_a_message_the_receiver_keeps_refusing_is_given_up_and_the_next_goes(
    receiver: Receiver, ticks: Ticks
) -> None:
    api = new_api()
    add_sink(api, "team", receiver.url, send=["report", "stop"])
    ops_may_read(api)
    sender = notifier(api, registry(api), ticks)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    receiver.refuse = "report"
    for _ in range(REFUSALS_BEFORE_SKIP):
        assert receiver.got == []
        await sender.deliver(NS, "build")
        ticks.now += BACKOFF_MAX
    assert [body["kind"] for _, body in receiver.got] == ["stop"]
    assert status(api)["notices"]["delivered"] == {"team": 2}


async def test_an_unavailable_receiver_is_never_given_up_on(
    receiver: Receiver, ticks: Ticks
) -> None:
    api = new_api()
    add_sink(api, "team", receiver.url)
    ops_may_read(api)
    sender = notifier(api, registry(api), ticks)
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), sinks=sender
    )
    await stopped_run(api, reconciler)
    receiver.answer = 429
    for _ in range(REFUSALS_BEFORE_SKIP * 2):
        await sender.deliver(NS, "build")
        ticks.now += BACKOFF_MAX
    assert "team" not in status(api)["notices"]["delivered"]
    receiver.answer = 200
    await sender.deliver(NS, "build")
    assert [body["kind"] for _, body in receiver.got] == ["stop"]
