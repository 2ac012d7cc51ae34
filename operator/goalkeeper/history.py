"""`goalkeeper history MONITOR [-n NAMESPACE]`: every kept check's report, oldest first.

A check's report goes out as an Event, which expires (an hour by default), and into
`status.report`, which holds only the latest. The operator also writes it onto the observe
step whose observation made the check (annotations `goalkeeper.dev/report` and
`goalkeeper.dev/check`), so the monitor's step history, the newest `GOALKEEPER_STEP_HISTORY`
MonitorSteps, keeps each check's report beside the step's input and result. This command
reads that history from the API server (never a cache): one block per check, with its time
and step, one line for each step without a report (extract, act, repair, an observation
that was not accepted as a check), and last the monitor's current report when the history
does not hold it (a final stop report stays in `status.report` alone).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from goalkeeper.controller.manifests import (
    ANNOTATION_CHECK,
    ANNOTATION_LAUNCHED_AT,
    ANNOTATION_REPORT,
    GROUP,
    LABEL_MONITOR,
    VERSION,
    label_value,
    owned_by,
)
from goalkeeper.core.report import printable
from goalkeeper.kubeclient import connect

# MonitorSteps read per request: a maximal step is a few hundred KB.
PAGE = 50
REPORT_INDENT = "    "
ERROR_MAX = 200


@dataclass(frozen=True)
class Step:
    """What the history shows of one MonitorStep."""

    seq: int
    name: str
    kind: str
    check: int | None
    phase: str
    started: datetime | None
    finished: datetime | None
    error: str = ""
    report: str | None = None
    reported_check: int | None = None


@dataclass(frozen=True)
class Latest:
    """The monitor's current report (`status.report`) and what the status says of it."""

    report: str
    check: int | None
    stopped_at: datetime | None = None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def step_of(body: Mapping[str, Any]) -> Step | None:
    """The history's view of a MonitorStep as the API server has it; None when it names
    no sequence number (not a step the operator made)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    seq = _int(spec.get("seq"))
    if seq is None:
        return None
    annotations = meta.get("annotations") or {}
    report = annotations.get(ANNOTATION_REPORT)
    return Step(
        seq=seq,
        name=str(meta.get("name") or ""),
        kind=str(spec.get("kind") or "?"),
        check=_int(spec.get("check")),
        phase=str(status.get("phase") or "Pending"),
        # The step's own account, else when the operator launched it.
        started=_time(status.get("startedAt"))
        or _time(annotations.get(ANNOTATION_LAUNCHED_AT))
        or _time(meta.get("creationTimestamp")),
        finished=_time(status.get("finishedAt")),
        error=str(status.get("error") or ""),
        report=report if isinstance(report, str) and report else None,
        reported_check=_int(annotations.get(ANNOTATION_CHECK)),
    )


def latest_of(status: Mapping[str, Any]) -> Latest | None:
    """The monitor's current report from its status, or None when it has none yet."""
    report = status.get("report")
    if not isinstance(report, str) or not report:
        return None
    stopped = status.get("monitor") == "stopped"
    return Latest(
        report=report,
        check=_int(status.get("reportedCheck")),
        stopped_at=_time((status.get("stop") or {}).get("at")) if stopped else None,
    )


def when(started: datetime | None, finished: datetime | None) -> str:
    """`2026-12-01 09:00:41 → 09:01:20 UTC`: the finish without its date when it is the
    start's."""
    if started is None and finished is None:
        return "time unknown"
    first = started.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if started else "?"
    if finished is None:
        return f"{first} → … UTC"
    end = finished.astimezone(UTC)
    same_day = started is not None and started.astimezone(UTC).date() == end.date()
    last = end.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
    return f"{first} → {last} UTC"


def _indented(text: str) -> str:
    lines = printable(text).splitlines()
    return "\n".join(REPORT_INDENT + line if line else "" for line in lines)


def _outcome(step: Step) -> str:
    if step.phase in ("Pending", "Running"):
        return step.phase.lower()
    if step.phase == "Failed":
        error = printable(" ".join(step.error.split()))
        if len(error) > ERROR_MAX:
            error = error[: ERROR_MAX - 1] + "…"
        return f"Failed: {error}" if error else "Failed"
    if step.kind == "observe":
        return f"{step.phase}, no report kept"
    return step.phase


