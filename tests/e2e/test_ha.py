"""High availability end to end: two operator processes elect a leader on a real Lease; only
the leader reconciles; when it is killed mid-run the standby takes over within about one
lease and finishes the monitor from its status, with no check lost and no report doubled."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness import (
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

LEASE, LEASE_NS = "goalkeeper-operator", "goalkeeper-system"
LEASE_SECONDS = 4
CHECKS = 5
# Starting kopf and its first watch of the namespace, on a loaded two-core machine.
STARTUP_SECONDS = 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


def healthz(port: int) -> dict[str, Any] | None:
    """The probe's answer over HTTP on loopback; None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            if response.status != 200:
                return None
            answer: dict[str, Any] = json.loads(response.read())["leader"]
            return answer
    except OSError:
        return None


class Lease:
    def __init__(self, api: Any) -> None:
        self.api = client.CoordinationV1Api(api)

    def spec(self) -> Any:
        try:
            return self.api.read_namespaced_lease(LEASE, LEASE_NS).spec
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def holder(self) -> str | None:
        spec = self.spec()
        return spec.holder_identity if spec is not None else None

    def delete(self) -> None:
        try:
            self.api.delete_namespaced_lease(LEASE, LEASE_NS)
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
def lease(api_client: Any, operator_kubeconfig: Path) -> Lease:
    """The operator's Lease, gone before the test (the RBAC that names it is installed)."""
    found = Lease(api_client)
    found.delete()
    return found


@dataclass
class Replica:
    process: OperatorProcess
    health_port: int
    metrics_port: int


@pytest.fixture
def replicas(
    operator_kubeconfig: Path,
    target_ns: str,
    model: ModelServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Replica]]:
    """Replicas a and b of the operator, not yet started, each with its own ports."""
    made: dict[str, Replica] = {}
    for identity in ("a", "b"):
        log_dir = tmp_path / identity
        log_dir.mkdir()
        port, metrics_port = free_port(), free_port()
        process = OperatorProcess(
            operator_kubeconfig,
            target_ns,
            model,
            log_dir,
            GOALKEEPER_LEADER_ELECTION="true",
            GOALKEEPER_LEASE_NAME=LEASE,
            GOALKEEPER_LEASE_NAMESPACE=LEASE_NS,
            GOALKEEPER_LEASE_SECONDS=str(LEASE_SECONDS),
            GOALKEEPER_IDENTITY=identity,
            GOALKEEPER_HEALTH_PORT=str(port),
            GOALKEEPER_METRICS_PORT=str(metrics_port),
        )
        made[identity] = Replica(process, port, metrics_port)
    yield made
    for replica in made.values():
        replica.process.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for identity, replica in made.items():
            print(f"---- operator {identity} log ----\n" + replica.process.logs()[-15000:])


def waits_then_completes(cluster: Cluster, gate: Path) -> Callable[[Facts, int], dict[str, Any]]:
    """Waits while the target runs; at the last check the target is let finish first, as
    the step's own read of the Job holds a completed goal to a Job that has ended."""

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n < CHECKS:
            return observation("wait", "incomplete", "running", facts, f"Check {n}: running.")
        gate.touch()

        def ended() -> Any:
            return cluster.batch.read_namespaced_job("build", cluster.ns).status.succeeded

        wait_until(ended, 60, "the target Job to finish")
        return observation(
            "stop", "complete", "complete", facts, "The build is done.", stopReason="goalComplete"
        )

    return observe


