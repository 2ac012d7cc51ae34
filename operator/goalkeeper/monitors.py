"""A Monitor as a person starts, reads and follows it: shared by `goalkeeper show` and
`goalkeeper mcp`.

- `monitor_manifest`: the Monitor a person hands a goal over with (the four spec fields;
  those left out take the CRD's defaults).
- `authority_reading`: what goalkeeper read from the task for the current spec
  generation, as the table `goalkeeper authority` prints (`core/authority.table`), or None
  while the task is not read yet.
- `summary`: the Monitor in a few lines: its state, goal and work, checks, progress with
  rate and ETA, health, the step in flight, the next check, an open approval request, the
  stop, and the latest report.
- `watch_monitor`: read the Monitor, then follow it with a watch (never by polling) until
  a condition holds, it is deleted, or a timeout passes.

Everything is read with the caller's own client: the API server decides what they may see.
Text a model or a target wrote is shown with its control characters made visible.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.core.authority import table
from goalkeeper.core.controls import controls_of
from goalkeeper.core.models import AuthorityRecord, TrackState
from goalkeeper.core.permissions import AUTHOR
from goalkeeper.core.progress import describe_track
from goalkeeper.core.report import printable
from goalkeeper.kubeclient import connect

Monitor = dict[str, Any]
# How long one watch request lasts before it is opened again from where it was.
WATCH_SECONDS = 240


def monitor_manifest(
    name: str,
    namespace: str,
    task: str,
    stop_when: str | None = None,
    every_minutes: int | None = None,
    max_checks: int | None = None,
) -> Monitor:
    """The Monitor for `task`; a field left None takes the CRD's default. The API server
    checks the bounds and names the field it refuses."""
    spec: dict[str, Any] = {"task": task}
    if stop_when is not None:
        spec["stopWhen"] = stop_when
    if every_minutes is not None:
        spec["everyMinutes"] = every_minutes
    if max_checks is not None:
        spec["maxChecks"] = max_checks
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _meta(monitor: Mapping[str, Any]) -> Mapping[str, Any]:
    return monitor.get("metadata") or {}


def _status(monitor: Mapping[str, Any]) -> Mapping[str, Any]:
    return monitor.get("status") or {}


def ref(monitor: Mapping[str, Any]) -> str:
    meta = _meta(monitor)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def stopped(monitor: Mapping[str, Any]) -> bool:
    return _status(monitor).get("monitor") == "stopped"


def reported_check(monitor: Mapping[str, Any]) -> int:
    value = _status(monitor).get("reportedCheck")
    return value if isinstance(value, int) and _status(monitor).get("report") else 0


def authority_record(monitor: Mapping[str, Any]) -> AuthorityRecord | None:
    """The authority recorded for the Monitor's current spec generation, if any."""
    found = _status(monitor).get("authority")
    if not isinstance(found, Mapping):
        return None
    record = AuthorityRecord.model_validate(found)
    return record if record.generation == _meta(monitor).get("generation") else None


def authority_reading(monitor: Mapping[str, Any]) -> list[str] | None:
    """The reading of the current spec generation's task as report lines, or None while
    it is not read."""
    record = authority_record(monitor)
    return None if record is None else [printable(line) for line in table(record).splitlines()]


def authority_read_or_stopped(monitor: Mapping[str, Any]) -> bool:
    return stopped(monitor) or authority_record(monitor) is not None


def reported_after(check: int) -> Callable[[Mapping[str, Any]], bool]:
    """Whether the Monitor has a report of a check after `check`, or has stopped."""
    return lambda monitor: stopped(monitor) or reported_check(monitor) > check


def _indented(text: str, indent: str = "    ") -> str:
    return "\n".join(indent + line if line else "" for line in printable(text).splitlines())


def _time(value: Any) -> str:
    if not isinstance(value, str) or not value:
        return "?"
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return printable(value)
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _tracks(status: Mapping[str, Any], now: datetime) -> list[str]:
    lines = []
    for body in status.get("progress") or []:
        try:
            track = TrackState.model_validate(body)
        except ValueError:
            continue
        lines.append(printable(describe_track(track, now)))
    return lines


