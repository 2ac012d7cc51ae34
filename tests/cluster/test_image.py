"""The image built by scripts/build-image.sh: both entry points, the non-root user, nothing
a running operator does not need, and the operator run from it (host network, a mounted
kubeconfig) through one acceptance case against the local control plane; the steps are run
by the session pod runner.

Skipped when the image is absent, unless GOALKEEPER_REQUIRE_IMAGE=1 (CI builds the image
first and sets it, so there a missing image fails)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goalkeeper import __version__
from tests.cluster.test_chart import finish_one_monitor
from tests.e2e.harness import write_token_kubeconfig
from tests.support.cluster_fixtures import REPO
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

IMAGE = os.environ.get("GOALKEEPER_IMAGE", f"goalkeeper:{__version__}")


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def image() -> str:
    present = shutil.which("docker") and docker("image", "inspect", IMAGE).returncode == 0
    if not present:
        if os.environ.get("GOALKEEPER_REQUIRE_IMAGE") == "1":
            pytest.fail(f"image {IMAGE} is missing: run scripts/build-image.sh")
        pytest.skip(f"image {IMAGE} not built (scripts/build-image.sh)")
    return IMAGE


def in_image(image: str, entrypoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    return docker("run", "--rm", "--network", "none", "--entrypoint", entrypoint, image, *args)


def test_entry_points_answer_help(image: str) -> None:
    operator = docker("run", "--rm", "--network", "none", image, "--help")
    assert operator.returncode == 0 and "run" in operator.stdout, operator.stderr
    step = in_image(image, "goalkeeper-step", "--help")
    assert step.returncode == 0 and "observe" in step.stdout, step.stderr


def test_runs_as_the_non_root_user(image: str) -> None:
    assert in_image(image, "id", "-u").stdout.strip() == "65532"
    assert docker("image", "inspect", "-f", "{{.Config.User}}", image).stdout.strip() == (
        "65532:65532"
    )


def test_holds_no_compiler_and_no_test_tools(image: str) -> None:
    found = in_image(image, "sh", "-c", "command -v gcc cc g++ make pip || true")
    assert found.stdout.strip() == ""
    for module in (
        "pytest",
        "hypothesis",
        "mypy",
        "tests",
        "cryptography",
        "goalkeeper.devcluster",
        "goalkeeper.localmodel",
        "xllamacpp",
    ):
        absent = in_image(image, "python3", "-c", f"import {module}")
        assert absent.returncode != 0, f"{module} is in the image"


@pytest.fixture
def operator_container(
    image: str,
    control_plane: Any,
    api_client: Any,
    pod_runner: Any,
    namespace: str,
    tmp_path: Path,
) -> Iterator[tuple[str, ModelServer]]:
    """The operator from the image, as its least-privilege ServiceAccount, watching the
    test namespace; the steps' accounts come from config/rbac/steps.yaml."""
    control_plane.kubectl("apply", "-f", str(REPO / "config/rbac/operator.yaml"), check=True)
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", str(REPO / "config/rbac/steps.yaml"), check=True
    )
    control_plane.kubectl(
        "create", "secret", "generic", "model-api", "-n", namespace,
        "--from-literal=api-key=test-key-not-secret", check=True,
    )  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    write_token_kubeconfig(
        api_client, control_plane.kubeconfig, "goalkeeper-system", "goalkeeper-operator", kubeconfig
    )
    # The image's user is not the file's owner: a test token, readable for the mount.
    kubeconfig.chmod(0o644)
    name = f"goalkeeper-test-{uuid.uuid4().hex[:8]}"
    with ModelServer() as model:
        started = docker(
            "run", "-d", "--name", name, "--network", "host", "--read-only",
            "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "-v", f"{kubeconfig}:/etc/goalkeeper/kubeconfig:ro",
            "-e", "KUBECONFIG=/etc/goalkeeper/kubeconfig",
            "-e", "GOALKEEPER_MODEL=openai:scripted-model",
            "-e", f"GOALKEEPER_MODEL_BASE_URL={model.base_url}",
            "-e", "GOALKEEPER_MODEL_API_KEY_SECRET=model-api",
            "-e", f"GOALKEEPER_NAMESPACES={namespace}",
            "-e", "GOALKEEPER_TIME_SCALE=1",
            "-e", "GOALKEEPER_LISTEN_ADDRESS=127.0.0.1",
            "-e", "GOALKEEPER_STEP_DEADLINE_SECONDS=120",
            "-e", "GOALKEEPER_RETRY_BACKOFF_SECONDS=0.1",
            image, "run", "-v",
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        try:
            yield name, model
        finally:
            logs = docker("logs", name)
            docker("rm", "-f", name)
            print(f"---- operator container log ----\n{(logs.stdout + logs.stderr)[-20000:]}")


def test_operator_from_the_image_finishes_a_complete_goal(
    operator_container: tuple[str, ModelServer], api_client: Any, namespace: str
) -> None:
    name, model = operator_container
    finish_one_monitor(api_client, namespace, model)
    assert docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == "true"
