"""Step pods from the image, run the way a kubelet runs them.

Elsewhere the session pod runner runs a step Job's pod as a local process. Here the pod a
real cluster would run comes from the image: `manifests.step_job` builds the Job, the API
server stores it, the Job controller makes its pod (named `<job>-` + 5 characters, owned by
the Job), and `PodContainer` turns that stored pod into one `docker run`, as a kubelet
would: the Job's `command` in place of the image's entry point, the pod's and container's
securityContext (user and groups, read-only root filesystem, no capabilities,
no-new-privileges, the runtime's seccomp profile), the resource limits, the `tmp` emptyDir,
the model key's Secret volume and the projected service-account token (TokenRequest, bound
to the pod) rendered in the kubelet's atomic-writer layout and mounted where the pod says,
the env with its downward-API values, `KUBERNETES_SERVICE_HOST`/`PORT` for the in-cluster
configuration, and the termination-message file. The host network carries the loopback API
server and the scripted model server.

Two changes keep the test a test: the pod template carries `goalkeeper.dev/test-runner=own`,
so the session pod runner never starts the pod itself, and the namespace gets the
`kube-root-ca.crt` ConfigMap, which the projected token volume names and a real cluster's
controller-manager publishes (the local control plane runs no such controller).

Skipped when the image is absent, unless GOALKEEPER_REQUIRE_IMAGE=1 (CI builds the image
first and sets it, so there a missing image fails)."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from goalkeeper import __version__
from goalkeeper.controller import manifests
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.core.models import ActionResult, MonitorStepStatus, Observation
from goalkeeper.devcluster.podrunner import expand
from tests.cluster.test_step_agent import create_deployment, create_step, read_status, replicas
from tests.support.cluster_fixtures import OWN_RUNNER_LABEL, REPO, wait_for
from tests.support.model_server import Final, ModelServer, ToolCalls, call
from tests.support.observations import AUTHORIZED, action, contract, observation_dict

pytestmark = pytest.mark.cluster

IMAGE = os.environ.get("GOALKEEPER_IMAGE", f"goalkeeper:{__version__}")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KEY_SECRET = "model-api"
# Room for the container to start and finish; the Job's activeDeadlineSeconds bounds a run.
DEADLINE_SECONDS = 180


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


# --- the kubelet's part ------------------------------------------------------------------


def cpus(quantity: str) -> str:
    return str(int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity))


def memory_bytes(quantity: str) -> str:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    found = re.fullmatch(r"(\d+)([KMG]i?)?", quantity)
    assert found, f"memory quantity {quantity!r} is not translated"
    return str(int(found.group(1)) * units.get(found.group(2) or "", 1))


def atomic_write(root: Path, files: dict[str, tuple[bytes, int]], fs_group: int | None) -> None:
    """`files` laid out as the kubelet's atomic writer does for a Secret or projected volume:
    a timestamped payload folder, `..data` linking to it and one link per top-level name
    through `..data`. Such volumes are read-only: with an fsGroup every file belongs to that
    group and gets group read (`SetVolumeOwnership`)."""
    now = time.time_ns()
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(now // 10**9))
    payload = root / f"..{stamp}.{now % 10**9:09d}"
    for rel, (content, mode) in files.items():
        path = payload / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if fs_group is not None:
            os.chown(path, 0, fs_group)
            mode |= 0o440
        path.chmod(mode)
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        if fs_group is not None:
            os.chown(folder, 0, fs_group)
        folder.chmod(0o2755 if fs_group is not None else 0o755)
    (root / "..data").symlink_to(payload.name)
    for top in sorted({rel.split("/", 1)[0] for rel in files}):
        (root / top).symlink_to(f"..data/{top}")


# Settings this kubelet translates; any other one fails the test instead of being dropped.
SECURITY_FIELDS = {
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "supplementalGroups",
    "seccompProfile",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "capabilities",
    "privileged",
}


@dataclass
class PodContainer:
    """The `docker run` of a stored pod's one container: options, image and arguments."""

    pod: dict[str, Any]
    options: list[str]
    image: str
    entrypoint: str | None  # the command's first part, in place of the image's entry point
    argv: list[str]
    termination_log: Path

    @classmethod
    def of(cls, api: Any, control_plane: Any, pod: dict[str, Any], folder: Path) -> PodContainer:
        spec, meta = pod["spec"], pod["metadata"]
        assert not spec.get("initContainers") and len(spec["containers"]) == 1, spec
        [container] = spec["containers"]
        context = {
            **(spec.get("securityContext") or {}),
            **(container.get("securityContext") or {}),
        }
        untranslated = set(context) - SECURITY_FIELDS
        assert not untranslated, f"securityContext fields not translated: {untranslated}"
        assert not context.get("privileged")
        uid, gid = context.get("runAsUser"), context.get("runAsGroup")
        assert uid is not None and gid is not None, "the pod names no user and group"
        # The kubelet's own check: runAsNonRoot refuses uid 0 before the container starts.
        assert not (context.get("runAsNonRoot") and uid == 0)
        fs_group = context.get("fsGroup")
        options = ["--network", "host", "--hostname", meta["name"], "--user", f"{uid}:{gid}"]
        for group in [fs_group, *(context.get("supplementalGroups") or [])]:
            if group is not None:
                options += ["--group-add", str(group)]
        if context.get("readOnlyRootFilesystem"):
            options.append("--read-only")
        capabilities = context.get("capabilities") or {}
        options += [o for cap in capabilities.get("drop") or [] for o in ("--cap-drop", cap)]
        options += [o for cap in capabilities.get("add") or [] for o in ("--cap-add", cap)]
        if context.get("allowPrivilegeEscalation") is False:
            options += ["--security-opt", "no-new-privileges"]
        seccomp = (context.get("seccompProfile") or {}).get("type", "Unconfined")
        assert seccomp in ("RuntimeDefault", "Unconfined"), seccomp
        if seccomp == "Unconfined":
            options += ["--security-opt", "seccomp=unconfined"]
        limits = (container.get("resources") or {}).get("limits") or {}
        assert set(limits) <= {"cpu", "memory"}, limits
        if "cpu" in limits:
            options += ["--cpus", cpus(limits["cpu"])]
        if "memory" in limits:
            options += ["--memory", memory_bytes(limits["memory"])]

        fields = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        }
        # The `kubernetes` Service's variables come with every pod, service links or not.
        host, port = "127.0.0.1", control_plane.port
        env = {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
        }
        assert not container.get("envFrom")
        for var in container.get("env") or []:
            source = var.get("valueFrom")
            if source is None:
                env[var["name"]] = expand(var.get("value", ""), env)
                continue
            path = (source.get("fieldRef") or {}).get("fieldPath")
            assert path in fields, f"env {var['name']}: {source} is not translated"
            env[var["name"]] = fields[path]
        options += [o for name, value in env.items() for o in ("-e", f"{name}={value}")]

        volumes = {
            volume["name"]: cls._volume(
                api, volume, folder / "volumes" / volume["name"], fields, fs_group
            )
            for volume in spec.get("volumes") or []
        }
        for mount in container.get("volumeMounts") or []:
            assert set(mount) <= {"name", "mountPath", "readOnly"}, mount
            ro = ":ro" if mount.get("readOnly") else ""
            options += ["-v", f"{volumes[mount['name']]}:{mount['mountPath']}{ro}"]
        termination_log = folder / "termination-log"
        termination_log.touch()
        termination_log.chmod(0o666)
        path = container.get("terminationMessagePath") or "/dev/termination-log"
        options += ["-v", f"{termination_log}:{path}"]

        command = [expand(part, env) for part in container.get("command") or []]
        args = [expand(part, env) for part in container.get("args") or []]
        if container.get("workingDir"):
            options += ["--workdir", container["workingDir"]]
        # The pod's command replaces the image's entry point and its CMD.
        entrypoint = command[0] if command else None
        argv = [*command[1:], *args]
        return cls(pod, options, container["image"], entrypoint, argv, termination_log)

    @staticmethod
    def _volume(
        api: Any,
        volume: dict[str, Any],
        root: Path,
        fields: dict[str, str],
        fs_group: int | None,
    ) -> Path:
        from kubernetes import client

        core = client.CoreV1Api(api)
        namespace = fields["metadata.namespace"]
        root.mkdir(parents=True)
        if "emptyDir" in volume:
            # The kubelet's emptyDir: 0777, and the fsGroup's with its setgid bit.
            if fs_group is not None:
                os.chown(root, 0, fs_group)
            root.chmod(0o2777 if fs_group is not None else 0o777)
            return root
        files: dict[str, tuple[bytes, int]] = {}
        if "secret" in volume:
            sources = [{"secret": volume["secret"]}]
            default = volume["secret"].get("defaultMode", 0o644)
        elif "projected" in volume:
            sources = volume["projected"]["sources"]
            default = volume["projected"].get("defaultMode", 0o644)
        else:
            pytest.fail(f"volume {volume} is not translated")
        for source in sources:
            if "secret" in source or "configMap" in source:
                ref = source.get("secret") or source["configMap"]
                if "secret" in source:
                    name = ref.get("secretName") or ref["name"]
                    found = core.read_namespaced_secret(name, namespace).data or {}
                    data = {k: base64.b64decode(v) for k, v in found.items()}
                else:
                    found = core.read_namespaced_config_map(ref["name"], namespace).data or {}
                    data = {k: v.encode() for k, v in found.items()}
                items = ref.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    files[item["path"]] = (data[item["key"]], item.get("mode", default))
            elif "serviceAccountToken" in source:
                token = source["serviceAccountToken"]
                request: dict[str, Any] = {
                    "expirationSeconds": token.get("expirationSeconds", 3600),
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": fields["metadata.name"],
                        "uid": fields["metadata.uid"],
                    },
                }
                if token.get("audience"):
                    request["audiences"] = [token["audience"]]
                answer = core.create_namespaced_service_account_token(
                    fields["spec.serviceAccountName"], namespace, {"spec": request}
                )
                files[token["path"]] = (answer.status.token.encode(), default)
            elif "downwardAPI" in source:
                for item in source["downwardAPI"]["items"]:
                    path = (item.get("fieldRef") or {}).get("fieldPath")
                    assert path in fields, f"downward API item {item} is not translated"
                    files[item["path"]] = (fields[path].encode(), item.get("mode", default))
            else:
                pytest.fail(f"volume source {source} is not translated")
        atomic_write(root, files, fs_group)
        return root


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    inspect: str

    @property
    def logs(self) -> str:
        return self.stdout + self.stderr


