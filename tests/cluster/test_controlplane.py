"""The local control plane itself: version, CRDs, strict validation, bounds, two side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from goalkeeper.devcluster import K8S_VERSION, ControlPlane
from goalkeeper.devcluster.procs import pid_alive
from tests.support.cluster_fixtures import REPO, wait_for

pytestmark = pytest.mark.cluster

MONITORS_CRD = REPO / "crds" / "monitors.goalkeeper.dev.yaml"


def needs_monitor_crd() -> None:
    if not MONITORS_CRD.is_file():
        pytest.skip(f"{MONITORS_CRD} not generated yet")


def monitor(name: str, namespace: str, **spec: Any) -> str:
    body = {"task": "Keep the nightly export finishing before 06:00.", **spec}
    return yaml.safe_dump(
        {
            "apiVersion": "goalkeeper.dev/v1alpha1",
            "kind": "Monitor",
            "metadata": {"name": name, "namespace": namespace},
            "spec": body,
        }
    )


def test_version_and_startup(control_plane: ControlPlane, api_client: Any) -> None:
    from kubernetes import client

    info = client.VersionApi(api_client).get_code()
    assert info.git_version == K8S_VERSION
    assert info.git_tree_state == "clean"
    out = control_plane.kubectl("version", "-o", "json", check=True).stdout
    versions = json.loads(out)
    assert versions["clientVersion"]["gitVersion"] == K8S_VERSION
    assert versions["serverVersion"]["gitVersion"] == K8S_VERSION
    print(f"startup to ready: {control_plane.startup_seconds:.1f} s")


def test_everything_listens_on_loopback(control_plane: ControlPlane) -> None:
    assert control_plane.server.startswith("https://127.0.0.1:")
    pids = set(control_plane.pids().values())
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and inode in inodes:  # LISTEN
                listening.append(local.split(":")[0])
    assert listening, "no listening sockets found for the control plane"
    loopback = {"0100007F", "00000000000000000000000001000000"}
    assert set(listening) <= loopback, f"non-loopback listeners: {listening}"


def test_crds_established(control_plane: ControlPlane, api_client: Any) -> None:
    from kubernetes import client

    needs_monitor_crd()
    assert "monitors.goalkeeper.dev" in control_plane.installed_crds
    if (REPO / "crds" / "monitorsteps.goalkeeper.dev.yaml").is_file():
        assert "monitorsteps.goalkeeper.dev" in control_plane.installed_crds
    ext = client.ApiextensionsV1Api(api_client)
    for name in control_plane.installed_crds:
        crd = ext.read_custom_resource_definition(name)
        conds = {c.type: c.status for c in crd.status.conditions}
        assert conds.get("Established") == "True", (name, conds)
        assert conds.get("NamesAccepted") == "True", (name, conds)


def test_kubectl_get_monitors_columns(control_plane: ControlPlane, namespace: str) -> None:
    needs_monitor_crd()
    applied = control_plane.kubectl("apply", "-f", "-", input=monitor("nightly", namespace))
    assert applied.returncode == 0, applied.stderr
    got = control_plane.kubectl("get", "monitors", "-n", namespace)
    assert got.returncode == 0, got.stderr
    print(got.stdout)
    header = got.stdout.splitlines()[0].split()
    # "NEXT CHECK" is two words in the header.
    assert header[:10] == [
        "NAME",
        "GOAL",
        "WORK",
        "PROGRESS",
        "CHECKS",
        "NEXT",
        "CHECK",
        "STEP",
        "HEALTH",
        "AGE",
    ]
    assert "nightly" in got.stdout
    short = control_plane.kubectl("get", "mon", "-n", namespace, "-o", "name")
    assert short.stdout.strip() == "monitor.goalkeeper.dev/nightly"
    # Defaults from the schema.
    spec = json.loads(
        control_plane.kubectl("get", "monitor", "nightly", "-n", namespace, "-o", "json").stdout
    )["spec"]
    assert spec["everyMinutes"] == 30
    assert spec["maxChecks"] == 1000
    assert spec["stopWhen"] == "Stop only when the user explicitly asks to stop."


def _assert_nothing_created(control_plane: ControlPlane, namespace: str) -> None:
    listed = control_plane.kubectl("get", "monitors", "-n", namespace, "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == ""


def test_unknown_field_is_rejected_by_strict_validation(
    control_plane: ControlPlane, namespace: str
) -> None:
    needs_monitor_crd()
    res = control_plane.kubectl("apply", "-f", "-", input=monitor("typo", namespace, everyMinute=5))
    assert res.returncode != 0
    print(res.stderr)
    assert 'unknown field "spec.everyMinute"' in res.stderr
    assert "strict decoding error" in res.stderr
    _assert_nothing_created(control_plane, namespace)


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"everyMinutes": 0}, "spec.everyMinutes", "greater than or equal to 1"),
        ({"everyMinutes": 1441}, "spec.everyMinutes", "less than or equal to 1440"),
        ({"maxChecks": 1001}, "spec.maxChecks", "less than or equal to 1000"),
        ({"task": "   "}, "spec.task", "must not be blank"),
    ],
    ids=["everyMinutes=0", "everyMinutes=1441", "maxChecks=1001", "blank-task"],
)
def test_bounds_are_enforced_by_the_schema(
    control_plane: ControlPlane, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    needs_monitor_crd()
    res = control_plane.kubectl("apply", "-f", "-", input=monitor("bad", namespace, **spec))
    print(res.stderr)
    assert res.returncode != 0
    assert "is invalid" in res.stderr
    assert field in res.stderr
    assert words in res.stderr
    _assert_nothing_created(control_plane, namespace)


def test_second_control_plane_side_by_side(control_plane: ControlPlane) -> None:
    with ControlPlane(install_crds=False) as other:
        assert other.port != control_plane.port
        assert other.etcd_port != control_plane.etcd_port
        print(f"second control plane ready in {other.startup_seconds:.1f} s")
        res = other.kubectl("get", "namespaces", "-o", "name", check=True)
        assert "namespace/default" in res.stdout
        pids = list(other.pids().values())
        folder = other.dir
    assert folder is not None and not folder.exists()
    assert not any(pid_alive(pid) for pid in pids)
    # The session's control plane is untouched.
    assert control_plane.kubectl("get", "namespaces").returncode == 0


def test_cluster_up_and_down_cli(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    cmd = [sys.executable, "-m", "goalkeeper.cli", "cluster", "--state-dir", str(state_dir)]
    up = subprocess.run(
        [*cmd, "up", "--no-pod-runner"], capture_output=True, text=True, timeout=240, check=False
    )
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip().splitlines()[-1]
        assert Path(kubeconfig).is_file()
        again = subprocess.run([*cmd, "kubeconfig"], capture_output=True, text=True, check=True)
        assert again.stdout.strip() == kubeconfig
        state = json.loads((state_dir / "state.json").read_text())
        assert set(state["pids"]) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        from goalkeeper.devcluster.binaries import find_binary

        kubectl = str(find_binary("kubectl"))
        got = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "get", "ns"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert got.returncode == 0, got.stderr
    finally:
        down = subprocess.run(
            [*cmd, "down"], capture_output=True, text=True, timeout=120, check=False
        )
    assert down.returncode == 0, down.stderr
    assert not (state_dir / "state.json").exists()
    wait_for(
        lambda: (
            not pid_alive(state["pid"])
            and not any(pid_alive(pid) for pid in state["pids"].values())
        ),
        30,
        "the daemon and its children to exit",
    )
    gone = subprocess.run([*cmd, "kubeconfig"], capture_output=True, text=True, check=False)
    assert gone.returncode == 1
