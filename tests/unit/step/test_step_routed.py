"""The route-keyed observation schema carries the rules `Observation` checks in validators.

Each case is judged twice: by `Observation` itself, and by whether any variant of the
routed schema admits it (route, goal and work values, a required or forbidden action and
stop reason, the action's kind). The two must agree, so a grammar bound to the schema
cannot write an observation the validators refuse, and loses none they accept.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.support.observations import action, observation, observation_dict
from tests.support.step_fakes import step_input

from goalkeeper.core.models import Observation
from goalkeeper.step.routed import (
    REFUTED_ACT,
    RoutedOutput,
    pinned_action_ids,
    pinned_resources,
    routed_schema,
)

FLAT = Observation.model_json_schema()
ROUTED = routed_schema(FLAT)


def admits(value: Any, schema: dict[str, Any]) -> bool:
    """What the routed schema's own keywords say of `value` (const, enum, required, $ref)."""
    if "$ref" in schema:
        return admits(value, ROUTED["$defs"][schema["$ref"].rsplit("/", 1)[-1]])
    if "const" in schema and value != schema["const"]:
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, dict) and "properties" in schema:
        if any(key not in value or value[key] is None for key in schema.get("required", [])):
            return False
        for key, item in value.items():
            if item is None:
                continue
            if key not in schema["properties"]:
                return False  # a field this route does not allow
            if not admits(item, schema["properties"][key]):
                return False
    return True


def routed_admits(body: dict[str, Any]) -> bool:
    return any(admits(body, variant) for variant in ROUTED["anyOf"])


def valid(body: dict[str, Any]) -> bool:
    try:
        Observation.model_validate(body)
    except ValidationError:
        return False
    return True


def answer(route: str, **overrides: Any) -> dict[str, Any]:
    """An observation as a model answers it now: the authority is the recorded one."""
    body = observation_dict(route, **overrides)
    del body["contract"], body["authorizedActions"]
    return body


