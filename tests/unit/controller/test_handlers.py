"""The handlers of the operator's own watches of steps and Jobs: the cache kept in step,
and the monitor a finished, failed or deleted one concerns woken, a deletion found by a
list after a gap included (its body names only the object)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from goalkeeper.controller.cache import JOB, STEP, WatchCache
from goalkeeper.controller.handlers import on_job, on_step
from goalkeeper.controller.manifests import ANNOTATION_MONITOR, LABEL_SEQ

NS = "team-a"


class Woken:
    """The work queue's side the handlers call: which monitor's step changed."""

    def __init__(self) -> None:
        self.changed: list[tuple[str, str, int | None]] = []

    def step_changed(self, namespace: str, monitor: str, seq: int | None) -> None:
        self.changed.append((namespace, monitor, seq))


def memo() -> Any:
    return SimpleNamespace(cache=WatchCache(), queue=Woken())


def step(phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "build-3-observe",
            "namespace": NS,
            "uid": "u1",
            "resourceVersion": "5",
        },
        "spec": {"monitor": "build", "kind": "observe", "seq": 3},
        "status": {"phase": phase},
    }


def job(failed: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Failed", "status": "True"}] if failed else []
    return {
        "metadata": {
            "name": "build-3-observe",
            "namespace": NS,
            "uid": "u2",
            "resourceVersion": "6",
            "annotations": {ANNOTATION_MONITOR: "build", "other": "x"},
            "labels": {LABEL_SEQ: "3", "other": "x"},
        },
        "status": {"conditions": conditions},
    }


GONE = {"metadata": {"namespace": NS, "name": "build-3-observe"}}


def test_a_step_wakes_its_monitor_when_it_ends_or_goes_even_unseen() -> None:
    m = memo()
    on_step(m, "LISTED", step("Running"))
    assert m.cache.get(STEP, NS, "build-3-observe") is not None and m.queue.changed == []
    on_step(m, "MODIFIED", step("Succeeded"))
    on_step(m, "DELETED", GONE)  # found by a list after a gap
    assert m.queue.changed == [(NS, "build", 3), (NS, "build", 3)]
    assert m.cache.get(STEP, NS, "build-3-observe") is None


def test_a_job_wakes_its_monitor_when_it_fails_or_goes_even_unseen() -> None:
    m = memo()
    on_job(m, "ADDED", job())
    assert m.queue.changed == []
    on_job(m, "MODIFIED", job(failed=True))
    on_job(m, "DELETED", GONE)
    assert m.queue.changed == [(NS, "build", 3), (NS, "build", 3)]
    assert m.cache.get(JOB, NS, "build-3-observe") is None
    # Nothing it concerns is left to wake: an unknown deletion names no monitor.
    on_job(m, "DELETED", GONE)
    assert len(m.queue.changed) == 2
