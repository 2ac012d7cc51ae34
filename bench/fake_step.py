"""A stand-in for the step pods: it answers every observe step the way `goalkeeper-step`
does after a successful observation, and every task reading with the standard reading of
`TASK`, with no model and no kubelet.

When a MonitorStep appears it waits for the Pod the Job controller makes for the step's
Job, then writes the MonitorStep's /status as that pod would (the step runtime's own
`running_status` and `final_status`, naming the pod): Running, then Succeeded with a
`wait` observation. It writes as the cluster admin: the admission policy on step results
binds ServiceAccount writers only, and the operator still checks that the pod named is
its Job's. While held, it marks steps Running and keeps their results until released.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tests.support.observations import extraction, observation_dict

from bench.harness import Watch, new_api
from goalkeeper.controller.manifests import GROUP, LABEL_STEP, VERSION
from goalkeeper.core.models import StepPod, StepUsage
from goalkeeper.step.agent import StepOutcome
from goalkeeper.step.cli import final_status, running_status

FINISH = "finish"
START = "start"


def _now() -> datetime:
    return datetime.now(UTC)


def result_status(pod: StepPod, started: datetime, *, reading: bool = False) -> dict[str, Any]:
    """What a step pod writes after a successful observation that routes to `wait`, or
    after reading the task (`reading`)."""
    result = extraction() if reading else observation_dict("wait")
    return final_status(StepOutcome(result, StepUsage()), started, _now(), pod)


class FakeStep:
    def __init__(self, kubeconfig: Path, namespace: str, *, writers: int = 4) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self._lock = threading.Lock()
        # Results being written: `hold` returns once none is, so none lands after it.
        self._writing = 0
        self._written = threading.Condition(self._lock)
        self._holding = False
        self._steps: dict[str, dict[str, Any]] = {}  # name -> the MonitorStep as first seen
        self._pods: dict[str, StepPod] = {}  # step name -> the pod of its Job
        self._begun: set[str] = set()
        self._readings: set[str] = set()  # extract steps: answered, never counted as checks
        self._held: list[tuple[str, datetime]] = []
        self._work: queue.Queue[tuple[str, str, datetime] | None] = queue.Queue()
        self.answered: Counter[str] = Counter()  # monitor -> results written
        self.launches: defaultdict[tuple[str, int], set[str]] = defaultdict(set)
        self.errors: list[str] = []
        self._watches = [
            Watch(kubeconfig, "monitorsteps", namespace, self._on_step),
            Watch(kubeconfig, "pods", namespace, self._on_pod, label_selector=LABEL_STEP),
        ]
        self._writers = [
            threading.Thread(target=self._write_loop, name=f"fake-step-{i}", daemon=True)
            for i in range(writers)
        ]

    # --- control ---

    def __enter__(self) -> FakeStep:
        for writer in self._writers:
            writer.start()
        for watch in self._watches:
            watch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for watch in self._watches:
            watch.stop()
        for _ in self._writers:
            self._work.put(None)
        for writer in self._writers:
            writer.join(15)

    def hold(self) -> None:
        """From now on, observe steps are marked Running and their results kept back (a
        reading of the task is still answered); returns once no result is being written."""
        with self._lock:
            self._holding = True
            self._written.wait_for(lambda: self._writing == 0, timeout=60)

    def release(self) -> None:
        """Write every result kept back, and answer new steps at once again."""
        with self._lock:
            self._holding = False
            held, self._held = self._held, []
        for name, started in held:
            self._work.put((FINISH, name, started))

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def written(self) -> int:
        with self._lock:
            return sum(self.answered.values())

    def sample_step(self) -> dict[str, Any]:
        """A MonitorStep as the operator made it, without its identity and owner."""
        with self._lock:
            first = copy.deepcopy(next(iter(self._steps.values())))
        meta = first["metadata"]
        first["metadata"] = {"name": meta["name"], "labels": meta.get("labels") or {}}
        first.pop("status", None)
        return first

    # --- what the watches see ---

    def _on_step(self, kind: str, step: dict[str, Any]) -> None:
        name = step["metadata"]["name"]
        if kind == "DELETED":
            return
        with self._lock:
            if name in self._steps:
                return
            self._steps[name] = step
            spec = step["spec"]
            if spec["kind"] == "extract":
                self._readings.add(name)
                self._ready(name)
                return
            self.launches[spec["monitor"], int(spec["check"])].add(name)
            if spec["kind"] != "observe":
                self.errors.append(f"{name}: a {spec['kind']} step; only observe is expected")
                return
            self._ready(name)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        step = (meta.get("labels") or {}).get(LABEL_STEP)
        if kind == "DELETED" or step is None:
            return
        with self._lock:
            if step not in self._pods:
                self._pods[step] = StepPod(name=meta["name"], uid=meta["uid"])
                self._ready(step)

    def _ready(self, name: str) -> None:
        """Called under the lock: start a step once both it and its pod are known."""
        if name in self._steps and name in self._pods and name not in self._begun:
            self._begun.add(name)
            self._work.put((START, name, _now()))

    # --- writing results ---

    def _write_loop(self) -> None:
        custom = client.CustomObjectsApi(new_api(self.kubeconfig))
        while (item := self._work.get()) is not None:
            stage, name, started = item
            with self._lock:
                pod = self._pods[name]
                monitor = self._steps[name]["spec"]["monitor"]
                reading = name in self._readings
            try:
                if stage == START:
                    self._patch(custom, name, running_status(started, pod))
                with self._lock:
                    # A reading of the task is never held: the check it leads to is.
                    if stage == START and self._holding and not reading:
                        self._held.append((name, started))
                        continue
                    self._writing += 1
                try:
                    self._patch(custom, name, result_status(pod, started, reading=reading))
                    if not reading:
                        with self._lock:
                            self.answered[monitor] += 1
                finally:
                    with self._lock:
                        self._writing -= 1
                        self._written.notify_all()
            except ApiException as error:
                with self._lock:
                    self.errors.append(
                        f"{name}: status write refused: {error.status} {error.reason}"
                    )

    def _patch(self, custom: Any, name: str, status: dict[str, Any]) -> None:
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            "monitorsteps",
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )
