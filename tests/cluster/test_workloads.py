"""Workloads on the local control plane: the controller manager's controllers make the pods,
and the pod runner registers a Node, binds the pods to it and runs them, as a scheduler and
a kubelet would."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from goalkeeper.devcluster import ControlPlane, PodRunner
from goalkeeper.devcluster.podrunner import NODE_LEASE_NAMESPACE
from goalkeeper.devcluster.procs import pid_alive
from tests.support.cluster_fixtures import OWN_RUNNER_LABEL, _exists, wait_for

pytestmark = pytest.mark.cluster

SLEEP = ["python", "-c", "import time; time.sleep(100000)"]


def pod_template(labels: dict[str, str], command: list[str] = SLEEP) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "example.invalid/app:1", "command": command}],
        },
    }


def pods(core: Any, namespace: str, selector: str) -> list[Any]:
    """The pods the selector matches, Terminating ones left out."""
    found = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in found if p.metadata.deletion_timestamp is None]


def ready(pod: Any) -> bool:
    conditions = {c.type: c.status for c in (pod.status.conditions or [])}
    return pod.status.phase == "Running" and conditions.get("Ready") == "True"


def make_namespace(core: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: _exists(lambda: core.read_namespaced_service_account("default", name)),
        60,
        f"default ServiceAccount in {name}",
    )
    return name


@pytest.fixture(scope="module", autouse=True)
def cron_namespace(api_client: Any, pod_runner: PodRunner) -> Iterator[str]:
    """A CronJob made when the module starts, so that most of the minute before its first
    run passes while the other tests run; its test comes last."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    name = make_namespace(core)
    job_spec = {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "x", "command": ["python", "-c", "print('tick')"]}
                ],
            }
        },
    }
    client.BatchV1Api(api_client).create_namespaced_cron_job(
        name,
        {
            "metadata": {"name": "tick"},
            "spec": {
                "schedule": "* * * * *",
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": job_spec},
            },
        },
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)


def test_the_runner_registers_a_ready_node_and_renews_its_lease(
    control_plane: ControlPlane, api_client: Any, namespace: str
) -> None:
    from kubernetes import client

    core, coordination = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
    runner = PodRunner(
        control_plane.kubeconfig,
        label_selector=f"{OWN_RUNNER_LABEL}=own",
        namespace=namespace,
        heartbeat_seconds=0.5,
    )
    with runner:
        node = core.read_node(runner.node_name)
        conditions = {c.type: c.status for c in node.status.conditions}
        assert conditions["Ready"] == "True"
        assert {a.type: a.address for a in node.status.addresses}["InternalIP"] == "127.0.0.1"
        assert node.status.allocatable["pods"] == "110"
        assert node.metadata.labels["kubernetes.io/hostname"] == runner.node_name
        # Admission taints a new node not-ready; the node-lifecycle controller lifts the
        # taint once it reads the node's Ready condition.
        wait_for(
            lambda: not (core.read_node(runner.node_name).spec.taints or []),
            60,
            "the node-lifecycle controller to untaint the node",
        )
        lease = coordination.read_namespaced_lease(runner.node_name, NODE_LEASE_NAMESPACE)
        assert lease.spec.holder_identity == runner.node_name
        assert lease.metadata.owner_references[0].uid == node.metadata.uid
        first: dt.datetime = lease.spec.renew_time
        wait_for(
            lambda: (
                coordination.read_namespaced_lease(
                    runner.node_name, NODE_LEASE_NAMESPACE
                ).spec.renew_time
                > first
            ),
            30,
            "the lease to be renewed",
        )
    assert not _exists(lambda: core.read_node(runner.node_name))
    assert not _exists(
        lambda: coordination.read_namespaced_lease(runner.node_name, NODE_LEASE_NAMESPACE)
    )


def test_a_deployment_scales_up_and_rolls_out(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": pod_template({"app": "web"}),
            },
        },
    )
    apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 2}})

    def available() -> int:
        return apps.read_namespaced_deployment("web", namespace).status.available_replicas or 0

    wait_for(lambda: available() == 2, 90, "2 available replicas")
    before = pods(core, namespace, "app=web")
    assert len(before) == 2
    for pod in before:
        assert pod.spec.node_name == pod_runner.node_name
        assert pod.status.pod_ip == pod.status.host_ip == "127.0.0.1"
        conditions = {c.type: c.status for c in pod.status.conditions}
        for kind in ("PodScheduled", "Initialized", "PodReadyToStartContainers"):
            assert conditions[kind] == "True", kind
        assert conditions["ContainersReady"] == conditions["Ready"] == "True"
        (status,) = pod.status.container_statuses
        assert status.ready and status.started and status.restart_count == 0
        assert status.state.running is not None
    old_pids = [pod_runner.wait_for(namespace, p.metadata.name).pid for p in before]
    assert None not in old_pids

    # What `kubectl rollout restart` does.
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    annotations = {"kubectl.kubernetes.io/restartedAt": stamp}
    apps.patch_namespaced_deployment(
        "web", namespace, {"spec": {"template": {"metadata": {"annotations": annotations}}}}
    )

    def rolled_out() -> bool:
        deployment = apps.read_namespaced_deployment("web", namespace)
        status = deployment.status
        return (
            (status.observed_generation or 0) >= deployment.metadata.generation
            and status.updated_replicas == status.replicas == status.available_replicas == 2
        )

    wait_for(rolled_out, 120, "the rollout to finish")
    old_names = {p.metadata.name for p in before}
    wait_for(
        lambda: (
            not any(
                _exists(lambda n=name: core.read_namespaced_pod(n, namespace)) for name in old_names
            )
        ),
        60,
        "the old pods to be gone",
    )
    after = pods(core, namespace, "app=web")
    assert len(after) == 2 and not old_names & {p.metadata.name for p in after}
    assert all(ready(p) for p in after)
    wait_for(lambda: not any(pid_alive(pid) for pid in old_pids), 30, "old processes gone")


def test_a_statefulset_runs_in_order_and_scales_down(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": pod_template({"app": "db"}),
            },
        },
    )
    wait_for(
        lambda: apps.read_namespaced_stateful_set("db", namespace).status.ready_replicas == 2,
        90,
        "2 ready StatefulSet replicas",
    )
    assert sorted(p.metadata.name for p in pods(core, namespace, "app=db")) == ["db-0", "db-1"]
    last = pod_runner.wait_for(namespace, "db-1")

    apps.patch_namespaced_stateful_set_scale("db", namespace, {"spec": {"replicas": 1}})
    wait_for(
        lambda: not _exists(lambda: core.read_namespaced_pod("db-1", namespace)),
        60,
        "db-1 to be deleted",
    )
    assert last.done.wait(15) and last.reason == "Deleted"
    assert ready(core.read_namespaced_pod("db-0", namespace))


def test_a_daemonset_gets_one_ready_pod_on_the_runner_node(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_daemon_set(
        namespace,
        {
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": pod_template({"app": "agent"}),
            },
        },
    )

    def on_node() -> list[Any]:
        found = pods(core, namespace, "app=agent")
        return [p for p in found if p.spec.node_name == pod_runner.node_name]

    wait_for(lambda: [p for p in on_node() if ready(p)], 90, "a ready DaemonSet pod")
    assert len(on_node()) == 1
    wait_for(
        lambda: (apps.read_namespaced_daemon_set("agent", namespace).status.number_ready or 0) >= 1,
        60,
        "the DaemonSet to count its ready pod",
    )


def test_restart_policy_always_restarts_the_process_and_deletion_is_confirmed(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "again"},
            "spec": {
                "containers": [
                    {"name": "main", "image": "x", "command": ["python", "-c", "print('run')"]}
                ]
            },
        },
    )

    def restarts() -> int:
        statuses = core.read_namespaced_pod("again", namespace).status.container_statuses
        return int(statuses[0].restart_count) if statuses else 0

    wait_for(lambda: restarts() >= 2, 60, "two restarts")
    pod = core.read_namespaced_pod("again", namespace)
    assert pod.status.phase == "Running"
    (status,) = pod.status.container_statuses
    assert status.last_state.terminated.exit_code == 0
    rec = pod_runner.record(namespace, "again")
    assert rec is not None and rec.stdout is not None
    assert rec.stdout.read_text().count("run\n") >= 2

    core.delete_namespaced_pod("again", namespace)
    wait_for(
        lambda: not _exists(lambda: core.read_namespaced_pod("again", namespace)),
        30,
        "the deletion to be confirmed",
    )
    assert rec.done.wait(15) and rec.reason == "Deleted"


def test_a_pod_waits_for_its_secret_and_then_runs(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    secret_env = {"secretKeyRef": {"name": "late", "key": "token"}}
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "patient"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "command": SLEEP,
                        "env": [{"name": "TOKEN", "valueFrom": secret_env}],
                    }
                ]
            },
        },
    )

    def waiting_reason() -> str | None:
        statuses = core.read_namespaced_pod("patient", namespace).status.container_statuses
        waiting = statuses[0].state.waiting if statuses else None
        return str(waiting.reason) if waiting else None

    assert (
        wait_for(waiting_reason, 60, "the pod to wait for its Secret")
        == "CreateContainerConfigError"
    )
    assert core.read_namespaced_pod("patient", namespace).status.phase == "Pending"
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "late"}, "stringData": {"token": "t"}}
    )
    wait_for(lambda: ready(core.read_namespaced_pod("patient", namespace)), 60, "pod Ready")


def test_a_pod_deleted_before_its_runner_started_is_let_go(
    control_plane: ControlPlane, api_client: Any, namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    node = f"later-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "early", "labels": {OWN_RUNNER_LABEL: "own"}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "x", "command": SLEEP}],
            },
        },
    )
    core.delete_namespaced_pod("early", namespace)
    # Bound to a node, it stays Terminating until that node's kubelet confirms.
    assert core.read_namespaced_pod("early", namespace).metadata.deletion_timestamp is not None
    with PodRunner(
        control_plane.kubeconfig,
        label_selector=f"{OWN_RUNNER_LABEL}=own",
        namespace=namespace,
        node_name=node,
    ) as runner:
        wait_for(
            lambda: not _exists(lambda: core.read_namespaced_pod("early", namespace)),
            30,
            "the deletion to be confirmed",
        )
        rec = runner.record(namespace, "early")
        assert rec is not None and rec.done.wait(15)
        assert rec.pid is None and rec.reason is None


def test_node_affinity_decides_which_runner_binds(
    control_plane: ControlPlane, api_client: Any, namespace: str
) -> None:
    """Two runners see the pods; each binds only those whose affinity allows its node."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def pod(name: str, node: str, operator: str) -> dict[str, Any]:
        term = {"matchFields": [{"key": "metadata.name", "operator": operator, "values": [node]}]}
        return {
            "metadata": {"name": name, "labels": {OWN_RUNNER_LABEL: "own"}},
            "spec": {
                "restartPolicy": "Never",
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [term]
                        }
                    }
                },
                "containers": [{"name": "main", "image": "x", "command": ["python", "-c", "1"]}],
            },
        }

    selector = f"{OWN_RUNNER_LABEL}=own"
    with (
        PodRunner(control_plane.kubeconfig, label_selector=selector, namespace=namespace) as one,
        PodRunner(control_plane.kubeconfig, label_selector=selector, namespace=namespace) as two,
    ):
        core.create_namespaced_pod(namespace, pod("for-two", two.node_name, "In"))
        core.create_namespaced_pod(namespace, pod("not-one", one.node_name, "NotIn"))
        for name in ("for-two", "not-one"):
            done = wait_for(
                lambda n=name: (
                    (p := core.read_namespaced_pod(n, namespace)).status.phase == "Succeeded" and p
                ),
                60,
                f"pod {name} to succeed",
            )
            assert done.spec.node_name == two.node_name
        assert one.record(namespace, "for-two") is None
        assert one.record(namespace, "not-one") is None


def test_a_cronjob_makes_a_job_whose_pod_succeeds(
    api_client: Any, pod_runner: PodRunner, cron_namespace: str
) -> None:
    from kubernetes import client

    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)

    def completed() -> Any:
        for job in batch.list_namespaced_job(cron_namespace).items:
            for cond in (job.status.conditions or []) if job.status else []:
                if cond.type == "Complete" and cond.status == "True":
                    return job
        return None

    # The first run is at the next whole minute; the controller looks every 10 s.
    job = wait_for(completed, 100, "a Job of the CronJob to complete")
    assert job.metadata.owner_references[0].name == "tick"
    (pod,) = core.list_namespaced_pod(
        cron_namespace, label_selector=f"job-name={job.metadata.name}"
    ).items
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == pod_runner.node_name
    rec = pod_runner.record(cron_namespace, pod.metadata.name)
    assert rec is not None and rec.stdout is not None and rec.stdout.read_text() == "tick\n"
    wait_for(
        lambda: batch.read_namespaced_cron_job("tick", cron_namespace).status.last_successful_time,
        30,
        "the CronJob to record its success",
    )
