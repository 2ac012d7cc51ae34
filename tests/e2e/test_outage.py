"""A model provider outage end to end: every observe step fails while the provider refuses,
the monitor retries after a growing delay, shows `Failing`, stays active and counts no
failed attempt as a check; once the provider answers again it finishes the run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Cluster, Facts, OperatorProcess, Scenario, observation, wait_until
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

# At a time scale of 1 s per minute: a check every 2 s, which also caps the retry delay.
INTERVAL = 2
# Fewer than the attempts the outage fails: were failed attempts counted, the run would
# stop on its safety limit instead of finishing.
MAX_CHECKS = 3
FAILED_AT_LEAST = 3


def column(control_plane: Any, namespace: str, name: str) -> str:
    """One column of the monitor's row in `kubectl get monitors`: from its header to the
    next header."""
    table = control_plane.kubectl("get", "monitors", "-n", namespace, check=True).stdout
    header, line = table.splitlines()[:2]
    start = header.index(name)
    rest = header[start + len(name) :]
    end = start + len(name) + len(rest) - len(rest.lstrip()) if rest.strip() else None
    return line[start:end].strip()


def failed_observes(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        s
        for s in cluster.steps()
        if s["spec"]["kind"] == "observe" and (s.get("status") or {}).get("phase") == "Failed"
    ]


def job_succeeded(cluster: Cluster) -> bool:
    job = cluster.batch.read_namespaced_job("build", cluster.ns)
    return bool(job.status and job.status.succeeded)


@pytest.mark.operator_env(GOALKEEPER_PROVIDER_RETRIES="0", GOALKEEPER_STEP_HISTORY="100")
def test_a_model_outage_is_ridden_out_and_the_run_finishes(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    tmp_path: Path,
) -> None:
    gate = tmp_path / "finish-build"
    cluster.target(suspended=False, gate=gate)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if facts.succeeded:
            return observation(
                "stop", "complete", "complete", facts, "Job build succeeded.",
                stopReason="goalComplete",
            )  # fmt: skip
        if n == 1:
            # The provider goes down right after the first check's answer.
            model.refuse_all(503, "the model provider is overloaded")
        return observation("wait", "incomplete", "running", facts, "Job build runs.")

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=INTERVAL, maxChecks=MAX_CHECKS)

    # Two failed observe steps make the health Failing; the monitor stays active and says
    # when it tries again, and why.
    def failing() -> dict[str, Any] | None:
        status = cluster.status()
        return status if (status.get("health") or {}).get("state") == "Failing" else None

    status = wait_until(failing, 120, "the health to be Failing", operator.logs)
    assert len(failed_observes(cluster)) >= 2
    assert status["monitor"] == "active" and status.get("stop") is None
    assert status["checks"] == 1
    wait_until(
        lambda: column(control_plane, cluster.ns, "HEALTH") == "Failing",
        30,
        "kubectl get monitors to show HEALTH Failing",
        operator.logs,
    )
    print(control_plane.kubectl("get", "monitors", "-n", cluster.ns).stdout)
    schedule = status.get("schedule") or {}
    assert schedule.get("nextCheckAt"), status
    # The retry is the schedule's next check, and the description says why.
    assert re.search(r"retr", schedule.get("description", ""), re.I), schedule
    assert "HTTP 503" in schedule["description"], schedule
    print(schedule["description"])
    wait_until(
        lambda: (
            column(control_plane, cluster.ns, "NEXT CHECK")
            == (cluster.status().get("schedule") or {}).get("nextCheckAt")
        ),
        30,
        "Next Check to show the retry",
        operator.logs,
    )
    wait_until(
        lambda: [e for e in cluster.events("Health") if "Failing" in e.message],
        30,
        "a Health Event saying Failing",
        operator.logs,
    )

    # It keeps trying while the outage lasts, and never ends the run for it.
    wait_until(
        lambda: len(failed_observes(cluster)) >= FAILED_AT_LEAST,
        120,
        f"{FAILED_AT_LEAST} failed observe steps",
        operator.logs,
    )
    status = cluster.status()
    assert status["monitor"] == "active" and status["checks"] == 1, status
    assert cluster.events("Stopped") == []
    assert status["health"]["state"] == "Failing"

    # The target finishes, then the provider answers again: the next retry sees it.
    gate.touch()
    wait_until(lambda: job_succeeded(cluster), 60, "Job build to succeed")
    model.answer_again()
    stopped = wait_until(cluster.stopped, 120, "the monitor to finish", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete", stopped["stop"]
    assert stopped["goal"] == "complete"
    failed = failed_observes(cluster)
    # Only accepted observations are checks: the first and the one after the outage.
    assert stopped["checks"] == 2, (stopped["checks"], len(failed))
    assert len(cluster.reports(2)) == 2
    assert len(failed) >= FAILED_AT_LEAST
    assert len(model.refused) >= len(failed)
    assert all(r.status == 503 for r in model.refused)
    assert len(cluster.posted("StepFailed")) >= 1
    print(f"{len(failed)} failed observe steps, {len(model.refused)} refused model requests")
