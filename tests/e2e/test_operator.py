"""Operator behaviour beyond the acceptance cases: restarts, untrusted results, deletion,
and the clear stops for missing dependencies."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from tests.e2e.harness import (
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    _is_observe,
    is_reading,
    observation,
    report_text,
    wait_until,
)
from tests.support.model_server import Final, ModelServer, Reply
from tests.support.observations import action

pytestmark = pytest.mark.cluster


def complete(facts: Facts, n: int) -> dict[str, Any]:
    return observation("stop", "complete", "complete", facts, "Done.", stopReason="goalComplete")


def running_step(cluster: Cluster) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        steps = cluster.steps()
        live = [s for s in steps if (s.get("status") or {}).get("phase") == "Running"]
        return live[-1] if live else None

    return wait_until(found, 90, "a running step")


def test_operator_killed_mid_step_accepts_the_result_once(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=False, seconds=0)
    answer = threading.Event()
    model.default = Scenario(cluster.ns, complete, gate=answer)
    cluster.create_monitor()
    step = running_step(cluster)
    operator.kill()
    answer.set()  # the step finishes while the operator is down
    wait_until(
        lambda: cluster.step_phase(step["metadata"]["name"]) == "Succeeded",
        60,
        "the step to finish while the operator is down",
    )
    assert cluster.status().get("monitor") == "active"  # nobody handled it yet
    settled = operator.logs().count("/build: nothing to do")
    operator.start()
    status = wait_until(cluster.stopped, 90, "the restarted operator to settle", operator.logs)
    assert status["checks"] == 1 and status["stop"]["reason"] == "goalComplete"
    # A positive signal that the restarted operator is done with the monitor.
    wait_until(
        lambda: operator.logs().count("/build: nothing to do") > settled,
        60,
        "the restarted operator to find nothing left to do",
        operator.logs,
    )
    assert len(cluster.events("Report")) == 1
    assert cluster.step_kinds() == ["extract", "observe"]


def test_invalid_step_result_is_rejected_and_not_counted(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=False, seconds=0)
    answer = threading.Event()
    model.default = Scenario(cluster.ns, complete, gate=answer)
    cluster.create_monitor()
    step = running_step(cluster)
    # A compromised step writes a result that is not an observation.
    forged = {"phase": "Succeeded", "result": {"route": "delete-everything", "goal": "complete"}}
    cluster.custom.patch_namespaced_custom_object_status(
        "goalkeeper.dev",
        "v1alpha1",
        cluster.ns,
        "monitorsteps",
        step["metadata"]["name"],
        {"status": forged},
        _content_type="application/merge-patch+json",
    )
    retried = wait_until(
        lambda: len(cluster.steps()) >= 2 and cluster.status(),
        60,
        "a retried observation",
        operator.logs,
    )
    assert retried["checks"] == 0
    assert "route" in retried["lastRejection"]
    answer.set()
    status = wait_until(cluster.stopped, 90, "the retried check", operator.logs)
    assert status["checks"] == 1
    assert len(cluster.reports(1)) == 1


def test_deleting_a_monitor_mid_step_kills_the_step(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, pod_runner: Any
) -> None:
    cluster.target(suspended=False, seconds=0)
    # The step never gets its answer: it is still running when the monitor goes.
    model.default = Scenario(cluster.ns, complete, gate=threading.Event())
    cluster.create_monitor()
    step = running_step(cluster)
    pods = cluster.core.list_namespaced_pod(
        cluster.ns, label_selector=f"goalkeeper.dev/step={step['metadata']['name']}"
    ).items
    assert len(pods) == 1

    def started() -> int | None:
        record = pod_runner.record(cluster.ns, pods[0].metadata.name)
        return record.pid if record is not None else None

    pid = wait_until(started, 30, "the step process")
    cluster.custom.delete_namespaced_custom_object(
        "goalkeeper.dev", "v1alpha1", cluster.ns, "monitors", "build"
    )
    wait_until(
        lambda: not cluster.steps() and not cluster.step_jobs(),
        60,
        "garbage collection of steps and Jobs",
    )
    wait_until(lambda: not _alive(pid), 60, "the step process to be killed")
    assert cluster.events("Report") == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def failing_with(cluster: Cluster, text: str) -> dict[str, Any] | None:
    """The status once the monitor is Failing and its retry names `text`."""
    status = cluster.status()
    health = (status.get("health") or {}).get("state")
    description = (status.get("schedule") or {}).get("description") or ""
    return status if health == "Failing" and text in description else None


def test_a_missing_observer_account_is_waited_out_with_a_clear_reason(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    from kubernetes import client

    cluster.core.delete_namespaced_service_account("goalkeeper-observer", cluster.ns)
    cluster.target(suspended=False, seconds=0)
    model.default = Scenario(cluster.ns, complete)
    cluster.create_monitor()
    missing = "ServiceAccount goalkeeper-observer is missing"
    status = wait_until(
        lambda: failing_with(cluster, missing), 120, "the monitor to wait, Failing", operator.logs
    )
    assert status["monitor"] == "active" and status["checks"] == 0
    assert cluster.steps() == []
    failed = cluster.posted("StepFailed")
    assert failed and failed[0].type == "Warning" and missing in failed[0].message
    # The namespace admin puts the account back: the run carries on and finishes.
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="goalkeeper-observer"))
    cluster.core.create_namespaced_service_account(cluster.ns, account)
    status = wait_until(cluster.stopped, 180, "the monitor to finish", operator.logs)
    assert status["stop"]["reason"] == "goalComplete"


def test_no_model_configured_is_waited_out_with_a_clear_reason(
    cluster: Cluster, operator: OperatorProcess
) -> None:
    operator.restart_with(GOALKEEPER_MODEL="")
    cluster.create_monitor()
    status = wait_until(
        lambda: failing_with(cluster, "No model is configured"),
        120,
        "the monitor to wait, Failing",
        operator.logs,
    )
    assert status["monitor"] == "active" and cluster.steps() == []


def test_no_repair_workflow_configured_stops_with_that_reason(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=False, seconds=0, exit_code=3)
    fix = action(kind="repair", authorizedActionId="fix-config", failureId="bad-flag")
    model.default = Scenario(
        cluster.ns,
        lambda facts, n: observation("act", "incomplete", "failed", facts, "Defect.", action=fix),
    )
    cluster.create_monitor()
    status = wait_until(cluster.stopped, 90, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "blocked"
    assert "No repair workflow is configured." in status["stop"]["message"]
    assert cluster.step_kinds() == ["extract", "observe", "repair"]


def test_status_conditions_and_observed_generation_follow_spec_edits(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=False, seconds=120)
    model.default = Scenario(
        cluster.ns,
        lambda facts, n: observation("wait", "incomplete", "running", facts, "Running."),
    )
    cluster.create_monitor(everyMinutes=600)
    wait_until(lambda: cluster.status().get("schedule"), 90, "the first check", operator.logs)
    cluster.custom.patch_namespaced_custom_object(
        "goalkeeper.dev", "v1alpha1", cluster.ns, "monitors", "build", {"spec": {"maxChecks": 5}}
    )
    generation = cluster.monitor()["metadata"]["generation"]
    status = wait_until(
        lambda: cluster.status().get("observedGeneration") == generation and cluster.status(),
        30,
        "the edit to be observed",
        operator.logs,
    )
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True" and conditions["Ready"]["reason"] == "Waiting"
    assert conditions["Progressing"]["status"] == "False"
    assert conditions["Ready"]["observedGeneration"] == generation
    assert status["checks"] == 1, "an edit alone is not a check"


def test_step_history_is_pruned_to_its_bound(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    operator.restart_with(GOALKEEPER_STEP_HISTORY="2")
    cluster.target(suspended=False, seconds=120)
    model.default = Scenario(
        cluster.ns,
        lambda facts, n: observation("wait", "incomplete", "running", facts, "Running."),
    )
    cluster.create_monitor(everyMinutes=1, maxChecks=4)
    status = wait_until(cluster.stopped, 120, "the safety limit", operator.logs)
    assert status["checks"] == 4
    # Step 1 read the task; steps 2 to 5 were the checks.
    assert [s["spec"]["seq"] for s in cluster.steps()] == [4, 5]
    wait_until(lambda: len(cluster.step_jobs()) == 2, 60, "pruned steps' Jobs to be collected")
    assert len(cluster.reports(4)) == 4


def test_a_step_job_that_keeps_failing_is_retried_with_growing_delays_until_the_window_ends(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    # Without its RoleBinding the observer cannot read its MonitorStep: every step pod
    # fails before it can write a result, so only the Job's failure tells the operator.
    from datetime import datetime
    from itertools import pairwise

    from kubernetes import client

    # A step tries a refusal by RBAC again for 20 s (step/kube.py RBAC_WARMUP) before it
    # fails: the window holds a few of those.
    operator.restart_with(GOALKEEPER_FAILURE_WINDOW_SECONDS="70")
    client.RbacAuthorizationV1Api(cluster.core.api_client).delete_namespaced_role_binding(
        "goalkeeper-observer", cluster.ns
    )
    cluster.target(suspended=False, seconds=0)
    model.default = Scenario(cluster.ns, complete)
    cluster.create_monitor()

    def failing() -> dict[str, Any] | None:
        status = cluster.status()
        return status if (status.get("health") or {}).get("state") == "Failing" else None

    status = wait_until(failing, 180, "the monitor to show Failing", operator.logs)
    assert status["monitor"] == "active" and "Retrying at" in status["schedule"]["description"]
    status = wait_until(cluster.stopped, 300, "the failure window to end", operator.logs)
    assert status["stop"]["reason"] == "blocked"
    message = status["stop"]["message"]
    assert "Steps have failed to run for" in message and "GOALKEEPER_FAILURE_WINDOW" in message
    assert "Job build-" in message and "-extract-" in message
    assert status["checks"] == 0
    steps = cluster.steps()
    assert {s["spec"]["kind"] for s in steps} == {"extract"} and len(steps) >= 3
    # Never back to back: each retry waited longer than the one before.
    starts = sorted(
        datetime.fromisoformat(s["metadata"]["annotations"]["goalkeeper.dev/launched-at"])
        for s in steps
    )
    gaps = [b - a for a, b in pairwise(starts)]
    assert gaps[-1] > gaps[0], gaps
    assert all((s.get("status") or {}).get("phase") != "Succeeded" for s in steps)
    assert cluster.events("Report") == []


def test_a_refused_call_shows_as_a_condition_until_it_goes_through(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    """An admission policy refuses the operator's Job: the Monitor says so in a Degraded
    condition with the policy's own message, and recovers by itself once it is lifted."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    cluster.target(suspended=False, seconds=0)
    model.default = Scenario(cluster.ns, complete)
    admission = client.AdmissionregistrationV1Api(cluster.api)
    name = f"freeze-jobs-{cluster.ns}"
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["batch"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["jobs"],
                        }
                    ]
                },
                "validations": [{"expression": "false", "message": "Jobs are frozen here."}],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": cluster.ns}
                    }
                },
            },
        }
    )
    batch = client.BatchV1Api(cluster.api)
    probe = {
        "metadata": {"name": "probe"},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            }
        },
    }

    def refused() -> bool:
        try:
            batch.create_namespaced_job(cluster.ns, probe, dry_run="All")
        except ApiException as error:
            return "frozen" in str(error.body)
        return False

    try:
        wait_until(refused, 60, "the policy to refuse Jobs")
        cluster.create_monitor()

        def degraded() -> dict[str, Any] | None:
            conditions = (cluster.status().get("conditions")) or []
            found = [c for c in conditions if c["type"] == "Degraded"]
            return found[0] if found else None

        condition = wait_until(degraded, 90, "the Degraded condition", operator.logs)
        assert condition["status"] == "True" and condition["reason"] == "ApiRefused"
        assert "create Job" in condition["message"], condition
        assert "Jobs are frozen here." in condition["message"], condition
        assert "Jobs are frozen here." in operator.logs()
        assert cluster.status().get("monitor") == "active", "a refusal is retried, not a stop"
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
    status = wait_until(cluster.stopped, 120, "the monitor to run once Jobs go through")
    assert status["stop"]["reason"] == "goalComplete"
    assert not [c for c in status["conditions"] if c["type"] == "Degraded"]


