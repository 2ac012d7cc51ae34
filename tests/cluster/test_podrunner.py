"""Jobs and pods run through the local pod runner against the real control plane."""

from __future__ import annotations

import os
import textwrap
from typing import Any

import pytest

from goalkeeper.devcluster import ControlPlane, PodRunner
from goalkeeper.devcluster.procs import pid_alive
from tests.support.cluster_fixtures import OWN_RUNNER_LABEL, _exists, wait_for

pytestmark = pytest.mark.cluster


def job_body(name: str, argv: list[str], **spec: Any) -> dict[str, Any]:
    pod_spec = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "goalkeeper-step:dev", "command": argv}],
    }
    pod_spec.update(spec.pop("pod", {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}, **spec},
    }


def job_condition(batch: Any, namespace: str, name: str) -> str | None:
    job = batch.read_namespaced_job(name, namespace)
    for cond in (job.status.conditions or []) if job.status else []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return str(cond.type)
    return None


def job_pods(core: Any, namespace: str, name: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items)


def test_job_completes(api_client: Any, pod_runner: PodRunner, namespace: str) -> None:
    from kubernetes import client

    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    batch.create_namespaced_job(namespace, job_body("hi", ["python", "-c", "print('hi')"]))
    assert wait_for(lambda: job_condition(batch, namespace, "hi"), 90, "job hi") == "Complete"
    (pod,) = job_pods(core, namespace, "hi")
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == pod_runner.node_name  # bound by the runner, as a scheduler
    state = pod.status.container_statuses[0].state.terminated
    assert state.exit_code == 0 and state.reason == "Completed"
    rec = pod_runner.record(namespace, pod.metadata.name)
    assert rec is not None and rec.stdout is not None
    assert rec.stdout.read_text() == "hi\n"
    assert rec.image == "goalkeeper-step:dev"
    # As from a kubelet: the API server reads the pod's log from the node (kubectl logs).
    assert core.read_namespaced_pod_log(pod.metadata.name, namespace) == "hi\n"
    assert core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=0) == ""


def test_job_fails_with_exit_code(api_client: Any, pod_runner: PodRunner, namespace: str) -> None:
    from kubernetes import client

    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    script = (
        "import os, sys\n"
        "open(os.environ['GOALKEEPER_TERMINATION_MESSAGE_PATH'], 'w').write('gave up')\n"
        "sys.exit(3)\n"
    )
    batch.create_namespaced_job(namespace, job_body("bad", ["python", "-c", script]))
    assert wait_for(lambda: job_condition(batch, namespace, "bad"), 90, "job bad") == "Failed"
    (pod,) = job_pods(core, namespace, "bad")
    assert pod.status.phase == "Failed"
    state = pod.status.container_statuses[0].state.terminated
    assert state.exit_code == 3
    assert state.reason == "Error"
    assert state.message == "gave up"


def test_owner_deletion_collects_job_and_kills_process(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
    }
    sleeper = "import time\nwhile True: time.sleep(0.5)"
    batch.create_namespaced_job(
        namespace,
        job_body("sleeper", ["python", "-c", sleeper], metadata={"ownerReferences": [ref]}),
    )
    pods = wait_for(lambda: job_pods(core, namespace, "sleeper"), 60, "sleeper pod")
    pod_name = pods[0].metadata.name
    rec = pod_runner.wait_for(namespace, pod_name)
    wait_for(lambda: rec.pid is not None, 60, "the sleeper process")
    pid = rec.pid
    assert pid is not None and pid_alive(pid)
    wait_for(
        lambda: core.read_namespaced_pod(pod_name, namespace).status.phase == "Running",
        30,
        "pod Running",
    )

    core.delete_namespaced_config_map(
        "owner", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground")
    )
    wait_for(
        lambda: not _exists(lambda: batch.read_namespaced_job("sleeper", namespace)),
        90,
        "the Job to be garbage collected",
    )
    wait_for(
        lambda: not _exists(lambda: core.read_namespaced_pod(pod_name, namespace)),
        90,
        "the pod to be garbage collected",
    )
    wait_for(
        lambda: not _exists(lambda: core.read_namespaced_config_map("owner", namespace)),
        60,
        "the owner to go",
    )
    wait_for(lambda: not pid_alive(pid), 15, f"process {pid} to be killed")
    assert rec.done.wait(15)
    assert rec.reason == "Deleted"


def test_active_deadline_kills_the_pod(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "slow"},
            "spec": {
                "restartPolicy": "Never",
                "activeDeadlineSeconds": 2,
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "command": ["python", "-c", "import time; time.sleep(120)"],
                    }
                ],
            },
        },
    )
    rec = pod_runner.wait_for(namespace, "slow")
    wait_for(lambda: rec.pid is not None, 30, "the slow process")
    pid = rec.pid
    assert pid is not None
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod("slow", namespace)).status.phase == "Failed" and p,
        60,
        "pod Failed",
    )
    assert pod.status.reason == "DeadlineExceeded"
    assert not pid_alive(pid)