def test_standby_takes_over_from_a_killed_leader_and_finishes_the_monitor(
    cluster: Cluster,
    model: ModelServer,
    lease: Lease,
    replicas: dict[str, Replica],
    tmp_path: Path,
) -> None:
    a, a_port = replicas["a"].process, replicas["a"].health_port
    b, b_port = replicas["b"].process, replicas["b"].health_port
    a.start()
    wait_until(lambda: lease.holder() == "a", 60, "a to take the lease", a.logs)
    b.start()
    # The standby answers from its start; it names the holder once it has read the lease.
    standby = {"identity": "b", "leader": False, "holder": "a"}
    wait_until(lambda: healthz(b_port) == standby, 60, "the standby's /healthz", b.logs)
    leader = {"identity": "a", "leader": True, "holder": "a"}
    wait_until(lambda: healthz(a_port) == leader, 60, "the leader's /healthz", a.logs)
    # Both serve metrics; only the leader says it leads.
    assert "goalkeeper_leader 1.0" in (scrape(replicas["a"].metrics_port) or "")
    assert "goalkeeper_leader 0.0" in (scrape(replicas["b"].metrics_port) or "")

    # The target runs until the last check; the scripted model decides the checks.
    gate = tmp_path / "finish"
    cluster.batch.create_namespaced_job(
        cluster.ns, build_job(cluster.ns, suspended=False, gate=gate)
    )
    model.default = Scenario(cluster.ns, waits_then_completes(cluster, gate))
    cluster.create_monitor(everyMinutes=1)

    def two_reports() -> bool:
        return len(cluster.events("Report")) >= 2

    wait_until(two_reports, 120, "the reports of checks 1 and 2", a.logs)
    assert lease.holder() == "a"
    assert healthz(b_port) == {"identity": "b", "leader": False, "holder": "a"}
    # Only the leader reconciles: the standby has not even started kopf.
    assert cluster.ns in a.logs()
    assert cluster.ns not in b.logs() and "operator starting" not in b.logs()

    killed = time.monotonic()
    a.kill()
    wait_until(lambda: lease.holder() == "b", 30, "b to take the lease", b.logs)
    took = time.monotonic() - killed
    wait_until(lambda: "operator starting" in b.logs(), 30, "b to start reconciling", b.logs)
    started = time.monotonic() - killed
    print(f"\nlease taken {took:.2f} s and reconciling {started:.2f} s after the kill")
    assert took <= LEASE_SECONDS * 2, took
    assert started <= LEASE_SECONDS * 2 + STARTUP_SECONDS, started
    spec = lease.spec()
    assert spec.lease_transitions == 1 and spec.lease_duration_seconds == LEASE_SECONDS

    status = wait_until(cluster.stopped, 180, "the monitor to finish under b", b.logs)
    assert status["stop"]["reason"] == "goalComplete"
    assert status["checks"] == CHECKS
    assert healthz(b_port) == {"identity": "b", "leader": True, "holder": "b"}
    assert "goalkeeper_leader 1.0" in (scrape(replicas["b"].metrics_port) or "")
    # One report per accepted check, none lost, none doubled; and one step per check.
    want = sorted(f"check-{n}" for n in range(1, CHECKS + 1))
    wait_until(lambda: report_names(cluster) == want, 30, f"reports {want}", b.logs)
    assert len(cluster.events("Report")) == CHECKS
    assert cluster.step_kinds() == ["extract"] + ["observe"] * CHECKS

    # A clean shutdown hands the lease back at once.
    b.stop()
    assert b.proc is not None and b.proc.returncode == 0
    assert lease.holder() == ""


def test_clean_shutdown_hands_the_lease_to_the_standby_at_once(
    lease: Lease, replicas: dict[str, Replica]
) -> None:
    a, b, b_port = replicas["a"].process, replicas["b"].process, replicas["b"].health_port
    a.start()
    wait_until(lambda: lease.holder() == "a", 60, "a to take the lease", a.logs)
    b.start()
    wait_until(lambda: healthz(b_port), 60, "the standby's /healthz", b.logs)
    a.stop()
    assert a.proc is not None and a.proc.returncode == 0
    stopped = time.monotonic()
    assert "released lease" in a.logs()
    wait_until(lambda: lease.holder() == "b", 30, "b to take the released lease", b.logs)
    handed = time.monotonic() - stopped
    print(f"\nlease handed over {handed:.2f} s after a clean stop")
    # The standby polls every third of the lease; it never waits for the expiry.
    assert handed < LEASE_SECONDS / 3 + 1, handed


def test_leader_that_loses_the_lease_exits_non_zero(
    lease: Lease, replicas: dict[str, Replica]
) -> None:
    a = replicas["a"].process
    a.start()
    wait_until(lambda: lease.holder() == "a", 60, "a to take the lease", a.logs)
    # Another holder appears (a partition healed the other way): a must stop at once.
    taken = lease.api.read_namespaced_lease(LEASE, LEASE_NS)
    taken.spec.holder_identity = "intruder"
    taken.spec.lease_duration_seconds = 60
    taken.spec.renew_time = datetime.now(UTC)
    lease.api.replace_namespaced_lease(LEASE, LEASE_NS, taken)
    assert a.proc is not None
    wait_until(lambda: a.proc.poll() is not None, LEASE_SECONDS, "a to exit", a.logs)
    assert a.proc.returncode == 1
    assert "lost lease" in a.logs()
    assert lease.holder() == "intruder"
