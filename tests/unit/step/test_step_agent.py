"""The agent core with pydantic-ai's FunctionModel: routes, corrections, limits, usage, tools."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from tests.support.observations import AUTHORIZED, action, contract, observation_dict
from tests.support.step_fakes import FakeKube, deployment, failed_job, secret, step_input

from goalkeeper.core.models import (
    ActionResult,
    CostSource,
    Observation,
    StepErrorKind,
    StepUsage,
    TypedGrant,
)
from goalkeeper.step import prompts
from goalkeeper.step.agent import RunLimits, run_act, run_observe
from goalkeeper.step.kube import KubeError
from goalkeeper.step.model import StepModel
from goalkeeper.step.redact import REDACTED
from goalkeeper.step.tools import StepTools, ToolConfig

FID = "feedfacecafebeef"
Script = list[Callable[[list[ModelMessage], AgentInfo], ModelResponse] | ModelResponse]


def tools(kube: FakeKube | None = None, **config: Any) -> StepTools:
    return StepTools(
        kube if kube is not None else FakeKube([deployment()]),
        ToolConfig(fence_id=FID, namespace="shop", **config),
    )


def scripted(*steps: ModelResponse | Callable[..., ModelResponse]) -> tuple[FunctionModel, list]:
    """A FunctionModel answering from a script; returns it and the list of message lists seen."""
    seen: list[list[ModelMessage]] = []
    queue = list(steps)

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        step = queue.pop(0)
        return step(messages, info) if callable(step) else step

    return FunctionModel(fn), seen


def final(answer: dict[str, Any]) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart("final_result", answer)],
        usage=RequestUsage(input_tokens=1000, output_tokens=100),
    )


def tool_call(name: str, /, **args: Any) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(name, args)], usage=RequestUsage(input_tokens=800, output_tokens=50)
    )


def last_parts(messages: list[ModelMessage]) -> list[Any]:
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    return list(last.parts)


@pytest.mark.parametrize("route", ["wait", "act", "stop"])
async def test_observe_returns_each_route(route: str) -> None:
    answer = observation_dict(route)
    model, seen = scripted(final(answer))
    outcome = await run_observe(step_input(), model, tools())
    assert outcome.ok, outcome.error
    assert outcome.result is not None
    obs = Observation.model_validate(outcome.result)
    assert obs.route.value == route
    assert outcome.result == Observation.model_validate(answer).model_dump(
        mode="json", exclude_none=True
    )
    assert outcome.usage.requests == 1
    # the system prompt is the observe prompt; the user message carries the check and fence id
    first = seen[0][0]
    assert isinstance(first, ModelRequest)
    assert first.instructions == prompts.OBSERVE_SYSTEM_PROMPT
    user = str(first.parts[-1].content)
    assert "Check 3 of at most 50" in user
    assert f"Fence id for this run: {FID}" in user


def test_observe_prompt_starts_with_what_a_monitor_keeps_and_states_the_authority_once() -> None:
    recorded: dict[str, Any] = {"contract": contract(), "authorizedActions": AUTHORIZED}
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def prompt(check: int, route: str, fence_id: str) -> str:
        step = step_input(check=check, previousObservation=observation_dict(route), **recorded)
        return prompts.observe_user_prompt(step, fence_id=fence_id, namespace="shop", now=now)

    first, second = prompt(3, "wait", FID), prompt(4, "act", "0123456789abcdef")
    kept, marker, _ = first.partition("## This check")
    # the same from check to check but for the run's fence id, which fences the authority
    assert marker and second.startswith(kept.replace(FID, "0123456789abcdef"))
    for same in (step_input().task, step_input().stopWhen, contract()["goal"], "resume-build"):
        assert same in kept
    # the previous observation comes without its own copy of the pinned authority
    assert first.count(contract()["goal"]) == 1
    assert first.count(AUTHORIZED[0]["description"]) == 1
    assert observation_dict("wait")["report"] in first.partition(kept)[2]
    assert "Check 4 of at most 50" in second and "0123456789abcdef" in second


def test_observe_prompt_says_what_woke_the_check_and_that_a_person_can_approve() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    plain = prompts.observe_user_prompt(step_input(), fence_id=FID, namespace="shop", now=now)
    assert "## Why this check runs now" not in plain and "## Approvals" not in plain
    step = step_input(wokenBy="Job/build: Complete", approvals=True)
    told = prompts.observe_user_prompt(step, fence_id=FID, namespace="shop", now=now)
    assert "## Why this check runs now\nBefore its timer: Job/build: Complete" in told
    assert "## Approvals\nA person can approve a paid action" in told


async def test_invalid_answer_is_sent_back_for_correction_then_accepted() -> None:
    bad = observation_dict("act")
    del bad["action"]  # route act without an action request
    good = observation_dict("act")

    def check_feedback(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = last_parts(messages)
        # pydantic-ai answers the output tool call with the validation errors
        assert any(
            isinstance(p, RetryPromptPart | ToolReturnPart) and p.tool_name == "final_result"
            for p in parts
        ), parts
        feedback = json.dumps([str(p.content) for p in parts])
        assert "action is required when route is 'act'" in feedback
        return final(good)

    model, seen = scripted(final(bad), check_feedback)
    outcome = await run_observe(step_input(), model, tools())
    assert outcome.ok, outcome.error
    assert outcome.result is not None and outcome.result["route"] == "act"
    assert len(seen) == 2
    assert outcome.usage.requests == 2


async def test_answers_that_stay_invalid_fail_the_step_as_invalid_output() -> None:
    bad = {**observation_dict("wait"), "route": "sideways"}
    model, seen = scripted(*[final(bad)] * 5)
    outcome = await run_observe(step_input(), model, tools(), limits=RunLimits(output_retries=2))
    assert not outcome.ok
    assert outcome.error_kind is StepErrorKind.invalidOutput
    assert len(seen) == 3  # the first answer and two corrections


def distinct_reads(n: int) -> list[ModelResponse]:
    """Tool-call turns that each read something else, so none is answered as a repeat."""
    return [tool_call("k8s_get", kind="Deployment", name=f"web-{i}") for i in range(n)]


async def test_request_limit_fails_the_step_with_limits() -> None:
    model, seen = scripted(*distinct_reads(10))
    outcome = await run_observe(step_input(), model, tools(), limits=RunLimits(request_limit=3))
    assert not outcome.ok
    assert outcome.error_kind is StepErrorKind.limits
    assert outcome.error == (
        "The step made the 3 model requests it may make (GOALKEEPER_REQUEST_LIMIT=3) without "
        "a final answer. Raise GOALKEEPER_REQUEST_LIMIT, or make the task quicker to check."
    )
    assert outcome.usage.requests == 3
    assert outcome.usage.toolCalls == 3
    assert len(seen) == 3


async def test_tool_call_limit_fails_the_step_with_limits() -> None:
    model, _ = scripted(*distinct_reads(10))
    outcome = await run_observe(step_input(), model, tools(), limits=RunLimits(tool_calls_limit=2))
    assert outcome.error_kind is StepErrorKind.limits
    assert (outcome.error or "").startswith(
        "The model asked for more tool calls than the 2 a step may make "
        "(GOALKEEPER_TOOL_CALLS_LIMIT=2). Raise GOALKEEPER_TOOL_CALLS_LIMIT"
    )


async def test_tool_result_reaches_the_model_fenced_and_secrets_are_redacted() -> None:
    kube = FakeKube([deployment(), secret()])

    def after_tools(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in last_parts(messages) if isinstance(p, ToolReturnPart)]
        assert {p.tool_name for p in returns} == {"k8s_get"}
        for p in returns:
            text = str(p.content)
            if not text.startswith("<<<"):  # the tool's own state line comes first
                lead, text = text.split("\n", 1)
                assert "<<<" not in lead and "\n" not in lead
            assert text.startswith(f"<<<UNTRUSTED_TARGET_DATA id={FID}")
            assert text.endswith(f"<<<END_UNTRUSTED_TARGET_DATA id={FID}>>>")
            assert "aHVudGVyMg==" not in text and "s3cr3t-token" not in text
            assert "managedFields" not in text
        joined = "\n".join(str(p.content) for p in returns)
        assert REDACTED in joined and "password" in joined
        assert "replicas: 2" in joined
        return final(observation_dict("wait"))

    model, _ = scripted(
        ModelResponse(
            parts=[
                ToolCallPart("k8s_get", {"kind": "Deployment", "name": "web"}),
                ToolCallPart("k8s_get", {"kind": "Secret", "name": "db"}),
            ]
        ),
        after_tools,
    )
    outcome = await run_observe(step_input(), model, tools(kube))
    assert outcome.ok, outcome.error
    assert outcome.usage.toolCalls == 2
    assert ("get", ("apps/v1", "Deployment", "web", "shop")) in kube.calls


async def test_observe_has_no_write_tools_and_refuses_mutating_verbs() -> None:
    kube = FakeKube([deployment()])

    def check(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        names = {t.name for t in info.function_tools}
        assert names == {
            "k8s_get",
            "k8s_list",
            "pod_logs",
            "k8s_events",
            "k8s_raw",
        }
        return tool_call(
            "k8s_raw",
            path="/apis/apps/v1/namespaces/shop/deployments/web",
            method="PATCH",
            body={"spec": {"replicas": 0}},
        )

    def after(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        [ret] = [p for p in last_parts(messages) if isinstance(p, ToolReturnPart)]
        assert str(ret.content).startswith("REFUSED: this is a read-only observe step")
        return final(observation_dict("wait"))

    model, _ = scripted(check, after)
    t = tools(kube)
    outcome = await run_observe(step_input(), model, t)
    assert outcome.ok
    assert kube.writes() == []
    assert not any(c[0] == "request" for c in kube.calls)
    assert t.refusals == ["PATCH /apis/apps/v1/namespaces/shop/deployments/web"]


async def test_act_scales_and_returns_an_action_result() -> None:
    kube = FakeKube([deployment(replicas=0)])

    def verify(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert "k8s_scale" in {t.name for t in info.function_tools}
        assert "run_command" not in {t.name for t in info.function_tools}
        return tool_call("k8s_get", kind="Deployment", name="web")

    model, seen = scripted(
        tool_call("k8s_scale", kind="Deployment", name="web", replicas=2),
        verify,
        final(
            {
                "outcome": "succeeded",
                "evidence": "spec.replicas is 2",
                "changed": ["deployments/web"],
            }
        ),
    )
    outcome = await run_act(
        step_input("act"), model, tools(kube, mutation_set=("deployments/web",))
    )
    assert outcome.ok, outcome.error
    assert ActionResult.model_validate(outcome.result).outcome.value == "succeeded"
    assert kube.objects[("Deployment", "shop", "web")]["spec"]["replicas"] == 2
    first = seen[0][0]
    assert isinstance(first, ModelRequest) and first.instructions == prompts.ACT_SYSTEM_PROMPT
    user = str(first.parts[-1].content)
    assert "Scale Deployment web to 2 replicas." in user
    assert "- deployments/web" in user


def typed(verb: str, kind: str, name: str, **more: Any) -> TypedGrant:
    return TypedGrant.model_validate(
        {
            "id": f"{verb}-{name}",
            "verb": verb,
            "object": {"kind": kind, "name": name},
            "quote": f"You may {verb} {kind} {name}.",
            **more,
        }
    )


async def test_a_typed_rerun_is_one_call_by_code_with_no_model_request() -> None:
    kube = FakeKube([failed_job()])
    rerun = action(action="Re-run Job export.", mutationSet=["jobs/export"])
    model, seen = scripted()  # any request would fail the step: none is made
    opted_in = tools(kube, mutation_set=("jobs/export",), extra_verbs=("create", "delete"))
    grant = typed("rerun", "Job", "export")
    outcome = await run_act(step_input("act", action=rerun, grant=grant), model, opted_in)
    assert outcome.ok, outcome.error
    assert seen == [] and outcome.usage.requests == 0
    assert outcome.result is not None and outcome.result["outcome"] == "succeeded"
    assert "read back: it holds" in outcome.result["evidence"]
    assert [c[0] for c in kube.writes() if c[0] in ("delete", "create")] == ["delete", "create"]


async def test_a_typed_restart_is_stamped_and_read_back_and_a_scale_sets_its_count() -> None:
    kube = FakeKube([deployment()])
    restart = action(action="Restart Deployment web.", mutationSet=["deployments/web"])
    model, seen = scripted()
    limited = tools(kube, mutation_set=("deployments/web",))
    grant = typed("restart", "Deployment", "web")
    outcome = await run_act(step_input("act", action=restart, grant=grant), model, limited)
    assert outcome.ok and outcome.result is not None, outcome.error
    assert outcome.result["outcome"] == "succeeded" and seen == []
    template = kube.objects[("Deployment", "shop", "web")]["spec"]["template"]
    assert "kubectl.kubernetes.io/restartedAt" in template["metadata"]["annotations"]
    scale = typed("scale", "Deployment", "web", replicas=5)
    outcome = await run_act(step_input("act", action=restart, grant=scale), model, limited)
    assert outcome.result is not None and outcome.result["outcome"] == "succeeded"
    assert kube.objects[("Deployment", "shop", "web")]["spec"]["replicas"] == 5


async def test_a_typed_write_the_api_server_refuses_is_failed_with_its_words() -> None:
    class Refusing(FakeKube):
        def patch(self, *args: Any, **kw: Any) -> Any:
            raise KubeError(403, 'HTTP 403: jobs.batch "export" is forbidden')

    kube = Refusing([failed_job()])
    pause = action(action="Suspend Job export.", mutationSet=["jobs/export"])
    model, _ = scripted()
    grant = typed("suspend", "Job", "export")
    limited = tools(kube, mutation_set=("jobs/export",))
    outcome = await run_act(step_input("act", action=pause, grant=grant), model, limited)
    assert outcome.result is not None and outcome.result["outcome"] == "failed"
    evidence = outcome.result["evidence"]
    assert evidence.startswith("Job export: ERROR: Kubernetes API") and "is forbidden" in evidence


@pytest.mark.parametrize(
    ("marks", "owner"),
    [
        ({"labels": {"argocd.argoproj.io/instance": "shop-web"}}, "Argo CD (application shop-web)"),
        (
            {"annotations": {"argocd.argoproj.io/tracking-id": "shop:apps/Deployment:shop/web"}},
            "Argo CD (application shop)",
        ),
        ({"labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}}, "Flux (Kustomization apps)"),
    ],
)
async def test_a_typed_act_on_what_gitops_keeps_in_sync_is_refused_unless_the_words_know(
    marks: dict[str, Any], owner: str
) -> None:
    managed = deployment()
    managed["metadata"].update(marks)
    kube = FakeKube([managed])
    restart = action(action="Restart Deployment web.", mutationSet=["deployments/web"])
    model, _ = scripted()
    limited = tools(kube, mutation_set=("deployments/web",))
    grant = typed("restart", "Deployment", "web")
    outcome = await run_act(step_input("act", action=restart, grant=grant), model, limited)
    assert outcome.result is not None and outcome.result["outcome"] == "blocked"
    assert owner in outcome.result["evidence"] and kube.writes() == []
    known = grant.model_copy(update={"gitopsAcknowledged": True})
    outcome = await run_act(step_input("act", action=restart, grant=known), model, limited)
    assert outcome.result is not None and outcome.result["outcome"] == "succeeded"


async def test_act_write_outside_the_mutation_set_is_refused_and_reported() -> None:
    progress = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "build-progress", "namespace": "shop"},
        "data": {"done": "3"},
    }
    kube = FakeKube([deployment(replicas=0), progress])

    def after(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        scaled, refused = (
            str(p.content) for p in last_parts(messages) if isinstance(p, ToolReturnPart)
        )
        assert "spec.replicas is now 2" in scaled
        assert refused.startswith(
            "REFUSED: configmaps/build-progress is not in the action's mutation set "
            "(deployments/web)"
        )
        # the model claims it changed both
        return final(
            {
                "outcome": "succeeded",
                "evidence": "Scaled web and marked progress done.",
                "changed": ["deployments/web", "configmaps/build-progress"],
            }
        )

    model, _ = scripted(
        ModelResponse(
            parts=[
                ToolCallPart("k8s_scale", {"kind": "Deployment", "name": "web", "replicas": 2}),
                ToolCallPart(
                    "k8s_patch",
                    {
                        "kind": "ConfigMap",
                        "name": "build-progress",
                        "patch": {"data": {"done": "27"}},
                    },
                ),
            ]
        ),
        after,
    )
    t = tools(kube, mutation_set=("deployments/web",))
    outcome = await run_act(step_input("act"), model, t)
    assert outcome.ok, outcome.error
    assert outcome.result is not None
    assert outcome.result["evidence"] == (
        "Scaled web and marked progress done.\nrefused writes: k8s_patch configmaps/build-progress"
    )
    ActionResult.model_validate(outcome.result)
    assert kube.objects[("ConfigMap", "shop", "build-progress")]["data"] == {"done": "3"}
    assert [c[0] for c in kube.writes()] == ["patch"]  # the scale only


async def test_refused_writes_fit_the_evidence_bound_and_reach_a_failed_step() -> None:
    from goalkeeper.step.agent import StepOutcome, with_refusals

    long = StepOutcome({"outcome": "failed", "evidence": "x" * 4000}, StepUsage())
    bounded = with_refusals(long, ["k8s_delete jobs/other"] * 500)
    assert bounded.result is not None
    evidence = bounded.result["evidence"]
    assert len(evidence) <= 4000 and "\nrefused writes: k8s_delete jobs/other" in evidence
    ActionResult.model_validate(bounded.result)
    failed = with_refusals(
        StepOutcome(None, StepUsage(), "usage limit", StepErrorKind.limits), ["k8s_delete jobs/x"]
    )
    assert failed.error == "usage limit; refused writes: k8s_delete jobs/x"


async def test_act_tools_must_be_limited_to_the_actions_mutation_set() -> None:
    model, seen = scripted()
    outcome = await run_act(step_input("act"), model, tools(mutation_set=("deployments/*",)))
    assert outcome.error_kind is StepErrorKind.internal
    assert seen == []


async def test_usage_cost_unknown_without_prices() -> None:
    model, _ = scripted(final(observation_dict("wait")))
    outcome = await run_observe(step_input(), StepModel(model), tools())
    assert outcome.usage.costUsd is None
    assert outcome.usage.costSource is CostSource.unknown
    assert outcome.usage.inputTokens == 1000 and outcome.usage.outputTokens == 100


async def test_usage_cost_from_configured_prices_per_request() -> None:
    model, _ = scripted(
        tool_call("k8s_get", kind="Deployment", name="web"), final(observation_dict("wait"))
    )
    priced = StepModel(model, prices=(Decimal("3"), Decimal("15")))
    outcome = await run_observe(step_input(), priced, tools())
    assert outcome.ok
    # (800 + 1000) input tokens at $3/M, (50 + 100) output tokens at $15/M
    expected = (1800 * 3 + 150 * 15) / 1_000_000
    assert outcome.usage.costUsd == pytest.approx(expected)
    assert outcome.usage.costSource is CostSource.configured
    assert [p.source for p in priced.ledger.priced] == [CostSource.configured] * 2


async def test_configured_cost_limit_stops_the_run() -> None:
    model, seen = scripted(*distinct_reads(10))
    priced = StepModel(model, prices=(Decimal("100"), Decimal("100")))  # $0.085 per request
    outcome = await run_observe(
        step_input(), priced, tools(), limits=RunLimits(cost_limit_usd=Decimal("0.2"))
    )
    assert outcome.error_kind is StepErrorKind.limits
    assert "ceiling of 0.2 US dollars (GOALKEEPER_COST_LIMIT_USD=0.2)" in (outcome.error or "")
    assert len(seen) == 3  # the third request pushes the cost over the ceiling
    assert outcome.usage.costSource is CostSource.configured
    assert outcome.usage.costUsd == pytest.approx(3 * 850 * 100 / 1_000_000)


async def test_provider_errors_are_retried_with_backoff_then_succeed() -> None:
    delays: list[float] = []
    attempts = 0

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal attempts
        attempts += 1
        if attempts <= 2:
            raise ModelHTTPError(503, "function", {"error": "overloaded"})
        return final(observation_dict("wait"))

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    model = StepModel(FunctionModel(fn), retries=3, backoff_seconds=0.5, sleep=sleep)
    outcome = await run_observe(step_input(), model, tools())
    assert outcome.ok, outcome.error
    assert delays == [0.5, 1.0]
    assert outcome.usage.requests == 1


async def test_provider_errors_beyond_the_retries_fail_the_step() -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(500, "function", {"error": "boom"})

    async def sleep(seconds: float) -> None:
        return None

    model = StepModel(FunctionModel(fn), retries=2, sleep=sleep)
    outcome = await run_observe(step_input(), model, tools())
    assert outcome.error_kind is StepErrorKind.provider
    assert (outcome.error or "").startswith(
        "The model server at the provider's API failed with HTTP 500 on all 3 attempts"
    )
    assert "Raise GOALKEEPER_PROVIDER_RETRIES (now 2)" in (outcome.error or "")


async def test_client_errors_are_not_retried() -> None:
    calls = 0

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        raise ModelHTTPError(401, "function", {"error": "bad key"})

    model = StepModel(FunctionModel(fn), retries=3)
    outcome = await run_observe(step_input(), model, tools())
    assert outcome.error_kind is StepErrorKind.configuration
    assert "refused the API key (HTTP 401" in (outcome.error or "")
    assert "attempts" not in (outcome.error or "")  # there was one
    assert calls == 1


async def test_act_without_an_action_is_a_configuration_error() -> None:
    model, seen = scripted()
    outcome = await run_act(step_input("observe"), model, tools())
    assert outcome.error_kind is StepErrorKind.configuration
    assert seen == []


def test_genai_prices_price_each_request_of_a_known_model() -> None:
    from goalkeeper.step.model import genai_price

    priced = ModelResponse(
        parts=[],
        model_name="gpt-4o",
        provider_name="openai",
        usage=RequestUsage(input_tokens=1_000_000, output_tokens=0),
    )
    price = genai_price(priced)
    assert price is not None and price > 0
    unknown = ModelResponse(
        parts=[],
        model_name="my-self-hosted-model",
        provider_name="openai",
        provider_url="http://127.0.0.1:8000/v1",
        usage=RequestUsage(input_tokens=1000, output_tokens=10),
    )
    assert genai_price(unknown) is None


async def test_unpriced_provider_is_unknown_and_the_ledger_sums_priced_requests() -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return final(observation_dict("wait"))

    model = StepModel(FunctionModel(fn, model_name="gpt-4o"))
    # FunctionModel answers as the 'function' provider, which genai-prices does not know:
    outcome = await run_observe(step_input(), model, tools())
    assert outcome.usage.costSource is CostSource.unknown
    # a ledger of priced requests sums them
    from goalkeeper.step.model import PricedRequest

    model.ledger.priced = [
        PricedRequest(CostSource.genaiPrices, Decimal("0.01")),
        PricedRequest(CostSource.genaiPrices, Decimal("0.02")),
    ]
    assert model.ledger.total() == (Decimal("0.03"), CostSource.genaiPrices)
    model.ledger.priced.append(PricedRequest(CostSource.unknown, None))
    assert model.ledger.total() == (None, CostSource.unknown)


async def test_a_worked_example_ends_each_system_prompt_only_when_asked() -> None:
    model, seen = scripted(final(observation_dict("wait")), final(observation_dict("wait")))
    await run_observe(step_input(), model, tools(), worked_example=True)
    await run_observe(step_input(), model, tools())
    with_example, without = (messages[0] for messages in seen)
    assert isinstance(with_example, ModelRequest) and isinstance(without, ModelRequest)
    assert with_example.instructions == (
        f"{prompts.OBSERVE_SYSTEM_PROMPT}\n\n{prompts.OBSERVE_EXAMPLE}"
    )
    assert without.instructions == prompts.OBSERVE_SYSTEM_PROMPT
    act_model, act_seen = scripted(final({"outcome": "blocked", "evidence": "Not done."}))
    await run_act(
        step_input("act"),
        act_model,
        tools(mutation_set=("deployments/web",)),
        worked_example=True,
    )
    first = act_seen[0][0]
    assert isinstance(first, ModelRequest)
    assert first.instructions == f"{prompts.ACT_SYSTEM_PROMPT}\n\n{prompts.ACT_EXAMPLE}"
    # The examples are of another target: nothing in them names the demo's.
    for example in (prompts.OBSERVE_EXAMPLE, prompts.ACT_EXAMPLE):
        assert "render" not in example
