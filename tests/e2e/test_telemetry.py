"""Traces end to end: with an OTLP endpoint on the operator, a check is one trace on a
receiver on loopback, from the operator's root span through the step's own spans (the
step runs as its Job's pod, over real HTTP to the scripted model), and `kubectl` shows the
trace id on the MonitorStep and the report's Event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from goalkeeper.core.traces import check_trace
from tests.e2e.harness import Cluster, OperatorProcess, Scenario, wait_until
from tests.e2e.test_operator import complete
from tests.support.model_server import ModelServer
from tests.support.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.cluster


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    yield found
    found.close()


def test_a_check_is_one_trace_from_the_operator_through_its_step(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    receiver: OtlpReceiver,
    control_plane: Any,
) -> None:
    operator.restart_with(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    cluster.target(suspended=False, seconds=0)
    model.default = Scenario(cluster.ns, complete)
    # A stop rule only a model can judge: the check asks the model, whose spans are traced.
    cluster.create_monitor(stopWhen="Stop when the nightly build looks finished.")
    stopped = wait_until(cluster.stopped, 90, "the check", operator.logs)
    assert stopped["checks"] == 1
    monitor = cluster.monitor()
    assert monitor is not None
    trace = check_trace(monitor["metadata"]["uid"], monitor["metadata"]["generation"], 1)

    (observe,) = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    assert observe["status"]["traceId"] == trace.trace_id

    def whole() -> list[Any] | None:
        spans = [s for s in receiver.received() if s.trace_id == trace.trace_id]
        names = {s.name for s in spans}
        wanted = {"goalkeeper.check 1", "goalkeeper.step observe"}
        return spans if wanted <= names and any(n.startswith("chat") for n in names) else None

    spans = wait_until(whole, 60, "the check's spans", operator.logs)
    (root,) = [s for s in spans if s.name == "goalkeeper.check 1"]
    (step,) = [s for s in spans if s.name == "goalkeeper.step observe"]
    (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert (root.service, root.span_id, root.parent_id) == (
        "goalkeeper-operator",
        trace.root_span_id,
        "",
    )
    assert (step.service, step.parent_id) == ("goalkeeper-step", root.span_id)
    assert agent.parent_id == step.span_id
    chats = [s for s in spans if s.name.startswith("chat")]
    assert all(int(s.attributes["gen_ai.usage.input_tokens"]) > 0 for s in chats)
    assert root.attributes["goalkeeper.goal"] == "complete"

    (report,) = cluster.reports(1)
    assert report.message.endswith(f"(trace {trace.trace_id})")
    described = control_plane.kubectl("describe", "monitor", "build", "-n", cluster.ns).stdout
    assert trace.trace_id in described
    # What the step read and answered stays in the cluster.
    leaked = [(s.name, k) for s in receiver.received() for k, v in s.attributes.items()
              if "Job build" in str(v)]  # fmt: skip
    assert not leaked and b"Job build" not in receiver.all_bytes(), leaked
