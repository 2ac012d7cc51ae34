"""Fixtures for the end-to-end tests: a namespace with the step accounts, a scripted model
server on loopback, and the operator running as its own process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ROOT, Cluster, OperatorProcess, write_token_kubeconfig
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster


@pytest.fixture
def target_ns(control_plane: Any, namespace: str, pod_runner: Any) -> str:
    """A namespace with the step ServiceAccounts and roles, and the model API key Secret."""
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", str(ROOT / "config" / "rbac" / "steps.yaml"), check=True
    )
    control_plane.kubectl(
        "create",
        "secret",
        "generic",
        "model-api",
        "-n",
        namespace,
        "--from-literal=api-key=test-key-not-secret",
        check=True,
    )
    return namespace


@pytest.fixture
def cluster(api_client: Any, target_ns: str) -> Cluster:
    return Cluster(api_client, target_ns)


@pytest.fixture
def model() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture(scope="session")
def operator_kubeconfig(
    control_plane: Any,
    api_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """The operator runs as its own ServiceAccount with config/rbac/operator.yaml: the
    end-to-end tests prove that role is enough."""
    control_plane.kubectl(
        "apply", "-f", str(ROOT / "config" / "rbac" / "operator.yaml"), check=True
    )
    path = tmp_path_factory.mktemp("operator") / "kubeconfig"
    write_token_kubeconfig(
        api_client, control_plane.kubeconfig, "goalkeeper-system", "goalkeeper-operator", path
    )
    return path


@pytest.fixture
def operator(
    operator_kubeconfig: Path,
    target_ns: str,
    model: ModelServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    marker = request.node.get_closest_marker("operator_env")
    env = dict(marker.kwargs) if marker is not None else {}
    process = OperatorProcess(operator_kubeconfig, target_ns, model, tmp_path, **env)
    process.start()
    yield process
    process.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print("---- operator log ----\n" + process.logs()[-20000:])


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
