"""`goalkeeper dev`: a whole local setup in the foreground; Ctrl-C stops everything."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

from goalkeeper.controller.run import run_operator
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.devcluster import ControlPlane, PodRunner

log = logging.getLogger("goalkeeper.dev")

ROOT = Path(__file__).resolve().parents[3]
STEP_RBAC = ROOT / "config" / "rbac" / "steps.yaml"


DEV_KEY_HOLDER = "goalkeeper-model"


def run_dev(settings: OperatorSettings, namespace: str = "default") -> int:
    with ControlPlane(crds_dir=ROOT / "crds") as cluster:
        cluster.kubectl("apply", "-n", namespace, "-f", str(STEP_RBAC), check=True)
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
            settings = settings.model_copy(update={"modelApiKeySecret": DEV_KEY_HOLDER})
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        print(f"export PATH={cluster.kubectl_path.parent}:$PATH", flush=True)
        print(
            f"control plane ready in {cluster.startup_seconds:.1f} s; step accounts in "
            f"namespace {namespace}; try: kubectl apply -f examples/monitor.yaml",
            flush=True,
        )
        with PodRunner(cluster.kubeconfig, label_selector=None):
            os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
            asyncio.run(_until_interrupted(settings))
    return 0


async def _until_interrupted(settings: OperatorSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(asyncio.CancelledError):
        await run_operator(settings, stop_flag=stop)
