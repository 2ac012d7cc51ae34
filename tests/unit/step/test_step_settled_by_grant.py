"""A model that gives no valid answer in its tries leaves the check to the facts and the
person's grants: when one makes a false predicate of the stop rule true, the step answers
with that act, as the engine would take it over a wait. Real HTTP to a scripted model."""

from __future__ import annotations

from typing import Any

from tests.support.model_server import Final, ModelServer
from tests.support.observations import observation_dict
from tests.support.step_fakes import FakeKube, deployment, step_input
from tests.unit.step.test_step_instructions import model

from goalkeeper.core import reading
from goalkeeper.core.goals import read_stop_rule
from goalkeeper.core.models import StepErrorKind, StepInput, TypedGrant, Words
from goalkeeper.step.agent import run_observe
from goalkeeper.step.tools import StepTools, ToolConfig

TASK = "Deployment web in namespace shop is no longer needed. You may scale Deployment web to 0."
STOP = "Stop when Deployment web has 0 replicas."


def _input(**overrides: Any) -> StepInput:
    body: dict[str, Any] = {
        "task": TASK,
        "stopWhen": STOP,
        "goal": read_stop_rule(STOP, "shop", TASK),
        "grants": reading.read([(Words.task, TASK)]).grants,
    }
    return step_input(**(body | overrides))


# A wait while the work is idle breaks the route rules: never a valid answer.
INVALID = observation_dict("wait", work="idle")


async def test_a_model_with_no_valid_answer_leaves_the_grants_move_to_the_facts(
    server: ModelServer,
) -> None:
    tools = StepTools(FakeKube([deployment()]), ToolConfig(fence_id="4444", namespace="shop"))
    server.script(*[Final(INVALID)] * 4)
    found = await run_observe(_input(), model(server), tools)
    assert found.ok and found.result is not None, found.error
    assert found.result["route"] == "act"
    assert found.result["action"]["authorizedActionId"] == "scale-web"
    assert found.result["action"]["mutationSet"] == ["deployments/web"]
    assert "The model gave no valid answer" in found.result["reason"]
    assert found.usage.requests == 4, "the model was asked, and its usage is kept"
    assert [f.name for f in found.facts] == ["web"]


async def test_with_nothing_the_grants_move_an_invalid_answer_stays_invalid(
    server: ModelServer,
) -> None:
    tools = StepTools(FakeKube([deployment()]), ToolConfig(fence_id="4444", namespace="shop"))
    # A restart leaves the replica count where it is: it moves nothing the rule asks.
    restart = reading.read([(Words.task, "You may restart Deployment web.")]).grants
    assert [g.verb.value for g in restart] == ["restart"]
    nothing: list[TypedGrant] = []
    for grants in (restart, nothing):
        server.script(*[Final(INVALID)] * 4)
        found = await run_observe(_input(grants=grants), model(server), tools)
        assert found.error_kind is StepErrorKind.invalidOutput and found.result is None
