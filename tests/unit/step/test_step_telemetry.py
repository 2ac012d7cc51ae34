"""The step's traces: its spans reach an OTLP receiver on loopback under the check's trace,
as children of the root span the operator named, with the GenAI conventions' spans and
token counts, and without prompts or answers unless the content switch says so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.observations import observation_dict
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.step_fakes import step_input
from tests.unit.step.test_step_agent import final, scripted, tool_call, tools

from goalkeeper.core.traces import check_trace, trace_of
from goalkeeper.step.agent import RunLimits, run_observe
from goalkeeper.step.processes import child_environment
from goalkeeper.step.telemetry import traced

TRACE = check_trace("uid-7", 2, 4)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.endpoint)
    monkeypatch.setenv("TRACEPARENT", TRACE.traceparent)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    yield found
    found.close()


async def observed() -> None:
    model, _ = scripted(
        tool_call("k8s_get", kind="Deployment", name="web"), final(observation_dict("wait"))
    )
    outcome = await run_observe(step_input(), model, tools(), limits=RunLimits())
    assert outcome.ok, outcome.error


async def test_the_steps_spans_hang_under_the_checks_root_span(receiver: OtlpReceiver) -> None:
    with traced("observe", "shop", "web-3-observe-abc") as trace_id:
        await observed()
    assert trace_id == TRACE.trace_id
    spans = receiver.received()
    names = [s.name for s in spans]
    assert {s.trace_id for s in spans} == {TRACE.trace_id}, names
    (step,) = [s for s in spans if s.name == "goalkeeper.step observe"]
    assert step.parent_id == TRACE.root_span_id and step.service == "goalkeeper-step"
    (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent.parent_id == step.span_id
    chats = [s for s in spans if s.name.startswith("chat")]
    tools_run = [s for s in spans if s.name.startswith("execute_tool")]
    assert len(chats) == 2 and tools_run, names
    assert all(s.parent_id == agent.span_id for s in chats)
    assert sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in chats) == 1800
    assert sum(int(s.attributes["gen_ai.usage.output_tokens"]) for s in chats) == 150
    # No prompt, answer or tool result leaves the step: not the task, not the report.
    assert not [s.name for s in spans if "gen_ai.tool.definitions" in s.attributes]
    sent = receiver.all_bytes()
    assert step_input().task.encode()[:40] not in sent
    assert observation_dict("wait")["report"].encode() not in sent


async def test_the_content_switch_exports_prompts(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    with traced("observe", "shop", "web-3-observe-abc"):
        await observed()
    assert observation_dict("wait")["report"].encode() in receiver.all_bytes()
    assert [s for s in receiver.received() if "gen_ai.tool.definitions" in s.attributes]


def test_untraced_the_trace_id_comes_from_traceparent_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("TRACEPARENT", TRACE.traceparent)
    with traced("act", "shop", "x") as trace_id:
        assert trace_id == TRACE.trace_id
    assert trace_of("00-" + "0" * 32 + "-" + "1" * 16 + "-01") is None
    assert trace_of("garbage") is None


def test_a_child_process_gets_no_exporter_headers() -> None:
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer t0k", "PATH": "/bin"}
    assert child_environment(env) == {"PATH": "/bin"}