def test_env_from_secret_and_configmap(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "s"}, "stringData": {"api-key": "sekret"}}
    )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"m": "gpt"}})
    script = textwrap.dedent(
        """
        import os, shutil
        msg = "|".join([
            os.environ["KEY"], os.environ["MODEL"], os.environ["PLAIN"], os.environ["POD"],
            str("KUBERNETES_SERVICE_HOST" in os.environ),
            str(bool(shutil.which("goalkeeper-step"))),
        ])
        open(os.environ["GOALKEEPER_TERMINATION_MESSAGE_PATH"], "w").write(msg)
        """
    )
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "envy"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "command": ["python", "-c", script],
                        "env": [
                            {
                                "name": "KEY",
                                "valueFrom": {"secretKeyRef": {"name": "s", "key": "api-key"}},
                            },
                            {
                                "name": "MODEL",
                                "valueFrom": {"configMapKeyRef": {"name": "c", "key": "m"}},
                            },
                            {"name": "PLAIN", "value": "v-$(MODEL)"},
                            {
                                "name": "POD",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                            },
                        ],
                    }
                ],
            },
        },
    )
    pod = wait_for(
        lambda: (
            (p := core.read_namespaced_pod("envy", namespace)).status.phase
            in ("Succeeded", "Failed")
            and p
        ),
        60,
        "pod envy to finish",
    )
    state = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Succeeded", state
    assert state.message == "sekret|gpt|v-gpt|envy|False|True"


def test_secret_volume_is_written_with_its_mode_and_its_mount_path_mapped(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "model"}, "stringData": {"api-key": "sekret", "other": "x"}},
    )
    script = textwrap.dedent(
        """
        import os, stat, sys
        path = os.environ["KEY_FILE"]
        mode = stat.S_IMODE(os.stat(path).st_mode)
        msg = "|".join([
            open(path).read(), oct(mode), sys.argv[1], path,
            str(os.path.exists(os.path.join(os.path.dirname(path), "other"))),
        ])
        open(os.environ["GOALKEEPER_TERMINATION_MESSAGE_PATH"], "w").write(msg)
        """
    )
    mount = "/var/run/secrets/example.dev/model"
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "keyed"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "command": ["python", "-c", script],
                        "args": [f"{mount}/api-key"],
                        "env": [{"name": "KEY_FILE", "value": f"{mount}/api-key"}],
                        "volumeMounts": [
                            {"name": "key", "mountPath": mount, "readOnly": True},
                            {"name": "scratch", "mountPath": "/scratch"},
                        ],
                    }
                ],
                "volumes": [
                    {
                        "name": "key",
                        "secret": {
                            "secretName": "model",
                            "items": [{"key": "api-key", "path": "api-key"}],
                            "defaultMode": 0o400,
                        },
                    },
                    {"name": "scratch", "emptyDir": {}},
                ],
            },
        },
    )
    pod = wait_for(
        lambda: (
            (p := core.read_namespaced_pod("keyed", namespace)).status.phase
            in ("Succeeded", "Failed")
            and p
        ),
        60,
        "pod keyed to finish",
    )
    state = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Succeeded", state
    key, mode, argument, path, other = state.message.split("|")
    assert (key, mode, other) == ("sekret", "0o400", "False")
    assert argument == path and not path.startswith(mount) and path.endswith("/key/api-key")
    rec = pod_runner.record(namespace, "keyed")
    assert rec is not None and rec.done.wait(15)
    assert not os.path.exists(path)  # removed with its pod, as a kubelet unmounts it


def test_a_missing_secret_volume_fails_the_pod(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "keyless"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "command": ["python", "-c", "pass"],
                        "volumeMounts": [{"name": "key", "mountPath": "/key"}],
                    }
                ],
                "volumes": [{"name": "key", "secret": {"secretName": "absent"}}],
            },
        },
    )
    pod = wait_for(
        lambda: (
            (p := core.read_namespaced_pod("keyless", namespace)).status.phase == "Failed" and p
        ),
        60,
        "pod keyless to fail",
    )
    assert pod.status.reason == "CreateContainerConfigError"
    assert 'secret "absent" not found' in pod.status.message


