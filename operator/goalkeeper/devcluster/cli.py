"""`goalkeeper cluster up|down|kubeconfig`: a detached local control plane for development.

`up` starts `python -m goalkeeper.devcluster.daemon` in its own session; the daemon runs
the control plane (and, unless --no-pod-runner, a pod runner for step pods) until `down`
sends it SIGTERM. State lives in `~/.cache/goalkeeper/cluster/state.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from goalkeeper.devcluster import binaries, procs


def state_dir() -> Path:
    return binaries.cache_root() / "cluster"


def state_file(folder: Path | None = None) -> Path:
    return (folder or state_dir()) / "state.json"


def read_state(folder: Path | None = None) -> dict[str, Any] | None:
    path = state_file(folder)
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state


def _daemon_alive(state: dict[str, Any]) -> bool:
    pid = int(state.get("pid", 0))
    if pid <= 0 or not procs.pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"goalkeeper.devcluster.daemon" in cmdline


def _up(args: argparse.Namespace) -> int:
    folder = Path(args.state_dir) if args.state_dir else state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    state = read_state(folder)
    if state and _daemon_alive(state):
        print(state["kubeconfig"])
        return 0
    state_file(folder).unlink(missing_ok=True)
    # Build in the foreground so the user sees progress and failures.
    binaries.ensure_binaries()
    log = folder / "daemon.log"
    argv = [sys.executable, "-m", "goalkeeper.devcluster.daemon", "--state-dir", str(folder)]
    if args.no_pod_runner:
        argv.append("--no-pod-runner")
    if args.selector is not None:
        argv += ["--selector", args.selector]
    with open(log, "ab") as out:
        daemon = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives this command and its terminal
        )
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        state = read_state(folder)
        if state and state.get("ready"):
            print(state["kubeconfig"])
            return 0
        if daemon.poll() is not None:
            print(
                f"control plane failed to start (exit {daemon.returncode}); log {log}:",
                file=sys.stderr,
            )
            print(procs.log_tail(log), file=sys.stderr)
            return 1
        time.sleep(0.25)
    print(f"control plane not ready after {args.timeout} s; see {log}", file=sys.stderr)
    os.killpg(daemon.pid, signal.SIGTERM)
    return 1


def _down(args: argparse.Namespace) -> int:
    folder = Path(args.state_dir) if args.state_dir else state_dir()
    state = read_state(folder)
    if not state:
        print("no local cluster running", file=sys.stderr)
        return 0
    pid = int(state.get("pid", 0))
    if _daemon_alive(state):
        os.kill(pid, signal.SIGTERM)
        if not procs.wait_pid_gone(pid, 40):
            os.kill(pid, signal.SIGKILL)
            procs.wait_pid_gone(pid, 10)
    # The components die with the daemon (PDEATHSIG); make sure of it.
    leftovers = []
    for name, cpid in (state.get("pids") or {}).items():
        if not procs.wait_pid_gone(int(cpid), 10):
            try:
                os.kill(int(cpid), signal.SIGKILL)
            except ProcessLookupError:
                continue
            if not procs.wait_pid_gone(int(cpid), 5):
                leftovers.append(f"{name}={cpid}")
    state_file(folder).unlink(missing_ok=True)
    if leftovers:
        print(f"could not stop: {', '.join(leftovers)}", file=sys.stderr)
        return 1
    print("local cluster stopped")
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    folder = Path(args.state_dir) if args.state_dir else state_dir()
    state = read_state(folder)
    if not state or not _daemon_alive(state):
        print("no local cluster running; run `goalkeeper cluster up`", file=sys.stderr)
        return 1
    print(state["kubeconfig"])
    return 0


def register(subparsers: Any) -> None:
    """Add `cluster up|down|kubeconfig` to the `goalkeeper` command line."""
    cluster = subparsers.add_parser("cluster", help="a local control plane for development")
    cluster.add_argument("--state-dir", default=None, help=f"default: {state_dir()}")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)

    up = sub.add_parser("up", help="start a detached local control plane")
    up.add_argument("--no-pod-runner", action="store_true", help="do not run step pods")
    up.add_argument(
        "--selector",
        default=None,
        help="label selector of the pods to run (default goalkeeper.dev/step; '' for all)",
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for ready")
    up.set_defaults(func=_up)

    down = sub.add_parser("down", help="stop the local control plane")
    down.set_defaults(func=_down)

    kc = sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    kc.set_defaults(func=_kubeconfig)