def run(pod: PodContainer, *, command: list[str] | None = None, timeout: float) -> Ran:
    """Run the pod's container (with `command` in place of the pod's, if given) to its end;
    its exit code and logs."""
    name = f"goalkeeper-step-{uuid.uuid4().hex[:8]}"
    entrypoint, argv = (pod.entrypoint, pod.argv) if command is None else (command[0], command[1:])
    options = [*pod.options, *(["--entrypoint", entrypoint] if entrypoint else [])]
    try:
        started = docker("run", "--name", name, *options, pod.image, *argv, timeout=timeout)
        state = docker("inspect", "-f", "{{.State.ExitCode}} {{.State.Error}}", name)
        code, _, error = state.stdout.strip().partition(" ")
        assert state.returncode == 0 and not error, f"the container did not run: {started.stderr}"
        logs = docker("logs", name)
        print(f"---- {pod.pod['metadata']['name']}: docker run {' '.join(options)} {pod.image}")
        print(f"exit {code}; stderr:\n{logs.stderr[-5000:]}")
        print(f"stdout:\n{logs.stdout[-5000:]}")
        return Ran(int(code), logs.stdout, logs.stderr, docker("inspect", name).stdout)
    finally:
        docker("rm", "-f", name)


# --- the cluster's part ------------------------------------------------------------------


