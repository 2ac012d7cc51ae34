"""The step reads the objects its task, stop rule and action name, itself.

Before the first model request the observe and act steps read them and show their state
lines first, and a named ConfigMap as `k8s_get` shows it, fenced (a fact sheet: fewer tool
round trips for the model); after the model answered,
the observe step reads them again and returns them with the observation, as facts the
operator holds the observation's claims against (core/facts.py). Names are found in the
text as Kubernetes spells them; objects of the kinds in `FactKind` are listed once per kind
and ConfigMaps are listed once per kind in the monitor's namespace, so a read costs six
requests however long the task is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from goalkeeper.core.facts import action_names, names_in, synced_by
from goalkeeper.core.models import FACTS_MAX, FactKind, NamedIn, ObjectFacts
from goalkeeper.step.render import state_line
from goalkeeper.step.tools import Kube, job_end

API_VERSIONS: dict[str, str] = {
    FactKind.Job: "batch/v1",
    FactKind.CronJob: "batch/v1",
    FactKind.Deployment: "apps/v1",
    FactKind.StatefulSet: "apps/v1",
    FactKind.DaemonSet: "apps/v1",
    "ConfigMap": "v1",
}
# ConfigMaps shown whole in a fact sheet; more are left to the model's own reads.
CONFIG_MAPS_SHOWN = 3
# A namespace with more objects of one kind than this is read in part.
LIST_LIMIT = 500


def named(
    task: str, stop_when: str, mutation_set: Iterable[str], namespace: str
) -> dict[tuple[FactKind | None, str], list[NamedIn]]:
    """Where each name appears: by the stop rule, the task (any fact kind, key kind None)
    and the action's mutation set (its own kind)."""
    found: dict[tuple[FactKind | None, str], list[NamedIn]] = {}
    for where, text in ((NamedIn.stopWhen, stop_when), (NamedIn.task, task)):
        for name in names_in(text):
            found.setdefault((None, name), []).append(where)
    for kind, name in action_names(mutation_set, namespace):
        found.setdefault((kind, name), []).append(NamedIn.action)
    return found


