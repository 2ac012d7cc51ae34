"""The operator's side of a check's trace: each step's Job names the check's trace in
TRACEPARENT, the accepted check's root span reaches an OTLP receiver on loopback with the ids
the steps name as their parent, and the report's Event names the trace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.observations import extraction, observation_dict
from tests.support.otlp_receiver import OtlpReceiver
from tests.unit.controller.test_reconciler import NS, Clock, finish, new_api, reports, status

from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.controller.telemetry import CheckSpans, step_settings
from goalkeeper.core.traces import check_trace


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.endpoint)
    yield found
    found.close()


def job_env(api: object, name: str) -> dict[str, str]:
    job = api.get("Job", NS, name)  # type: ignore[attr-defined]
    assert job is not None
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


async def test_a_check_is_one_trace_from_the_operator_to_its_steps(
    receiver: OtlpReceiver,
) -> None:
    api = new_api()
    spans = CheckSpans()
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=Clock(), spans=spans
    )
    await reconciler.reconcile(NS, "build")
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    trace = check_trace(monitor["metadata"]["uid"], 1, 1)
    observe = status(api)["step"]
    assert observe["kind"] == "observe" and observe["check"] == 1
    env = job_env(api, api.all("MonitorStep")[-1]["metadata"]["name"])
    assert env["TRACEPARENT"] == trace.traceparent
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == receiver.endpoint

    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    spans.close()
    (root,) = [s for s in receiver.received() if s.name == "goalkeeper.check 1"]
    assert (root.trace_id, root.span_id, root.parent_id) == (trace.trace_id, trace.root_span_id, "")
    assert root.service == "goalkeeper-operator"
    assert root.attributes["goalkeeper.route"] == "wait"
    assert root.attributes["goalkeeper.monitor"] == "build"
    (report,) = reports(api)
    assert report["message"].endswith(f"(trace {trace.trace_id})")
    # Names and outcomes only: the task and the report stay in the cluster.
    assert b"nightly build" not in receiver.all_bytes()


def test_untraced_no_step_gets_tracing_settings() -> None:
    assert step_settings({}) == {}
    assert CheckSpans({}).trace("uid", 1, 1) is None
    assert step_settings(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "a=b"}
    ) == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    off = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    assert step_settings(off) == {}
