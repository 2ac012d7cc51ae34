"""The fault schedule and the hands that carry it out: operator kills, kube-apiserver and
etcd restarts, step processes killed mid-run and step Jobs deleted by hand.

The schedule is drawn from the seed before the run; only what each fault hits (which
step is running at that moment) depends on timing.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from goalkeeper.devcluster import PodRunner, procs
from tests.e2e.harness import GROUP, OperatorProcess
from tests.faults.cluster import RestartableControlPlane

STEP_NAME = re.compile(r"^(fleet-\d+-\d+)-\d+-(observe|act|repair)-[a-z0-9]{5}")


@dataclass(frozen=True)
class Budget:
    """How many of each fault one round injects."""

    kill: int = 22
    apiserver: int = 2
    etcd: int = 2
    step_kill: int = 6
    job_delete: int = 3


def schedule(rng: random.Random, budget: Budget, window: float) -> list[tuple[float, str]]:
    """Each kind's faults spread over the window, one in each equal slice, at a random
    moment inside it."""
    moments = []
    for kind, n in vars(budget).items():
        moments.extend(((i + rng.random()) * window / n, kind) for i in range(n))
    return sorted(moments)


@dataclass
class Chaos:
    rng: random.Random
    plane: RestartableControlPlane
    operator: OperatorProcess
    runner: PodRunner
    api: Any
    namespace: str
    done: Counter[str] = field(default_factory=Counter)
    # Steps a fault hit directly: their results may legitimately be discarded.
    faulted_steps: set[str] = field(default_factory=set)
    # Monitors whose step a fault hit: at most one each, so that no monitor's observe step
    # fails more often in a row than the engine's retry budget allows by design.
    faulted_monitors: set[str] = field(default_factory=set)
    self_exits: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def run(self, moments: list[tuple[float, str]]) -> None:
        begin = time.monotonic()
        for at, kind in moments:
            # Waiting for the fault's moment, keeping the operator up meanwhile.
            while (left := begin + at - time.monotonic()) > 0:
                self.watch_operator()
                time.sleep(min(0.5, left))
            hit = getattr(self, kind)()
            self.log.append(f"{time.monotonic() - begin:6.1f}s {kind} {hit or ''}".rstrip())

    def watch_operator(self) -> None:
        """An operator that exits by itself is a finding; start it again and note it."""
        proc = self.operator.proc
        if proc is not None and proc.poll() is not None:
            self.self_exits.append(
                f"operator start {self.operator.starts} exited {proc.returncode}"
            )
            self.operator.start()

    # --- the faults ---------------------------------------------------------------------

    def kill(self) -> None:
        self.operator.kill()
        self.done["kill"] += 1
        time.sleep(self.rng.uniform(0, 1.5))  # down for a moment, like a rescheduled pod
        self.operator.start()

    def apiserver(self) -> None:
        self.plane.restart(
            "kube-apiserver", down=self.rng.uniform(0.2, 2.0), hard=self.rng.random() < 0.5
        )
        self.done["apiserver"] += 1

    def etcd(self) -> None:
        self.plane.restart("etcd", down=self.rng.uniform(0.2, 2.0), hard=self.rng.random() < 0.5)
        self.done["etcd"] += 1

    def step_kill(self) -> str | None:
        pick = self.rng.random()  # drawn whatever is running, so later draws keep their seed
        running = []
        for record in self._records():
            found = STEP_NAME.match(record.name)
            if found is None or found.group(1) in self.faulted_monitors:
                continue
            if record.pid is not None and not record.done.is_set() and procs.pid_alive(record.pid):
                running.append((record, found.group(1)))
        if not running:
            return None
        record, monitor = running[int(pick * len(running))]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        self.faulted_monitors.add(monitor)
        self.faulted_steps.add(record.name.rsplit("-", 1)[0])  # the pod's Job, the step
        self.done["step_kill"] += 1
        return record.name

    def job_delete(self) -> str | None:
        pick = self.rng.random()
        batch = client.BatchV1Api(self.api)
        try:
            jobs = batch.list_namespaced_job(self.namespace, label_selector=f"{GROUP}/step").items
        except ApiException:
            return None
        open_jobs = []
        for job in jobs:
            found = STEP_NAME.match(job.metadata.name)
            finished = any(
                c.status == "True" and c.type in ("Complete", "Failed")
                for c in (job.status.conditions or [])
            )
            if found and not finished and found.group(1) not in self.faulted_monitors:
                open_jobs.append((job.metadata.name, found.group(1)))
        if not open_jobs:
            return None
        name, monitor = open_jobs[int(pick * len(open_jobs))]
        try:
            batch.delete_namespaced_job(name, self.namespace, propagation_policy="Background")
        except ApiException as error:
            if error.status != 404:
                raise
            return None
        self.faulted_monitors.add(monitor)
        self.faulted_steps.add(name)
        self.done["job_delete"] += 1
        return name

    def _records(self) -> list[Any]:
        while True:
            with contextlib.suppress(RuntimeError):  # the runner adds records meanwhile
                return list(self.runner.records.values())
