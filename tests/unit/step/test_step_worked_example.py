"""A small model may copy the worked example at the end of its prompt: an observation that
repeats the example's answer word for word is an invalid answer, never a check. Real HTTP to
a scripted model server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.model_server import Final, ModelServer
from tests.support.observations import action, observation_dict
from tests.support.step_fakes import FakeKube, deployment, step_input
from tests.unit.step.test_step_instructions import model

from goalkeeper.core.models import StepErrorKind
from goalkeeper.step.agent import run_observe
from goalkeeper.step.tools import StepTools, ToolConfig


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        yield s


async def test_an_observation_that_repeats_the_worked_examples_answer_is_invalid(
    server: ModelServer,
) -> None:

    copied = observation_dict(
        "act", action=action(incomplete="api cannot scale past 8.", failureId="hpa-capped:api:8")
    )
    server.script(Final(copied))
    tools = StepTools(FakeKube([deployment()]), ToolConfig(fence_id="4444", namespace="shop"))
    found = await run_observe(step_input(), model(server), tools, worked_example=True)
    assert found.error_kind is StepErrorKind.invalidOutput and found.result is None
    assert found.error is not None and "repeats the worked example's incomplete" in found.error
    # Its own words are taken, and without the example nothing is compared.
    server.script(Final(observation_dict("act")))
    assert (await run_observe(step_input(), model(server), tools, worked_example=True)).ok
    server.script(Final(copied))
    assert (await run_observe(step_input(), model(server), tools)).ok