@pytest.fixture
def step_namespace(
    image: str, control_plane: Any, api_client: Any, namespace: str
) -> tuple[str, str]:
    """The test namespace with the step identities (config/rbac/steps.yaml), the model key's
    Secret, once the cluster CA's ConfigMap is there; the key's value comes with it."""
    from kubernetes import client

    # The step-results policy is what binds a status write to the step's pod.
    client.AdmissionregistrationV1Api(api_client).read_validating_admission_policy(
        "goalkeeper-step-results"
    )
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", str(REPO / "config/rbac/steps.yaml"), check=True
    )
    key = f"KEYMARK-{secrets.token_hex(16)}"
    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": KEY_SECRET}, "stringData": {"api-key": key}}
    )
    # The controller manager's root-ca-cert-publisher writes it into every namespace.
    ca = wait_for(
        lambda: _root_ca(core, namespace), 60, f"kube-root-ca.crt in namespace {namespace}"
    )
    assert ca == Path(control_plane.ca_file).read_text()
    return namespace, key


def _root_ca(core: Any, namespace: str) -> str | None:
    from kubernetes.client.exceptions import NotFoundException

    try:
        return core.read_namespaced_config_map("kube-root-ca.crt", namespace).data["ca.crt"]
    except NotFoundException:
        return None


def settings_for(image: str, server: ModelServer) -> OperatorSettings:
    return OperatorSettings(
        model="openai:scripted-model",
        modelBaseUrl=server.base_url,
        modelApiKeySecret=KEY_SECRET,
        stepImage=image,
        stepDeadlineSeconds=DEADLINE_SECONDS,
    )


