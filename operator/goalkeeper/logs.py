"""`goalkeeper logs MONITOR [-n NAMESPACE]`: the log of a monitor's latest step.

The latest step is the monitor's MonitorStep with the highest `spec.seq`; its pod carries
the label `goalkeeper.dev/step=<step name>`. The log comes from the API server (as
`kubectl logs` reads it) when a kubelet serves it; the local pod runner of `goalkeeper dev`
has none, so then it comes from the dev log folder, where the runner keeps every pod's
output by namespace and pod name (`dev_logs_root()`/<session>/<namespace>/<pod>.stdout).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from goalkeeper.controller.manifests import GROUP, LABEL_MONITOR, LABEL_STEP, label_value
from goalkeeper.kubeclient import connect

VERSION = "v1alpha1"
LOG_MAX_BYTES = 4 * 1024 * 1024


def dev_logs_root() -> Path:
    """Where `goalkeeper dev` keeps step logs, one folder per session."""
    override = os.environ.get("GOALKEEPER_DEV_LOGS", "").strip()
    if override:
        return Path(override)
    from goalkeeper.devcluster.binaries import cache_root

    return cache_root() / "dev-logs"


def latest_step(
    custom: Any, namespace: str, monitor: str, seq: int | None = None
) -> dict[str, Any] | None:
    """The monitor's step with the highest sequence number, or the one numbered `seq`."""
    listing = custom.list_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "monitorsteps",
        label_selector=f"{LABEL_MONITOR}={label_value(monitor)}",
    )
    steps = [
        s
        for s in listing.get("items") or []
        if (s.get("spec") or {}).get("monitor") in (None, monitor)
        and (seq is None or (s.get("spec") or {}).get("seq") == seq)
    ]
    return max(steps, key=lambda s: int((s.get("spec") or {}).get("seq") or 0), default=None)


def step_pod(core: Any, namespace: str, step: str) -> str | None:
    """The newest pod of the step's Job, or None while there is none."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_STEP}={step}").items
    if not pods:
        return None
    newest = max(pods, key=lambda p: p.metadata.creation_timestamp)
    return str(newest.metadata.name)


def log_files(root: Path, namespace: str, pod: str) -> list[Path]:
    """The pod's kept stdout and stderr from the newest dev session that has them."""
    from goalkeeper.devcluster.podrunner import log_paths

    if not root.is_dir():
        return []
    sessions = sorted(
        (d for d in root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True
    )
    for session in sessions:
        found = [p for p in log_paths(session, namespace, pod) if p.is_file()]
        if found:
            return found
    return []


def _tail(path: Path) -> str:
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - LOG_MAX_BYTES))
        return handle.read().decode("utf-8", "replace")


def show_logs(
    monitor: str,
    namespace: str | None,
    *,
    seq: int | None = None,
    api_client: Any = None,
    root: Path | None = None,
    dev_logs: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the latest step's log (`seq`: that step's); 1 (saying why) when there is
    none to print. `dev_logs` False: only what the API server gives (a console serving
    other people never reads this machine's files for them)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    out = out or sys.stdout
    err = err or sys.stderr
    connected = connect(namespace, api_client, err)
    if connected is None:
        return 2
    api_client, namespace = connected
    custom: Any = client.CustomObjectsApi(api_client)
    core: Any = client.CoreV1Api(api_client)
    try:
        step = latest_step(custom, namespace, monitor, seq)
    except ApiException as error:
        from goalkeeper.controller.api import server_message

        print(f"goalkeeper: {error.status} {error.reason}: {server_message(error)}", file=err)
        return 1
    if step is None:
        which = f" numbered {seq}" if seq is not None else ""
        print(f"no MonitorStep{which} of monitor {monitor} in namespace {namespace}", file=err)
        return 1
    name = step["metadata"]["name"]
    spec = step.get("spec") or {}
    about = f"step {name} ({spec.get('kind', '?')}, seq {spec.get('seq', '?')})"
    pod = step_pod(core, namespace, name)
    if pod is None:
        print(f"{about} has no pod yet", file=err)
        return 1
    try:
        text = core.read_namespaced_pod_log(pod, namespace, limit_bytes=LOG_MAX_BYTES)
        why = "an empty answer"  # e.g. a pod no kubelet runs
    except ApiException as exc:
        text, why = None, f"{exc.status} {exc.reason}"
    if text:
        print(f"{about}, pod {pod}: from the API server", file=err)
        out.write(text)
        return 0
    if not dev_logs:
        print(f"{about}, pod {pod}: no log from the API server ({why})", file=err)
        return 1
    root = root or dev_logs_root()
    files = log_files(root, namespace, pod)
    if not files:
        print(
            f"{about}, pod {pod}: no log: the API server has none ({why}) and nothing is kept "
            f"for {namespace}/{pod} under {root}",
            file=err,
        )
        return 1
    print(f"{about}, pod {pod}: from {files[0].parent}", file=err)
    for path in files:
        text = _tail(path)
        if text:
            if path.suffix == ".stderr":
                out.write("--- stderr\n")
            out.write(text if text.endswith("\n") else text + "\n")
    return 0


__all__ = ["dev_logs_root", "latest_step", "log_files", "show_logs", "step_pod"]
