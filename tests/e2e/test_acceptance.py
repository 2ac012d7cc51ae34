"""The monitor spec's 15 acceptance cases, end to end: real API server, the operator as its
own process, `goalkeeper-step` processes run by the pod runner, a scripted model on loopback,
and a target that is a plain Job and ConfigMap."""

from __future__ import annotations

import json
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    ROOT,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    build_job,
    observation,
    progress_map,
    report_text,
    wait_until,
)
from tests.support.model_server import ModelServer
from tests.support.observations import action, extraction

pytestmark = pytest.mark.cluster


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def job_state(cluster: Cluster) -> Any:
    return cluster.batch.read_namespaced_job("build", cluster.ns)


def finished(cluster: Cluster, operator: OperatorProcess, timeout: float = 120) -> dict[str, Any]:
    return wait_until(cluster.stopped, timeout, "the monitor to stop", operator.logs)


# An observation that does not restate the authority: the recorded one stands as it is.
UNSTATED: dict[str, Any] = {"contract": None, "authorizedActions": None}


def act(facts: Facts, report: str = "Idle; resuming the build now.", **overrides: Any) -> dict:
    return observation("act", "incomplete", "idle", facts, report, action=action(**overrides))


def done_or_wait(facts: Facts) -> dict[str, Any]:
    if facts.succeeded:
        return observation(
            "stop", "complete", "complete", facts, "Job build succeeded.", stopReason="goalComplete"
        )
    return observation("wait", "incomplete", "running", facts, "Job build is running.")


def step_results(cluster: Cluster, kind: str) -> list[dict[str, Any]]:
    return [
        s.get("status", {}).get("result") or {}
        for s in cluster.steps()
        if s["spec"]["kind"] == kind
    ]


