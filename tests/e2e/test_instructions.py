"""The operators' instructions bind every Monitor of their cluster and namespace: real API
server with the admission policies, the operator as its own process under its own role,
real step processes, a scripted model over HTTP.

A namespace admin's ConfigMap goalkeeper-instructions forbids an action a task allows: the
action is refused and the target is left alone. An instruction that grants one is quoted in
the record as the namespace's words, and the act runs. The cluster admin's instructions
(GOALKEEPER_INSTRUCTIONS, the chart's `instructions`) bind the same way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import (
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    is_reading,
    observation,
    report_text,
    wait_until,
)
from tests.support.model_server import ModelServer
from tests.support.observations import action, extraction

pytestmark = pytest.mark.cluster

NEVER_RESUME = "Never resume Job build; the release team starts the build by hand."
CLUSTER_NEVER = "No Monitor may resume Job build."
MAY_RESUME = "Monitors here may resume Job build (spec.suspend=false)."
FINISH = "Finish the nightly build: Job build in this namespace must complete."


def instructions(cluster: Cluster, text: str) -> None:
    cluster.core.create_namespaced_config_map(
        cluster.ns,
        {"metadata": {"name": "goalkeeper-instructions"}, "data": {"instructions": text}},
    )


def resume_when_suspended(facts: Facts, _: int) -> dict[str, Any]:
    """A model that resumes the Job whenever it finds it suspended, then waits for it."""
    unpinned = {"contract": None, "authorizedActions": None}
    if facts.suspended:
        return observation(
            "act",
            "incomplete",
            "idle",
            facts,
            "Job build is suspended; resuming it.",
            action=action(),
            **unpinned,
        )
    if facts.succeeded:
        return observation(
            "stop",
            "complete",
            "complete",
            facts,
            "Job build succeeded.",
            stopReason="goalComplete",
            **unpinned,
        )
    return observation("wait", "incomplete", "running", facts, "Job build runs.", **unpinned)


def readings(model: ModelServer) -> list[str]:
    return [json.dumps(body) for body in model.bodies if is_reading(body)]


def test_a_namespace_instruction_refuses_an_action_the_task_allows(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=True)
    instructions(cluster, NEVER_RESUME)
    # The reading finds the task's own grant to resume, quoted from the task.
    model.default = Scenario(cluster.ns, resume_when_suspended, reading=extraction())
    cluster.create_monitor(everyMinutes=1)
    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)

    assert status["stop"]["reason"] == "outsideAuthority"
    assert (
        "'resume-build' is not among the recorded authorized actions" in status["stop"]["message"]
    )
    dropped = "\n".join(status["authority"]["dropped"])
    assert f"resume Job build: the namespace instructions forbid it: {NEVER_RESUME!r}" in dropped
    assert NEVER_RESUME in status["authority"]["prohibitions"]
    assert status["instructions"]["namespace"] == NEVER_RESUME
    assert status["instructions"]["namespaceVersion"]
    assert "act" not in cluster.step_kinds()
    assert cluster.batch.read_namespaced_job("build", cluster.ns).spec.suspend is True
    [read] = readings(model)
    assert NEVER_RESUME in read
    [recorded] = cluster.posted("AuthorityRecorded")
    assert "with the namespace instructions (ConfigMap goalkeeper-instructions" in (
        recorded.message
    )


def test_an_instruction_that_grants_is_quoted_as_the_namespaces_and_the_act_runs(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=True)
    instructions(cluster, f"The nightly build is ours. {MAY_RESUME}")
    reading = extraction(
        goal="Job build completes.",
        allowedResources=[{"entry": "jobs/build", "quote": MAY_RESUME}],
        authorizedActions=[
            {"id": "resume-build", "description": "Resume Job build.", "quote": MAY_RESUME}
        ],
        allowedSystems=[],
        allowedRecoveryActions=[],
    )
    model.default = Scenario(cluster.ns, resume_when_suspended, reading=reading)
    cluster.create_monitor(task=FINISH, everyMinutes=1)
    status = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)

    assert status["stop"]["reason"] == "goalComplete", status["stop"]
    [grant] = status["authority"]["typedGrants"]
    assert (grant["id"], grant["verb"], grant["object"]["name"]) == (
        "resume-build",
        "resume",
        "build",
    )
    assert grant["quote"] == MAY_RESUME and grant["source"] == "namespaceInstructions"
    assert "act" in cluster.step_kinds()
    assert cluster.batch.read_namespaced_job("build", cluster.ns).status.succeeded == 1
    # The first report shows what was read, and whose words granted it.
    texts = [report_text(e) for e in cluster.reports(status["checks"])]
    [first] = [t for t in texts if "Authority (read from the task" in t]
    assert f'"{MAY_RESUME}" (the namespace instructions)' in first


@pytest.mark.operator_env(GOALKEEPER_INSTRUCTIONS=CLUSTER_NEVER)
def test_the_cluster_instructions_bind_every_monitor(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=True)
    model.default = Scenario(cluster.ns, resume_when_suspended, reading=extraction())
    cluster.create_monitor(everyMinutes=1)
    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)

    assert status["stop"]["reason"] == "outsideAuthority"
    dropped = "\n".join(status["authority"]["dropped"])
    assert f"resume Job build: the cluster instructions forbid it: {CLUSTER_NEVER!r}" in dropped
    assert status["instructions"] == {
        "cluster": CLUSTER_NEVER,
        "namespace": "",
        "namespaceVersion": "",
    }
    assert cluster.batch.read_namespaced_job("build", cluster.ns).spec.suspend is True
    [read] = readings(model)
    assert CLUSTER_NEVER in read