def summary(
    monitor: Mapping[str, Any], now: datetime | None = None, *, authority: bool = True
) -> str:
    """The Monitor in a few lines, its latest report last (`authority`: with what was read
    from its task)."""
    now = now or datetime.now(UTC)
    meta = _meta(monitor)
    status = _status(monitor)
    spec = monitor.get("spec") or {}
    paused = controls_of(meta.get("annotations")).paused
    state = str(status.get("monitor") or "active")
    activity = str(status.get("activity") or ("starting" if not status else "?"))
    doing = f" ({activity})" if activity != state else ""
    lines = [
        f"Monitor {ref(monitor)}: {state}" + (", paused" if paused else "") + doing,
        f"Author: {(meta.get('annotations') or {}).get(AUTHOR) or 'not recorded'}",
        f"Goal: {status.get('goal') or 'unknown'} · Work: {status.get('work') or 'unknown'}"
        f" · Checks: {status.get('checks') or 0} of at most {spec.get('maxChecks', '?')}",
    ]
    health = status.get("health") or {}
    said = f": {printable(str(health['message']))}" if health.get("message") else ""
    lines.append(f"Health: {health.get('state') or 'Unknown'}{said}")
    tracks = _tracks(status, now)
    if tracks:
        lines.append("Progress:")
        lines += [f"  {line}" for line in tracks]
    step = status.get("step") or {}
    if step:
        lines.append(
            f"Step: {step.get('kind')} step {step.get('seq')} for check {step.get('check')}, "
            f"started {_time(step.get('startedAt'))}"
        )
    schedule = status.get("schedule") or {}
    if state != "stopped" and schedule.get("nextCheckAt"):
        every = schedule.get("everyMinutes") or spec.get("everyMinutes")
        lines.append(f"Next check: {_time(schedule['nextCheckAt'])} (every {every} min)")
    approval = status.get("approval") or {}
    if approval:
        lines.append(
            f"Awaiting approval: request {approval.get('id')} (check {approval.get('check')}): "
            f"{printable(str(approval.get('message') or ''))} Open until "
            f"{_time(approval.get('expiresAt'))}."
        )
    stop = status.get("stop") or {}
    if state == "stopped" and stop:
        lines.append(
            f"Stopped {_time(stop.get('at'))}: {stop.get('reason')}: "
            f"{printable(str(stop.get('message') or ''))}"
        )
    reading = authority_reading(monitor) if authority else None
    if reading is not None:
        lines.append("Authority read from the task:")
        lines += [f"  {line}" for line in reading]
    report = status.get("report")
    if isinstance(report, str) and report:
        lines.append(f"Latest report (check {status.get('reportedCheck', '?')}):")
        lines.append(_indented(report))
    else:
        lines.append("No report yet.")
    return "\n".join(lines) + "\n"


def line(monitor: Mapping[str, Any]) -> str:
    """One line per Monitor, the columns of `kubectl get monitors`."""
    meta = _meta(monitor)
    status = _status(monitor)
    paused = controls_of(meta.get("annotations")).paused
    parts = [
        f"{meta.get('namespace')}/{meta.get('name')}",
        str(status.get("monitor") or "active") + (" (paused)" if paused else ""),
        f"goal {status.get('goal') or 'unknown'}",
        f"work {status.get('work') or 'unknown'}",
    ]
    if status.get("progressSummary"):
        parts.append(printable(str(status["progressSummary"])))
    parts.append(f"checks {status.get('checks') or 0}")
    next_at = (status.get("schedule") or {}).get("nextCheckAt")
    if next_at and status.get("monitor") != "stopped":
        parts.append(f"next check {_time(next_at)}")
    parts.append(f"step {status.get('activity') or 'starting'}")
    parts.append(f"health {(status.get('health') or {}).get('state') or 'Unknown'}")
    return " · ".join(parts)


def get_monitor(custom: Any, namespace: str, name: str) -> Monitor:
    found: Monitor = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "monitors", name
    )
    return found


def watch_monitor(
    custom: Any,
    namespace: str,
    name: str,
    done: Callable[[Mapping[str, Any]], bool],
    timeout: float,
    *,
    on_change: Callable[[Monitor], None] | None = None,
) -> tuple[Monitor | None, bool]:
    """Read the Monitor, then follow it with a watch until `done` holds of it: (the
    Monitor as last seen, whether `done` held). (None, False) when it is deleted; a 404
    at the first read is raised. `on_change` sees every version the watch delivers."""
    from goalkeeper.controller.targets import Gone, shut, watch_events

    deadline = time.monotonic() + timeout
    monitor = get_monitor(custom, namespace, name)
    while True:
        if done(monitor):
            return monitor, True
        left = deadline - time.monotonic()
        if left <= 0:
            return monitor, False
        response = custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "monitors",
            field_selector=f"metadata.name={name}",
            watch=True,
            resource_version=_meta(monitor).get("resourceVersion"),
            timeout_seconds=max(1, min(WATCH_SECONDS, int(left + 0.999))),
            _preload_content=False,
            _request_timeout=left + 30,
        )
        try:
            for event in watch_events(response):
                body = event.get("object") or {}
                if event.get("type") == "DELETED":
                    return None, False
                if event.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                monitor = body
                if on_change is not None:
                    on_change(monitor)
                if done(monitor):
                    return monitor, True
        except Gone:
            monitor = get_monitor(custom, namespace, name)
        finally:
            shut(response, name)


def show_monitor(
    name: str,
    namespace: str | None,
    *,
    api_client: Any = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`goalkeeper show`: print the Monitor's summary; 1 (saying why) when it cannot be
    read."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from goalkeeper.controller.api import server_message

    out = out or sys.stdout
    err = err or sys.stderr
    connected = connect(namespace, api_client, err)
    if connected is None:
        return 2
    api_client, namespace = connected
    try:
        monitor = get_monitor(client.CustomObjectsApi(api_client), namespace, name)
    except ApiException as error:
        if error.status == 404:
            print(f"goalkeeper: no Monitor {name} in namespace {namespace}", file=err)
        else:
            print(f"goalkeeper: {error.status} {error.reason}: {server_message(error)}", file=err)
        return 1
    out.write(summary(monitor))
    return 0


__all__ = [
    "authority_read_or_stopped",
    "authority_reading",
    "authority_record",
    "get_monitor",
    "line",
    "monitor_manifest",
    "reported_after",
    "reported_check",
    "show_monitor",
    "stopped",
    "summary",
    "watch_monitor",
]
