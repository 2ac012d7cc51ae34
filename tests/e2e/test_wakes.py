"""Event wakes end to end: a waiting monitor checks again as soon as a target it watches
changes, through the real API server, once per change and at most once per interval."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.harness import (
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    report_text,
    wait_until,
)
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

LAUNCHED_AT = "goalkeeper.dev/launched-at"
JOB = [{"apiVersion": "batch/v1", "kind": "Job", "name": "build"}]
FLAPPY = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "flappy"}]
# At a time scale of 1 s per minute: a 24-minute timer, far beyond every deadline here.
LONG_WAIT = 1440


def finish_build(facts: Facts, _: int) -> dict[str, Any]:
    if facts.succeeded:
        return observation(
            "stop", "complete", "complete", facts, "Job build succeeded.", stopReason="goalComplete"
        )
    return observation("wait", "incomplete", "running", facts, "Job build runs.", watch=JOB)


def watch_flappy(facts: Facts, _: int) -> dict[str, Any]:
    return observation("wait", "incomplete", "running", facts, "Waiting on flappy.", watch=FLAPPY)


def first_wait(cluster: Cluster, operator: OperatorProcess, kind: str, name: str) -> Any:
    """The first schedule, once the operator's watch of its target has listed it."""
    status = wait_until(
        lambda: (s := cluster.status()).get("schedule") and s, 120, "the first wait", operator.logs
    )
    wait_until(
        lambda: f"watching {kind} {name} in {cluster.ns}" in operator.logs(),
        60,
        f"the operator to watch {kind} {name}",
        operator.logs,
    )
    return status


def woken_steps(cluster: Cluster) -> list[dict[str, Any]]:
    return [s for s in cluster.steps() if s["spec"]["input"].get("wokenBy")]


@pytest.mark.operator_env(GOALKEEPER_WAKE_INTERVAL_SECONDS="2")
def test_a_job_that_finishes_mid_wait_stops_the_monitor_within_seconds_after_a_restart(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    tmp_path: Path,
    control_plane: Any,
) -> None:
    gate = tmp_path / "finish-build"
    cluster.target(suspended=False, gate=gate)
    model.default = Scenario(cluster.ns, finish_build)
    cluster.create_monitor(everyMinutes=LONG_WAIT, maxChecks=6)
    status = first_wait(cluster, operator, "Job", "build")
    schedule = status["schedule"]
    assert schedule["watch"] == JOB
    assert schedule["description"].endswith(", or sooner on a change of Job/build.")
    print(control_plane.kubectl("get", "monitors", "-n", cluster.ns).stdout)

    # The operator dies while the monitor waits; the new one watches again from status.
    operator.kill()
    operator.start()
    watching = f"watching Job build in {cluster.ns}"
    wait_until(lambda: operator.logs().count(watching) == 2, 60, "the watch again", operator.logs)
    gate.touch()  # the build finishes now, long before the timer
    stopped = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete"
    assert datetime.fromisoformat(stopped["stop"]["at"]) < datetime.fromisoformat(
        schedule["nextCheckAt"]
    )
    # Every check after the first was started by a change of the Job, none by the timer.
    steps = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    assert [bool(s["spec"]["input"].get("wokenBy")) for s in steps] == [False] + [True] * (
        len(steps) - 1
    )
    assert all(s["spec"]["input"]["wokenBy"].startswith("Job/build: ") for s in steps[1:])
    # One report per check, and the last says what woke it.
    reports = cluster.reports(stopped["checks"])
    assert len(reports) == stopped["checks"] == len(steps)
    assert "Checked: woken by Job/build: " in stopped["report"]
    assert any("Checked: woken by Job/build" in report_text(e) for e in reports)
    print(stopped["report"])


@pytest.mark.operator_env(GOALKEEPER_WAKE_INTERVAL_SECONDS="3")
def test_a_flapping_target_wakes_at_most_once_per_interval_and_others_never(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    apps = client.AppsV1Api(cluster.api)
    for name in ("flappy", "other"):
        apps.create_namespaced_replica_set(
            cluster.ns,
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "main", "image": "none"}]},
                    },
                },
            },
        )
    model.default = Scenario(cluster.ns, watch_flappy)
    cluster.create_monitor(everyMinutes=LONG_WAIT, maxChecks=100)
    first_wait(cluster, operator, "ReplicaSet", "flappy")
    flips = 0

    def flip(name: str) -> None:
        nonlocal flips
        flips += 1
        state = "True" if flips % 2 else "False"
        apps.patch_namespaced_replica_set_status(
            name, cluster.ns, {"status": {"conditions": [{"type": "Flap", "status": state}]}}
        )

    # The unrelated ReplicaSet changes first, on the same watch: it wakes nothing.
    for _ in range(5):
        flip("other")
    # Then the watched one flaps until it has woken the monitor four times.
    flips_before = flips
    deadline = time.monotonic() + 120
    while len(woken_steps(cluster)) < 4:
        assert time.monotonic() < deadline, operator.logs()[-5000:]
        flip("flappy")
        time.sleep(0.2)  # drives the target: a change every fifth of a second
    woken = woken_steps(cluster)
    assert all(s["spec"]["input"]["wokenBy"].startswith("ReplicaSet/flappy: ") for s in woken)
    launched = [datetime.fromisoformat(s["metadata"]["annotations"][LAUNCHED_AT]) for s in woken]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(launched)]
    assert all(gap >= 3 for gap in gaps), gaps
    # Far more changes than wakes: the interval held the rest back.
    assert flips - flips_before >= 2 * len(woken)
    # No check but the first came from the timer, and none from the other ReplicaSet.
    steps = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    assert [bool(s["spec"]["input"].get("wokenBy")) for s in steps] == [False] + [True] * (
        len(steps) - 1
    )
    assert not [s for s in steps if "other" in s["spec"]["input"].get("wokenBy", "")]