def step_pod(
    api_client: Any,
    control_plane: Any,
    namespace: str,
    name: str,
    settings: OperatorSettings,
    folder: Path,
) -> PodContainer:
    """The Job `step_job` builds for MonitorStep `name`, as stored, and the pod the Job
    controller makes for it, as a kubelet would run it."""
    from kubernetes import client

    step = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        manifests.GROUP, manifests.VERSION, namespace, "monitorsteps", name
    )
    job = manifests.step_job(step, settings)
    job["spec"]["template"]["metadata"]["labels"][OWN_RUNNER_LABEL] = "own"
    client.BatchV1Api(api_client).create_namespaced_job(namespace, job)
    core = client.CoreV1Api(api_client)
    [pod] = wait_for(
        lambda: (
            core.list_namespaced_pod(
                namespace, label_selector=f"batch.kubernetes.io/job-name={name}"
            ).items
        ),
        60,
        f"the pod of Job {name}",
    )
    stored: dict[str, Any] = api_client.sanitize_for_serialization(pod)
    folder.mkdir(parents=True, exist_ok=True)
    return PodContainer.of(api_client, control_plane, stored, folder)


def check_pod_identity(container: PodContainer, name: str, account: str) -> None:
    """The pod is the Job's, named as the admission policy wants, and mounts the token
    where in-cluster configuration looks for it."""
    meta, spec = container.pod["metadata"], container.pod["spec"]
    assert re.fullmatch(rf"{re.escape(name)}-[a-z0-9]{{5}}", meta["name"]), meta["name"]
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", name, True)
    assert spec["serviceAccountName"] == account
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts[SA_DIR]["readOnly"] is True
    assert mounts[manifests.MODEL_KEY_DIR]["readOnly"] is True
    assert mounts[manifests.POD_TMP]


def check_no_key(ran: Ran, container: PodContainer, status: dict[str, Any], key: str) -> None:
    assert key not in ran.logs, "the model key is in the container's logs"
    assert key not in ran.inspect, "the model key is in the container's configuration"
    assert key not in container.termination_log.read_text()
    assert key not in json.dumps(status)


def step_events(ran: Ran) -> list[str]:
    """The step log's events: stdout is one JSON object per line."""
    return [json.loads(line)["event"] for line in ran.stdout.splitlines()]


# --- the tests ---------------------------------------------------------------------------


def test_observe_step_pod_reads_a_deployment_and_writes_its_observation(
    image: str,
    control_plane: Any,
    api_client: Any,
    step_namespace: tuple[str, str],
    tmp_path: Path,
) -> None:
    namespace, key = step_namespace
    create_deployment(api_client, namespace, replicas=1)
    create_step(api_client, namespace, "m-observe-2", "observe")
    answer = observation_dict(
        "act",
        observation="Deployment web has spec.replicas 1; the task wants 3.",
        action=action(
            action="Scale Deployment web to 3 replicas.",
            mutationSet=["deployments/web"],
            failureId="replicas-below-target:deployment/web",
            targetStateId="deployment/web:replicas-1",
        ),
    )
    with ModelServer() as server:
        settings = settings_for(image, server)
        container = step_pod(
            api_client, control_plane, namespace, "m-observe-2", settings, tmp_path
        )
        check_pod_identity(container, "m-observe-2", "goalkeeper-observer")
        server.script(ToolCalls([call("k8s_get", kind="Deployment", name="web")]), Final(answer))
        ran = run(container, timeout=DEADLINE_SECONDS)
        requests = server.requests

    assert ran.code == 0, ran.logs
    assert "Traceback" not in ran.stderr
    assert [r.status for r in requests] == [200, 200]
    # The key reached the model from the mounted Secret, never through the environment.
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {key}"}
    # The Deployment was read with the pod's in-cluster token.
    [read] = ModelServer.tool_results(requests[1].body)
    assert f"Deployment {namespace}/web" in read and "replicas: 1" in read

    status = read_status(api_client, namespace, "m-observe-2")
    parsed = MonitorStepStatus.model_validate(status)
    assert parsed.phase.value == "Succeeded", status
    meta = container.pod["metadata"]
    assert parsed.pod is not None and (parsed.pod.name, parsed.pod.uid) == (
        meta["name"],
        meta["uid"],
    )
    observed = Observation.model_validate(parsed.result)
    assert observed.route.value == "act"
    assert observed.action is not None and observed.action.mutationSet == ["deployments/web"]
    assert container.termination_log.read_text().startswith("observe Succeeded: route=act")
    assert step_events(ran) == [
        "step_start",
        "model_request",
        "tool_call",
        "model_request",
        "step_end",
    ]
    check_no_key(ran, container, status, key)


