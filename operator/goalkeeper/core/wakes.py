"""Event wakes: which target objects may wake a waiting monitor, and which of their
changes count. Pure: the operator's watches hand in the objects, this says what changed.

A change is material when the object is deleted, or its status conditions (type, status,
reason), phase, ready or succeeded/failed counts change. A new resourceVersion, managed
fields, labels, annotations or a condition's heartbeat alone never wake a monitor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from goalkeeper.core.models import ObjectRef, WatchTarget
from goalkeeper.core.progress import clip

# The kinds a wake may watch, with their API resource: workloads whose status says how
# their work goes. Others are left out of the schedule, which says so.
WAKE_KINDS: dict[tuple[str, str], str] = {
    ("batch/v1", "Job"): "jobs",
    ("batch/v1", "CronJob"): "cronjobs",
    ("apps/v1", "Deployment"): "deployments",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("apps/v1", "DaemonSet"): "daemonsets",
    ("apps/v1", "ReplicaSet"): "replicasets",
    ("v1", "Pod"): "pods",
}
# At most one early wake per monitor in this long, unless the operator sets otherwise.
WAKE_INTERVAL = timedelta(minutes=1)

_COUNTS = (
    "ready",
    "readyReplicas",
    "availableReplicas",
    "updatedReplicas",
    "replicas",
    "succeeded",
    "failed",
    "active",
    "numberReady",
    "numberAvailable",
)

# A deleted object's state.
GONE: tuple[Any, ...] = ("deleted",)


def watch_of(ref: ObjectRef) -> list[WatchTarget]:
    """The watch entry for an object of the Monitor's namespace whose change can wake it;
    none for another namespace or a kind no wake watches."""
    if ref.namespace:
        return []
    api = next((api for api, kind in WAKE_KINDS if kind == ref.kind), None)
    return [] if api is None else [WatchTarget(apiVersion=api, kind=ref.kind, name=ref.name)]


def wakeable(targets: Iterable[WatchTarget]) -> tuple[list[WatchTarget], list[WatchTarget]]:
    """The targets a wake can watch (deduplicated, in order) and those it cannot."""
    kept: list[WatchTarget] = []
    left: list[WatchTarget] = []
    for target in targets:
        into = kept if (target.apiVersion, target.kind) in WAKE_KINDS else left
        if target not in into:
            into.append(target)
    return kept, left


def material_state(obj: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What of an object can wake a monitor; GONE when it does not exist."""
    if obj is None:
        return GONE
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    conditions = status.get("conditions")
    listed = conditions if isinstance(conditions, list) else []
    seen = sorted(
        (str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason", "")))
        for c in listed
        if isinstance(c, Mapping)
    )
    counts = tuple((key, status[key]) for key in _COUNTS if isinstance(status.get(key), int))
    phase = status.get("phase")
    return ("present", str(phase) if isinstance(phase, str) else "", tuple(seen), counts)


def describe_change(before: tuple[Any, ...], after: tuple[Any, ...]) -> str | None:
    """The material change from `before` to `after` in a few words, or None when there is
    none: `deleted`, `Complete`, `phase Succeeded`, `ready 2`, ..."""
    if before == after:
        return None
    if after == GONE:
        return "deleted"
    if before == GONE:
        return "created"
    _, old_phase, old_conditions, old_counts = before
    _, phase, conditions, counts = after
    parts: list[str] = []
    became = sorted({c[0] for c in conditions if c[1] == "True"} - _true(old_conditions))
    parts.extend(became)
    if phase != old_phase and phase:
        parts.append(f"phase {phase}")
    old = dict(old_counts)
    parts.extend(f"{key} {value}" for key, value in counts if old.get(key) != value)
    if not parts:
        parts.append("conditions changed")
    return clip(", ".join(parts), 120)


def _true(conditions: Sequence[tuple[str, str, str]]) -> set[str]:
    return {c[0] for c in conditions if c[1] == "True"}


def wake_text(target: WatchTarget, change: str) -> str:
    """`Job/build: Complete`, as the report and the schedule show it."""
    return clip(f"{target.ref}: {change}", 300)


def schedule_text(
    next_check_at: datetime, watch: Sequence[WatchTarget], left: Sequence[WatchTarget]
) -> str:
    """The schedule in words: "Next check at T, or sooner on a change of Job/build."."""
    text = f"Next check at {next_check_at.isoformat()}"
    if watch:
        text += ", or sooner on a change of " + _refs(watch)
    text += "."
    if left:
        kinds = ", ".join(sorted({kind for _, kind in WAKE_KINDS}))
        text += f" Not watched (only {kinds} can wake a monitor): {_refs(left)}."
    return clip(text, 1000)


def _refs(targets: Sequence[WatchTarget]) -> str:
    refs = [t.ref for t in targets]
    return ", ".join(refs[:-1]) + f" or {refs[-1]}" if len(refs) > 1 else refs[0]
