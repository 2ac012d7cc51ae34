"""Facts beat words, end to end: the step pod reads the named Job itself, and an answer
the Job refutes goes back to the model within the step, told why, before any of it counts;
the operator would refuse it the same way (tests/unit: the engine's own check)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import Cluster, Facts, OperatorProcess, Scenario, observation, wait_until
from tests.support.model_server import ModelServer
from tests.support.observations import action

pytestmark = pytest.mark.cluster


def test_a_goal_called_complete_while_the_job_is_suspended_is_refuted_then_finished(
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
    # The lie never became a check, nor an invalid answer: the step told the model why.
    assert cluster.events("ObservationRejected") == []
    assert status["checks"] == 2 and status["invalidStreak"] == 0
    sent = [json.dumps(b, ensure_ascii=False) for b in model.bodies]
    told = [b for b in sent if "Contradicted by the facts: goal 'complete'" in b]
    assert told and "Job build is suspended" in told[0]
    assert "resume-build (resume Job build)" in told[0]
    observes = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    assert observes[0]["status"]["result"]["route"] == "act"
    # What the step pod read after the corrected answer, in the step's own status.
    [fact] = observes[0]["status"]["facts"]
    assert (fact["kind"], fact["name"], fact["suspended"]) == ("Job", "build", True)
    assert "stopWhen" in fact["namedIn"]