def check_block(step: Step) -> str:
    """A kept check: its header (check, step, time) and its report, indented."""
    assert step.report is not None
    check = step.reported_check if step.reported_check is not None else step.check
    header = (
        f"check {check if check is not None else '?'} · step {step.seq} {step.kind} "
        f"{step.name} · {when(step.started, step.finished)}"
    )
    return f"{header}\n{_indented(step.report)}"


def step_line(step: Step) -> str:
    """A step without a report, in one line, so the audit trail shows it."""
    serves = f" (check {step.check})" if step.check else ""
    return (
        f"step {step.seq} {step.kind}{serves} {step.name} · "
        f"{when(step.started, step.finished)} · {_outcome(step)}"
    )


def latest_block(latest: Latest) -> str:
    check = f" · check {latest.check}" if latest.check is not None else ""
    if latest.stopped_at is not None:
        stopped = latest.stopped_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        header = f"final report{check} · stopped {stopped} UTC (status.report)"
    else:
        header = f"latest report{check} (status.report, not in the step history)"
    return f"{header}\n{_indented(latest.report)}"


def format_history(
    namespace: str, monitor: str, steps: Sequence[Step], latest: Latest | None
) -> str:
    """The whole history: a title, then each step oldest first (a block for each kept
    check, a line for any other step), then the current report when no step holds it."""
    ordered = sorted(steps, key=lambda s: s.seq)
    checks = sum(1 for s in ordered if s.report is not None)
    span = f"steps {ordered[0].seq}-{ordered[-1].seq}" if ordered else "no steps"
    lines = [
        f"Monitor {namespace}/{monitor}: {checks} check report(s) in {len(ordered)} kept "
        f"step(s) ({span}), oldest first; times in UTC.",
    ]
    newest_report: str | None = None
    for step in ordered:
        lines.append("")
        if step.report is not None:
            lines.append(check_block(step))
            newest_report = step.report
        else:
            lines.append(step_line(step))
    if latest is not None and latest.report != newest_report:
        lines.extend(["", latest_block(latest)])
    return "\n".join(lines) + "\n"


def list_steps(custom: Any, namespace: str, monitor: str) -> Iterator[dict[str, Any]]:
    """The monitor's MonitorSteps from the API server, page by page."""
    token: str | None = None
    while True:
        page: dict[str, Any] = custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "monitorsteps",
            label_selector=f"{LABEL_MONITOR}={label_value(monitor)}",
            limit=PAGE,
            **({"_continue": token} if token else {}),
        )
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return


def read_history(custom: Any, namespace: str, monitor: dict[str, Any]) -> list[Step]:
    """The kept steps of this Monitor (its uid: not those of an earlier one of its name)."""
    meta = monitor["metadata"]
    steps = []
    for body in list_steps(custom, namespace, meta["name"]):
        step = step_of(body) if owned_by(body, meta["uid"]) else None
        if step is not None:
            steps.append(step)
    return sorted(steps, key=lambda s: s.seq)


def show_history(
    monitor: str,
    namespace: str | None,
    *,
    api_client: Any = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the monitor's history; 1 (saying why) when there is none to print."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from goalkeeper.controller.api import server_message

    out = out or sys.stdout
    err = err or sys.stderr
    connected = connect(namespace, api_client, err)
    if connected is None:
        return 2
    api_client, namespace = connected
    custom: Any = client.CustomObjectsApi(api_client)
    try:
        found: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "monitors", monitor
        )
        steps = read_history(custom, namespace, found)
    except ApiException as error:
        if error.status == 404:
            print(f"goalkeeper: Monitor {namespace}/{monitor} not found", file=err)
        else:
            said = server_message(error)
            print(f"goalkeeper: {error.status} {error.reason}: {said}".rstrip(": "), file=err)
        return 1
    if not steps:
        print(
            f"goalkeeper: Monitor {namespace}/{monitor} has no step history kept: no "
            f"MonitorStep labelled {LABEL_MONITOR}={label_value(monitor)} belongs to it "
            "(it has not run a step yet, or its steps were deleted); `kubectl describe "
            f"monitor {monitor} -n {namespace}` shows its latest report",
            file=err,
        )
        return 1
    out.write(format_history(namespace, monitor, steps, latest_of(found.get("status") or {})))
    return 0


__all__ = [
    "Latest",
    "Step",
    "check_block",
    "format_history",
    "latest_of",
    "list_steps",
    "read_history",
    "show_history",
    "step_line",
    "step_of",
    "when",
]
