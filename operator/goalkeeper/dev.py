"""`goalkeeper dev`: a whole local setup in the foreground; Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.devcluster import ControlPlane, PodRunner

ROOT = Path(__file__).resolve().parents[2]
STEP_RBAC = ROOT / "config" / "rbac" / "steps.yaml"
DEV_KEY_HOLDER = "goalkeeper-model"
STOP_GRACE_SECONDS = 15


def run_dev(settings: OperatorSettings, namespace: str = "default", verbose: bool = False) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ControlPlane(crds_dir=ROOT / "crds") as cluster:
        cluster.kubectl("apply", "-n", namespace, "-f", str(STEP_RBAC), check=True)
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        api_key = os.environ.get("GOALKEEPER_MODEL_API_KEY")
        if api_key and not settings.modelApiKeySecret:
            # The key goes into a Secret the steps reference; it is never put in a Job.
            cluster.kubectl(
                "create",
                "secret",
                "generic",
                DEV_KEY_HOLDER,
                "-n",
                namespace,
                f"--from-literal={settings.modelApiKeySecretKey}={api_key}",
                check=True,
            )
            env["GOALKEEPER_MODEL_API_KEY_SECRET"] = DEV_KEY_HOLDER
        env.pop("GOALKEEPER_MODEL_API_KEY", None)
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        print(f"export PATH={cluster.kubectl_path.parent}:$PATH", flush=True)
        print(
            f"control plane ready in {cluster.startup_seconds:.1f} s; step accounts in "
            f"namespace {namespace}; try: kubectl apply -f examples/monitor.yaml",
            flush=True,
        )
        with PodRunner(cluster.kubeconfig, label_selector=None):
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


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
