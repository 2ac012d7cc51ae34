"""How Kubernetes answers are shown to the model: YAML, list summaries, describe, events.

Pure, no I/O. The input is already redacted; nothing here reads or changes secrets.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import yaml

from goalkeeper.step.redact import LAST_APPLIED

# Object names, keys and reasons as the API server allows them: no spaces, no sentences.
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_POD_PHASES = frozenset({"Pending", "Running", "Succeeded", "Failed", "Unknown"})
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_JOB_CONDITIONS = ("Complete", "Failed", "Suspended", "SuccessCriteriaMet", "FailureTarget")
STATE_LINE_MAX = 300


# Fields the API server defaults in every pod spec and container: at their default value they
# say nothing about the target (a field left out reads as its default).
_POD_SPEC_DEFAULTS: dict[str, Any] = {
    "dnsPolicy": "ClusterFirst",
    "enableServiceLinks": True,
    "preemptionPolicy": "PreemptLowerPriority",
    "priority": 0,
    "schedulerName": "default-scheduler",
    "securityContext": {},
    "terminationGracePeriodSeconds": 30,
}
_CONTAINER_DEFAULTS: dict[str, Any] = {
    "resources": {},
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def strip_noise(obj: Any) -> Any:
    """Drop, in place, what only costs the model tokens: managedFields, the last-applied
    annotation (a copy of the applied spec), a pod template's null creationTimestamp, the
    deprecated serviceAccount alias, and pod-spec and container fields at their defaults.

    Run it after `redact`, which reads the last-applied annotation for secrets first.
    """
    if isinstance(obj, list):
        for item in obj:
            strip_noise(item)
        return obj
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        _strip_metadata(meta)
    if isinstance(obj.get("containers"), list):
        _strip_pod_spec(obj)
    for value in obj.values():
        strip_noise(value)
    return obj


def _strip_metadata(meta: dict[str, Any]) -> None:
    meta.pop("managedFields", None)
    if "creationTimestamp" in meta and meta["creationTimestamp"] is None:
        del meta["creationTimestamp"]
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
        if not annotations:
            del meta["annotations"]


def _strip_pod_spec(spec: dict[str, Any]) -> None:
    _drop_defaults(spec, _POD_SPEC_DEFAULTS)
    if "serviceAccount" in spec and spec["serviceAccount"] == spec.get("serviceAccountName"):
        del spec["serviceAccount"]
    for key in _CONTAINER_LISTS:
        containers = spec.get(key)
        for container in containers if isinstance(containers, list) else []:
            if isinstance(container, dict):
                _drop_defaults(container, _CONTAINER_DEFAULTS)


def _drop_defaults(fields: dict[str, Any], defaults: dict[str, Any]) -> None:
    for key, default in defaults.items():
        value = fields.get(key)
        # Compared with the type too: True == 1 and 0 == False would match across types.
        if key in fields and type(value) is type(default) and value == default:
            del fields[key]


def to_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _age(ts: str | None, now: datetime) -> str:
    if not ts:
        return "?"
    try:
        then = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    seconds = int((now - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _item_state(item: dict[str, Any]) -> str:
    status = item.get("status") or {}
    spec = item.get("spec") or {}
    bits: list[str] = []
    if "replicas" in spec or "readyReplicas" in status:
        bits.append(f"ready={status.get('readyReplicas', 0)}/{spec.get('replicas', '?')}")
        if "updatedReplicas" in status:
            bits.append(f"updated={status['updatedReplicas']}")
    if status.get("phase"):
        bits.append(f"phase={status['phase']}")
    statuses = status.get("containerStatuses") or []
    if statuses:
        ready = sum(1 for c in statuses if c.get("ready"))
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
        bits.append(f"containers={ready}/{len(statuses)} restarts={restarts}")
        for c in statuses:
            waiting = (c.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                bits.append(f"{c.get('name')}:{waiting['reason']}")
    if "succeeded" in status or "failed" in status or "active" in status:
        bits.append(
            f"active={status.get('active', 0)} succeeded={status.get('succeeded', 0)} "
            f"failed={status.get('failed', 0)}"
        )
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Available", "Progressing", "Ready", "Complete", "Failed"):
            bits.append(f"{cond['type']}={cond.get('status')}")
    return " ".join(bits)


def summarize_list(doc: Any, *, now: datetime | None = None) -> str:
    """One line per item: namespace/name, age and a state summary."""
    if not isinstance(doc, dict):
        return str(doc)
    now = now or datetime.now(UTC)
    items = doc.get("items") or []
    kind = str(doc.get("kind", "List")).removesuffix("List") or "item"
    lines = [f"{len(items)} {kind} item(s)"]
    for item in items:
        meta = item.get("metadata") or {}
        ns = meta.get("namespace")
        name = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
        line = f"- {name} age={_age(meta.get('creationTimestamp'), now)}"
        state = _item_state(item)
        if state:
            line += f" {state}"
        if item.get("kind") == "Secret" or kind == "Secret":
            line += f" keys={sorted((item.get('data') or {}).keys())}"
        lines.append(line)
    remaining = (doc.get("metadata") or {}).get("remainingItemCount")
    if remaining or (doc.get("metadata") or {}).get("continue"):
        lines.append(f"(more items exist: {remaining or 'unknown'} not shown; narrow the query)")
    lines.append("Use k8s_get for one object's full state.")
    return "\n".join(lines)


def describe(obj: Any) -> str:
    """A describe-like view: a short header, then the object without managedFields."""
    if not isinstance(obj, dict):
        return str(obj)
    header = [_title(obj)]
    state = _item_state(obj)
    if state:
        header.append(f"state: {state}")
    return "\n".join(header) + "\n---\n" + to_yaml(obj)


def patched_view(obj: Any, patch: Any) -> str:
    """The patched object as the API server returned it, cut to what the patch touched: its
    header, then each patched field's value now (the whole object when a path is unclear)."""
    if not isinstance(obj, dict):
        return str(obj)
    paths = _patch_paths(patch)
    if not paths or not all(paths):
        return describe(obj)
    lines = [_title(obj)]
    for path in paths:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        label = ".".join(path)
        shown = to_yaml(value).strip() if isinstance(value, (dict, list)) else json.dumps(value)
        if "\n" in shown:
            lines += [f"{label}:", *(f"  {line}" for line in shown.splitlines())]
        else:
            lines.append(f"{label}: {shown}")
    return "\n".join(lines)


def _title(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')} {meta.get('namespace', '-')}/{meta.get('name', '?')}"


def _patch_paths(patch: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The field paths a merge or strategic patch sets (down to a list or a value), or a JSON
    patch's op paths; none when one is not a plain object path."""
    if isinstance(patch, list):
        paths = []
        for op in patch:
            path = op.get("path") if isinstance(op, dict) else None
            if not isinstance(path, str) or not path.startswith("/"):
                return []
            keys = [k.replace("~1", "/").replace("~0", "~") for k in path[1:].split("/")]
            # A list index or an append names no object field: show the list it is in.
            index = next((i for i, k in enumerate(keys) if k.isdigit() or k == "-"), len(keys))
            paths.append(tuple(keys[:index]))
        return paths
    if not isinstance(patch, dict):
        return [prefix] if prefix else []
    paths = []
    for key, value in patch.items():
        if isinstance(value, dict) and value:
            paths.extend(_patch_paths(value, (*prefix, str(key))))
        else:
            paths.append((*prefix, str(key)))
    return paths


def state_line(obj: Any) -> str | None:
    """One line on a Job, CronJob, Deployment, StatefulSet, DaemonSet, Pod or ConfigMap's
    state, else None.

    It stands outside the fence, so it is built only from numbers, values from fixed sets
    and name-like tokens: nothing in it can read as an instruction.
    """
    if not isinstance(obj, dict):
        return None
    kind = obj.get("kind")
    builders = {
        "Job": _job_state,
        "Deployment": _replicas_state,
        "StatefulSet": _replicas_state,
        "DaemonSet": _daemon_set_state,
        "CronJob": _cron_job_state,
        "Pod": _pod_state,
        "ConfigMap": _config_map_state,
    }
    build = builders.get(kind) if isinstance(kind, str) else None
    if build is None:
        return None
    meta = obj.get("metadata") or {}
    where = "/".join(_token(meta.get(k)) or "?" for k in ("namespace", "name"))
    line = f"{kind} {where}: {build(obj.get('spec') or {}, obj.get('status') or {}, obj)}"
    return line[:STATE_LINE_MAX]


def _token(value: Any) -> str | None:
    return value if isinstance(value, str) and _TOKEN.fullmatch(value) else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _true_conditions(status: dict[str, Any], wanted: tuple[str, ...]) -> list[str]:
    found = []
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") in wanted and cond.get("status") == "True":
            reason = _token(cond.get("reason"))
            found.append(f"{cond['type']}" + (f" ({reason})" if reason else ""))
    return found


def _job_state(spec: dict[str, Any], status: dict[str, Any], _: dict[str, Any]) -> str:
    conditions = _true_conditions(status, _JOB_CONDITIONS)
    types = {c.split(" ")[0] for c in conditions}
    active = _count(status.get("active"))
    if "Complete" in types:
        state = "succeeded"
    elif "Failed" in types:
        state = "failed"
    elif spec.get("suspend") is True:
        state = "suspended"
    elif active:
        state = "active"
    else:
        state = "not running"
    counts = (
        f"active {active}, succeeded {_count(status.get('succeeded'))}, failed "
        f"{_count(status.get('failed'))}"
    )
    if isinstance(spec.get("completions"), int):
        counts += f" of {spec['completions']} completions"
    return f"{state}; {counts}; conditions: {', '.join(conditions) or 'none true'}"


def _replicas_state(spec: dict[str, Any], status: dict[str, Any], _: dict[str, Any]) -> str:
    desired = spec.get("replicas", 1)
    line = (
        f"ready {_count(status.get('readyReplicas'))} of {_count(desired)} desired, updated "
        f"{_count(status.get('updatedReplicas'))}, available "
        f"{_count(status.get('availableReplicas'))}"
    )
    if spec.get("paused") is True:
        line += ", paused"
    return line


def _daemon_set_state(spec: dict[str, Any], status: dict[str, Any], _: dict[str, Any]) -> str:
    return (
        f"ready {_count(status.get('numberReady'))} of "
        f"{_count(status.get('desiredNumberScheduled'))} scheduled, updated "
        f"{_count(status.get('updatedNumberScheduled'))}, available "
        f"{_count(status.get('numberAvailable'))}"
    )


def _cron_job_state(spec: dict[str, Any], status: dict[str, Any], _: dict[str, Any]) -> str:
    line = f"{'suspended' if spec.get('suspend') is True else 'scheduling'}; active "
    line += str(len(status.get("active") or []))
    for key in ("lastScheduleTime", "lastSuccessfulTime"):
        value = status.get(key)
        if isinstance(value, str) and _TIMESTAMP.fullmatch(value):
            line += f", {key} {value}"
    return line


def _pod_state(spec: dict[str, Any], status: dict[str, Any], _: dict[str, Any]) -> str:
    phase = status.get("phase") if status.get("phase") in _POD_PHASES else "phase unknown"
    containers = [c for c in status.get("containerStatuses") or [] if isinstance(c, dict)]
    total = len(containers) or len(spec.get("containers") or [])
    ready = sum(1 for c in containers if c.get("ready") is True)
    restarts = sum(_count(c.get("restartCount")) for c in containers)
    line = f"{phase}, {ready}/{total} containers ready, {restarts} restarts"
    reasons = []
    for c in containers:
        state = c.get("state") or {}
        for key in ("waiting", "terminated"):
            reason = _token((state.get(key) or {}).get("reason"))
            if reason:
                reasons.append(f"{_token(c.get('name')) or '?'} {key} {reason}")
    return line + (f" ({'; '.join(reasons)})" if reasons else "")


def _config_map_state(spec: dict[str, Any], status: dict[str, Any], obj: dict[str, Any]) -> str:
    keys = [
        key
        for field in ("data", "binaryData")
        for key in (obj.get(field) or {})
        if isinstance(obj.get(field), dict)
    ]
    names = [_token(k) or "?" for k in keys]
    return f"{len(names)} keys: {', '.join(names)}" if names else "no keys"


def summarize_events(doc: Any) -> str:
    items = (doc or {}).get("items") or [] if isinstance(doc, dict) else []
    if not items:
        return "no events found for this object"

    def when(e: dict[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")

    lines = []
    for e in sorted(items, key=when):
        lines.append(
            f"{when(e)} {e.get('type', '')} {e.get('reason', '')} x{e.get('count') or 1}: "
            f"{e.get('message', '')}".strip()
        )
    return "\n".join(lines)


__all__ = [
    "describe",
    "state_line",
    "strip_noise",
    "summarize_events",
    "summarize_list",
    "to_yaml",
]