CASES = {
    "wait, running": answer("wait"),
    "wait, waiting": answer("wait", work="waiting"),
    "wait, idle": answer("wait", work="idle"),
    "wait with a stop reason": answer("wait", stopReason="goalComplete"),
    "wait with an action": answer("wait", action=action()),
    "wait, goal complete": answer("wait", goal="complete"),
    "act, advance, idle": answer("act"),
    "act, advance, running": answer("act", work="running"),
    "act, repair, running": answer("act", work="running", action=action(kind="repair")),
    "act without an action": {**answer("act"), "action": None},
    "act, goal complete": answer("act", goal="complete"),
    "stop, goal complete": answer("stop", goal="complete", stopReason="goalComplete"),
    "stop, complete but goal incomplete": answer("stop", stopReason="goalComplete"),
    "stop, blocked": answer("stop", work="blocked", stopReason="materialBlocker"),
    "stop without a reason": answer("stop", goal="complete"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_routed_schema_admits_exactly_what_the_validators_accept(case: str) -> None:
    body = CASES[case]
    assert routed_admits(body) == valid(body), case


def test_only_an_observation_schema_is_routed_and_every_variant_is_closed() -> None:
    assert routed_schema({"type": "object", "properties": {"outcome": {}}}) == {
        "type": "object",
        "properties": {"outcome": {}},
    }
    for variant in ROUTED["anyOf"]:
        assert variant["type"] == "object" and variant["additionalProperties"] is False
        assert "route" in variant["required"] and "$defs" not in variant


async def test_the_output_tool_is_given_the_routed_schema_after_a_first_read() -> None:
    offered: list[tuple[Any, list[dict[str, Any]]]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        choice = (info.model_settings or {}).get("tool_choice")
        offered.append((choice, [tool.parameters_json_schema for tool in info.output_tools]))
        if choice == ["read"]:
            return ModelResponse(parts=[ToolCallPart("read", {"name": "build"})])
        return ModelResponse(parts=[ToolCallPart("final_result", observation_dict("wait"))])

    agent: Agent[None, Observation] = Agent(
        FunctionModel(answer),
        output_type=Observation,
        capabilities=[RoutedOutput(read_tools=("read",))],
    )

    @agent.tool_plain
    def read(name: str) -> str:
        return f"Job {name}: active 1"

    result = await agent.run("observe")
    assert result.output.route.value == "wait"
    # The first request may only read; the answer's tool stays listed, so does the prompt.
    assert [choice for choice, _ in offered] == [["read"], None]
    first, second = (schemas for _, schemas in offered)
    assert first == second and len(second) == 1
    assert [v["properties"]["route"] for v in second[0]["anyOf"]] == [
        {"const": "wait"},
        {"const": "act"},
        {"const": "act"},
        {"const": "stop"},
        {"const": "stop"},
    ]


def variant(route: str, index: int = 0) -> dict[str, Any]:
    found = [v for v in ROUTED["anyOf"] if v["properties"]["route"] == {"const": route}]
    return found[index]


def resolved(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    defs = ROUTED["$defs"] if defs is None else defs
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def strings(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every string schema under `schema`, through references, with where it is."""
    found: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref not in seen:
                seen.add(ref)
                walk(ROUTED["$defs"][ref.rsplit("/", 1)[-1]], where)
            if node.get("type") == "string":
                found.append((where, node))
            for key, value in node.items():
                walk(value, f"{where}.{key}")

    walk(schema, path)
    return found


def test_every_text_is_bounded_tightly_and_the_facts_come_before_the_route() -> None:
    for where, schema in strings(ROUTED["anyOf"]):
        if "pattern" in schema or "format" in schema:
            continue
        assert schema.get("maxLength", 10**9) <= 600, where
    assert resolved(variant("wait")["properties"]["observation"])["maxLength"] == 600
    assert list(variant("act")["properties"])[:4] == ["observation", "work", "goal", "route"]
    # The authority is the recorded one: no answer copies it.
    for each in ROUTED["anyOf"]:
        assert not {"contract", "authorizedActions"} & set(each["properties"])


def test_an_act_names_a_mutation_set_the_act_tools_can_write() -> None:
    for index in (0, 1):
        act = variant("act", index)
        mutations = resolved(act["properties"]["action"])["properties"]["mutationSet"]
        pattern = re.compile(mutations["items"]["pattern"])
        assert mutations["minItems"] == 1
        for entry in ("jobs/build", "Job.batch/render-1", "ci/deployments/web", "pods/build-*"):
            assert pattern.fullmatch(entry), entry
        for entry in ("https://ci.example/api/retry", "command:make"):
            assert pattern.fullmatch(entry), entry
        for entry in ("spec.suspend=false", "Job build", "the render image", "jobs/"):
            assert not pattern.fullmatch(entry), entry


def test_recorded_actions_bind_the_covering_id() -> None:
    recorded = observation_dict("act")
    ids = [a["id"] for a in recorded["authorizedActions"]]
    schema = routed_schema(FLAT, ids)
    for each in schema["anyOf"]:
        if "action" in each["properties"]:
            action = resolved(each["properties"]["action"], schema["$defs"])
            assert action["properties"]["authorizedActionId"]["enum"] == ids
    # No recorded authorized action: nothing to act on, so no act case at all.
    bare = routed_schema(FLAT, [])
    assert {v["properties"]["route"]["const"] for v in bare["anyOf"]} == {"wait", "stop"}


def test_the_step_input_pins_only_a_recorded_contract() -> None:
    assert pinned_action_ids(step_input()) is None
    recorded = observation("act")
    step = step_input(contract=recorded.contract, authorizedActions=recorded.authorizedActions)
    assert pinned_action_ids(step) == [a.id for a in recorded.authorizedActions]


def test_recorded_allowed_resources_are_the_only_mutation_set_entries() -> None:
    # A small model copying its worked example (an HPA) cannot name one it may not change.
    writable = ["jobs/thumbnail-backfill"]
    schema = routed_schema(FLAT, ["resume-backfill"], writable)
    acts = [v for v in schema["anyOf"] if "action" in v["properties"]]
    assert len(acts) == 2
    for each in acts:
        action = resolved(each["properties"]["action"], schema["$defs"])
        assert action["properties"]["mutationSet"]["items"] == {"enum": writable}
    # With nothing recorded, the entries stay free in form (the engine refuses what its
    # recorded resources do not cover).
    free = routed_schema(FLAT, ["resume-backfill"], None)
    for each in (v for v in free["anyOf"] if "action" in v["properties"]):
        action = resolved(each["properties"]["action"], free["$defs"])
        assert "pattern" in action["properties"]["mutationSet"]["items"]


def test_the_step_input_pins_its_recorded_allowed_resources() -> None:
    assert pinned_resources(step_input()) is None
    recorded = observation("act")
    assert recorded.contract is not None
    step = step_input(contract=recorded.contract, authorizedActions=recorded.authorizedActions)
    assert pinned_resources(step) == recorded.contract.allowedResources
    bare = recorded.contract.model_copy(update={"allowedResources": []})
    assert pinned_resources(step_input(contract=bare)) is None


def admitted(body: dict[str, Any], schema: dict[str, Any]) -> bool:
    """`routed_admits` against another routed schema than the module's."""

    def check(value: Any, node: dict[str, Any]) -> bool:
        if "$ref" in node:
            return check(value, schema["$defs"][node["$ref"].rsplit("/", 1)[-1]])
        if "const" in node and value != node["const"]:
            return False
        if "enum" in node and value not in node["enum"]:
            return False
        if isinstance(value, dict) and "properties" in node:
            if any(key not in value or value[key] is None for key in node.get("required", [])):
                return False
            return all(
                item is None or (key in node["properties"] and check(item, node["properties"][key]))
                for key, item in value.items()
            )
        return True

    return any(check(body, variant) for variant in schema["anyOf"])


def test_a_refuted_claim_leaves_the_grammar_and_nothing_else_does() -> None:
    no_complete = routed_schema(FLAT, refuted={"goal": {"complete"}})
    assert not admitted(CASES["stop, goal complete"], no_complete)
    blocked_complete = answer("stop", goal="complete", work="blocked", stopReason="materialBlocker")
    assert valid(blocked_complete) and not admitted(blocked_complete, no_complete)
    for case in ("act, advance, idle", "wait, running"):
        assert admitted(CASES[case], no_complete), case
    blocked = answer("stop", goal="incomplete", work="blocked", stopReason="materialBlocker")
    assert admitted(blocked, no_complete)
    not_running = routed_schema(FLAT, refuted={"work": {"running"}})
    assert not admitted(CASES["wait, running"], not_running)
    assert admitted(CASES["wait, waiting"], not_running)
    # A refutation of every value leaves the schema as it was, never without a variant.
    everything = {"goal": {"complete", "incomplete", "unknown"}}
    assert routed_schema(FLAT, refuted=everything) == ROUTED


def test_a_refuted_act_leaves_the_grammar_and_with_none_left_no_act_is_offered() -> None:
    ids = ["resume-build", "fix-config"]
    one_left = routed_schema(FLAT, ids, refuted={REFUTED_ACT: {"fix-config"}})
    assert admitted(CASES["act, advance, idle"], one_left)  # it names resume-build
    fix = answer("act", action=action(authorizedActionId="fix-config"))
    assert admitted(fix, routed_schema(FLAT, ids)) and not admitted(fix, one_left)
    none_left = routed_schema(FLAT, ids, refuted={REFUTED_ACT: set(ids)})
    assert {v["properties"]["route"]["const"] for v in none_left["anyOf"]} == {"wait", "stop"}
    assert admitted(CASES["wait, running"], none_left)


async def test_after_the_facts_refute_complete_the_next_answer_cannot_say_it() -> None:
    """Job report-gen is suspended: the model's `complete` is refused within the step, and
    the output tool of its next request no longer admits `complete` at all."""
    from tests.support.step_fakes import FakeKube
    from tests.unit.step.test_step_agent import tools
    from tests.unit.step.test_step_facts import STOP, TASK, job

    from goalkeeper.step.agent import run_observe

    schemas: list[dict[str, Any]] = []
    answers = [answer("stop", goal="complete", stopReason="goalComplete"), answer("act")]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        schemas.append(info.output_tools[0].parameters_json_schema)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answers.pop(0))])

    given = step_input(
        task=TASK, stopWhen=STOP, contract=observation_dict("wait")["contract"],
        authorizedActions=observation_dict("wait")["authorizedActions"],
    )  # fmt: skip
    found = await run_observe(
        given, FunctionModel(model), tools(FakeKube([job("report-gen", suspend=True)])),
        routed_output=True,
    )  # fmt: skip
    assert found.ok and found.result is not None and found.result["route"] == "act"
    assert admitted(CASES["stop, goal complete"], schemas[0])
    assert not admitted(CASES["stop, goal complete"], schemas[1])


async def test_a_stop_refused_while_the_named_job_runs_leaves_the_grammar_for_the_step() -> None:
    """Job report-gen runs: a stop short of the goal is refused within the step, and the
    output tool of the next request admits no stop at all, only waiting or acting."""
    from tests.support.step_fakes import FakeKube
    from tests.unit.step.test_step_agent import tools
    from tests.unit.step.test_step_facts import STOP, TASK, job

    from goalkeeper.step.agent import run_observe

    schemas: list[dict[str, Any]] = []
    given_up = answer("stop", goal="incomplete", work="blocked", stopReason="outsideAuthority")
    answers = [given_up, answer("wait")]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        schemas.append(info.output_tools[0].parameters_json_schema)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answers.pop(0))])

    running = job("report-gen", active=1)
    found = await run_observe(
        step_input(task=TASK, stopWhen=STOP), FunctionModel(model), tools(FakeKube([running])),
        routed_output=True,
    )  # fmt: skip
    assert found.ok and found.result is not None and found.result["route"] == "wait"
    assert admitted(given_up, schemas[0]) and not admitted(given_up, schemas[1])
    assert not any(admitted(CASES[c], schemas[1]) for c in CASES if c.startswith("stop"))
    assert admitted(CASES["wait, running"], schemas[1])