def test_acceptance_01_goal_already_complete(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(done=27, suspended=False, seconds=0)
    wait_until(lambda: job_state(cluster).status.succeeded, 60, "the target Job to succeed")
    model.default = Scenario(cluster.ns, lambda facts, n: done_or_wait(facts))
    cluster.create_monitor()

    status = finished(cluster, operator)
    assert status["stop"]["reason"] == "goalComplete"
    assert status["goal"] == "complete" and status["checks"] == 1
    assert cluster.step_kinds() == ["extract", "observe"]
    assert {j.metadata.labels["goalkeeper.dev/kind"] for j in cluster.step_jobs()} <= {
        "extract",
        "observe",
    }
    reports = cluster.reports(1)
    assert len(reports) == 1 and "Goal: complete" in report_text(reports[0])
    assert reports[0].message.startswith("check 1: goal complete, work complete")


def test_acceptance_02_work_active_so_monitor_waits(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=False, seconds=120)
    model.default = Scenario(cluster.ns, lambda facts, n: done_or_wait(facts))
    cluster.create_monitor(everyMinutes=3, maxChecks=2)

    first = wait_until(
        lambda: cluster.status().get("schedule"), 90, "a published schedule", operator.logs
    )
    assert first["everyMinutes"] == 3
    assert (stamp(first["nextCheckAt"]) - stamp(first["lastCheckAt"])).total_seconds() == 3
    assert cluster.status()["work"] == "running"

    status = finished(cluster, operator)
    assert status["stop"]["message"] == "Reached the 2-check safety limit."
    observes = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    assert len(observes) == 2
    second_created = stamp(observes[1]["metadata"]["creationTimestamp"])
    # Timestamps have whole seconds: the second check starts at nextCheckAt, not before.
    assert second_created >= stamp(first["nextCheckAt"]).replace(microsecond=0)


def test_acceptance_03_work_idle_so_monitor_starts_it(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(done=0)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        return (
            act(facts, action="Start Job build (set spec.suspend=false).")
            if facts.suspended
            else done_or_wait(facts)
        )

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=1)
    status = finished(cluster, operator)
    assert status["stop"]["reason"] == "goalComplete"
    assert cluster.step_kinds()[:4] == ["extract", "observe", "act", "observe"]
    assert job_state(cluster).spec.suspend is False
    first_report = sorted(cluster.events("Report"), key=lambda e: e.metadata.name)[0]
    assert "Work: idle" in report_text(first_report)
    assert "Next action: Start Job build" in report_text(first_report)


def test_acceptance_04_saved_work_exists_so_monitor_resumes_it(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(done=21)
    uid = job_state(cluster).metadata.uid

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if facts.suspended:
            return act(
                facts, kind="recover", action="Resume Job build from the 21 saved module outputs."
            )
        return done_or_wait(facts)

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=1)
    finished(cluster, operator)
    assert job_state(cluster).metadata.uid == uid, "resumed, not recreated"
    saved = cluster.core.read_namespaced_config_map("build-progress", cluster.ns)
    assert saved.data["done"] == "21", "saved progress kept"
    act_step = next(s for s in cluster.steps() if s["spec"]["kind"] == "act")
    assert "21 saved module outputs" in act_step["spec"]["input"]["action"]["action"]


def test_acceptance_05_action_succeeds_so_monitor_observes_immediately(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(seconds=60)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if facts.suspended:
            return act(facts)
        return observation(
            "stop",
            "incomplete",
            "running",
            facts,
            "Resumed; stopping here.",
            stopReason="materialBlocker",
        )

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=600)  # a timer in between would take 10 minutes
    finished(cluster, operator)
    steps = cluster.steps()
    assert [s["spec"]["kind"] for s in steps] == ["extract", "observe", "act", "observe"]
    act_done = stamp(steps[2]["status"]["finishedAt"])
    verify_created = stamp(steps[3]["metadata"]["creationTimestamp"])
    assert (verify_created - act_done).total_seconds() < 30
    assert steps[2]["status"]["result"]["outcome"] == "succeeded"


def test_acceptance_06_action_fails_once_then_recovery_succeeds(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    # The first resume finds no Job build (it is created once that act has failed); the
    # recovery resumes the Job then there.
    cluster.core.create_namespaced_config_map(cluster.ns, progress_map(cluster.ns, 21))

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:
            return act(facts)
        if facts.suspended:
            return act(
                facts,
                kind="recover",
                failureId="resume-failed",
                action="Resume Job build again after the failed attempt.",
            )
        return done_or_wait(facts)

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=1)
    wait_until(
        lambda: any(r.get("outcome") == "failed" for r in step_results(cluster, "act")),
        120,
        "the first act to fail",
        operator.logs,
    )
    cluster.batch.create_namespaced_job(cluster.ns, build_job(cluster.ns))
    status = finished(cluster, operator)
    assert status["stop"]["reason"] == "goalComplete"
    assert [r["outcome"] for r in step_results(cluster, "act")] == ["failed", "succeeded"]
    assert status["lastAction"]["outcome"] == "succeeded"


@pytest.fixture
def repair_marker(tmp_path: Path) -> Path:
    return tmp_path / "repair-request.json"


@pytest.fixture
def repair_env(repair_marker: Path) -> dict[str, str]:
    script = ROOT / "tests" / "e2e" / "repair_workflow.py"
    return {"GOALKEEPER_REPAIR_COMMAND": f"{sys.executable} {script} {repair_marker}"}


def repair(facts: Facts, **overrides: Any) -> dict[str, Any]:
    return observation(
        "act",
        "incomplete",
        "failed",
        facts,
        "A configuration defect fails the build.",
        action=action(
            kind="repair",
            authorizedActionId="fix-config",
            failureId="bad-flag",
            targetStateId="build-failed-bad-flag",
            action="Fix the --jobs flag in the build configuration.",
            **overrides,
        ),
    )


def test_acceptance_07_same_repaired_failure_returns_so_monitor_stops(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    repair_env: dict[str, str],
    repair_marker: Path,
) -> None:
    operator.restart_with(**repair_env)
    cluster.target(suspended=False, seconds=0, exit_code=3)
    model.default = Scenario(cluster.ns, lambda facts, n: repair(facts))
    cluster.create_monitor()
    status = finished(cluster, operator)
    assert status["stop"]["reason"] == "repairRepeated"
    assert cluster.step_kinds() == ["extract", "observe", "repair", "observe"]
    assert repair_marker.exists()


def test_acceptance_08_action_outside_authority_so_monitor_stops(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target()
    model.default = Scenario(
        cluster.ns,
        lambda facts, n: act(
            facts, authorizedActionId="rewrite-build-script", action="Rewrite the build script."
        ),
    )
    cluster.create_monitor()
    status = finished(cluster, operator)
    assert status["stop"]["reason"] == "outsideAuthority"
    assert "rewrite-build-script" in status["stop"]["message"]
    assert cluster.step_kinds() == ["extract", "observe"]
    assert job_state(cluster).spec.suspend is True


def test_acceptance_09_paid_action_exceeds_limit_so_monitor_does_not_launch_it(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    from tests.support.observations import TASK, contract, extraction

    cluster.target()

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        body = act(
            facts,
            estimatedCost={"amount": 25.0, "currency": "USD"},
            approval="budget approved in ticket OPS-12",
        )
        body["contract"] = contract(costCeiling={"amount": 10.0, "currency": "USD"})
        return body

    ceiling = "The build may cost at most 10 USD in all."
    reading = extraction(
        costCeiling={"amount": 10.0, "currency": "USD", "quote": ceiling},
    )
    model.default = Scenario(cluster.ns, observe, reading=reading)
    cluster.create_monitor(task=f"{TASK} {ceiling}")
    status = finished(cluster, operator)
    assert status["stop"]["reason"] == "paidActionNotApproved"
    assert "would exceed the cost ceiling" in status["stop"]["message"]
    assert {j.metadata.labels["goalkeeper.dev/kind"] for j in cluster.step_jobs()} <= {
        "extract",
        "observe",
    }


def test_acceptance_10_monitor_active_while_target_idle(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, control_plane: Any
) -> None:
    cluster.target()

    # An idle target takes the act route (a wait needs work running or waiting); the
    # second observation answers only once the test has read check 1's facts.
    read = threading.Event()

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:
            return act(facts, report="Idle; resuming the build now.")
        assert read.wait(120)
        return done_or_wait(facts)

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=600)
    status = wait_until(
        lambda: (s := cluster.status()).get("checks") == 1 and s.get("step") and s,
        90,
        "the first check",
        operator.logs,
    )
    assert (status["monitor"], status["work"], status["goal"]) == ("active", "idle", "incomplete")
    report = report_text(sorted(cluster.events("Report"), key=lambda e: e.metadata.name)[0])
    assert "Monitor: active" in report and "Work: idle" in report
    assert "Work: running" not in report
    table = control_plane.kubectl("get", "monitors", "-n", cluster.ns, check=True).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "GOAL", "WORK", "PROGRESS", "CHECKS"]
    assert "NEXT CHECK" in header and "AGE" in header
    assert row.split()[:5] == ["build", "incomplete", "idle", "21/27", "modules"]
    read.set()


def test_acceptance_11_target_completes_between_timed_observations(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, tmp_path: Path
) -> None:
    gate = tmp_path / "build-may-finish"
    cluster.target(suspended=False, gate=gate)
    wait_until(lambda: job_state(cluster).status.active, 60, "the target Job to run")

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        answer = done_or_wait(facts)
        if n == 1:
            assert answer["route"] == "wait", "the first check sees the build running"
            gate.touch()  # the target finishes after the first check, before the next
        return answer

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=3)
    status = finished(cluster, operator)
    assert status["stop"]["reason"] == "goalComplete"
    kinds = cluster.step_kinds()
    assert kinds[0] == "extract" and set(kinds[1:]) == {"observe"} and len(kinds) >= 3
    assert status["checks"] == len(kinds) - 1


