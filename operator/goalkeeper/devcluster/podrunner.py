"""A tiny test kubelet: runs pods' first container as a local process.

For each new pod matched by the label selector, `PodRunner` runs the first container's
`command` + `args` with the current Python environment (the venv's bin first on PATH; the
image is recorded only), the pod's `env`/`envFrom` resolved (values, Secret and
ConfigMap keys, a few field refs), and `KUBECONFIG` pointing at a kubeconfig holding a
TokenRequest token for the pod's ServiceAccount, bound to the pod. Secret volumes are
written, with their modes, into a per-pod folder removed when the pod ends; a process cannot
be given mounts, so a container path under a mounted Secret volume, in an environment value
or an argument, is rewritten to that folder. Other volumes are ignored. It patches the pod's
status as a kubelet would (Running with Ready conditions, then Succeeded/Failed with the
exit code and the termination message), and kills the process group when the pod is
deleted or its `activeDeadlineSeconds` pass. `KUBERNETES_SERVICE_HOST`/`PORT` are never
set: the pod talks to the loopback apiserver only.

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
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3.exceptions
import yaml

from goalkeeper.devcluster import procs

log = logging.getLogger(__name__)

DEFAULT_SELECTOR = "goalkeeper.dev/step"
TERMINATION_MESSAGE_ENV = "GOALKEEPER_TERMINATION_MESSAGE_PATH"
_MAX_MESSAGE = 4096
# How long a pod's status patch is retried while the API server cannot be reached.
STATUS_RETRY_SECONDS = 120.0
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def log_paths(log_dir: Path, namespace: str, pod: str) -> tuple[Path, Path]:
    """Where a pod's stdout and stderr are kept: by namespace and pod name, so a reader that
    knows the pod (`goalkeeper logs`) finds them."""
    folder = log_dir / namespace
    return folder / f"{pod}.stdout", folder / f"{pod}.stderr"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion (`$$` escapes), unknown references kept as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, value)


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
    stdout: Path | None = None
    stderr: Path | None = None
    done: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""


class PodRunner:
    """Runs matching pods as local processes until `stop()`."""

    def __init__(
        self,
        kubeconfig: Path | str,
        *,
        label_selector: str | None = DEFAULT_SELECTOR,
        namespace: str | None = None,
        log_dir: Path | str | None = None,
        cwd: Path | str | None = None,
        token_seconds: int = 3600,
        extra_env: dict[str, str] | None = None,
        keep_logs: bool = False,
    ) -> None:
        """`log_dir` keeps each pod's stdout/stderr (`<ns>/<pod>.stdout|.stderr`, see
        `log_paths`); without one they go to a temp folder removed by `stop()` unless
        `keep_logs`."""
        self.kubeconfig = Path(kubeconfig)
        self.label_selector = label_selector or None
        self.namespace = namespace
        self._own_dir = Path(tempfile.mkdtemp(prefix="goalkeeper-pods-"))
        self.log_dir = Path(log_dir) if log_dir is not None else self._own_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cwd = Path(cwd) if cwd is not None else None
        self.token_seconds = token_seconds
        self.extra_env = dict(extra_env or {})
        self.keep_logs = keep_logs or log_dir is not None
        self.records: dict[str, RunRecord] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        self._watch_error: BaseException | None = None
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
        self._thread = threading.Thread(target=self._watch_loop, name="pod-runner", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"pod runner did not list pods within {timeout} s")
        if self._watch_error is not None:
            raise RuntimeError("pod runner failed to start") from self._watch_error
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self._stopping.set()
        with self._lock:
            records = list(self.records.values())
        for rec in records:
            rec.cancel_reason = rec.cancel_reason or "RunnerStopped"
            rec.cancel.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for worker in list(self._workers):
            worker.join(timeout)
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
        with self._lock:
            for rec in self.records.values():
                if rec.namespace == namespace and rec.name == name:
                    return rec
        return None

    # -- watching -----------------------------------------------------------------------

    def _api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )

    def _watch_loop(self) -> None:
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        api_client = self._api()
        core: Any = client.CoreV1Api(api_client)
        kwargs: dict[str, Any] = {}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
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
                for pod in listing.items:
                    self._on_pod("ADDED", pod)
                self._ready.set()
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
                        self._on_pod(event["type"], obj)
                        if self._stopping.is_set():
                            w.stop()
                            break
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("pod runner watch error: %s", exc)
                    time.sleep(0.5)
            except Exception as exc:
                if not self._ready.is_set():
                    self._watch_error = exc
                    self._ready.set()
                    return
                log.warning("pod runner watch error: %r", exc)
                time.sleep(0.5)
        api_client.close()

    def _on_pod(self, kind: str, pod: Any) -> None:
        uid = pod.metadata.uid
        with self._lock:
            rec = self.records.get(uid)
        if rec is not None:
            if kind == "DELETED" or pod.metadata.deletion_timestamp is not None:
                rec.cancel_reason = rec.cancel_reason or "Deleted"
                rec.cancel.set()
            return
        if kind == "DELETED" or pod.metadata.deletion_timestamp is not None:
            return
        phase = pod.status.phase if pod.status else None
        if phase not in (None, "Pending") or (pod.status and pod.status.container_statuses):
            return  # already run (by us earlier, or by someone else)
        rec = RunRecord(namespace=pod.metadata.namespace, name=pod.metadata.name, uid=uid)
        with self._lock:
            self.records[uid] = rec
        worker = threading.Thread(
            target=self._run_pod, args=(pod, rec), name=f"pod-{rec.name}", daemon=True
        )
        self._workers.append(worker)
        worker.start()

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
            rec.done.set()
            api_client.close()

    def _run_dir(self, rec: RunRecord) -> Path:
        return self._own_dir / "run" / f"{rec.namespace}_{rec.name}_{rec.uid[:8]}"

    def _run_pod_inner(self, core: Any, pod: Any, rec: RunRecord) -> None:
        container = pod.spec.containers[0]
        rec.image = container.image or ""
        run_dir = self._run_dir(rec)
        run_dir.mkdir(parents=True, exist_ok=True)
        rec.stdout, rec.stderr = log_paths(self.log_dir, rec.namespace, rec.name)
        rec.stdout.parent.mkdir(parents=True, exist_ok=True)
        message_file = run_dir / "termination-log"
        started = _now()

        try:
            mounts = self._mount_volumes(core, pod, container, run_dir / "volumes")
            env = self._environment(core, pod, container, run_dir, message_file, mounts)
            argv = [
                local_path(expand(a, env), mounts)
                for a in (container.command or []) + (container.args or [])
            ]
            if not container.command:
                raise PodStartError(
                    "CreateContainerError",
                    "the pod runner needs an explicit command (images are not run)",
                )
        except PodStartError as exc:
            rec.reason = exc.reason
            self._patch_status(
                core,
                pod,
                "Failed",
                started,
                reason=exc.reason,
                message=exc.message,
                exit_code=128,
                container_reason=exc.reason,
            )
            return
        rec.argv = argv
        cwd = self.cwd or run_dir
        restart_on_failure = pod.spec.restart_policy == "OnFailure"
        deadline = None
        if pod.spec.active_deadline_seconds:
            deadline = time.monotonic() + pod.spec.active_deadline_seconds
        restarts = 0
        while True:
            message_file.write_text("")
            with open(rec.stdout, "ab") as out, open(rec.stderr, "ab") as err:
                try:
                    proc = procs.spawn(argv, stdout=out, stderr=err, env=env, cwd=cwd)
                except OSError as exc:
                    rec.reason = "StartError"
                    self._patch_status(
                        core,
                        pod,
                        "Failed",
                        started,
                        reason="StartError",
                        message=str(exc),
                        exit_code=128,
                        container_reason="StartError",
                    )
                    return
            rec.pid = proc.pid
            self._patch_status(core, pod, "Running", started, restarts=restarts)
            cancelled = self._wait(proc, rec, deadline)
            code = proc.returncode
            if code is None or code < 0:
                code = 128 + (-code if code is not None else signal.SIGKILL)
            rec.exit_code = code
            message = self._termination_message(pod, container, message_file, rec, code)
            if cancelled == "DeadlineExceeded":
                rec.reason = "DeadlineExceeded"
                self._patch_status(
                    core,
                    pod,
                    "Failed",
                    started,
                    reason="DeadlineExceeded",
                    message=(
                        f"Pod was active on the node longer than the specified deadline "
                        f"({pod.spec.active_deadline_seconds} s)"
                    ),
                    exit_code=code,
                    container_reason="Error",
                    restarts=restarts,
                    termination_message=message,
                )
                return
            if cancelled:
                rec.reason = cancelled
                self._patch_status(
                    core,
                    pod,
                    "Failed",
                    started,
                    exit_code=code,
                    container_reason="Error",
                    restarts=restarts,
                    termination_message=message,
                )
                return
            if code != 0 and restart_on_failure and not self._stopping.is_set():
                restarts += 1
                if rec.cancel.wait(min(10.0, float(restarts))):
                    return
                continue
            rec.reason = "Completed" if code == 0 else "Error"
            self._patch_status(
                core,
                pod,
                "Succeeded" if code == 0 else "Failed",
                started,
                exit_code=code,
                container_reason=rec.reason,
                restarts=restarts,
                termination_message=message,
            )
            return

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
                procs.terminate(proc, grace=2.0)
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
            cm = core.read_namespaced_config_map(name, pod.metadata.namespace)
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
            secret = core.read_namespaced_secret(name, pod.metadata.namespace)
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
            resp = core.create_namespaced_service_account_token(sa, pod.metadata.namespace, body)
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

    def _patch_status(
        self,
        core: Any,
        pod: Any,
        phase: str,
        started: str,
        *,
        reason: str | None = None,
        message: str | None = None,
        exit_code: int | None = None,
        container_reason: str | None = None,
        restarts: int = 0,
        termination_message: str = "",
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        now = _now()
        container = pod.spec.containers[0]
        running = phase == "Running"
        cstatus: dict[str, Any] = {
            "name": container.name,
            "image": container.image or "",
            "imageID": "",
            "containerID": f"goalkeeper://{pod.metadata.uid}",
            "ready": running,
            "started": running,
            "restartCount": restarts,
        }
        if running:
            cstatus["state"] = {"running": {"startedAt": started}}
        else:
            terminated: dict[str, Any] = {
                "exitCode": exit_code if exit_code is not None else 1,
                "reason": container_reason or ("Completed" if exit_code == 0 else "Error"),
                "startedAt": started,
                "finishedAt": now,
                "containerID": f"goalkeeper://{pod.metadata.uid}",
            }
            if termination_message:
                terminated["message"] = termination_message
            cstatus["state"] = {"terminated": terminated}

        def cond(kind: str, ok: bool, why: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
            if why:
                c["reason"] = why
            return c

        done_reason = None if running else "PodCompleted"
        status: dict[str, Any] = {
            "phase": phase,
            "startTime": started,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "conditions": [
                cond("PodReadyToStartContainers", running),
                cond("Initialized", True),
                cond("Ready", running, done_reason),
                cond("ContainersReady", running, done_reason),
                cond("PodScheduled", True),
            ],
            "containerStatuses": [cstatus],
        }
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        # As a kubelet does, keep trying while the API server is away (restarted, or its
        # etcd is): a pod whose phase is lost would stay Running, its Job never ending.
        deadline = time.monotonic() + STATUS_RETRY_SECONDS
        pause = 0.2
        while True:
            try:
                core.patch_namespaced_pod_status(
                    pod.metadata.name, pod.metadata.namespace, {"status": status}
                )
                return
            except ApiException as exc:
                if exc.status in (404, 409, 422):
                    log.info(
                        "pod runner: status of %s/%s not patched: %s",
                        pod.metadata.namespace,
                        pod.metadata.name,
                        exc.reason,
                    )
                    return
                if not (exc.status in (0, 429) or exc.status >= 500) or time.monotonic() > deadline:
                    raise
            except urllib3.exceptions.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    # -- helpers for tests --------------------------------------------------------------

    def wait_for(self, namespace: str, name: str, timeout: float = 60.0) -> RunRecord:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rec = self.record(namespace, name)
            if rec is not None:
                return rec
            time.sleep(0.1)
        raise TimeoutError(f"pod runner never saw {namespace}/{name}")


def local_path(value: str, mounts: dict[str, Path]) -> str:
    """`value` with a container path under one of `mounts` rewritten to its local folder."""
    for mount_path, folder in mounts.items():
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return str(folder) + value[len(mount_path) :]
    return value


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """True once `pid` has exited (tests use it to check a pod's process was killed)."""
    return procs.wait_pid_gone(pid, timeout)
