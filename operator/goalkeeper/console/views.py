"""What the console's pages show, shaped from the API server's objects: no I/O here.

Every string that a model, a target or a person wrote passes through unchanged: the
templates escape it (Jinja2's autoescape), and nothing here builds markup from it. The
progress plot is geometry (numbers and escaped labels), drawn as SVG by the template.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from goalkeeper.core.controls import controls_of
from goalkeeper.core.models import MonitorStatus, TrackState
from goalkeeper.core.permissions import AUTHOR
from goalkeeper.core.progress import describe_track
from goalkeeper.core.report import printable
from goalkeeper.crds import MONITOR_COLUMNS
from goalkeeper.history import Step, step_of

# `kubectl get monitors` shows the columns of priority 0; `-o wide` the others.
COLUMNS = [c for c in MONITOR_COLUMNS if not c.get("priority")]
# The plot's drawing area, in SVG user units.
PLOT_WIDTH = 560
PLOT_HEIGHT = 180
PLOT_MARGIN = 36


def _walk(body: Mapping[str, Any], path: str) -> Any:
    """A printer column's JSONPath (`.status.health.state`) on a body; None where absent."""
    value: Any = body
    for part in path.strip(".").split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def age(created: Any, now: datetime) -> str:
    """The age kubectl prints (its HumanDuration): 45s, 7m30s, 90m, 5h3m, 3d4h, 30d."""
    if not isinstance(created, str):
        return ""
    try:
        at = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = max(0, int((now - at).total_seconds()))
    minutes, hours = seconds // 60, seconds // 3600
    days = hours // 24

    def pair(big: int, big_unit: str, small: int, small_unit: str) -> str:
        return f"{big}{big_unit}" + (f"{small}{small_unit}" if small else "")

    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return pair(minutes, "m", seconds % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return pair(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return pair(days, "d", hours % 24, "h")
    if days < 730:
        return f"{days}d"
    if days < 2920:
        return pair(days // 365, "y", days % 365, "d")
    return f"{days // 365}y"


def cells(monitor: Mapping[str, Any], now: datetime) -> list[str]:
    """The Monitor's cells under `COLUMNS`, as kubectl prints them."""
    row = []
    for column in COLUMNS:
        value = _walk(monitor, column["jsonPath"])
        if column["type"] == "date":
            row.append(age(value, now))
        elif value is None:
            row.append("")
        else:
            row.append(printable(str(value)))
    return row


@dataclass(frozen=True)
class Row:
    namespace: str
    name: str
    cells: list[str]
    paused: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_event(self, kind: str) -> dict[str, Any]:
        """What the live list hears of this row; the page sets each cell as text."""
        return {
            "type": kind,
            "key": self.key,
            "namespace": self.namespace,
            "name": self.name,
            "cells": self.cells,
            "paused": self.paused,
        }


def row(monitor: Mapping[str, Any], now: datetime) -> Row:
    meta = monitor.get("metadata") or {}
    return Row(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        cells=cells(monitor, now),
        paused=controls_of(meta.get("annotations")).paused,
    )


def rows(monitors: Iterable[Mapping[str, Any]], now: datetime) -> list[Row]:
    return sorted((row(m, now) for m in monitors), key=lambda r: (r.namespace, r.name))


# --- the progress plot ----------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    check: int
    completed: float
    x: float
    y: float


@dataclass(frozen=True)
class Plot:
    """One progress track over the accepted checks that reported it."""

    key: str
    label: str
    unit: str
    total: float | None
    points: list[Point]
    polyline: str
    # Axis ticks: (position, text).
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    # Rate, ETA and state, as `goalkeeper show` says them; empty without a current track.
    estimate: str = ""
    width: int = PLOT_WIDTH
    height: int = PLOT_HEIGHT


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _shown(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.2f}"


def samples(bodies: Iterable[dict[str, Any]], uid: str) -> dict[str, list[tuple[int, Any]]]:
    """Each track's values by accepted check: from the observe steps whose observation was
    a check (the operator wrote its report on them), one value per check."""
    from goalkeeper.controller.manifests import owned_by

    by_track: dict[str, dict[int, Any]] = {}
    for body in bodies:
        if not owned_by(body, uid):
            continue
        step = step_of(body)
        if step is None or step.kind != "observe" or step.report is None:
            continue
        check = step.reported_check if step.reported_check is not None else step.check
        if check is None:
            continue
        result = (body.get("status") or {}).get("result") or {}
        for track in result.get("progress") or []:
            if isinstance(track, Mapping) and isinstance(track.get("key"), str):
                by_track.setdefault(track["key"], {})[check] = track
    return {key: sorted(found.items()) for key, found in by_track.items()}


def plot(
    key: str, reported: Sequence[tuple[int, Any]], current: TrackState | None, now: datetime
) -> Plot | None:
    """The track's plot, or None when no check reported a value for it."""
    values = [(check, _number(t.get("completed"))) for check, t in reported]
    known = [(check, value) for check, value in values if value is not None]
    if not known:
        return None
    last = reported[-1][1]
    total = _number(last.get("total"))
    checks = [check for check, _ in known]
    low_check, high_check = min(checks), max(checks)
    top = max([total or 0.0, *(value for _, value in known)]) or 1.0
    inner_w = PLOT_WIDTH - 2 * PLOT_MARGIN
    inner_h = PLOT_HEIGHT - 2 * PLOT_MARGIN

    def x(check: int) -> float:
        span = high_check - low_check
        share = 0.5 if span == 0 else (check - low_check) / span
        return round(PLOT_MARGIN + share * inner_w, 1)

    def y(value: float) -> float:
        return round(PLOT_HEIGHT - PLOT_MARGIN - (value / top) * inner_h, 1)

    points = [Point(check, value, x(check), y(value)) for check, value in known]
    return Plot(
        key=key,
        label=printable(str(last.get("label") or key)),
        unit=printable(str(last.get("unit") or "")),
        total=total,
        points=points,
        polyline=" ".join(f"{p.x},{p.y}" for p in points),
        x_ticks=[(x(c), str(c)) for c in sorted(set(checks))],
        y_ticks=[(y(0.0), "0"), (y(top), _shown(top))],
        estimate=describe_track(current, now) if current is not None else "",
    )


def plots(
    bodies: Iterable[dict[str, Any]], uid: str, status: MonitorStatus, now: datetime
) -> list[Plot]:
    current = {track.key: track for track in status.progress}
    found = []
    for key, reported in sorted(samples(bodies, uid).items()):
        drawn = plot(key, reported, current.get(key), now)
        if drawn is not None:
            found.append(drawn)
    return found


# --- the timeline of checks and steps --------------------------------------------------------


@dataclass(frozen=True)
class TimelineEntry:
    seq: int
    kind: str
    check: int | None
    phase: str
    started: str
    duration: str
    tokens: str
    requests: str
    outcome: str
    reported: bool


def _duration(step: Step, now: datetime) -> str:
    if step.started is None:
        return ""
    end = step.finished or now
    seconds = max(0, int((end - step.started).total_seconds()))
    text = f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
    return text if step.finished else f"{text} so far"


def timeline(bodies: Iterable[dict[str, Any]], uid: str, now: datetime) -> list[TimelineEntry]:
    """Every kept step, newest first: its kind, check, duration, tokens and outcome."""
    from goalkeeper.controller.manifests import owned_by

    entries = []
    for body in bodies:
        step = step_of(body) if owned_by(body, uid) else None
        if step is None:
            continue
        usage = (body.get("status") or {}).get("usage") or {}
        tokens = int(usage.get("inputTokens") or 0) + int(usage.get("outputTokens") or 0)
        requests = int(usage.get("requests") or 0)
        error = " ".join(printable(step.error).split())
        outcome = step.phase + (f": {error[:300]}" if error else "")
        if step.report is not None:
            outcome += f" · reported check {step.reported_check}"
        entries.append(
            TimelineEntry(
                seq=step.seq,
                kind=step.kind,
                check=step.check,
                phase=step.phase,
                started=step.started.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
                if step.started
                else "",
                duration=_duration(step, now),
                tokens=f"{tokens:,}" if usage else "",
                requests=str(requests) if usage else "",
                outcome=outcome,
                reported=step.report is not None,
            )
        )
    return sorted(entries, key=lambda e: e.seq, reverse=True)


# --- the monitor page --------------------------------------------------------------------------


@dataclass(frozen=True)
class Approval:
    id: str
    kind: str
    check: int
    message: str
    expires: str


@dataclass
class MonitorPage:
    namespace: str
    name: str
    state: str
    paused: bool
    author: str
    task: str
    stop_when: str
    row: Row
    report: str
    reported_check: int
    reading: list[str]
    health: str
    stop: str
    next_check: str
    approval: Approval | None
    plots: list[Plot] = field(default_factory=list)
    timeline: list[TimelineEntry] = field(default_factory=list)
    # Why the steps (plot and timeline) are not shown: the API server's refusal.
    steps_hidden: str = ""


def monitor_page(
    monitor: Mapping[str, Any],
    steps: Sequence[dict[str, Any]],
    reading: list[str] | None,
    now: datetime,
) -> MonitorPage:
    meta = monitor.get("metadata") or {}
    spec = monitor.get("spec") or {}
    raw = monitor.get("status") or {}
    status = MonitorStatus.model_validate(raw)
    uid = str(meta.get("uid") or "")
    request = status.approval
    health = raw.get("health") or {}
    stop = status.stop
    return MonitorPage(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        state=status.monitor.value,
        paused=controls_of(meta.get("annotations")).paused,
        author=str((meta.get("annotations") or {}).get(AUTHOR) or "not recorded"),
        task=printable(str(spec.get("task") or "")),
        stop_when=printable(str(spec.get("stopWhen") or "")),
        row=row(monitor, now),
        report=printable(status.report or ""),
        reported_check=status.reportedCheck,
        reading=reading or [],
        health=printable(
            f"{health.get('state') or 'Unknown'}"
            + (f": {health['message']}" if health.get("message") else "")
        ),
        stop=printable(f"{stop.reason.value}: {stop.message}") if stop is not None else "",
        next_check=(
            status.schedule.nextCheckAt.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            if status.schedule is not None
            and status.schedule.nextCheckAt is not None
            and status.monitor.value != "stopped"
            else ""
        ),
        approval=Approval(
            id=request.id,
            kind=request.kind.value,
            check=request.check,
            message=printable(request.message),
            expires=request.expiresAt.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        )
        if request is not None
        else None,
        plots=plots(steps, uid, status, now),
        timeline=timeline(steps, uid, now),
    )
