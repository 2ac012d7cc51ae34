"""The background process behind `goalkeeper cluster up` (python -m goalkeeper.devcluster.daemon).

Runs a ControlPlane (and a PodRunner) until SIGTERM/SIGINT, then stops and reaps them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import threading
from pathlib import Path

from goalkeeper.devcluster.controlplane import ControlPlane
from goalkeeper.devcluster.podrunner import DEFAULT_SELECTOR, PodRunner


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--no-pod-runner", action="store_true")
    parser.add_argument("--selector", default=DEFAULT_SELECTOR)
    args = parser.parse_args()
    folder = Path(args.state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    state_path = folder / "state.json"

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    runner = None
    with ControlPlane() as cp:
        kubeconfig = folder / "kubeconfig"
        shutil.copyfile(cp.kubeconfig, kubeconfig)
        kubeconfig.chmod(0o600)
        if not args.no_pod_runner:
            runner = PodRunner(
                kubeconfig, label_selector=args.selector or None, log_dir=folder / "pod-logs"
            )
            runner.start()
        state = {
            "pid": os.getpid(),
            "pids": cp.pids(),
            "kubeconfig": str(kubeconfig),
            "server": cp.server,
            "dir": str(cp.dir),
            "logs": {k: str(v) for k, v in cp.logs.items()},
            "startup_seconds": cp.startup_seconds,
            "pod_runner": None
            if runner is None
            else {"selector": args.selector or None, "log_dir": str(runner.log_dir)},
            "ready": True,
        }
        tmp = state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(state_path)
        print(f"control plane ready in {cp.startup_seconds:.1f} s at {cp.server}", flush=True)
        try:
            while not stop.wait(1.0):
                for name, proc in cp.processes.items():
                    if proc.poll() is not None:
                        print(f"{name} exited with {proc.returncode}; stopping", flush=True)
                        stop.set()
        finally:
            if runner is not None:
                runner.stop()
            state_path.unlink(missing_ok=True)
    print("control plane stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