def test_acceptance_12_unknown_input_fields_fail_before_run_creation(
    cluster: Cluster, control_plane: Any, operator: OperatorProcess
) -> None:
    manifest = {
        "apiVersion": "goalkeeper.dev/v1alpha1",
        "kind": "Monitor",
        "metadata": {"name": "build", "namespace": cluster.ns},
        "spec": {"task": "Finish the build.", "audience": "ops"},
    }
    result = control_plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    assert result.returncode != 0
    assert 'unknown field "spec.audience"' in result.stderr
    assert cluster.monitor() is None
    assert (
        cluster.custom.list_namespaced_custom_object(
            "goalkeeper.dev", "v1alpha1", cluster.ns, "monitorsteps"
        )["items"]
        == []
    )


def test_acceptance_13_normal_restart_does_not_trigger_repair(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    repair_env: dict[str, str],
    repair_marker: Path,
    control_plane: Any,
) -> None:
    # Recreating a Job is beyond the default actor: the namespace admin grants it.
    grant = ROOT / "config" / "rbac" / "examples" / "actor-recreate-jobs.yaml"
    control_plane.kubectl("apply", "-n", cluster.ns, "-f", str(grant), check=True)
    # ... and the operator lets act steps delete and create beyond patch.
    operator.restart_with(**repair_env, GOALKEEPER_ACT_EXTRA_VERBS="create,delete")
    # An operational failure: the first run fails, a run of the same Job again succeeds.
    flaky = build_job(cluster.ns, suspended=False)
    marker = repair_marker.parent / "ran-once"
    flaky["spec"]["template"]["spec"]["containers"][0]["command"] = [
        "python",
        "-c",
        f"import os, sys\nm = {str(marker)!r}\nfirst = not os.path.exists(m)\n"
        "open(m, 'w').close()\nsys.exit(1 if first else 0)",
    ]
    cluster.batch.create_namespaced_job(cluster.ns, flaky)
    cluster.core.create_namespaced_config_map(cluster.ns, progress_map(cluster.ns, 21))
    wait_until(lambda: job_state(cluster).status.failed, 60, "the target Job to fail")

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        # The answers leave the recorded authority as the reading pinned it.
        if facts.failed:
            rerun = action(
                kind="recover",
                failureId="build-exit-1",
                action="Re-run Job build after its operational failure.",
                authorizedActionId="rerun-build",
            )
            return observation(
                "act", "incomplete", "idle", facts, "It failed.", action=rerun, **UNSTATED
            )
        return {**done_or_wait(facts), **UNSTATED}

    rerun = "You may rerun Job build."
    reading = extraction(
        authorizedActions=[
            {"id": "rerun-build", "description": "Re-run Job build.", "quote": rerun}
        ]
    )
    scenario = Scenario(cluster.ns, observe, reading=reading)
    model.default = scenario
    cluster.create_monitor(everyMinutes=1, task=f"Finish Job build. {rerun}")
    status = finished(cluster, operator, timeout=180)
    assert status["stop"]["reason"] == "goalComplete"
    assert "repair" not in cluster.step_kinds()
    assert [r["outcome"] for r in step_results(cluster, "act")] == ["succeeded"]
    assert not repair_marker.exists(), "the repair workflow never ran"
    # The re-run is the typed grant's one call, done by code: no act reached the model.
    assert scenario.acts == 0


