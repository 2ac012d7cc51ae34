"""Facts beat words, end to end: the step pod reads the named Job itself, the operator
refuses an observation that contradicts it, and the next observation is told why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.harness import Cluster, Facts, OperatorProcess, Scenario, observation, wait_until
from tests.support.model_server import ModelServer
from tests.support.observations import action

pytestmark = pytest.mark.cluster


def test_a_goal_called_complete_while_the_job_is_suspended_is_refused_then_finished(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(done=21, suspended=True, seconds=0)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:  # the lie: the Job has not run at all
            return observation(
                "stop", "complete", "complete", facts, "All done.", stopReason="goalComplete"
            )
        if facts.suspended:
            return observation("act", "incomplete", "idle", facts, "Resuming.", action=action())
        if facts.succeeded:
            return observation(
                "stop", "complete", "complete", facts, "Job build succeeded.",
                stopReason="goalComplete",
            )  # fmt: skip
        return observation("wait", "incomplete", "running", facts, "Job build runs.")

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=1)
    status = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)

    assert status["stop"]["reason"] == "goalComplete"
    assert cluster.batch.read_namespaced_job("build", cluster.ns).status.succeeded == 1
    refused = cluster.events("ObservationRejected")
    assert len(refused) == 1, [e.message for e in refused]
    assert "Contradicted by the facts: goal 'complete'" in refused[0].message
    assert "Job build is suspended" in refused[0].message
    observes = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    # What the step pod read after the lie, in the step's own status.
    [fact] = observes[0]["status"]["facts"]
    assert (fact["kind"], fact["name"], fact["suspended"]) == ("Job", "build", True)
    assert "stopWhen" in fact["namedIn"]
    # The retry was told why, and the refused answer was no check.
    assert "goal 'complete'" in observes[1]["spec"]["input"]["lastRejection"]
    assert observes[1]["spec"]["input"]["check"] == 1
    assert all(not s["spec"]["input"].get("lastRejection") for s in observes[2:])
