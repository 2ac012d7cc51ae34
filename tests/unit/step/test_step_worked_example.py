"""A small model may copy the worked example at the end of its prompt: an observation that
repeats the example's answer word for word goes back to the model, told why, and is never a
check. Real HTTP to a scripted model server."""

from __future__ import annotations

import json

from tests.support.model_server import Final, ModelServer
from tests.support.observations import AUTHORIZED, action, observation_dict
from tests.support.step_fakes import FakeKube, deployment, step_input
from tests.unit.step.test_step_instructions import model

from goalkeeper.core.models import StepErrorKind
from goalkeeper.step.agent import run_observe
from goalkeeper.step.tools import StepTools, ToolConfig


async def test_an_observation_that_repeats_the_worked_examples_answer_goes_back_to_the_model(
    server: ModelServer,
) -> None:
    copied = observation_dict(
        "act", action=action(incomplete="api cannot scale past 8.", failureId="hpa-capped:api:8")
    )
    own = observation_dict("act")
    tools = StepTools(FakeKube([deployment()]), ToolConfig(fence_id="4444", namespace="shop"))
    # Told why within the step, the model answers in its own words: that is the result.
    server.script(Final(copied), Final(own))
    found = await run_observe(step_input(), model(server), tools, worked_example=True)
    assert found.ok and found.result is not None
    assert found.result["action"]["incomplete"] == own["action"]["incomplete"]
    told = json.dumps(server.bodies[-1], ensure_ascii=False)
    assert "The answer repeats the worked example's incomplete word for word" in told
    # A model that copies it whatever it is told never gives a result: an invalid answer.
    server.script(*[Final(copied)] * 4)
    stuck = await run_observe(step_input(), model(server), tools, worked_example=True)
    assert stuck.error_kind is StepErrorKind.invalidOutput and stuck.result is None
    # The record says what it was last told, for the person and for the next check.
    assert stuck.error is not None
    assert "Its last answer: The answer repeats the worked example's incomplete" in stuck.error
    # Without the example nothing is compared.
    server.script(Final(copied))
    assert (await run_observe(step_input(), model(server), tools)).ok


async def test_an_action_that_borrows_the_worked_examples_field_is_told_the_recorded_one(
    server: ModelServer,
) -> None:
    """Seen from a small model: "Set spec.maxReplicas=1 on Deployment pricing-worker" where
    the task allowed a restart."""
    borrowed = observation_dict(
        "act", action=action(action="Set spec.maxReplicas=1 on Deployment web.")
    )
    own = observation_dict("act")
    tools = StepTools(FakeKube([deployment()]), ToolConfig(fence_id="4444", namespace="shop"))
    server.script(Final(borrowed), Final(own))
    recorded = step_input(authorizedActions=AUTHORIZED)
    found = await run_observe(recorded, model(server), tools, worked_example=True)
    assert found.ok and found.result is not None
    assert found.result["action"]["action"] == own["action"]["action"]
    told = json.dumps(server.bodies[-1], ensure_ascii=False)
    assert "The action names the worked example's maxreplicas" in told
    assert "The task allows 'Resume the build Job from saved outputs.'" in told
    # A task that names the field itself may act on it.
    hpa = step_input(task="Raise maxReplicas of HorizontalPodAutoscaler web to 6.")
    server.script(Final(borrowed))
    assert (await run_observe(hpa, model(server), tools, worked_example=True)).ok
