"""Shards end to end: two operator processes, each owning the Monitors its label selector
picks, on a real control plane. A Monitor with no shard label runs on the default shard;
relabelled while its observe step runs, it is handed to the other shard, which adopts the
step in flight and finishes the run: every check once, no report lost or doubled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    GROUP,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    build_job,
    observation,
    report_names,
    wait_until,
)
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

SHARD = "goalkeeper.dev/shard"
CHECKS = 5
MOVED_AT = 3  # the check whose observe step runs while the monitor is relabelled


@pytest.fixture
def shards(
    operator_kubeconfig: Path,
    target_ns: str,
    model: ModelServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, OperatorProcess]]:
    """Shard `a` owns the Monitors labelled a; the default shard every other one."""
    made: dict[str, OperatorProcess] = {}
    for name, selector in (("a", f"{SHARD}=a"), ("default", f"{SHARD} notin (a)")):
        log_dir = tmp_path / name
        log_dir.mkdir()
        made[name] = OperatorProcess(
            operator_kubeconfig,
            target_ns,
            model,
            log_dir,
            GOALKEEPER_SHARD_SELECTOR=selector,
            # A Job that fails without a result reaches the new shard through the resync.
            GOALKEEPER_RESYNC_SECONDS="5",
        ).start()
    yield made
    for process in made.values():
        process.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for name, process in made.items():
            print(f"---- shard {name} log ----\n" + process.logs()[-15000:])


def relabel(cluster: Cluster, shard: str) -> None:
    patch = {"metadata": {"labels": {SHARD: shard}}}
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitors", "build", patch
    )


def test_a_monitor_relabelled_mid_step_is_finished_by_the_other_shard_once(
    cluster: Cluster,
    model: ModelServer,
    shards: dict[str, OperatorProcess],
    tmp_path: Path,
) -> None:
    a, default = shards["a"], shards["default"]
    gate = tmp_path / "finish"
    cluster.batch.create_namespaced_job(
        cluster.ns, build_job(cluster.ns, suspended=False, gate=gate)
    )

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == MOVED_AT:
            # The step is still running: the monitor moves, and the answer waits until
            # shard a has taken the step over.
            relabel(cluster, "a")
            wait_until(lambda: "adopting step" in a.logs(), 60, "shard a to adopt the step")
        if n < CHECKS:
            return observation("wait", "incomplete", "running", facts, f"Check {n}: running.")
        gate.touch()

        def ended() -> Any:
            return cluster.batch.read_namespaced_job("build", cluster.ns).status.succeeded

        wait_until(ended, 60, "the target Job to finish")
        return observation(
            "stop", "complete", "complete", facts, "The build is done.", stopReason="goalComplete"
        )

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=1)

    status = wait_until(cluster.stopped, 240, "the monitor to finish", a.logs)
    assert status["stop"]["reason"] == "goalComplete"
    assert status["checks"] == CHECKS
    # One report per accepted check, none lost, none doubled; one step per check.
    want = sorted(f"check-{n}" for n in range(1, CHECKS + 1))
    wait_until(lambda: report_names(cluster) == want, 30, f"reports {want}", a.logs)
    assert len(cluster.events("Report")) == CHECKS
    steps = cluster.steps()
    assert [s["spec"]["kind"] for s in steps] == ["extract"] + ["observe"] * CHECKS

    # Before the move the default shard launched every step, unlabelled; the one in flight
    # was relabelled on adoption, and shard a launched the rest with its label.
    labels = [(s["metadata"].get("labels") or {}).get(SHARD) for s in steps]
    moved = MOVED_AT + 1  # the extract step is seq 1: check n runs as step n + 1
    assert labels == [None] * (moved - 1) + ["a"] * (len(steps) - moved + 1), labels
    for step in steps:
        launched = f"launched {step['spec']['kind']} step {step['metadata']['name']}"
        seq = step["spec"]["seq"]
        by, other = (default, a) if seq <= moved else (a, default)
        assert launched in by.logs(), launched
        # Shard a, finding the timer's step in flight under its name, takes it as its own.
        assert seq == moved or launched not in other.logs(), launched
    assert "moved to another shard: let go" in default.logs()
    jobs = {j.metadata.name: j.metadata.labels.get(SHARD) for j in cluster.step_jobs()}
    assert jobs[steps[-1]["metadata"]["name"]] == "a"
    assert jobs[steps[0]["metadata"]["name"]] is None
