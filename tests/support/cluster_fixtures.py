"""Fixtures for tests against the real local control plane (etcd, kube-apiserver,
kube-controller-manager built from Go modules) and the local pod runner.

Missing binaries are built with scripts/build-k8s.sh on first use; a failed build fails
the tests loudly, it never skips them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goalkeeper.devcluster import ControlPlane, PodRunner

REPO = Path(__file__).resolve().parents[2]
OWN_RUNNER_LABEL = "goalkeeper.dev/test-runner"


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane(crds_dir=REPO / "crds")
    cp.start()
    print(
        f"\ncontrol plane {cp.server} ready in {cp.startup_seconds:.1f} s "
        f"(CRDs: {', '.join(cp.installed_crds) or 'none'}); logs in {cp.dir}"
    )
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def pod_runner(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PodRunner]:
    """Runs every pod of the cluster as a local process, except pods labelled
    `goalkeeper.dev/test-runner=own` (tests that start a runner of their own)."""
    runner = PodRunner(
        control_plane.kubeconfig,
        label_selector=f"{OWN_RUNNER_LABEL}!=own",
        log_dir=tmp_path_factory.mktemp("pod-logs"),
    )
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[Any]:
    with control_plane.api_client() as client:
        yield client


@pytest.fixture
def namespace(control_plane: ControlPlane, api_client: Any) -> Iterator[str]:
    """A fresh namespace whose `default` ServiceAccount exists; deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: _exists(lambda: core.read_namespaced_service_account("default", name)),
        60,
        f"default ServiceAccount in {name}",
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)


def _exists(read: Callable[[], Any]) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll `predicate` until it returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
