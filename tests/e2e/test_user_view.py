"""What a user sees through kubectl alone: honest columns, an Event for every step and
failure, stops that say what to do, and a stopped monitor restarted by a spec edit."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.harness import (
    GROUP,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    wait_until,
)
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster


def running(facts: Facts, _: int = 0) -> dict[str, Any]:
    return observation("wait", "incomplete", "running", facts, "Job build is running.")


def row(control_plane: Any, namespace: str) -> dict[str, str]:
    table = control_plane.kubectl("get", "monitors", "-n", namespace, check=True).stdout
    header, line = table.splitlines()[:2]
    names = ["NAME", "GOAL", "WORK", "PROGRESS", "CHECKS", "NEXT CHECK", "STEP", "HEALTH", "AGE"]
    starts = [header.index(n) for n in names]
    ends = [*starts[1:], None]
    return {n: line[a:b].strip() for n, a, b in zip(names, starts, ends, strict=True)}


def events(cluster: Cluster, reason: str) -> list[Any]:
    return cluster.events(reason)


def test_columns_show_the_next_check_as_a_time_and_what_runs(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, control_plane: Any
) -> None:
    cluster.target(suspended=False, seconds=600)
    model.default = Scenario(cluster.ns, running)
    cluster.create_monitor(everyMinutes=600, maxChecks=1)
    # maxChecks=1 stops at the first check; a spec edit later restarts it.
    stopped = wait_until(cluster.stopped, 90, "the first run to stop", operator.logs)
    assert stopped["stop"]["reason"] == "safetyLimit"
    assert row(control_plane, cluster.ns)["STEP"] == "stopped"
    stop_event = events(cluster, "Stopped")
    assert len(stop_event) == 1 and "What to do: Raise spec.maxChecks" in stop_event[0].message

    # The edit starts a new run: checks count from zero, the old stop stays in history.
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitors", "build", {"spec": {"maxChecks": 5}}
    )
    waiting = wait_until(
        lambda: (s := cluster.status()).get("schedule") and s.get("monitor") == "active" and s,
        90,
        "the new run to wait",
        operator.logs,
    )
    assert waiting["checks"] == 1 and waiting["previousRuns"][0]["stop"]["reason"] == "safetyLimit"
    assert "Restarted: a spec edit began a new run" in waiting["report"]
    reports = sorted(events(cluster, "Report"), key=lambda e: e.metadata.name)
    assert len(reports) == 2, "one report per accepted check, in each run"
    assert all("\n" not in e.message and e.message.startswith("check 1:") for e in reports)

    # A future next check reads as the time it is, not as an age.
    shown = row(control_plane, cluster.ns)
    assert shown["NEXT CHECK"] == waiting["schedule"]["nextCheckAt"]
    assert shown["STEP"] == "waiting"
    assert shown["HEALTH"] == "Healthy"
    # Overdue (the operator is down past the time): still the same absolute time.
    operator.stop()
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitors", "build", {"spec": {"everyMinutes": 1}}
    )
    assert row(control_plane, cluster.ns)["NEXT CHECK"] == waiting["schedule"]["nextCheckAt"]


def test_failed_steps_and_rejected_observations_are_warning_events(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=False, seconds=600)
    # No retries inside the step: an invalid answer or a 500 ends the step at once.
    operator.restart_with(GOALKEEPER_PROVIDER_RETRIES="0", GOALKEEPER_OUTPUT_RETRIES="0")
    answers = iter(["invalid"])

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if next(answers, "stop") == "invalid":
            model.fail_next(1, 500, "upstream exploded")  # the next step's first request
            # A wait with idle work breaks the route rules: rejected, not counted.
            return observation("wait", "incomplete", "idle", facts, "Idle.")
        return observation(
            "stop", "incomplete", "blocked", facts, "Blocked.", stopReason="materialBlocker"
        )

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor()
    status = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "materialBlocker"

    rejected = events(cluster, "ObservationRejected")
    assert len(rejected) >= 1 and rejected[0].type == "Warning"
    assert "invalid" in rejected[0].message.lower()
    assert "Idle." not in rejected[0].message, "the model's own text is never echoed"
    failed = events(cluster, "StepFailed")
    assert len(failed) == 1 and failed[0].type == "Warning"
    assert "GOALKEEPER_PROVIDER_RETRIES" in failed[0].message
    # Only a mutation announces its start; an observation is told by its report.
    assert events(cluster, "StepStarted") == []
    stop = events(cluster, "Stopped")
    assert len(stop) == 1 and stop[0].type == "Warning"
    assert stop[0].message.startswith("materialBlocker: ") and "What to do:" in stop[0].message


def test_a_target_whose_progress_moved_then_froze_shows_stalled_with_one_event(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, control_plane: Any
) -> None:
    # The Job keeps running; its progress ConfigMap moves once, then never again.
    cluster.target(suspended=False, seconds=600, done=20)
    model.default = Scenario(cluster.ns, running)
    cluster.create_monitor(everyMinutes=1, maxChecks=20)
    wait_until(lambda: cluster.status().get("checks", 0) >= 1, 120, "the first check")
    assert (cluster.status().get("health") or {}).get("state") == "Healthy"
    cluster.core.patch_namespaced_config_map("build-progress", cluster.ns, {"data": {"done": "21"}})

    def stalled() -> dict[str, Any] | None:
        status = cluster.status()
        return status if (status.get("health") or {}).get("state") == "Stalled" else None

    status = wait_until(stalled, 180, "the monitor to show Stalled", operator.logs)
    # Three checks in a row after the one that saw it move (the default threshold).
    assert status["health"]["stalledChecks"] == 3 and status["health"]["progressMoved"]
    assert row(control_plane, cluster.ns)["HEALTH"] == "Stalled"
    (healthy,) = [c for c in status["conditions"] if c["type"] == "Healthy"]
    assert (healthy["status"], healthy["reason"]) == ("False", "Stalled")
    health = events(cluster, "Health")
    assert len(health) == 1 and health[0].type == "Warning"
    assert health[0].message.startswith("Health Healthy -> Stalled: The target claims running")
    stalled_at = status["checks"]

    # The next observe step is told, and what it may do: one authorized recovery.
    def told() -> str | None:
        steps = [s for s in cluster.steps() if s["spec"]["check"] == stalled_at + 1]
        return steps[0]["spec"]["input"].get("health") if steps else None

    note = wait_until(told, 60, "the next observe step", operator.logs)
    assert "has not moved for 3 checks" in note and "kind recover" in note
    assert "keep the work done so far" in note