def test_once_an_answer_copied_the_examples_ids_they_begin_with_a_named_object() -> None:
    narrowed = routed_schema(FLAT, ["restart-pricing-worker"], id_names=["pricing-worker"])
    for kind in ("AdvanceAction", "RecoveryAction"):
        pattern = narrowed["$defs"][kind]["properties"]["failureId"]["pattern"]
        assert re.match(pattern, "pricing-worker:stale-config")
        assert not re.match(pattern, "hpa-capped:api:8")
        assert re.match(pattern, "pricing-worker/restarted") and not re.match(pattern, "x")
    plain = routed_schema(FLAT)["$defs"]["AdvanceAction"]["properties"]["failureId"]
    assert re.match(plain["pattern"], "hpa-capped:api:8")


async def test_a_copied_failure_id_is_refused_and_the_next_answer_names_this_task() -> None:
    from tests.support.step_fakes import FakeKube, deployment
    from tests.unit.step.test_step_agent import tools

    from goalkeeper.step.agent import run_observe

    schemas: list[dict[str, Any]] = []
    copied = answer("act", action=action(failureId="hpa-capped:api:8"))
    answers = [copied, answer("act", action=action(failureId="web:short"))]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        schemas.append(info.output_tools[0].parameters_json_schema)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answers.pop(0))])

    given = step_input(
        contract=observation_dict("wait")["contract"],
        authorizedActions=observation_dict("wait")["authorizedActions"],
    )
    found = await run_observe(
        given, FunctionModel(model), tools(FakeKube([deployment("web", replicas=0)])),
        routed_output=True, worked_example=True,
    )  # fmt: skip
    assert found.ok, found.error
    first, second = (s["$defs"]["AdvanceAction"]["properties"]["failureId"] for s in schemas)
    assert re.match(first["pattern"], "hpa-capped:api:8")
    assert re.match(second["pattern"], "web:short") and not re.match(
        second["pattern"], "hpa-capped:api:8"
    )
    # Every text of the example's answer then begins with a name of this task's.
    held = schemas[1]["$defs"]
    texts = {
        "incomplete": held["AdvanceAction"]["properties"]["incomplete"],
        "verification": held["AdvanceAction"]["properties"]["verification"],
        "authorityBasis": held["AdvanceAction"]["properties"]["authorityBasis"],
        "reason": held["Observation_reason"],
        "report": held["Observation_report"],
    }
    for field, prop in texts.items():
        assert re.match(prop["pattern"], "web is at 0 replicas"), field
        assert not re.match(prop["pattern"], "api cannot scale past 8."), field