def test_an_act_step_that_ends_without_a_result_leaves_its_outcome_to_the_next_check(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, pod_runner: Any
) -> None:
    cluster.target(done=0)  # suspended: the first check resumes it

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if facts.suspended:
            # Under a grant the act step carries out with the model (a typed resume would be
            # one call by code, with no model request to hold the step at).
            resume = action(
                action="Resume Job build (set spec.suspend=false).", authorizedActionId="fix-config"
            )
            return observation("act", "incomplete", "idle", facts, "Resuming.", action=resume)
        if facts.succeeded:
            return complete(facts, n)
        return observation("wait", "incomplete", "running", facts, "Job build is running.")

    scenario = Scenario(cluster.ns, observe)
    acted, killed = threading.Event(), threading.Event()

    def reply(body: dict[str, Any]) -> Reply:
        answer = scenario(body)
        if isinstance(answer, Final) and not is_reading(body) and not _is_observe(body):
            # The act has resumed the Job; its step dies before it can write a result.
            acted.set()
            killed.wait(120)
        return answer

    model.default = reply
    cluster.create_monitor(everyMinutes=1)
    try:
        wait_until(acted.is_set, 120, "the act step's answer", operator.logs)
        [act] = [s for s in cluster.steps() if s["spec"]["kind"] == "act"]
        name = act["metadata"]["name"]
        pods = cluster.core.list_namespaced_pod(
            cluster.ns, label_selector=f"goalkeeper.dev/step={name}"
        ).items
        record = pod_runner.record(cluster.ns, pods[0].metadata.name)
        assert record is not None and record.pid is not None
        os.killpg(record.pid, signal.SIGKILL)
    finally:
        killed.set()
    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    # The next check finds the Job resumed: it waits while it runs, and stops once done.
    assert status["stop"]["reason"] == "goalComplete" and status["checks"] >= 2
    assert cluster.step_phase(name) == "Running", "the step wrote no result"
    assert scenario.acts == 1
    last = status["lastAction"]
    assert last["outcome"] == "unknown", last
    assert f"Job {name} failed (BackoffLimitExceeded)" in last["evidence"]
    assert "ended Error (exit code 137)" in last["evidence"]
    assert "the next observation decides" in last["evidence"]
    [told] = cluster.posted("StepFailed")
    assert "ended without a result" in told.message and "is unknown" in told.message
    reports = cluster.reports(status["checks"])
    [second] = [e for e in reports if e.metadata.name.endswith(".check-2")]
    said = report_text(second)
    assert (
        "Last action outcome: unknown: Whether the action took effect is unknown; the next "
        f"observation decides. The step ended without a result to take: Job {name} failed"
    ) in said
    assert "Last action outcome: failed" not in said
