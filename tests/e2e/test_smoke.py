from __future__ import annotations

import pytest

from tests.e2e.harness import (
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    build_job,
    observation,
    progress_map,
    wait_until,
)
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster


def test_smoke_goal_complete(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.batch.create_namespaced_job(
        cluster.ns, build_job(cluster.ns, suspended=False, seconds=0)
    )
    cluster.core.create_namespaced_config_map(cluster.ns, progress_map(cluster.ns, 27))
    wait_until(
        lambda: (cluster.batch.read_namespaced_job("build", cluster.ns).status.succeeded or 0) >= 1,
        60,
        "target job",
    )

    def observe(facts: Facts, n: int) -> dict:
        return observation(
            "stop",
            "complete",
            "complete",
            facts,
            "All 27 modules are done.",
            stopReason="goalComplete",
        )

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor()
    status = wait_until(cluster.stopped, 90, "monitor stopped", operator.logs)
    print(status)
    assert status["stop"]["reason"] == "goalComplete"