def test_act_step_pod_scales_the_deployment_and_writes_its_result(
    image: str,
    control_plane: Any,
    api_client: Any,
    step_namespace: tuple[str, str],
    tmp_path: Path,
) -> None:
    from kubernetes import client

    namespace, key = step_namespace
    create_deployment(api_client, namespace, replicas=1)
    create_step(
        api_client,
        namespace,
        "m-act-3",
        "act",
        action=action(
            kind="recover",
            action="Scale Deployment web to 3 replicas.",
            mutationSet=["deployments/web"],
            verification="Deployment web reads back spec.replicas 3.",
        ),
        contract=contract(),
        authorizedActions=AUTHORIZED,
    )
    done = {
        "outcome": "succeeded",
        "evidence": "Deployment web reads back spec.replicas 3.",
        "changed": ["deployments/web"],
    }
    with ModelServer() as server:
        settings = settings_for(image, server)
        container = step_pod(api_client, control_plane, namespace, "m-act-3", settings, tmp_path)
        check_pod_identity(container, "m-act-3", "goalkeeper-actor")
        server.script(
            ToolCalls([call("k8s_scale", kind="Deployment", name="web", replicas=3)]),
            ToolCalls([call("k8s_get", kind="Deployment", name="web")]),
            Final(done),
        )
        assert replicas(api_client, namespace) == 1
        ran = run(container, timeout=DEADLINE_SECONDS)
        requests = server.requests

    assert ran.code == 0, ran.logs
    assert "Traceback" not in ran.stderr
    assert [r.status for r in requests] == [200, 200, 200]
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {key}"}
    [scaled] = ModelServer.tool_results(requests[1].body)
    assert "spec.replicas is now 3" in scaled
    assert "replicas: 3" in ModelServer.tool_results(requests[2].body)[-1]
    # Scaled by the step, through its field manager, with the actor's in-cluster token.
    assert replicas(api_client, namespace) == 3
    deployment = client.AppsV1Api(api_client).read_namespaced_deployment("web", namespace)
    assert "goalkeeper-step" in {f.manager for f in deployment.metadata.managed_fields}

    status = read_status(api_client, namespace, "m-act-3")
    parsed = MonitorStepStatus.model_validate(status)
    assert parsed.phase.value == "Succeeded", status
    assert parsed.pod is not None and parsed.pod.uid == container.pod["metadata"]["uid"]
    assert parsed.pod.name == container.pod["metadata"]["name"]
    result = ActionResult.model_validate(parsed.result)
    assert (result.outcome.value, result.changed) == ("succeeded", ["deployments/web"])
    assert container.termination_log.read_text().startswith("act Succeeded: outcome=succeeded")
    check_no_key(ran, container, status, key)


PROBE = """
touch /usr/x 2>&1 && echo root-fs=writable
touch /tmp/probe && echo tmp=writable
echo "uid=$(id -u) groups=$(id -G)"
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
test -r {key} && echo key=readable
touch {key_dir}/x 2>/dev/null || echo key-dir=read-only
cat {sa}/namespace; echo
test -s {sa}/token && test -s {sa}/ca.crt && echo token=present
exit 0
"""


def test_the_step_pod_cannot_write_its_root_filesystem(
    image: str,
    control_plane: Any,
    api_client: Any,
    step_namespace: tuple[str, str],
    tmp_path: Path,
) -> None:
    """A second, short container with the act pod's settings: only its volumes are writable,
    and it runs with no capability, no new privileges and the runtime's seccomp filter."""
    namespace, key = step_namespace
    create_step(
        api_client,
        namespace,
        "m-act-4",
        "act",
        action=action(mutationSet=["deployments/web"]),
        contract=contract(),
        authorizedActions=AUTHORIZED,
    )
    with ModelServer() as server:
        settings = settings_for(image, server)
        container = step_pod(api_client, control_plane, namespace, "m-act-4", settings, tmp_path)
    script = PROBE.format(key=manifests.MODEL_KEY_FILE, key_dir=manifests.MODEL_KEY_DIR, sa=SA_DIR)
    ran = run(container, command=["sh", "-c", script], timeout=60)
    assert ran.code == 0, ran.logs
    said = ran.stdout.splitlines()
    assert "touch: cannot touch '/usr/x': Read-only file system" in said, ran.logs
    assert "root-fs=writable" not in said
    assert "tmp=writable" in said
    uid = manifests.STEP_UID
    assert f"uid={uid} groups={uid}" in said
    status = dict(line.split(":\t", 1) for line in said if ":\t" in line)
    assert status["CapEff"] == status["CapBnd"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"
    assert "key=readable" in said and "key-dir=read-only" in said
    assert namespace in said and "token=present" in said
    assert key not in ran.logs
