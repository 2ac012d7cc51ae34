"""The task reading held to the person's words in the step, as the engine will hold it: a
proposal whose quote gives no grant the engine reads is named to the model, which reads
again. Real HTTP to a
scripted model server."""

from __future__ import annotations

import json
from typing import Any

from tests.support.model_server import Final, ModelServer
from tests.support.step_fakes import step_input
from tests.unit.step.test_step_instructions import model

from goalkeeper.core.authority import pin
from goalkeeper.core.models import AuthorityExtraction, MonitorSpec
from goalkeeper.step.agent import RunLimits
from goalkeeper.step.extract import run_extract

TASK = (
    "Run the postcode import in this namespace to completion. Job geo-import is suspended; "
    "you may resume Job geo-import by setting spec.suspend to false."
)
GOAL = "Run the postcode import in this namespace to completion."
GRANT = (
    "Job geo-import is suspended; you may resume Job geo-import by setting spec.suspend to false."
)


def reading(quote: str) -> dict[str, Any]:
    return {
        "goal": GOAL,
        "allowedResources": [{"entry": "jobs/geo-import", "quote": quote}],
        "authorizedActions": [
            {"id": "resume-geo-import", "description": "Resume Job geo-import.", "quote": quote}
        ],
    }


async def test_a_grant_quoting_the_goal_is_named_and_read_again(server: ModelServer) -> None:
    server.script(Final(reading(GOAL)), Final(reading(GRANT)))
    step = step_input("extract", check=0, task=TASK, stopWhen="Stop when Job geo-import ends.")
    found = await run_extract(step, model(server))
    assert found.ok and found.result is not None, found.error
    assert found.result["allowedResources"][0]["quote"] == GRANT
    told = json.dumps(server.bodies[1]["messages"][-1])
    assert (
        "The operator reads no grant from these proposals: authorized action 'resume-geo-import'"
        in told
    )
    assert "the words it quotes give no grant the engine reads with certainty" in told

    # Asked once: the same misquote again stands, for the engine to drop.
    server.script(Final(reading(GOAL)), Final(reading(GOAL)))
    found = await run_extract(step, model(server))
    assert found.ok and found.result is not None, found.error
    assert found.result["allowedResources"][0]["quote"] == GOAL and len(server.bodies) == 4


async def test_with_no_retry_left_the_reading_stands_for_the_engine_to_judge(
    server: ModelServer,
) -> None:
    server.script(Final(reading(GOAL)))
    step = step_input("extract", check=0, task=TASK, stopWhen="Stop when Job geo-import ends.")
    found = await run_extract(step, model(server), limits=RunLimits(output_retries=0))
    assert found.ok and found.result is not None, found.error
    assert found.result["allowedResources"][0]["quote"] == GOAL and len(server.bodies) == 1


async def test_a_grant_the_words_forbid_is_left_for_the_engine_to_drop(server: ModelServer) -> None:
    # No other quote gives what the task forbids: asking again would only cost a request.
    forbidding = (
        "Job geo-import is suspended; you may resume Job geo-import. Never resume Job geo-import."
    )
    server.script(Final(reading("you may resume Job geo-import.")))
    step = step_input("extract", check=0, task=forbidding, stopWhen="Stop when it ends.")
    found = await run_extract(step, model(server))
    assert found.ok and found.result is not None, found.error
    assert len(server.bodies) == 1
    spec = MonitorSpec(task=forbidding, stopWhen="Stop when it ends.")
    dropped = pin(spec, AuthorityExtraction.model_validate(found.result), generation=None)
    assert any("the task forbids it" in d for d in dropped.record.dropped), dropped.record.dropped
