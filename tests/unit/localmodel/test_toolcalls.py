"""The tool-call proxy: each call as JSON text under one schema, read back into a call.

The real HTTP path runs an observe step (OpenAIChatModel, the step's tools on a fake
cluster) through the proxy to the scripted server standing in for llama.cpp: it answers
the JSON text a grammar would have made the model write.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.model_server import ModelServer, Text
from tests.support.observations import observation_dict
from tests.support.step_fakes import FakeKube, deployment, step_input

from goalkeeper.core.models import Observation
from goalkeeper.localmodel.toolcalls import (
    SLOTS,
    TOOLS_INTRO,
    ToolCallError,
    ToolCallProxy,
    call_schema,
    client_response,
    slot_for,
    upstream_request,
)
from goalkeeper.step.agent import RunLimits, run_observe
from goalkeeper.step.model import build_model, model_settings
from goalkeeper.step.settings import load_settings
from goalkeeper.step.tools import StepTools, ToolConfig


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": f"The {name} tool.", "parameters": parameters},
    }


WITH_DEFS = {
    "type": "object",
    "properties": {"track": {"$ref": "#/$defs/Track"}},
    "required": ["track"],
    "$defs": {"Track": {"type": "object", "properties": {"done": {"type": "integer"}}}},
}


def test_the_schema_is_one_call_of_any_tool_with_references_from_the_root() -> None:
    schema = call_schema([tool("get")["function"], tool("final_result", WITH_DEFS)["function"]])
    get, final = schema["anyOf"]
    assert get["properties"]["name"] == {"const": "get"}
    assert final["properties"]["name"] == {"const": "final_result"}
    assert final["required"] == ["name", "arguments"] and not final["additionalProperties"]
    # The tool's own $defs move to the root, where the grammar resolves references.
    ref = final["properties"]["arguments"]["properties"]["track"]["$ref"]
    assert ref == "#/$defs/t1_Track" and "t1_Track" in schema["$defs"]
    assert "$defs" not in final["properties"]["arguments"]


def test_a_request_with_tools_goes_as_text_turns_under_the_schema() -> None:
    body = {
        "model": "local",
        "messages": [
            {"role": "system", "content": "Observe."},
            {"role": "user", "content": "Check 1."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get", "arguments": '{"name": "build"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "Job build: suspended"},
        ],
        "tools": [tool("get"), tool("final_result", WITH_DEFS)],
        "tool_choice": "required",
        "max_tokens": 900,
    }
    upstream = upstream_request(body)
    assert "tools" not in upstream and "tool_choice" not in upstream
    assert upstream["max_tokens"] == 900 and upstream["model"] == "local"
    assert upstream["response_format"]["json_schema"]["schema"] == call_schema(
        [tool("get")["function"], tool("final_result", WITH_DEFS)["function"]]
    )
    system, user, assistant, result = upstream["messages"]
    assert system["content"].startswith("Observe.\n\n" + TOOLS_INTRO)
    assert "final_result(track): The final_result tool." in system["content"]
    assert user == {"role": "user", "content": "Check 1."}
    assert assistant["content"] == (
        '<tool_call>\n{"name": "get", "arguments": {"name": "build"}}\n</tool_call>'
    )
    assert result == {
        "role": "user",
        "content": "<tool_response>\nJob build: suspended\n</tool_response>",
    }
    # The same tools make the same system message: the prompt prefix stays cached.
    assert upstream_request(body)["messages"][0] == system


def test_a_request_without_tools_or_that_wants_none_goes_unchanged_but_for_its_slot() -> None:
    plain = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}
    assert upstream_request(plain) == {**plain, "id_slot": 0}
    none = {**plain, "tools": [tool("get"), tool("final_result")], "tool_choice": "none"}
    assert upstream_request(none) == {**none, "id_slot": 1}


def test_each_step_kind_has_its_own_slot_so_its_prefix_stays_cached() -> None:
    extract = [tool("final_result")]
    observe = [tool("k8s_get"), tool("pod_logs"), tool("final_result")]
    act = [*observe, tool("k8s_patch")]
    slots = [slot_for([t["function"] for t in tools]) for tools in (extract, observe, act)]
    assert slots == [0, 1, 2] and max(slots) < SLOTS
    body = {"model": "local", "messages": [{"role": "user", "content": "go"}], "tools": act}
    assert upstream_request(body)["id_slot"] == 2


@pytest.mark.parametrize(
    ("choice", "allowed"),
    [
        ({"type": "function", "function": {"name": "final_result"}}, ["final_result"]),
        (
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [
                        {"type": "function", "function": {"name": "get"}},
                        {"type": "function", "function": {"name": "list"}},
                    ],
                },
            },
            ["get", "list"],
        ),
        ({"type": "function", "function": {"name": "absent"}}, ["get", "list", "final_result"]),
        ("required", ["get", "list", "final_result"]),
    ],
)
def test_a_tool_choice_narrows_the_schema_but_every_tool_stays_described(
    choice: Any, allowed: list[str]
) -> None:
    body = {
        "messages": [{"role": "system", "content": "Observe."}, {"role": "user", "content": "hi"}],
        "tools": [tool("get"), tool("list"), tool("final_result")],
        "tool_choice": choice,
    }
    upstream = upstream_request(body)
    schema = upstream["response_format"]["json_schema"]["schema"]
    calls = schema.get("anyOf") or [schema]
    assert [c["properties"]["name"]["const"] for c in calls] == allowed
    # The prompt is the same whatever the turn may call: its cached prefix holds.
    unrestricted = upstream_request({**body, "tool_choice": "required"})
    assert upstream["messages"] == unrestricted["messages"]


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [], "tools": "get"},
        {"messages": [], "tools": [{"type": "function"}]},
        {"messages": ["hi"], "tools": [tool("get")]},
        {"messages": [], "tools": [tool("get")], "stream": True},
    ],
)
def test_a_request_the_proxy_cannot_carry_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ToolCallError):
        upstream_request(body)


def answer(content: str, finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "x",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def test_the_answer_becomes_one_tool_call_and_cut_text_stays_text() -> None:
    made = client_response(answer('{"name": "get", "arguments": {"name": "build"}}'), tools=True)
    choice = made["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and made["usage"]["total_tokens"] == 15
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get", "arguments": '{"name": "build"}'}
    cut = client_response(answer('{"name": "get", "argu', "length"), tools=True)
    assert cut["choices"][0]["message"]["content"] == '{"name": "get", "argu'
    assert cut["choices"][0]["finish_reason"] == "length"


@pytest.fixture
def upstream() -> Iterator[ModelServer]:
    with ModelServer(prompt_tokens=1000, completion_tokens=200) as server:
        yield server


def as_text(name: str, arguments: dict[str, Any]) -> Text:
    """What the grammar makes the model write for one call."""
    return Text(json.dumps({"name": name, "arguments": arguments}))


async def test_an_observe_step_runs_through_the_proxy_on_json_text_answers(
    upstream: ModelServer,
) -> None:
    upstream.script(
        as_text("k8s_get", {"kind": "Deployment", "name": "web"}),
        as_text("final_result", observation_dict("wait")),
    )
    with ToolCallProxy(upstream.base_url) as proxy:
        settings = load_settings(
            {
                "GOALKEEPER_MODEL": "openai:local",
                "GOALKEEPER_MODEL_BASE_URL": proxy.base_url,
                "GOALKEEPER_HTTP_TIMEOUT_SECONDS": "30",
            }
        )
        tools = StepTools(
            FakeKube([deployment()]), ToolConfig(fence_id="0123456789abcdef", namespace="shop")
        )
        outcome = await run_observe(
            step_input(),
            build_model(settings),
            tools,
            limits=RunLimits(),
            model_settings=model_settings(settings),
        )
    assert outcome.ok, outcome.error
    assert Observation.model_validate(outcome.result).route.value == "wait"
    first, second = upstream.bodies
    for body in (first, second):
        assert "tools" not in body and body["response_format"]["type"] == "json_schema"
        names = [
            c["properties"]["name"]["const"]
            for c in body["response_format"]["json_schema"]["schema"]["anyOf"]
        ]
        assert "k8s_get" in names and "final_result" in names
    assert first["messages"][0] == second["messages"][0], "one system message for the step"
    # The tool's result went back to the model as text, fenced as the step fences it.
    assert "<tool_response>" in second["messages"][-1]["content"]
    assert "0123456789abcdef" in second["messages"][-1]["content"]
    assert outcome.usage.requests == 2 and outcome.usage.inputTokens == 2000


def test_other_paths_pass_through(upstream: ModelServer) -> None:
    import urllib.error
    import urllib.request

    with ToolCallProxy(upstream.base_url) as proxy:
        request = urllib.request.Request(
            proxy.base_url + "/completions", data=b'{"prompt": "hi"}', method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404, "the upstream's own answer"
    assert upstream.requests[-1].path == "/v1/completions"
    assert upstream.requests[-1].body == {"prompt": "hi"}


def test_the_results_of_one_turn_share_one_user_turn() -> None:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "get", "arguments": "{}"}}
        for i in (1, 2)
    ]
    body = {
        "messages": [
            {"role": "user", "content": "Check 1."},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c2", "content": "two"},
            {"role": "user", "content": "Go on."},
        ],
        "tools": [tool("get")],
    }
    messages = upstream_request(body)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "user"]
    assert messages[3]["content"] == (
        "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>"
    )
    assert messages[4] == {"role": "user", "content": "Go on."}
