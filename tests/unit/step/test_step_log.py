"""The step log: one JSON object per line on stdout, and never a secret in it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from tests.support.observations import observation_dict
from tests.support.step_fakes import FakeKube, deployment, secret, step_input

from goalkeeper.core.models import StepErrorKind, StepUsage
from goalkeeper.step.agent import RunLimits, StepOutcome, run_observe
from goalkeeper.step.model import StepModel
from goalkeeper.step.steplog import StepLog, result_outcome, step_end, summarize_args
from goalkeeper.step.tools import StepTools, ToolConfig

FID = "0123456789abcdef"
KEY = "sk-planted-model-key-0001"


def lines(out: str) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in out.splitlines() if line.strip()]
    for doc in docs:
        assert list(doc)[:2] == ["ts", "event"]
    return docs


def tools(kube: FakeKube) -> StepTools:
    # An allowed host offers http_get; the planted URL's host is refused before any connect.
    config = ToolConfig(fence_id=FID, namespace="shop", http_allowed_hosts=("127.0.0.1",))
    return StepTools(kube, config)


def turn(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(name, args) for name, args in calls],
        usage=RequestUsage(input_tokens=700, output_tokens=40),
    )


def scripted(*responses: ModelResponse) -> FunctionModel:
    queue = list(responses)

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return queue.pop(0)

    return FunctionModel(fn)


async def test_each_request_and_tool_call_is_one_line_without_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOALKEEPER_MODEL_API_KEY", KEY)
    kube = FakeKube([deployment(), secret()])
    kube.logs_text[("shop", "web-1")] = f"password=planted-log-secret {KEY}\n"
    model = scripted(
        turn(
            ("k8s_get", {"kind": "Secret", "name": "db"}),
            ("pod_logs", {"pod": "web-1"}),
        ),
        turn(
            (
                "http_get",
                {
                    "url": f"http://u:planted-url-password@10.0.0.1/x?token=planted-query&k={KEY}",
                    "headers": {"Authorization": "Bearer planted-header-secret"},
                },
            ),
            ("k8s_list", {"kind": "Pod", "label_selector": "api-key=planted-selector"}),
        ),
        ModelResponse(
            parts=[ToolCallPart("final_result", observation_dict("wait"))],
            usage=RequestUsage(input_tokens=900, output_tokens=120),
        ),
    )
    outcome = await run_observe(step_input(), model, tools(kube), log=StepLog())
    assert outcome.ok, outcome.error
    out = capsys.readouterr().out
    for planted in (
        "aHVudGVyMg==",
        "s3cr3t-token",
        "planted-log-secret",
        "planted-url-password",
        "planted-query",
        "planted-header-secret",
        "planted-selector",
        KEY,
        "Keep Deployment web",  # the task, from the prompt
        "UNTRUSTED_TARGET_DATA",  # no tool result
    ):
        assert planted not in out, planted
    docs = lines(out)
    assert [d["event"] for d in docs] == [
        "model_request",
        "tool_call",
        "tool_call",
        "model_request",
        "tool_call",
        "tool_call",
        "model_request",
    ]
    first = docs[0]
    assert (first["n"], first["input_tokens"], first["output_tokens"]) == (1, 700, 40)
    assert isinstance(first["ms"], int)
    calls = {d["tool"]: d for d in docs if d["event"] == "tool_call"}
    assert calls["k8s_get"]["args"] == "kind=Secret name=db"
    assert calls["k8s_get"]["outcome"] == "ok" and calls["k8s_get"]["result_chars"] > 100
    assert calls["http_get"]["outcome"] == "refused"  # not in GOALKEEPER_HTTP_ALLOWED_HOSTS
    assert "headers={Authorization}" in calls["http_get"]["args"]
    # Calls of one response run concurrently: each is logged once, in the order it ends.
    assert sorted(d["n"] for d in docs if d["event"] == "tool_call") == [1, 2, 3, 4]
    assert docs[-1]["n"] == 3 and docs[-1]["output_tokens"] == 120


async def test_retries_limits_and_failed_requests_are_logged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    attempts = 0

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ModelHTTPError(503, "function", {"error": "planted-body-text"})
        return turn(("k8s_get", {"kind": "Deployment", "name": f"web-{attempts}"}))

    async def sleep(seconds: float) -> None:
        return None

    model = StepModel(FunctionModel(fn), retries=2, backoff_seconds=0.5, sleep=sleep)
    outcome = await run_observe(
        step_input(), model, tools(FakeKube([deployment()])), limits=RunLimits(request_limit=2)
    )
    assert outcome.error_kind is StepErrorKind.limits
    out = capsys.readouterr().out
    assert "planted-body-text" not in out
    docs = lines(out)
    assert [d["event"] for d in docs] == [
        "retry",
        "model_request",
        "tool_call",
        "model_request",
        "tool_call",
        "limit",
    ]
    assert {k: docs[0][k] for k in ("n", "attempt", "error", "delay_s")} == {
        "n": 1,
        "attempt": 1,
        "error": "ModelHTTPError HTTP 503",
        "delay_s": 0.5,
    }
    assert docs[-1] | {"ts": None} == {
        "ts": None,
        "event": "limit",
        "setting": "GOALKEEPER_REQUEST_LIMIT",
        "value": 2,
    }


async def test_a_rejected_final_answer_is_logged(capsys: pytest.CaptureFixture[str]) -> None:
    bad = {**observation_dict("wait"), "route": "sideways"}
    model = scripted(
        ModelResponse(parts=[ToolCallPart("final_result", bad)]),
        ModelResponse(parts=[ToolCallPart("final_result", observation_dict("wait"))]),
    )
    outcome = await run_observe(step_input(), model, tools(FakeKube()))
    assert outcome.ok, outcome.error
    events = [d["event"] for d in lines(capsys.readouterr().out)]
    assert events == ["model_request", "output_invalid", "model_request"]


def test_step_end_line(capsys: pytest.CaptureFixture[str]) -> None:
    usage = StepUsage(requests=3, toolCalls=4, inputTokens=100, outputTokens=10, costUsd=0.01)
    step_end(StepLog(), "observe", StepOutcome(observation_dict("wait"), usage), 12.34567)
    step_end(
        StepLog(),
        "act",
        StepOutcome(None, StepUsage(), f"boom {KEY}", StepErrorKind.provider),
        1.0,
    )
    ok, failed = lines(capsys.readouterr().out)
    assert ok | {"ts": None} == {
        "ts": None,
        "event": "step_end",
        "kind": "observe",
        "ok": True,
        "route": "wait",
        "s": 12.346,
        "requests": 3,
        "tool_calls": 4,
        "input_tokens": 100,
        "output_tokens": 10,
        "cost_usd": 0.01,
    }
    assert failed["ok"] is False and failed["error_kind"] == "provider"
    assert "route" not in failed and "boom" not in json.dumps(failed)


def test_argument_summaries_are_short_and_redacted() -> None:
    assert summarize_args({"kind": "Job", "name": "x", "namespace": None}) == "kind=Job name=x"
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
    assert summarize_args({"manifest": manifest, "force": True}) == (
        "manifest=ConfigMap/cm force=True"
    )
    assert summarize_args({"patch": {"data": {"password": "hunter2"}}}) == "patch={data}"
    assert summarize_args({"argv": ["tool", "--password=hunter2"]}) == "argv=[2 items]"
    long = summarize_args({"path": "/" + "a" * 500})
    assert len(long) <= 90 and long.endswith("…")
    assert "hunter2" not in summarize_args({"url": "http://h/?password=hunter2"})


def test_outcomes_read_from_the_answer() -> None:
    assert result_outcome("REFUSED: no") == "refused"
    assert result_outcome("ERROR: bad") == "error"
    assert result_outcome(f'<<<UNTRUSTED_TARGET_DATA id={FID} source="x">>>\nERROR: 404') == (
        "error"
    )
    assert result_outcome("(same call as before; result repeated, nothing re-read)\nx") == (
        "repeated"
    )
    assert result_outcome(f'<<<UNTRUSTED_TARGET_DATA id={FID} source="x">>>\nfine') == "ok"
