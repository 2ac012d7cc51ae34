"""A control plane of the suite's own whose kube-apiserver and etcd can be stopped and
started again in place: same flags, ports, certificates and etcd data directory.

The suite does not restart the session control plane: other test folders share it.
"""

from __future__ import annotations

import contextlib
import signal
import ssl
import time

from goalkeeper.devcluster import ControlPlane, procs
from goalkeeper.devcluster.controlplane import ControlPlaneError


class RestartableControlPlane(ControlPlane):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.argv: dict[str, list[str]] = {}
        self.restarts: list[tuple[str, float]] = []  # (component, seconds down)

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.argv[name] = list(argv)
        super()._spawn(name, argv)

    def restart(self, name: str, *, down: float = 0.0, hard: bool = True) -> float:
        """Stop one component (SIGKILL when `hard`, else SIGTERM), wait `down` seconds, start
        it again with the same argv, and wait until the API server answers /readyz again.
        Returns how long the API was not ready."""
        begin = time.monotonic()
        self.halt(name, hard=hard)
        time.sleep(down)
        self.resume(name)
        took = time.monotonic() - begin
        self.restarts.append((name, took))
        return took

    def halt(self, name: str, *, hard: bool = True) -> None:
        """Stop one component (SIGKILL when `hard`, else SIGTERM) until `resume(name)`."""
        proc = self.processes[name]
        if hard:
            procs.kill_group(proc, signal.SIGKILL)
        procs.terminate(proc, grace=10.0)

    def resume(self, name: str) -> None:
        """Start a halted component again with the same argv, and wait until the API server
        answers /readyz again."""
        assert self.dir is not None
        # Appends to the component's log, so the whole history stays in one file.
        self.processes[name] = procs.spawn(self.argv[name], log=self.logs[name], cwd=self.dir)
        self.wait_api_ready(timeout=self.ready_timeout)

    def wait_api_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            self._check_alive()
            with contextlib.suppress(OSError, ssl.SSLError):
                status, body = self._get("/readyz", timeout=2.0)
                if status == 200:
                    return
                last = f"HTTP {status}: {body.decode(errors='replace')[-500:]}"
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-apiserver not ready {timeout:.0f} s after a restart ({last}); "
                    f"log tail:\n{procs.log_tail(self.logs['kube-apiserver'])}"
                )
            time.sleep(0.2)
