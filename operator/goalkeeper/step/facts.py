"""The step reads the objects its task, stop rule and action name, itself.

Before the first model request the observe and act steps read them and show their state
lines first, and a named ConfigMap as `k8s_get` shows it, fenced (a fact sheet: fewer tool
round trips for the model); after the model answered,
the observe step reads them again and returns them with the observation, as facts the
operator holds the observation's claims against (core/facts.py). Names are found in the
text as Kubernetes spells them; objects of the kinds in `FactKind` and ConfigMaps are listed
once per kind in the monitor's namespace, and pods once when a workload or Job is named (for
their restarts, waiting reasons and last exit), so a read costs seven requests however long
the task is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from goalkeeper.core.facts import action_names, names_in, synced_by
from goalkeeper.core.goals import pods_said
from goalkeeper.core.models import (
    CONFIG_VALUE_MAX,
    EXIT_MESSAGE_MAX,
    FACTS_MAX,
    KUBELET_REASON_PATTERN,
    FactKind,
    GoalRule,
    LeafKind,
    NamedIn,
    ObjectFacts,
    PodsFacts,
)
from goalkeeper.core.progress import clip
from goalkeeper.core.report import printable
from goalkeeper.step.fence import normalise
from goalkeeper.step.redact import redact_text
from goalkeeper.step.render import state_line
from goalkeeper.step.tools import Kube, job_end

API_VERSIONS: dict[FactKind, str] = {
    FactKind.Job: "batch/v1",
    FactKind.CronJob: "batch/v1",
    FactKind.Deployment: "apps/v1",
    FactKind.StatefulSet: "apps/v1",
    FactKind.DaemonSet: "apps/v1",
    FactKind.ConfigMap: "v1",
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
    jobs: list[dict[str, Any]] = []
    for kind, api_version in API_VERSIONS.items():
        try:
            listing = kube.list(api_version, str(kind), namespace, limit=LIST_LIMIT)
        except (KubeError, OSError):  # a kind this identity may not read: no facts of it
            continue
        items = (listing or {}).get("items") or []
        if kind is FactKind.Job:
            jobs = items
        for item in items:
            name = str((item.get("metadata") or {}).get("name") or "")
            where = wanted.get((None, name), []) + wanted.get((kind, name), [])
            if where:
                found.append({**item, "kind": str(kind), "namedIn": sorted(set(where))})
    order = {NamedIn.stopWhen: 0, NamedIn.action: 1, NamedIn.task: 2}
    found.sort(key=lambda item: min(order[w] for w in item["namedIn"]))
    found = found[:FACTS_MAX]
    for item in found:
        if item["kind"] == FactKind.CronJob:
            item["lastRun"] = _last_run(item, jobs)
    pods = _pods(kube, namespace, found)
    for item in found:
        if item["kind"] in _PODDED_KINDS:
            item["podFacts"] = _pods_facts([p for p in pods if _selects(item, p)])
    _mark_stale_config(found, pods)
    return found


_WORKLOAD_KINDS = (FactKind.Deployment, FactKind.StatefulSet, FactKind.DaemonSet)
_PODDED_KINDS = (*_WORKLOAD_KINDS, FactKind.Job)


def _pods(kube: Kube, namespace: str, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The namespace's pods that are not being deleted, in one listing, when a workload or
    Job was named; none when the step may not list them."""
    from goalkeeper.step.kube import KubeError

    if not any(item["kind"] in _PODDED_KINDS for item in found):
        return []
    try:
        listing = kube.list("v1", "Pod", namespace, limit=LIST_LIMIT)
    except (KubeError, OSError):
        return []
    return [
        p
        for p in (listing or {}).get("items") or []
        if isinstance(p, dict) and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]


def _selects(owner: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The owner's label selector (its matchLabels) takes the pod; an owner with none takes
    nothing."""
    labels = ((owner.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    have = (pod.get("metadata") or {}).get("labels") or {}
    return bool(labels) and all(have.get(k) == v for k, v in labels.items())


def _pods_facts(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """Count, restarts, a waiting reason (CrashLoopBackOff before any other) and the newest
    failed exit of the pods' containers, as their kubelet wrote them."""
    restarts, waiting = 0, []
    exits: list[tuple[str, dict[str, Any]]] = []  # (finishedAt, exit)
    for pod in pods:
        status = pod.get("status") or {}
        containers = [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]
        for c in containers:
            if not isinstance(c, dict):
                continue
            restarts += _count(c.get("restartCount"))
            reason = ((c.get("state") or {}).get("waiting") or {}).get("reason")
            if isinstance(reason, str) and _KUBELET_REASON.fullmatch(reason):
                waiting.append(reason)
            for state in (c.get("state") or {}, c.get("lastState") or {}):
                ended = state.get("terminated") or {}
                code = ended.get("exitCode")
                if isinstance(code, int) and not isinstance(code, bool) and code != 0:
                    exits.append((str(ended.get("finishedAt") or ""), _exit(pod, ended, code)))
    facts: dict[str, Any] = {"count": len(pods), "restarts": restarts}
    started = [str(t) for p in pods if (t := _running_since(p))]
    if started:
        facts["oldestStart"] = min(started)
    if waiting:
        facts["waiting"] = "CrashLoopBackOff" if "CrashLoopBackOff" in waiting else waiting[0]
    if exits:
        facts["lastExit"] = max(exits, key=lambda e: e[0])[1]
    return facts


_KUBELET_REASON = re.compile(KUBELET_REASON_PATTERN)


def _running_since(pod: Mapping[str, Any]) -> str:
    """When a running pod started, as its kubelet wrote it; '' for one that does not run."""
    status = pod.get("status") or {}
    return str(status.get("startTime") or "") if status.get("phase") == "Running" else ""


def _exit(pod: Mapping[str, Any], ended: Mapping[str, Any], code: int) -> dict[str, Any]:
    reason = ended.get("reason")
    message = printable(" ".join(normalise(str(ended.get("message") or "")).split()))
    return {
        "pod": str((pod.get("metadata") or {}).get("name") or ""),
        "exitCode": max(-(2**31), min(code, 2**31 - 1)),
        "reason": reason if isinstance(reason, str) and _KUBELET_REASON.fullmatch(reason) else None,
        "message": clip(redact_text(message), EXIT_MESSAGE_MAX),
    }


def _last_run(cron_job: Mapping[str, Any], jobs: list[dict[str, Any]]) -> str | None:
    """How the newest finished Job the CronJob owns ended; None when none has."""
    name = (cron_job.get("metadata") or {}).get("name")
    ended = [
        (str((job.get("metadata") or {}).get("creationTimestamp") or ""), end)
        for job in jobs
        if any(
            o.get("kind") == "CronJob" and o.get("name") == name
            for o in (job.get("metadata") or {}).get("ownerReferences") or []
            if isinstance(o, dict)
        )
        and (end := job_end(job)) is not None
    ]
    return str(max(ended, key=lambda e: e[0])[1]) if ended else None


def _mark_stale_config(found: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    """Give each named workload `staleConfig`: the named ConfigMaps its pods read that were
    written after its oldest running pod started (a pod reads them when it starts, so it
    runs their earlier data), and `freshConfig`: those written before it."""
    written = {
        str(o["metadata"]["name"]): _last_written(o) for o in found if o["kind"] == "ConfigMap"
    }
    if not written:
        return
    for item in found:
        if item["kind"] not in _WORKLOAD_KINDS:
            continue
        reads = _config_maps_read(item) & written.keys()
        if not reads:
            continue
        oldest = min(
            (t for p in pods if _selects(item, p) and (t := _running_since(p))), default=""
        )
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


def facts_of(
    objects: Iterable[Mapping[str, Any]], goal: GoalRule | None = None
) -> list[ObjectFacts]:
    """The numbers the operator checks an observation against; a ConfigMap only when the
    `goal` names keys of it, with those keys alone, or pods that must start after it."""
    keys: dict[str, set[str]] = {}
    namespace = goal.namespace if goal is not None else ""
    for leaf in goal.leaves() if goal is not None else []:
        ref = leaf.object
        if leaf.kind is LeafKind.configMapKey and ref and ref.namespace == namespace and leaf.key:
            keys.setdefault(ref.name, set()).add(leaf.key)
        if leaf.after is not None and leaf.after.namespace == namespace:
            keys.setdefault(leaf.after.name, set())
    found = []
    for obj in objects:
        if obj.get("kind") == FactKind.ConfigMap:
            name = str(obj["metadata"]["name"])
            if name in keys:
                found.append(_config_map_facts(obj, keys[name]))
        elif obj.get("kind") in FactKind.__members__:
            found.append(_facts(obj))
    return found


def _config_map_facts(obj: Mapping[str, Any], keys: set[str]) -> ObjectFacts:
    data = obj.get("data") or {}
    held = {
        key: value if len(value) <= CONFIG_VALUE_MAX else None
        for key in sorted(keys)
        if isinstance(value := data.get(key), str)
    }
    return ObjectFacts(
        kind=FactKind.ConfigMap,
        name=obj["metadata"]["name"],
        namedIn=obj["namedIn"],
        data=held,
        writtenAt=_last_written(obj) or None,
    )


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
        numbers["rollingOut"] = (
            _unread_spec(obj) or numbers["updatedReplicas"] < (numbers["replicas"])
        )
    else:
        numbers = {
            "replicas": _count(spec.get("replicas", 1)),
            "readyReplicas": _count(status.get("readyReplicas")),
            "availableReplicas": _count(status.get("availableReplicas")),
            "updatedReplicas": _count(status.get("updatedReplicas")),
        }
        wanted = numbers["replicas"]
        numbers["rollingOut"] = (
            _unread_spec(obj)
            or numbers["updatedReplicas"] < wanted
            or _count(status.get("replicas")) > wanted
        )
    for field in ("staleConfig", "freshConfig"):
        if obj.get(field):
            numbers[field] = list(obj[field])
    if kind is FactKind.CronJob and obj.get("lastRun"):
        numbers["lastRun"] = obj["lastRun"]
    if obj.get("podFacts") is not None:
        numbers["pods"] = obj["podFacts"]
    numbers["syncedBy"] = synced_by(obj)
    return ObjectFacts(kind=kind, name=obj["metadata"]["name"], namedIn=obj["namedIn"], **numbers)


def _unread_spec(obj: Mapping[str, Any]) -> bool:
    """Whether the workload's controller has yet to read its newest spec."""
    generation = _count((obj.get("metadata") or {}).get("generation"))
    return _count((obj.get("status") or {}).get("observedGeneration")) < generation


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


def _pods_note(obj: Mapping[str, Any]) -> str:
    pods = obj.get("podFacts")
    return f"; {pods_said(PodsFacts.model_validate(pods))}" if isinstance(pods, dict) else ""


def _exit_message(obj: Mapping[str, Any]) -> str:
    last = (obj.get("podFacts") or {}).get("lastExit") or {}
    return str(last.get("message") or "")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def sheet(
    objects: Iterable[Mapping[str, Any]],
    show: Callable[[str, str], str] | None = None,
    fenced: Callable[[str, str], str] | None = None,
) -> str:
    """One state line per workload, built from numbers and name tokens only (render's
    `state_line`), so it stands outside any fence; under it, with `fenced`, its pods' last
    termination message as `fenced(text, source)` wraps it; then each named ConfigMap as
    `show(kind, name)` renders it (the step's `k8s_get`: redacted, fenced). Empty when
    nothing was read."""
    objects = list(objects)
    lines = []
    for obj in objects:
        line = state_line(dict(obj)) if obj.get("kind") != "ConfigMap" else None
        if not line:
            continue
        lines.append(f"- {line}{_config_note(obj)}{_pods_note(obj)}")
        message = _exit_message(obj)
        if message and fenced is not None:
            name = obj["metadata"]["name"]
            lines.append(fenced(message, f"termination message, pods of {obj['kind']} {name}"))
    if show is not None:
        maps = [o["metadata"]["name"] for o in objects if o.get("kind") == "ConfigMap"]
        lines += [show("ConfigMap", name) for name in maps[:CONFIG_MAPS_SHOWN]]
    return "\n".join(lines)
