"""An observe step gives only the stops a model may answer: one the operator gives itself (a
person's stop, a protected contract, a credential) goes back to the model, told which it
may give. Real HTTP to a scripted model server."""

from __future__ import annotations

import json

from tests.support.model_server import Final, ModelServer
from tests.support.observations import observation_dict
from tests.support.step_fakes import FakeKube, deployment, step_input
from tests.unit.step.test_step_instructions import model

from goalkeeper.step.agent import run_observe
from goalkeeper.step.tools import StepTools, ToolConfig


async def test_a_stop_reason_the_operator_gives_goes_back_to_the_model(
    server: ModelServer,
) -> None:
    asked = observation_dict("stop", goal="incomplete", work="blocked", stopReason="userRequested")
    blocker = {**asked, "stopReason": "materialBlocker"}
    tools = StepTools(FakeKube([deployment()]), ToolConfig(fence_id="4444", namespace="shop"))
    server.script(Final(asked), Final(blocker))
    found = await run_observe(step_input(), model(server), tools)
    assert found.ok and found.result is not None
    assert found.result["stopReason"] == "materialBlocker"
    told = json.dumps(server.bodies[-1], ensure_ascii=False)
    assert "stopReason 'userRequested' is not an observation's to give" in told
    assert "materialBlocker, outsideAuthority" in told
