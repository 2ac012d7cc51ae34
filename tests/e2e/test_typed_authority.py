"""Typed authority end to end: words the reading cannot parse wait for a person, who
confirms with `goalkeeper authority NAME --confirm` as themselves (the API server refuses
one who may not); a conditional grant acts only once its condition holds in the cluster;
and a typed act runs by code, with no model request, and is read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    build_job,
    observation,
    wait_until,
)
from tests.e2e.test_approvals import account, goalkeeper
from tests.support.model_server import ModelServer
from tests.support.observations import TASK, action, extraction

pytestmark = pytest.mark.cluster

STOP = "Stop when Job build has succeeded."


# The answers leave the recorded authority as the reading pinned it.
UNSTATED: dict[str, Any] = {"contract": None, "authorizedActions": None}


def until_done(facts: Facts, _: int) -> dict[str, Any]:
    """Resume the suspended build, wait while it runs, stop once it succeeded."""
    if facts.succeeded:
        done = {"stopReason": "goalComplete", **UNSTATED}
        return observation("stop", "complete", "complete", facts, "Job build succeeded.", **done)
    if facts.suspended:
        resume = action(action="Resume Job build.", mutationSet=["jobs/build"])
        return observation(
            "act", "incomplete", "idle", facts, "Job build waits.", action=resume, **UNSTATED
        )
    return observation("wait", "incomplete", "running", facts, "Job build runs.", **UNSTATED)


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT="10m")
def test_unclear_words_wait_for_a_person_who_confirms_as_themselves(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    tmp_path: Path,
) -> None:
    cluster.target()
    model.default = scenario = Scenario(cluster.ns, until_done, reading=extraction())
    unclear = "Job build is fragile."
    cluster.create_monitor(task=f"{TASK} {unclear}", stopWhen=STOP, everyMinutes=60, maxChecks=6)
    status = wait_until(
        lambda: (s := cluster.status()).get("approval") and s, 120, "the request", operator.logs
    )
    assert status["approval"]["kind"] == "authority"
    assert unclear in status["approval"]["message"]
    [confirmed] = [c for c in status["conditions"] if c["type"] == "AuthorityConfirmed"]
    assert confirmed["status"] == "False" and unclear in confirmed["message"]
    assert "act" not in cluster.step_kinds()

    approver = account(control_plane, cluster, "approver", tmp_path, role=True)
    stranger = account(control_plane, cluster, "stranger", tmp_path, role=False)
    shown = goalkeeper(stranger, "authority", "build", "-n", cluster.ns)
    assert shown.returncode == 1 and "403" in shown.stderr, "a stranger may not even read it"
    refused = goalkeeper(stranger, "authority", "build", "-n", cluster.ns, "--confirm")
    assert refused.returncode == 1 and "403" in refused.stderr

    said = goalkeeper(approver, "authority", "build", "-n", cluster.ns)
    assert said.returncode == 0, said.stderr
    print(said.stdout)
    assert "resume-build" in said.stdout and unclear in said.stdout
    done = goalkeeper(approver, "authority", "build", "-n", cluster.ns, "--confirm")
    assert done.returncode == 0, done.stderr
    me = f"system:serviceaccount:{cluster.ns}:approver"
    assert f"confirms the reading as {me}" in done.stdout

    stopped = wait_until(cluster.stopped, 180, "the monitor to finish", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete"
    assert stopped["authority"]["confirmedBy"].startswith(me)
    steps = cluster.steps()
    [act] = [s for s in steps if s["spec"]["kind"] == "act"]
    assert act["spec"]["input"]["grant"]["id"] == "resume-build"
    # The typed act ran by code: the step read it back, and the model was not asked.
    assert "read back: it holds" in act["status"]["result"]["evidence"]
    assert act["status"]["usage"]["requests"] == 0 and scenario.acts == 0


def test_a_conditional_grant_acts_only_once_its_condition_holds(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, tmp_path: Path
) -> None:
    gate = tmp_path / "extract-done"
    extract = build_job(cluster.ns, suspended=False, gate=gate)
    extract["metadata"]["name"] = "extract"
    cluster.batch.create_namespaced_job(cluster.ns, extract)
    cluster.target()  # Job build, suspended
    grant = "You may resume Job build once Job extract has succeeded."
    reading = extraction(
        authorizedActions=[
            {"id": "resume-build", "description": "Resume Job build.", "quote": grant}
        ]
    )
    model.default = scenario = Scenario(cluster.ns, until_done, reading=reading)
    cluster.create_monitor(
        task=f"Finish the load: Job build must complete. {grant}",
        stopWhen=STOP,
        everyMinutes=1,
        maxChecks=20,
    )

    def waited_for_extract() -> dict[str, Any] | None:
        status = cluster.status()
        report = status.get("report") or ""
        return status if "applies once job extract succeeded" in report else None

    status = wait_until(waited_for_extract, 120, "a check held by the condition", operator.logs)
    assert status["monitor"] == "active" and "act" not in cluster.step_kinds()
    assert status["contract"]["allowedResources"] == ["jobs/build"], "Job extract is not writable"

    gate.touch()  # Job extract succeeds; a later check finds it and acts
    stopped = wait_until(cluster.stopped, 240, "the monitor to finish", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete"
    ended = cluster.batch.read_namespaced_job(name="extract", namespace=cluster.ns)
    finished = ended.status.completion_time
    [act] = [s for s in cluster.steps() if s["spec"]["kind"] == "act"]
    started = act["metadata"]["creationTimestamp"]
    assert finished is not None and started >= finished.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert act["status"]["usage"]["requests"] == 0 and scenario.acts == 0


@pytest.mark.operator_env(GOALKEEPER_OUTPUT_RETRIES="0")
def test_a_check_the_model_leaves_without_a_valid_answer_takes_the_grant_that_moves(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target()  # Job build, suspended: "You may resume Job build." makes it succeed

    def invalid_while_held(facts: Facts, n: int) -> dict[str, Any]:
        if facts.suspended:
            # A wait while the Job is idle breaks the route rules: never a valid answer.
            return observation("wait", "incomplete", "idle", facts, "Idle.", **UNSTATED)
        return until_done(facts, n)

    model.default = scenario = Scenario(cluster.ns, invalid_while_held)
    cluster.create_monitor(stopWhen=STOP, everyMinutes=1)
    stopped = wait_until(cluster.stopped, 240, "the monitor to finish", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete"
    assert cluster.events("ObservationRejected") == [], "the check was not lost as invalid"
    first = next(s for s in cluster.steps() if s["spec"]["kind"] == "observe")
    assert first["status"]["usage"]["requests"] >= 1, "the model was asked"
    result = first["status"]["result"]
    assert result["route"] == "act" and result["action"]["authorizedActionId"] == "resume-build"
    assert result["reason"].startswith("The model gave no valid answer")
    assert cluster.step_kinds()[:3] == ["extract", "observe", "act"] and scenario.acts == 0


def test_a_grant_the_task_reader_left_out_stands_as_the_words_give_it(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target()  # Job build, suspended; the task says "You may resume Job build."
    # The reading's model proposes no grant at all: the grammar's reading still gives it.
    silent = extraction(authorizedActions=[], allowedResources=[], allowedRecoveryActions=[])
    model.default = scenario = Scenario(cluster.ns, until_done, reading=silent)
    cluster.create_monitor(stopWhen=STOP, everyMinutes=1)
    stopped = wait_until(cluster.stopped, 240, "the monitor to finish", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete"
    grants = {g["id"]: g["verb"] for g in stopped["authority"]["typedGrants"]}
    assert grants.get("resume-build") == "resume", grants
    assert stopped["authority"].get("dropped", []) == [] and scenario.readings == 1
    assert stopped["contract"]["allowedResources"] == ["jobs/build"]
    assert "act" in cluster.step_kinds()
    assert (
        cluster.batch.read_namespaced_job(name="build", namespace=cluster.ns).spec.suspend is False
    )