async def test_an_action_naming_the_examples_change_is_then_told_in_recorded_words() -> None:
    from tests.support.step_fakes import FakeKube, deployment
    from tests.unit.step.test_step_agent import tools

    from goalkeeper.step.agent import run_observe

    schemas: list[dict[str, Any]] = []
    recorded = observation_dict("wait")["authorizedActions"]
    said = recorded[0]["description"]
    borrowed = answer("act", action=action(action="Set spec.maxReplicas=2 on Deployment web."))
    answers = [borrowed, answer("act", action=action(action=said))]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        schemas.append(info.output_tools[0].parameters_json_schema)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answers.pop(0))])

    given = step_input(contract=observation_dict("wait")["contract"], authorizedActions=recorded)
    found = await run_observe(
        given, FunctionModel(model), tools(FakeKube([deployment("web", replicas=0)])),
        routed_output=True, worked_example=True,
    )  # fmt: skip
    assert found.ok and found.result is not None, found.error
    assert found.result["action"]["action"] == said
    first, second = (s["$defs"]["AdvanceAction"]["properties"]["action"] for s in schemas)
    assert "enum" not in first
    assert second == {"enum": [a["description"] for a in recorded]} and said in second["enum"]
    assert routed_schema(FLAT, said=[said])["$defs"]["RecoveryAction"]["properties"]["action"] == {
        "enum": [said]
    }


def test_the_examples_texts_must_then_begin_with_an_object_this_task_names() -> None:
    narrowed = routed_schema(
        FLAT,
        ["x"],
        id_names=["pricing-worker", "pricing.config"],
        copied=["verification", "report"],
    )
    verification = narrowed["$defs"]["RecoveryAction"]["properties"]["verification"]["pattern"]
    report = narrowed["$defs"]["Observation_report"]["pattern"]
    for pattern in (verification, report):
        assert re.match(pattern, "pricing-worker: its pods start after the fix")
        assert not re.match(pattern, "the pods of pricing-worker start after the fix")
        assert not re.match(pattern, "api shows spec.maxReplicas 10.")
        assert not re.match(pattern, "pricingXconfig")  # a dot in a name means a dot
        assert not re.match(pattern, 'pricing-worker" ,"x')  # stays inside the string
        # Bounded like any text.
        assert not re.match(pattern, "pricing-worker " + "the pods are fine " * 100)
    assert "pattern" not in narrowed["$defs"]["Observation_observation"]
