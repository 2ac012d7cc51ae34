"""The route-keyed observation schema carries the rules `Observation` checks in validators.

Each case is judged twice: by `Observation` itself, and by whether any variant of the
routed schema admits it (route, goal and work values, a required or forbidden action and
stop reason, the action's kind). The two must agree, so a grammar bound to the schema
cannot write an observation the validators refuse, and loses none they accept.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.support.observations import action, observation_dict

from goalkeeper.core.models import Observation
from goalkeeper.step.routed import RoutedOutput, routed_schema

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


CASES = {
    "wait, running": observation_dict("wait"),
    "wait, waiting": observation_dict("wait", work="waiting"),
    "wait, idle": observation_dict("wait", work="idle"),
    "wait with a stop reason": observation_dict("wait", stopReason="goalComplete"),
    "wait with an action": observation_dict("wait", action=action()),
    "wait, goal complete": observation_dict("wait", goal="complete"),
    "act, advance, idle": observation_dict("act"),
    "act, advance, running": observation_dict("act", work="running"),
    "act, repair, running": observation_dict("act", work="running", action=action(kind="repair")),
    "act without an action": {**observation_dict("act"), "action": None},
    "act, goal complete": observation_dict("act", goal="complete"),
    "stop, goal complete": observation_dict("stop", goal="complete", stopReason="goalComplete"),
    "stop, complete but goal incomplete": observation_dict("stop", stopReason="goalComplete"),
    "stop, blocked": observation_dict("stop", work="blocked", stopReason="materialBlocker"),
    "stop without a reason": observation_dict("stop", goal="complete"),
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


async def test_the_output_tool_is_given_the_routed_schema() -> None:
    seen: list[dict[str, Any]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(tool.parameters_json_schema for tool in info.output_tools)
        return ModelResponse(parts=[ToolCallPart("final_result", observation_dict("wait"))])

    agent: Agent[None, Observation] = Agent(
        FunctionModel(answer), output_type=Observation, capabilities=[RoutedOutput()]
    )
    result = await agent.run("observe")
    assert result.output.route.value == "wait"
    assert seen and "anyOf" in seen[0]
    assert [v["properties"]["route"] for v in seen[0]["anyOf"]] == [
        {"const": "wait"},
        {"const": "act"},
        {"const": "act"},
        {"const": "stop"},
        {"const": "stop"},
    ]
