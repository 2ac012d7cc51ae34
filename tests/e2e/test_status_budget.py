"""Maximal observations through the real API server: the loop keeps going, and neither
the Monitor nor a MonitorStep grows past its budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from goalkeeper.core.budget import STATUS_BUDGET
from tests.e2e.harness import (
    GROUP,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    wait_until,
)
from tests.support.model_server import ModelServer
from tests.support.observations import maximal_dict

pytestmark = pytest.mark.cluster

CHECKS = 3
GRANTS = ("allowedFiles", "allowedSystems", "allowedResources", "allowedRecoveryActions")


def test_maximal_observations_keep_the_loop_going_within_budget(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, tmp_path: Path
) -> None:
    # The Job ends before the last check only: one that ended first would settle a check.
    gate = tmp_path / "finish"
    cluster.target(suspended=False, gate=gate)

    def restating(route: str, n: int) -> dict[str, Any]:
        """A maximal observation that restates the recorded authority, as an honest model
        does: every restriction at its bound, and only the grants the task gave (none)."""
        body = maximal_dict(route, n)
        body["contract"] = {k: v for k, v in body["contract"].items() if k not in GRANTS}
        body["authorizedActions"] = []
        return body

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n < CHECKS:
            return restating("wait", n)
        done = restating("stop", n)
        return {**done, "goal": "complete", "work": "complete", "stopReason": "goalComplete"}

    # Restrictions need no quote: the reading records every one at its bound.
    reading = restating("wait", 0)["contract"]
    model.default = Scenario(cluster.ns, observe, reading=reading)
    cluster.create_monitor(everyMinutes=1)
    wait_until(
        lambda: cluster.status().get("checks") == CHECKS - 1, 180, "the checks", operator.logs
    )
    gate.touch()
    status = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "goalComplete" and status["checks"] == CHECKS
    assert len(cluster.events("Report")) == CHECKS

    monitor = cluster.monitor()
    assert monitor is not None
    assert len(json.dumps(monitor["status"])) <= STATUS_BUDGET
    for step in cluster.custom.list_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitorsteps"
    )["items"]:
        # The input the operator wrote, and the result the step wrote, each within budget.
        assert len(json.dumps(step["spec"])) <= STATUS_BUDGET
        assert len(json.dumps(step.get("status") or {})) <= STATUS_BUDGET
