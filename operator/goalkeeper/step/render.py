"""How Kubernetes answers are shown to the model: YAML, list summaries, describe, events.

Pure, no I/O. The input is already redacted; nothing here reads or changes secrets.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml


def strip_noise(obj: Any) -> Any:
    """Drop managedFields, in place: bookkeeping that only costs the model tokens."""
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        for item in obj.get("items") or []:
            strip_noise(item)
    return obj


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
    meta = obj.get("metadata") or {}
    header = [f"{obj.get('kind', '?')} {meta.get('namespace', '-')}/{meta.get('name', '?')}"]
    state = _item_state(obj)
    if state:
        header.append(f"state: {state}")
    return "\n".join(header) + "\n---\n" + to_yaml(obj)


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


__all__ = ["describe", "strip_noise", "summarize_events", "summarize_list", "to_yaml"]
