"""A tiny test kubelet and scheduler: a Node whose pods run as local processes.

On `start()`, `PodRunner` registers (or adopts) a Node named `node_name`: Ready, address
127.0.0.1, this machine's cpu and memory. It keeps the node alive as a kubelet does, renewing
its Lease in `kube-node-lease` every `heartbeat_seconds` and the Ready condition's heartbeat
every minute, so the node-lifecycle controller never marks it NotReady; `stop()` deletes
both. It schedules too: a pod its label selector (and namespace) matches that has no
`spec.nodeName` is bound to the node through `pods/binding` when the pod's nodeSelector and
required node affinity allow the node (taints are not checked). Several runners can share a
control plane: each binds and runs only the pods its selector matches.

For each pod bound to its node, the runner runs the first container's `command` + `args`
(init and other containers are not run) with the current Python environment (the venv's
bin first on PATH; the image is recorded only), the pod's `env`/`envFrom` resolved (values,
Secret and ConfigMap keys, a few field refs), and `KUBECONFIG` pointing at a kubeconfig
holding a TokenRequest token for the pod's ServiceAccount, bound to the pod. Secret volumes
are written, with their modes, into a per-pod folder removed when the pod ends; a process
cannot be given mounts, so a container path under a mounted Secret volume, in an environment
value or an argument, is rewritten to that folder. Other volumes are ignored.

It patches the pod's status as a kubelet would: Running and Ready (probes are not run, so a
running process counts as ready), `podIP`/`hostIP` 127.0.0.1, then Succeeded/Failed with the
exit code and the termination message. Like a kubelet it rides out an API server that
restarts or sheds load: a status write, a binding, and the token, Secret and ConfigMap reads
a pod's start needs are made again after a growing pause through connection errors, 429 and
5xx for as long as the runner runs, and a broken watch is listed again after a pause that
grows while it keeps breaking. `restartPolicy: Always` restarts the process whenever
it exits, `OnFailure` when it fails, after a backoff of one second more per restart (at most
ten), counted in `restartCount`; a pod of theirs that cannot start (no command, a missing
Secret: looked for again after a backoff) waits as Pending, where a `Never` pod fails. A pod
being deleted has its process group stopped (SIGTERM, then SIGKILL after its grace period,
ten seconds at most) and is then deleted with grace period 0, as a kubelet confirms a
deletion, so rollouts, scale-downs and namespace deletion finish; `activeDeadlineSeconds`
also stops it. `KUBERNETES_SERVICE_HOST`/`PORT` are never set: the pod talks to the loopback
apiserver only, and Services get no endpoints (a loopback pod IP is refused there). The
node's kubelet endpoint serves the pods' output (containerlogs.py), so `kubectl logs` and a
step's `pod_logs` read it through the API server.

The runner is a background thread: `start()`/`stop()` from sync code, or
`async with PodRunner(...)` from asyncio.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import urllib3.exceptions
import yaml

from goalkeeper.devcluster import procs
from goalkeeper.devcluster.binaries import K8S_VERSION
from goalkeeper.devcluster.containerlogs import ContainerLogServer

log = logging.getLogger(__name__)

DEFAULT_SELECTOR = "goalkeeper.dev/step"
TERMINATION_MESSAGE_ENV = "GOALKEEPER_TERMINATION_MESSAGE_PATH"
_MAX_MESSAGE = 4096
# A call the API server failed for a passing reason is made again after a pause doubling
# from the first to the most, as a kubelet keeps trying for as long as it runs.
RETRY_PAUSE_FIRST = 0.2
RETRY_PAUSE_MAX = 2.0
# A watch that breaks is listed again after a pause doubling up to this while it keeps
# breaking (the API server restarting), so the log is not flooded meanwhile.
WATCH_PAUSE_MAX = 5.0
# The admission plugins of an API server that has just started refuse with this.
NOT_READY = "not yet ready to handle request"
NODE_LEASE_NAMESPACE = "kube-node-lease"
# A kubelet's defaults: the lease lasts 40 s and is renewed every 10 s.
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10.0
# How often the Ready condition's heartbeat is written (a kubelet's is 5 min when unchanged).
NODE_STATUS_SECONDS = 60.0
# Deleted pods get their grace period up to this, so a deletion never stalls a test for long.
MAX_GRACE_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 10.0
_TERMINAL = ("Succeeded", "Failed")
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def log_paths(log_dir: Path, namespace: str, pod: str) -> tuple[Path, Path]:
    """Where a pod's stdout and stderr are kept: by namespace and pod name, so a reader that
    knows the pod (`goalkeeper logs`) finds them."""
    folder = log_dir / namespace
    return folder / f"{pod}.stdout", folder / f"{pod}.stderr"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion (`$$` escapes), unknown references kept as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, value)


def node_fits(pod: Any, node: str, labels: Mapping[str, str]) -> bool:
    """Whether the pod's nodeSelector and required node affinity allow the node `node` with
    `labels` (a DaemonSet's pod names its node in a `metadata.name` field term)."""
    spec = pod.spec
    if any(labels.get(key) != value for key, value in (spec.node_selector or {}).items()):
        return False
    node_affinity = spec.affinity.node_affinity if spec.affinity else None
    required = (
        node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    )
    if required is None:
        return True
    # The terms are ORed; an empty list matches no node.
    return any(_term_fits(term, node, labels) for term in required.node_selector_terms or [])


def _term_fits(term: Any, node: str, labels: Mapping[str, str]) -> bool:
    checks = [(e, labels.get(e.key)) for e in term.match_expressions or []]
    checks += [(f, node if f.key == "metadata.name" else None) for f in term.match_fields or []]
    # A term without requirements matches no node.
    return bool(checks) and all(
        _requirement(req.operator, value, req.values or []) for req, value in checks
    )


def _requirement(operator: str, value: str | None, values: list[str]) -> bool:
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _memory_kib() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024


class PodStartError(Exception):
    """The pod cannot be started (reason, message), like a kubelet's CreateContainerError."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class RunRecord:
    """What the runner did for one pod (for tests and debugging)."""

    namespace: str
    name: str
    uid: str
    image: str = ""
    argv: list[str] = field(default_factory=list)
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    restarts: int = 0
    stdout: Path | None = None
    stderr: Path | None = None
    done: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""
    # SIGTERM to SIGKILL when stopped; a deletion sets the pod's own grace period.
    grace: float = 2.0
    # Set when the API server keeps the pod Terminating until this runner confirms.
    confirm_deletion: bool = False


class PodRunner:
    """Registers a Node and runs matching pods on it as local processes until `stop()`."""

    def __init__(
        self,
        kubeconfig: Path | str,
        *,
        label_selector: str | None = DEFAULT_SELECTOR,
        namespace: str | None = None,
        node_name: str | None = None,
        log_dir: Path | str | None = None,
        cwd: Path | str | None = None,
        token_seconds: int = 3600,
        extra_env: dict[str, str] | None = None,
        keep_logs: bool = False,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
    ) -> None:
        """`log_dir` keeps each pod's stdout/stderr (`<ns>/<pod>.stdout|.stderr`, see
        `log_paths`); without one they go to a temp folder removed by `stop()` unless
        `keep_logs`. `node_name` defaults to a new `goalkeeper-dev-<random>` per runner."""
        self.kubeconfig = Path(kubeconfig)
        self.label_selector = label_selector or None
        self.namespace = namespace
        self.node_name = node_name or f"goalkeeper-dev-{uuid.uuid4().hex[:8]}"
        self.node_labels = {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _ARCH.get(platform.machine(), platform.machine()),
        }
        self._own_dir = Path(tempfile.mkdtemp(prefix="goalkeeper-pods-"))
        self.log_dir = Path(log_dir) if log_dir is not None else self._own_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cwd = Path(cwd) if cwd is not None else None
        self.token_seconds = token_seconds
        self.extra_env = dict(extra_env or {})
        self.keep_logs = keep_logs or log_dir is not None
        self.heartbeat_seconds = heartbeat_seconds
        self.records: dict[str, RunRecord] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        self._watch_error: BaseException | None = None
        # Pods whose binding failed for a passing reason: tried again after each watch.
        self._unbound: dict[str, Any] = {}
        self._node_uid: str | None = None
        self._logs: ContainerLogServer | None = None
        self._ready_since = _now()
        kc = yaml.safe_load(self.kubeconfig.read_text())
        cluster = kc["clusters"][0]["cluster"]
        self.server: str = cluster["server"]
        if "certificate-authority-data" in cluster:
            self._ca_data: str = cluster["certificate-authority-data"]
        else:
            ca_path = Path(cluster["certificate-authority"])
            self._ca_data = base64.b64encode(ca_path.read_bytes()).decode()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> PodRunner:
        if self._thread is not None:
            return self
        self._logs = ContainerLogServer(partial(log_paths, self.log_dir)).start()
        self._register_node()
        self._heartbeat = threading.Thread(
            target=self._heartbeat_loop, name="pod-runner-heartbeat", daemon=True
        )
        self._heartbeat.start()
        self._thread = threading.Thread(target=self._watch_loop, name="pod-runner", daemon=True)
        self._thread.start()
        error: RuntimeError | None = None
        if not self._ready.wait(timeout):
            error = RuntimeError(f"pod runner did not list pods within {timeout} s")
        elif self._watch_error is not None:
            error = RuntimeError("pod runner failed to start")
        if error is not None:
            self.stop()
            raise error from self._watch_error
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self._stopping.set()
        with self._lock:
            records = list(self.records.values())
        for rec in records:
            rec.cancel_reason = rec.cancel_reason or "RunnerStopped"
            rec.cancel.set()
        for thread in (self._thread, self._heartbeat, *self._workers):
            if thread is not None:
                thread.join(timeout)
        self._deregister_node()
        if self._logs is not None:
            self._logs.stop()
        shutil.rmtree(self._own_dir / "run", ignore_errors=True)
        if not self.keep_logs or not self.log_dir.is_relative_to(self._own_dir):
            shutil.rmtree(self._own_dir, ignore_errors=True)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> PodRunner:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def record(self, namespace: str, name: str) -> RunRecord | None:
        """The latest run of the pod `name` (a StatefulSet makes one name many times)."""
        with self._lock:
            for rec in reversed(self.records.values()):
                if rec.namespace == namespace and rec.name == name:
                    return rec
        return None

    def _api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )

    # -- the node -----------------------------------------------------------------------

    def _node_conditions(self) -> list[dict[str, Any]]:
        now = _now()

        def cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._ready_since,
            }

        return [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "enough PIDs"),
            cond("Ready", "True", "KubeletReady", "the goalkeeper pod runner is running"),
        ]

    def _node_status(self) -> dict[str, Any]:
        resources = {"cpu": str(os.cpu_count() or 1), "memory": f"{_memory_kib()}Ki", "pods": "110"}
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": self._node_conditions(),
            # No Hostname: the API server would try it first, and the name resolves nowhere.
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            # Where the API server reads `pods/log` (containerlogs.py).
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self._logs.port if self._logs else 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": "goalkeeper pod runner",
                "containerRuntimeVersion": "goalkeeper://local-process",
                "kubeletVersion": K8S_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": self.node_labels["kubernetes.io/arch"],
            },
        }

    def _register_node(self) -> None:
        """Create the Node, or take over one of the same name left by an earlier run."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self._api() as api_client:
            core: Any = client.CoreV1Api(api_client)
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self.node_name, "labels": self.node_labels},
                "status": self._node_status(),
            }
            try:
                node = core.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                node = core.patch_node(
                    self.node_name,
                    {"metadata": {"labels": self.node_labels}, "spec": {"unschedulable": False}},
                )
                core.patch_node_status(self.node_name, {"status": self._node_status()})
            self._node_uid = node.metadata.uid
            self._renew_lease(client.CoordinationV1Api(api_client))

    def _renew_lease(self, coordination: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            coordination.patch_namespaced_lease(
                self.node_name, NODE_LEASE_NAMESPACE, {"spec": {"renewTime": _micro_now()}}
            )
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        owner = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self._node_uid}
        coordination.create_namespaced_lease(
            NODE_LEASE_NAMESPACE,
            {
                "metadata": {"name": self.node_name, "ownerReferences": [owner]},
                "spec": {
                    "holderIdentity": self.node_name,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": _micro_now(),
                },
            },
        )

    def _heartbeat_loop(self) -> None:
        from kubernetes import client

        with self._api() as api_client:
            core: Any = client.CoreV1Api(api_client)
            coordination: Any = client.CoordinationV1Api(api_client)
            status_written = time.monotonic()
            while not self._stopping.wait(self.heartbeat_seconds):
                try:
                    self._renew_lease(coordination)
                    if time.monotonic() - status_written >= NODE_STATUS_SECONDS:
                        core.patch_node_status(
                            self.node_name, {"status": {"conditions": self._node_conditions()}}
                        )
                        status_written = time.monotonic()
                except Exception as exc:
                    # The API server may be restarting; the next beat tries again.
                    log.info("pod runner: node %s heartbeat failed: %r", self.node_name, exc)

    def _deregister_node(self) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        if self._node_uid is None:
            return
        self._node_uid = None
        with self._api() as api_client:
            coordination: Any = client.CoordinationV1Api(api_client)
            core: Any = client.CoreV1Api(api_client)
            for delete, args in (
                (coordination.delete_namespaced_lease, (self.node_name, NODE_LEASE_NAMESPACE)),
                (core.delete_node, (self.node_name,)),
            ):
                try:
                    delete(*args, _request_timeout=10)
                except ApiException as exc:
                    if exc.status != 404:
                        log.warning("pod runner: node %s not removed: %s", self.node_name, exc)
                except urllib3.exceptions.HTTPError as exc:
                    log.warning("pod runner: node %s not removed: %r", self.node_name, exc)

    # -- watching and scheduling --------------------------------------------------------

    def _watch_loop(self) -> None:
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        api_client = self._api()
        core: Any = client.CoreV1Api(api_client)
        kwargs: dict[str, Any] = {}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        pause = 0.5
        while not self._stopping.is_set():
            try:
                if self.namespace:
                    listing = core.list_namespaced_pod(self.namespace, **kwargs)
                    lister = core.list_namespaced_pod
                    args: tuple[Any, ...] = (self.namespace,)
                else:
                    listing = core.list_pod_for_all_namespaces(**kwargs)
                    lister = core.list_pod_for_all_namespaces
                    args = ()
                self._unbound.clear()
                for pod in listing.items:
                    self._on_pod(core, "ADDED", pod)
                self._ready.set()
                pause = 0.5
                rv = listing.metadata.resource_version
                while not self._stopping.is_set():
                    w: Any = watch.Watch()  # type: ignore[no-untyped-call]
                    for event in w.stream(
                        lister, *args, resource_version=rv, timeout_seconds=5, **kwargs
                    ):
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise ApiException(status=getattr(obj, "code", 410))
                        rv = obj.metadata.resource_version
                        self._on_pod(core, event["type"], obj)
                        if self._stopping.is_set():
                            w.stop()
                            break
                    for pod in list(self._unbound.values()):
                        self._on_pod(core, "ADDED", pod)
            except ApiException as exc:
                if exc.status != 410:
                    self._watch_broke(_short(exc), pause)
                    pause = min(pause * 2, WATCH_PAUSE_MAX)
            except Exception as exc:
                if not self._ready.is_set():
                    self._watch_error = exc
                    self._ready.set()
                    return
                self._watch_broke(_short(exc), pause)
                pause = min(pause * 2, WATCH_PAUSE_MAX)
        api_client.close()

    def _watch_broke(self, why: str, pause: float) -> None:
        """The pod watch failed: list again after `pause` (what the list finds is handled
        as a watch event would be, so nothing is missed meanwhile)."""
        if pause <= 0.5:
            log.warning("pod runner watch error: %s; listing again", why)
        else:
            log.info("pod runner watch still failing: %s; listing again in %.1f s", why, pause)
        self._stopping.wait(pause)

    def _on_pod(self, core: Any, kind: str, pod: Any) -> None:
        uid = pod.metadata.uid
        deleting = kind == "DELETED" or pod.metadata.deletion_timestamp is not None
        self._unbound.pop(uid, None)
        with self._lock:
            rec = self.records.get(uid)
        if rec is not None:
            if deleting:
                self._cancel_for_deletion(rec, kind, pod)
            return
        if kind == "DELETED" or self._stopping.is_set():
            return
        node = pod.spec.node_name
        if not node:
            if not deleting:
                self._bind(core, pod)
            return
        phase = pod.status.phase if pod.status else None
        if node != self.node_name or phase in _TERMINAL:
            return
        rec = RunRecord(namespace=pod.metadata.namespace, name=pod.metadata.name, uid=uid)
        if deleting:
            # Deleted before it started: the worker only confirms the deletion.
            self._cancel_for_deletion(rec, kind, pod)
        with self._lock:
            self.records[uid] = rec
        worker = threading.Thread(
            target=self._run_pod, args=(pod, rec), name=f"pod-{rec.name}", daemon=True
        )
        self._workers = [w for w in self._workers if w.is_alive()]
        self._workers.append(worker)
        worker.start()

    @staticmethod
    def _cancel_for_deletion(rec: RunRecord, kind: str, pod: Any) -> None:
        if kind != "DELETED" and pod.spec.node_name:
            rec.confirm_deletion = True
            grace = pod.metadata.deletion_grace_period_seconds
            rec.grace = min(MAX_GRACE_SECONDS, float(grace if grace is not None else 30))
        rec.cancel_reason = rec.cancel_reason or "Deleted"
        rec.cancel.set()

    def _bind(self, core: Any, pod: Any) -> None:
        """Bind the pod to this node, as a scheduler does, if the pod allows the node."""
        from kubernetes.client.exceptions import ApiException

        if not node_fits(pod, self.node_name, self.node_labels):
            return
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.metadata.name, "uid": pod.metadata.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        try:
            # Not preloaded: the answer is a Status, which the client cannot read as a Binding.
            core.create_namespaced_pod_binding(
                pod.metadata.name, pod.metadata.namespace, body, _preload_content=False
            ).release_conn()
        except ApiException as exc:
            if not (exc.status in (0, 429) or exc.status >= 500):
                # Gone, bound by another runner (409), or refused for good.
                if exc.status not in (404, 409):
                    log.warning("pod runner: %s not bound: %s", pod.metadata.name, exc.reason)
                return
            log.info("pod runner: %s not bound yet: %s", pod.metadata.name, exc.reason)
            self._unbound[pod.metadata.uid] = pod
        except urllib3.exceptions.HTTPError as exc:
            log.info("pod runner: %s not bound yet: %r", pod.metadata.name, exc)
            self._unbound[pod.metadata.uid] = pod

    # -- running one pod ----------------------------------------------------------------

    def _run_pod(self, pod: Any, rec: RunRecord) -> None:
        from kubernetes import client

        api_client = self._api()
        core: Any = client.CoreV1Api(api_client)
        try:
            self._run_pod_inner(core, pod, rec)
        except Exception as exc:
            log.exception("pod runner: %s/%s failed", rec.namespace, rec.name)
            rec.reason = rec.reason or f"RunnerError: {exc!r}"
            # Nobody watches its process any more: it must not run on unseen.
            if rec.pid is not None and procs.pid_alive(rec.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(rec.pid, signal.SIGKILL)
        finally:
            # As a kubelet unmounts them: no Secret stays on disk past its pod.
            shutil.rmtree(self._run_dir(rec) / "volumes", ignore_errors=True)
            if rec.confirm_deletion:
                self._confirm_deletion(core, rec)
            rec.done.set()
            api_client.close()

    def _confirm_deletion(self, core: Any, rec: RunRecord) -> None:
        """Delete the Terminating pod at once, as its kubelet does once its containers are
        stopped; the uid precondition spares a new pod of the same name."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": rec.uid}}
        try:
            self._retrying(
                lambda: core.delete_namespaced_pod(
                    rec.name, rec.namespace, grace_period_seconds=0, body=body
                ),
                f"deletion of {rec.namespace}/{rec.name}",
            )
        except Exception as exc:
            log.warning("pod runner: %s/%s left Terminating: %r", rec.namespace, rec.name, exc)

    def _run_dir(self, rec: RunRecord) -> Path:
        return self._own_dir / "run" / f"{rec.namespace}_{rec.name}_{rec.uid[:8]}"

    def _prepare(
        self, core: Any, pod: Any, container: Any, run_dir: Path, message_file: Path
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of the pod's process (PodStartError if it cannot run)."""
        if not container.command:
            raise PodStartError(
                "CreateContainerError",
                "the pod runner needs an explicit command (images are not run)",
            )
        mounts = self._mount_volumes(core, pod, container, run_dir / "volumes")
        env = self._environment(core, pod, container, run_dir, message_file, mounts)
        argv = [
            local_path(expand(a, env), mounts)
            for a in (container.command or []) + (container.args or [])
        ]
        return argv, env

    def _run_pod_inner(self, core: Any, pod: Any, rec: RunRecord) -> None:
        if rec.cancel.is_set():
            return  # deleted before it started: nothing to run or report
        container = pod.spec.containers[0]
        rec.image = container.image or ""
        run_dir = self._run_dir(rec)
        run_dir.mkdir(parents=True, exist_ok=True)
        rec.stdout, rec.stderr = log_paths(self.log_dir, rec.namespace, rec.name)
        rec.stdout.parent.mkdir(parents=True, exist_ok=True)
        message_file = run_dir / "termination-log"
        status = _PodStatus(self, core, pod, rec, _now())
        restartable = pod.spec.restart_policy != "Never"

        attempts = 0
        while True:
            try:
                argv, env = self._prepare(core, pod, container, run_dir, message_file)
                break
            except PodStartError as exc:
                rec.reason = exc.reason
                if not restartable:
                    status.finish("Failed", exc.reason, 128, reason=exc.reason, message=exc.message)
                    return
                # As a kubelet: the pod waits (a Secret may come), tried again after a backoff.
                status.waiting(exc.reason, exc.message)
                shutil.rmtree(run_dir / "volumes", ignore_errors=True)  # half written
                attempts += 1
                retry = None if exc.reason == "CreateContainerError" else _backoff(attempts)
                if rec.cancel.wait(retry):
                    return
        rec.argv = argv
        rec.reason = None
        policy = pod.spec.restart_policy
        deadline = None
        if pod.spec.active_deadline_seconds:
            deadline = time.monotonic() + pod.spec.active_deadline_seconds
        while not rec.cancel.is_set():
            code, cause, why, message = self._run_once(
                pod, rec, status, argv, env, run_dir, deadline
            )
            rec.exit_code = code
            if cause == "DeadlineExceeded":
                rec.reason = cause
                status.finish(
                    "Failed",
                    "Error",
                    code,
                    reason=cause,
                    message=(
                        f"Pod was active on the node longer than the specified deadline "
                        f"({pod.spec.active_deadline_seconds} s)"
                    ),
                    termination_message=message,
                )
                return
            if cause:
                rec.reason = cause
                status.finish("Failed", "Error", code, termination_message=message)
                return
            restart = policy == "Always" or (policy == "OnFailure" and code != 0)
            if restart and not self._stopping.is_set():
                rec.restarts += 1
                status.back_off(why, code, message)
                if rec.cancel.wait(_backoff(rec.restarts)):
                    rec.reason = rec.cancel_reason
                    status.finish("Failed", why, code, termination_message=message)
                    return
                continue
            rec.reason = why
            if why == "StartError":
                status.finish("Failed", why, code, reason=why, message=message)
            else:
                phase = "Succeeded" if code == 0 else "Failed"
                status.finish(phase, why, code, termination_message=message)
            return

    def _run_once(
        self,
        pod: Any,
        rec: RunRecord,
        status: _PodStatus,
        argv: list[str],
        env: dict[str, str],
        run_dir: Path,
        deadline: float | None,
    ) -> tuple[int, str, str, str]:
        """Run the process until it exits: its exit code, what stopped it ("" when it
        exited by itself), the container's reason and the termination message."""
        assert rec.stdout is not None and rec.stderr is not None
        message_file = run_dir / "termination-log"
        message_file.write_text("")
        status.run_started = _now()
        with open(rec.stdout, "ab") as out, open(rec.stderr, "ab") as err:
            try:
                proc = procs.spawn(argv, stdout=out, stderr=err, env=env, cwd=self.cwd or run_dir)
            except OSError as exc:
                return 128, "", "StartError", str(exc)
        rec.pid = proc.pid
        status.running()
        cause = self._wait(proc, rec, deadline)
        code = proc.returncode
        if code is None or code < 0:
            code = 128 + (-code if code is not None else signal.SIGKILL)
        container = pod.spec.containers[0]
        message = self._termination_message(pod, container, message_file, rec, code)
        return code, cause, "Completed" if code == 0 else "Error", message

    def _wait(self, proc: subprocess.Popen[bytes], rec: RunRecord, deadline: float | None) -> str:
        """Wait for exit; on deletion, stop or deadline kill the group. Returns the cause."""
        cause = ""
        while proc.poll() is None:
            timeout = 0.2
            if deadline is not None and time.monotonic() >= deadline:
                cause = "DeadlineExceeded"
            elif rec.cancel.wait(timeout):
                cause = rec.cancel_reason or "Deleted"
            if cause:
                procs.terminate(proc, grace=2.0 if cause == "DeadlineExceeded" else rec.grace)
                break
        # Whatever the cause, no child of the pod outlives it.
        procs.kill_group(proc, signal.SIGKILL)
        proc.wait()
        return cause

    def _termination_message(
        self, pod: Any, container: Any, message_file: Path, rec: RunRecord, code: int
    ) -> str:
        try:
            message = message_file.read_bytes()[-_MAX_MESSAGE:].decode("utf-8", "replace")
        except OSError:
            message = ""
        if (
            not message.strip()
            and code != 0
            and container.termination_message_policy == "FallbackToLogsOnError"
            and rec.stderr is not None
        ):
            message = procs.log_tail(rec.stderr, 2048)
        return message

    def _environment(
        self,
        core: Any,
        pod: Any,
        container: Any,
        run_dir: Path,
        message_file: Path,
        mounts: dict[str, Path],
    ) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", os.defpath)
        env["VIRTUAL_ENV"] = env.get("VIRTUAL_ENV") or str(Path(sys.executable).parent.parent)
        no_proxy = [x for x in env.get("NO_PROXY", "").split(",") if x]
        for host in ("127.0.0.1", "localhost", "::1"):
            if host not in no_proxy:
                no_proxy.append(host)
        env["NO_PROXY"] = env["no_proxy"] = ",".join(no_proxy)
        env.update(self.extra_env)
        env["HOSTNAME"] = pod.metadata.name
        env["KUBECONFIG"] = str(self._write_kubeconfig(core, pod, run_dir))
        env[TERMINATION_MESSAGE_ENV] = str(message_file)

        pod_env: dict[str, str] = {}
        for src in container.env_from or []:
            prefix = src.prefix or ""
            if src.config_map_ref is not None:
                data = self._config_map(
                    core, pod, src.config_map_ref.name, src.config_map_ref.optional
                )
            elif src.secret_ref is not None:
                data = self._secret(core, pod, src.secret_ref.name, src.secret_ref.optional)
            else:
                continue
            for key, value in (data or {}).items():
                pod_env[prefix + key] = value
        for var in container.env or []:
            value = self._env_value(core, pod, var, pod_env)
            if value is not None:
                pod_env[var.name] = value
        env.update({name: local_path(value, mounts) for name, value in pod_env.items()})
        return env

    def _mount_volumes(
        self, core: Any, pod: Any, container: Any, volumes_dir: Path
    ) -> dict[str, Path]:
        """Write the pod's Secret volumes the container mounts; its mount paths, each with
        the folder that stands in for it."""
        secrets = {v.name: v.secret for v in pod.spec.volumes or [] if v.secret is not None}
        mounts: dict[str, Path] = {}
        for mount in container.volume_mounts or []:
            source = secrets.get(mount.name)
            if source is None:
                continue
            folder = volumes_dir / mount.name
            if not folder.exists():
                self._write_secret_volume(core, pod, source, folder)
            mounts[mount.mount_path.rstrip("/") or "/"] = folder / (mount.sub_path or "")
        return mounts

    def _write_secret_volume(self, core: Any, pod: Any, source: Any, folder: Path) -> None:
        data = self._secret(core, pod, source.secret_name, source.optional) or {}
        default_mode = 0o644 if source.default_mode is None else source.default_mode
        files = [(item.key, item.path, item.mode) for item in source.items or []]
        if not source.items:
            files = [(key, key, None) for key in data]
        folder.mkdir(parents=True, mode=0o700)
        for key, path, mode in files:
            if key not in data:
                if source.optional:
                    continue
                raise PodStartError(
                    "CreateContainerConfigError",
                    f"couldn't find key {key} in Secret {source.secret_name}",
                )
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(data[key])
            target.chmod((default_mode if mode is None else mode) & 0o777)

    def _env_value(self, core: Any, pod: Any, var: Any, pod_env: dict[str, str]) -> str | None:
        if var.value_from is None:
            return expand(var.value or "", pod_env)
        src = var.value_from
        if src.secret_key_ref is not None:
            ref = src.secret_key_ref
            data = self._secret(core, pod, ref.name, ref.optional)
            return self._key(data, ref, "Secret")
        if src.config_map_key_ref is not None:
            ref = src.config_map_key_ref
            data = self._config_map(core, pod, ref.name, ref.optional)
            return self._key(data, ref, "ConfigMap")
        if src.field_ref is not None:
            path = src.field_ref.field_path
            fields = {
                "metadata.name": pod.metadata.name,
                "metadata.namespace": pod.metadata.namespace,
                "metadata.uid": pod.metadata.uid,
                "spec.serviceAccountName": pod.spec.service_account_name or "default",
                "spec.nodeName": pod.spec.node_name or "",
                "status.podIP": "127.0.0.1",
                "status.hostIP": "127.0.0.1",
            }
            if path.startswith("metadata.labels['"):
                return str((pod.metadata.labels or {}).get(path[17:-2], ""))
            if path.startswith("metadata.annotations['"):
                return str((pod.metadata.annotations or {}).get(path[22:-2], ""))
            if path in fields:
                return str(fields[path])
            raise PodStartError("CreateContainerConfigError", f"unsupported fieldRef {path}")
        return None

    @staticmethod
    def _key(data: dict[str, str] | None, ref: Any, kind: str) -> str | None:
        if data is None:
            return None  # optional and missing
        if ref.key in data:
            return data[ref.key]
        if ref.optional:
            return None
        raise PodStartError(
            "CreateContainerConfigError", f"couldn't find key {ref.key} in {kind} {ref.name}"
        )

    def _config_map(self, core: Any, pod: Any, name: str, optional: bool | None) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            cm = self._patient(
                lambda: core.read_namespaced_config_map(name, pod.metadata.namespace),
                f"read of ConfigMap {pod.metadata.namespace}/{name}",
            )
        except ApiException as exc:
            if exc.status == 404 and optional:
                return None
            raise PodStartError(
                "CreateContainerConfigError", f'configmap "{name}" not found'
            ) from exc
        data = dict(cm.data or {})
        for key, value in (cm.binary_data or {}).items():
            data[key] = base64.b64decode(value).decode("utf-8", "replace")
        return data

    def _secret(self, core: Any, pod: Any, name: str, optional: bool | None) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            secret = self._patient(
                lambda: core.read_namespaced_secret(name, pod.metadata.namespace),
                f"read of Secret {pod.metadata.namespace}/{name}",
            )
        except ApiException as exc:
            if exc.status == 404 and optional:
                return None
            raise PodStartError("CreateContainerConfigError", f'secret "{name}" not found') from exc
        return {
            k: base64.b64decode(v).decode("utf-8", "replace")
            for k, v in (secret.data or {}).items()
        }

    def _write_kubeconfig(self, core: Any, pod: Any, run_dir: Path) -> Path:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        sa = pod.spec.service_account_name or "default"
        body = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=self.token_seconds,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
                ),
            )
        )
        try:
            resp = self._patient(
                lambda: core.create_namespaced_service_account_token(
                    sa, pod.metadata.namespace, body
                ),
                f"token for ServiceAccount {pod.metadata.namespace}/{sa}",
            )
        except ApiException as exc:
            raise PodStartError(
                "CreateContainerConfigError",
                f"cannot get a token for ServiceAccount {pod.metadata.namespace}/{sa}: "
                f"{exc.status} {exc.reason}",
            ) from exc
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.server, "certificate-authority-data": self._ca_data},
                }
            ],
            "users": [{"name": sa, "user": {"token": resp.status.token}}],
            "contexts": [
                {
                    "name": "pod",
                    "context": {
                        "cluster": "local",
                        "user": sa,
                        "namespace": pod.metadata.namespace,
                    },
                }
            ],
            "current-context": "pod",
        }
        path = run_dir / "kubeconfig"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path

    # -- status -------------------------------------------------------------------------

    def _patient(self, call: Callable[[], Any], what: str) -> Any:
        """`call()`, made again while it fails for a passing reason (the API server or its
        etcd restarting: no connection, 429, 5xx, admission not ready yet), as a kubelet
        keeps trying, until it answers, fails for good or the runner stops (then the last
        error is raised)."""
        pause = RETRY_PAUSE_FIRST
        failures = 0
        while True:
            try:
                return call()
            except Exception as exc:
                if not _passing(exc):
                    raise
                failures += 1
                # The first failure and every tenth: enough to see an outage in the log.
                if failures % 10 == 1:
                    log.info("pod runner: %s failed (%s), trying again", what, _short(exc))
                if self._stopping.wait(pause):
                    raise
            pause = min(pause * 2, RETRY_PAUSE_MAX)

    def _retrying(self, call: Callable[[], Any], what: str) -> None:
        """Make an API call, tried again while the API server is away (restarted, or its
        etcd is), as a kubelet keeps trying: a pod whose phase is lost would stay Running,
        its Job never ending. Gone or conflicting objects end it quietly."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._patient(call, what)
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise
            log.info("pod runner: %s not done: %s", what, exc.reason)

    # -- helpers for tests --------------------------------------------------------------

    def wait_for(self, namespace: str, name: str, timeout: float = 60.0) -> RunRecord:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rec = self.record(namespace, name)
            if rec is not None:
                return rec
            time.sleep(0.1)
        raise TimeoutError(f"pod runner never saw {namespace}/{name}")


def _backoff(attempts: int) -> float:
    return min(MAX_BACKOFF_SECONDS, float(attempts))


def _passing(exc: BaseException) -> bool:
    """Whether an API call's failure may pass: no answer (connection refused or reset, a
    timeout), 429, a 5xx, or admission that is not ready yet after a restart."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, urllib3.exceptions.HTTPError):
        return True
    if not isinstance(exc, ApiException):
        return False
    status = exc.status or 0
    not_ready = status == 403 and NOT_READY in f"{exc.reason} {exc.body}"
    return status in (0, 429) or status >= 500 or not_ready