def read(
    kube: Kube | None,
    namespace: str,
    *,
    task: str,
    stop_when: str,
    mutation_set: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The named objects as the API server has them now (each with its `namedIn`), stop
    rule's first; a kind the step may not list is left out."""
    if kube is None:
        return []
    from goalkeeper.step.kube import KubeError

    wanted = named(task, stop_when, mutation_set, namespace)
    found: list[dict[str, Any]] = []
    for kind, api_version in API_VERSIONS.items():
        try:
            listing = kube.list(api_version, str(kind), namespace, limit=LIST_LIMIT)
        except (KubeError, OSError):  # a kind this identity may not read: no facts of it
            continue
        for item in (listing or {}).get("items") or []:
            name = str((item.get("metadata") or {}).get("name") or "")
            where = wanted.get((None, name), [])
            if isinstance(kind, FactKind):
                where = where + wanted.get((kind, name), [])
            if where:
                found.append({**item, "kind": str(kind), "namedIn": sorted(set(where))})
    order = {NamedIn.stopWhen: 0, NamedIn.action: 1, NamedIn.task: 2}
    found.sort(key=lambda item: min(order[w] for w in item["namedIn"]))
    found = found[:FACTS_MAX]
    _mark_stale_config(kube, namespace, found)
    return found


_WORKLOAD_KINDS = (FactKind.Deployment, FactKind.StatefulSet, FactKind.DaemonSet)


def _mark_stale_config(kube: Kube, namespace: str, found: list[dict[str, Any]]) -> None:
    """Give each named workload `staleConfig`: the named ConfigMaps its pods read that were
    written after its oldest running pod started (a pod reads them when it starts, so it
    runs their earlier data), and `freshConfig`: those written before it. One pod listing
    per such workload."""
    from goalkeeper.step.kube import KubeError

    written = {
        str(o["metadata"]["name"]): _last_written(o) for o in found if o["kind"] == "ConfigMap"
    }
    if not written:
        return
    for item in found:
        if item["kind"] not in _WORKLOAD_KINDS:
            continue
        reads = _config_maps_read(item) & written.keys()
        labels = ((item.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not reads or not labels:
            continue
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        try:
            pods = kube.list("v1", "Pod", namespace, label_selector=selector, limit=LIST_LIMIT)
        except (KubeError, OSError):
            continue
        started = [
            str((p.get("status") or {}).get("startTime") or "")
            for p in (pods or {}).get("items") or []
            if (p.get("status") or {}).get("phase") == "Running"
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        oldest = min((t for t in started if t), default="")
        if oldest:
            item["staleConfig"] = sorted(n for n in reads if written[n] > oldest)
            item["freshConfig"] = sorted(n for n in reads if n not in item["staleConfig"])


def _last_written(obj: Mapping[str, Any]) -> str:
    """When a ConfigMap's data was last written, as RFC 3339: the newest time of the
    managed fields that hold data (a label or annotation change is no new data)."""
    meta = obj.get("metadata") or {}
    times = [
        str(m.get("time") or "")
        for m in meta.get("managedFields") or []
        if {"f:data", "f:binaryData"} & set((m.get("fieldsV1") or {}).keys())
    ]
    return max([*times, str(meta.get("creationTimestamp") or "")])


def _config_maps_read(workload: Mapping[str, Any]) -> set[str]:
    """The ConfigMaps a workload's pods read once, when they start: through env, envFrom and
    volumes mounted with a subPath (a whole volume follows the ConfigMap as it changes)."""
    pod = (((workload.get("spec") or {}).get("template") or {}).get("spec")) or {}
    names: set[str] = set()
    volumes = {
        str(v.get("name")): str((v.get("configMap") or {}).get("name") or "")
        for v in pod.get("volumes") or []
    }
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        for mount in container.get("volumeMounts") or []:
            if mount.get("subPath") or mount.get("subPathExpr"):
                names.add(volumes.get(str(mount.get("name")), ""))
        for source in container.get("envFrom") or []:
            names.add(str((source.get("configMapRef") or {}).get("name") or ""))
        for var in container.get("env") or []:
            ref = (var.get("valueFrom") or {}).get("configMapKeyRef") or {}
            names.add(str(ref.get("name") or ""))
    names.discard("")
    return names


def facts_of(objects: Iterable[Mapping[str, Any]]) -> list[ObjectFacts]:
    """The numbers the operator checks an observation against."""
    return [_facts(obj) for obj in objects if obj.get("kind") in FactKind.__members__]


def _facts(obj: Mapping[str, Any]) -> ObjectFacts:
    kind = FactKind(obj["kind"])
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    numbers: dict[str, Any] = {}
    if kind is FactKind.Job:
        numbers = {
            "suspended": spec.get("suspend") is True,
            "active": _count(status.get("active")),
            "succeeded": _count(status.get("succeeded")),
            "failed": _count(status.get("failed")),
            "ended": job_end(obj),
        }
    elif kind is FactKind.CronJob:
        numbers = {
            "suspended": spec.get("suspend") is True,
            "active": len(status.get("active") or []),
        }
    elif kind is FactKind.DaemonSet:
        numbers = {
            "replicas": _count(status.get("desiredNumberScheduled")),
            "readyReplicas": _count(status.get("numberReady")),
            "availableReplicas": _count(status.get("numberAvailable")),
            "updatedReplicas": _count(status.get("updatedNumberScheduled")),
        }
    else:
        numbers = {
            "replicas": _count(spec.get("replicas", 1)),
            "readyReplicas": _count(status.get("readyReplicas")),
            "availableReplicas": _count(status.get("availableReplicas")),
            "updatedReplicas": _count(status.get("updatedReplicas")),
        }
    for field in ("staleConfig", "freshConfig"):
        if obj.get(field):
            numbers[field] = list(obj[field])
    numbers["syncedBy"] = synced_by(obj)
    return ObjectFacts(kind=kind, name=obj["metadata"]["name"], namedIn=obj["namedIn"], **numbers)


def _config_note(obj: Mapping[str, Any]) -> str:
    stale = [n for n in obj.get("staleConfig") or [] if isinstance(n, str)]
    fresh = [n for n in obj.get("freshConfig") or [] if isinstance(n, str)]
    note = ""
    if stale:
        note += (
            f"; its running pods started before ConfigMap {', '.join(stale)} was last written, "
            "so they run its earlier data"
        )
    if fresh:
        note += (
            f"; its running pods started after ConfigMap {', '.join(fresh)} was last written, "
            "so they run its current data"
        )
    return note


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def sheet(
    objects: Iterable[Mapping[str, Any]], show: Callable[[str, str], str] | None = None
) -> str:
    """One state line per workload, built from numbers and name tokens only (render's
    `state_line`), so it stands outside any fence; then each named ConfigMap as `show(kind,
    name)` renders it (the step's `k8s_get`: redacted, fenced). Empty when nothing was read."""
    objects = list(objects)
    lines = [
        f"- {line}{_config_note(obj)}"
        for obj in objects
        if obj.get("kind") != "ConfigMap" and (line := state_line(dict(obj)))
    ]
    if show is not None:
        maps = [o["metadata"]["name"] for o in objects if o.get("kind") == "ConfigMap"]
        lines += [show("ConfigMap", name) for name in maps[:CONFIG_MAPS_SHOWN]]
    return "\n".join(lines)
