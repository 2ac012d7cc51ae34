"""A Monitor applied by a GitOps tool stays as applied: the operator writes only status,
never the spec or metadata the tool owns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    GROUP,
    TASK,
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

# Set by the API server, not by whoever applies the object.
SERVER_SET = {"resourceVersion", "generation", "uid", "creationTimestamp", "managedFields"}


def test_spec_and_metadata_stay_as_applied_after_a_full_run(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    tmp_path: Path,
) -> None:
    # The Job ends once check 1 is in: one that ended first would settle check 1 by itself.
    gate = tmp_path / "finish"
    cluster.target(suspended=False, gate=gate)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1 or not facts.succeeded:  # the step's own read holds the model to the facts
            return observation("wait", "incomplete", "running", facts, "Running.")
        return observation(
            "stop", "complete", "complete", facts, "Done.", stopReason="goalComplete"
        )

    manifest = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": {
            "name": "build",
            "namespace": cluster.ns,
            "labels": {"kustomize.toolkit.fluxcd.io/name": "apps"},
            "annotations": {"kustomize.toolkit.fluxcd.io/checksum": "abc123"},
        },
        "spec": {"task": TASK, "stopWhen": "Stop when Job build has succeeded.", "everyMinutes": 1},
    }
    model.default = Scenario(cluster.ns, observe)
    # Applied the way Flux applies: server-side, with its own field manager.
    control_plane.kubectl(
        "apply",
        "--server-side",
        "--field-manager=kustomize-controller",
        "-f",
        "-",
        input=json.dumps(manifest),
        check=True,
    )
    applied = cluster.monitor()
    assert applied is not None
    wait_until(lambda: cluster.status().get("checks") == 1, 120, "check 1", operator.logs)
    gate.touch()
    status = wait_until(cluster.stopped, 120, "the monitor to finish", operator.logs)
    assert status["stop"]["reason"] == "goalComplete" and status["checks"] == 2

    after = cluster.monitor()
    assert after is not None
    assert json.dumps(after["spec"], sort_keys=True) == json.dumps(applied["spec"], sort_keys=True)
    kept = {k: v for k, v in after["metadata"].items() if k not in SERVER_SET}
    before = {k: v for k, v in applied["metadata"].items() if k not in SERVER_SET}
    assert kept == before, "no label, annotation, finalizer or owner was added"
    assert after["metadata"]["generation"] == applied["metadata"]["generation"]
    # Only the status subresource was written by anyone but the applier.
    managers = {
        (m["manager"], m.get("subresource", "")) for m in after["metadata"]["managedFields"]
    }
    assert {m for m in managers if m[1] != "status"} == {("kustomize-controller", "")}