def _short(exc: BaseException) -> str:
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return type(exc).__name__


class _PodStatus:
    """Writes one pod's status as its kubelet would: phase, conditions and the first
    container's state, `restartCount` and last state."""

    def __init__(
        self, runner: PodRunner, core: Any, pod: Any, rec: RunRecord, started: str
    ) -> None:
        self.runner = runner
        self.core = core
        self.pod = pod
        self.rec = rec
        self.started = started
        self.run_started = started
        self.last_state: dict[str, Any] | None = None

    def running(self) -> None:
        self._patch("Running", {"running": {"startedAt": self.run_started}})

    def waiting(self, reason: str, message: str) -> None:
        self._patch("Pending", {"waiting": {"reason": reason, "message": message}})

    def back_off(self, why: str, code: int, message: str) -> None:
        self.last_state = {"terminated": self._terminated(why, code, message)}
        waiting = {
            "reason": "CrashLoopBackOff",
            "message": f"back-off {_backoff(self.rec.restarts):.0f}s restarting the container",
        }
        self._patch("Running", {"waiting": waiting})

    def finish(
        self,
        phase: str,
        why: str,
        code: int,
        *,
        reason: str | None = None,
        message: str | None = None,
        termination_message: str = "",
    ) -> None:
        state = {"terminated": self._terminated(why, code, termination_message)}
        self._patch(phase, state, reason=reason, message=message)

    def _terminated(self, why: str, code: int, message: str) -> dict[str, Any]:
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": why,
            "startedAt": self.run_started,
            "finishedAt": _now(),
            "containerID": f"goalkeeper://{self.pod.metadata.uid}",
        }
        if message:
            terminated["message"] = message
        return terminated

    def _patch(
        self,
        phase: str,
        state: dict[str, Any],
        *,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        now = _now()
        pod = self.pod
        container = pod.spec.containers[0]
        ready = "running" in state
        cstatus: dict[str, Any] = {
            "name": container.name,
            "image": container.image or "",
            "imageID": "",
            "containerID": f"goalkeeper://{pod.metadata.uid}",
            "ready": ready,
            "started": ready,
            "restartCount": self.rec.restarts,
            "state": state,
        }
        if self.last_state is not None:
            cstatus["lastState"] = self.last_state

        def cond(kind: str, ok: bool, why: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
            if why and not ok:
                c["reason"] = why
            return c

        not_ready = "PodCompleted" if phase in _TERMINAL else "ContainersNotReady"
        status: dict[str, Any] = {
            "phase": phase,
            "startTime": self.started,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "conditions": [
                cond("PodReadyToStartContainers", phase == "Running"),
                cond("Initialized", True),
                cond("Ready", ready, not_ready),
                cond("ContainersReady", ready, not_ready),
                cond("PodScheduled", True),
            ],
            "containerStatuses": [cstatus],
        }
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        self.runner._retrying(
            lambda: self.core.patch_namespaced_pod_status(
                pod.metadata.name, pod.metadata.namespace, {"status": status}
            ),
            f"status of {pod.metadata.namespace}/{pod.metadata.name}",
        )


def local_path(value: str, mounts: dict[str, Path]) -> str:
    """`value` with a container path under one of `mounts` rewritten to its local folder."""
    for mount_path, folder in mounts.items():
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return str(folder) + value[len(mount_path) :]
    return value


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """True once `pid` has exited (tests use it to check a pod's process was killed)."""
    return procs.wait_pid_gone(pid, timeout)