def test_read_only_service_account_gets_403_on_create(
    control_plane: ControlPlane, api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    from kubernetes import client

    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-configmaps",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "data"}, "data": {"answer": "42"}}
    )
    script = textwrap.dedent(
        """
        import os, sys
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
        config.load_kube_config()  # KUBECONFIG from the pod runner
        core = client.CoreV1Api()
        ns = os.environ["NS"]
        answer = core.read_namespaced_config_map("data", ns).data["answer"]
        names = [c.metadata.name for c in core.list_namespaced_config_map(ns).items]
        try:
            core.create_namespaced_config_map(ns, {"metadata": {"name": "sneaky"}})
            created = "created"
        except ApiException as exc:
            created = str(exc.status)
        host = core.api_client.configuration.host
        msg = f"answer={answer} listed={'data' in names} create={created} host={host}"
        open(os.environ["GOALKEEPER_TERMINATION_MESSAGE_PATH"], "w").write(msg)
        sys.exit(0 if created == "403" else 1)
        """
    )
    client.BatchV1Api(api_client).create_namespaced_job(
        namespace,
        job_body(
            "rbac",
            ["python", "-c", script],
            pod={
                "serviceAccountName": "reader",
                "containers": [
                    {
                        "name": "main",
                        "image": "goalkeeper-step:dev",
                        "command": ["python", "-c", script],
                        "env": [
                            {
                                "name": "NS",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                            }
                        ],
                    }
                ],
            },
        ),
    )
    batch = client.BatchV1Api(api_client)
    result = wait_for(lambda: job_condition(batch, namespace, "rbac"), 90, "job rbac")
    (pod,) = job_pods(core, namespace, "rbac")
    message = pod.status.container_statuses[0].state.terminated.message
    rec = pod_runner.record(namespace, pod.metadata.name)
    stderr = rec.stderr.read_text() if rec and rec.stderr else ""
    assert result == "Complete", (message, stderr)
    assert message == f"answer=42 listed=True create=403 host={control_plane.server}"
    assert not _exists(lambda: core.read_namespaced_config_map("sneaky", namespace))


async def test_runner_from_asyncio_with_label_selector(
    control_plane: ControlPlane, api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    """A runner started from an asyncio program runs only the pods its selector matches."""
    import asyncio

    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "x", "command": ["python", "-c", "print(1)"]}
                ],
            },
        }

    async with PodRunner(
        control_plane.kubeconfig,
        label_selector=f"{OWN_RUNNER_LABEL}=own,goalkeeper.dev/step",
        namespace=namespace,
    ) as runner:
        core.create_namespaced_pod(
            namespace, pod("step", {OWN_RUNNER_LABEL: "own", "goalkeeper.dev/step": "observe"})
        )
        core.create_namespaced_pod(namespace, pod("other", {OWN_RUNNER_LABEL: "own"}))
        for _ in range(300):
            phase = core.read_namespaced_pod("step", namespace).status.phase
            if phase == "Succeeded":
                break
            await asyncio.sleep(0.2)
        assert phase == "Succeeded"
        assert runner.record(namespace, "step") is not None
        assert runner.record(namespace, "other") is None
    assert pod_runner.record(namespace, "step") is None
    assert core.read_namespaced_pod("other", namespace).status.phase == "Pending"


def monitor_step(api_client: Any, namespace: str, name: str, seq: int) -> None:
    from kubernetes import client

    step_input = {
        "kind": "observe",
        "check": seq,
        "maxChecks": 10,
        "task": "Keep Deployment web at 3 replicas.",
        "stopWhen": "Stop when the user asks.",
    }
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "goalkeeper.dev",
        "v1alpha1",
        namespace,
        "monitorsteps",
        {
            "apiVersion": "goalkeeper.dev/v1alpha1",
            "kind": "MonitorStep",
            "metadata": {"name": name, "labels": {"goalkeeper.dev/monitor": "nightly"}},
            "spec": {
                "monitor": "nightly",
                "kind": "observe",
                "check": seq,
                "seq": seq,
                "input": step_input,
            },
        },
    )


def test_logs_are_kept_by_pod_name_and_goalkeeper_logs_prints_the_latest_step(
    api_client: Any, pod_runner: PodRunner, namespace: str
) -> None:
    import io

    from kubernetes import client

    from goalkeeper.devcluster.podrunner import log_paths
    from goalkeeper.logs import show_logs

    core = client.CoreV1Api(api_client)
    for seq in (1, 2):
        step = f"nightly-{seq}-observe"
        monitor_step(api_client, namespace, step, seq)
        script = (
            f'import sys; print(\'{{"event":"step_end","seq":{seq}}}\'); '
            f"sys.stderr.write('said {seq}\\n')"
        )
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": f"{step}-pod", "labels": {"goalkeeper.dev/step": step}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "x", "command": ["python", "-c", script]}
                    ],
                },
            },
        )
    for seq in (1, 2):
        name = f"nightly-{seq}-observe-pod"
        wait_for(
            lambda name=name: core.read_namespaced_pod(name, namespace).status.phase == "Succeeded",
            60,
            f"pod {name}",
        )
    stdout, stderr = log_paths(pod_runner.log_dir, namespace, "nightly-2-observe-pod")
    assert stdout.read_text() == '{"event":"step_end","seq":2}\n'
    assert stderr.read_text() == "said 2\n"

    out, err = io.StringIO(), io.StringIO()
    root = pod_runner.log_dir.parent
    assert show_logs("nightly", namespace, api_client=api_client, root=root, out=out, err=err) == 0
    # The node serves the pod's output, stdout then stderr, through the API server.
    assert out.getvalue() == '{"event":"step_end","seq":2}\nsaid 2\n'
    assert "step nightly-2-observe (observe, seq 2), pod nightly-2-observe-pod: from the API " in (
        err.getvalue()
    )

    out, err = io.StringIO(), io.StringIO()
    assert show_logs("other", namespace, api_client=api_client, root=root, out=out, err=err) == 1
    assert err.getvalue() == f"no MonitorStep of monitor other in namespace {namespace}\n"