def test_acceptance_14_real_defect_uses_repair_path(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    repair_env: dict[str, str],
    repair_marker: Path,
) -> None:
    operator.restart_with(**repair_env)
    cluster.target(suspended=False, seconds=0, exit_code=3)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:
            return repair(facts)
        return observation(
            "stop",
            "incomplete",
            "idle",
            facts,
            "Repaired; the owner reruns.",
            stopReason="materialBlocker",
        )

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor()
    status = finished(cluster, operator)
    assert cluster.step_kinds() == ["extract", "observe", "repair", "observe"]
    request = json.loads(repair_marker.read_text())
    assert "--jobs flag" in json.dumps(request)
    assert [r["failureId"] for r in status["repairsDone"]] == ["bad-flag"]
    assert step_results(cluster, "repair")[0]["outcome"] == "succeeded"


def test_acceptance_15_no_target_specific_monitoring_api_required(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(done=21, suspended=False, seconds=120)
    model.default = Scenario(cluster.ns, lambda facts, n: done_or_wait(facts))
    cluster.create_monitor(everyMinutes=600)
    status = wait_until(
        lambda: cluster.status().get("schedule") and cluster.status(),
        90,
        "the first check",
        operator.logs,
    )
    assert status["progressSummary"] == "21/27 modules"
    job, progress = (
        job_state(cluster),
        cluster.core.read_namespaced_config_map("build-progress", cluster.ns),
    )
    for meta in (job.metadata, progress.metadata):
        marks = {**(meta.labels or {}), **(meta.annotations or {})}
        assert not any("goalkeeper" in key for key in marks), marks
    tools = {
        c["function"]["name"]
        for body in model.bodies
        for m in body.get("messages", [])
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    }
    assert tools <= {"k8s_get", "final_result"}
