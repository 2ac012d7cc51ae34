"""What `kubectl get` and `kubectl wait` read: the activity and the standard conditions.

Derived from the rest of the status after every decision, never decided on their own.
"""

from __future__ import annotations

from datetime import datetime

from goalkeeper.core.models import (
    Activity,
    Condition,
    ConditionStatus,
    Health,
    MonitorState,
    MonitorStatus,
    StepKind,
    StopReason,
)

_ACTIVITY = {
    StepKind.extract: Activity.extracting,
    StepKind.observe: Activity.observing,
    StepKind.act: Activity.acting,
    StepKind.repair: Activity.repairing,
}
_VERB = {
    StepKind.extract: "Extracting",
    StepKind.observe: "Observing",
    StepKind.act: "Acting",
    StepKind.repair: "Repairing",
}


def activity(status: MonitorStatus) -> Activity:
    if status.monitor is MonitorState.stopped:
        return Activity.stopped
    if status.step is not None:
        return _ACTIVITY[status.step.kind]
    if status.approval is not None:
        return Activity.awaitingApproval
    if status.pausedAt is not None:
        return Activity.paused
    return Activity.waiting if status.schedule is not None else Activity.starting


def conditions(status: MonitorStatus, now: datetime) -> list[Condition]:
    """`Ready`, `Progressing`, `Healthy` and, once the task is read, `AuthorityConfirmed`,
    keeping lastTransitionTime while a status is unchanged."""
    ready, progressing = _condition_values(status)
    previous = {c.type: c for c in status.conditions}
    result = []
    values = [("Ready", ready), ("Progressing", progressing), ("Healthy", _healthy(status))]
    confirmed = _authority_confirmed(status)
    if confirmed is not None:
        values.append(("AuthorityConfirmed", confirmed))
    for kind, (value, reason, message) in values:
        before = previous.get(kind)
        moved = before is None or before.status is not value
        result.append(
            Condition(
                type=kind,
                status=value,
                reason=reason,
                message=message[:4000],
                lastTransitionTime=now if moved or before is None else before.lastTransitionTime,
                observedGeneration=status.observedGeneration,
            )
        )
    return result


_Value = tuple[ConditionStatus, str, str]


def _authority_confirmed(status: MonitorStatus) -> _Value | None:
    """Whether the reading of the task may be acted on: read whole, or confirmed by a
    person; False names the unclear sentences a person must look at."""
    record = status.authority
    if record is None:
        return None
    if record.confirmedBy:
        return ConditionStatus.true, "Confirmed", f"Confirmed by {record.confirmedBy}."
    if not record.unclear:
        return ConditionStatus.true, "ReadWhole", "Every sentence was read with certainty."
    said = "; ".join(f'"{u.sentence}" ({u.why})' for u in record.unclear)
    return (
        ConditionStatus.false,
        "UnclearWords",
        f"No act runs until a person confirms the reading (goalkeeper authority NAME "
        f"--confirm). Unclear: {said}",
    )


def _healthy(status: MonitorStatus) -> _Value:
    state = status.health.state
    if state is Health.Unknown:
        return ConditionStatus.unknown, "Unknown", "No check has been accepted yet."
    if state is Health.Healthy:
        return ConditionStatus.true, "Healthy", "Nothing in the check history looks wrong."
    return ConditionStatus.false, state.value, status.health.message


def _condition_values(status: MonitorStatus) -> tuple[_Value, _Value]:
    true, false = ConditionStatus.true, ConditionStatus.false
    if status.monitor is MonitorState.stopped:
        assert status.stop is not None
        reason = status.stop.reason.value[0].upper() + status.stop.reason.value[1:]
        done = status.stop.reason is StopReason.goalComplete
        return (
            (true if done else false, reason, status.stop.message),
            (false, "Stopped", status.stop.message),
        )
    step = status.step
    if step is not None:
        message = f"{step.kind} step {step.seq} for check {step.check} is running."
        if status.pausedAt is not None:
            message += " Paused: nothing launches after it."
        return (true, _VERB[step.kind], message), (true, _VERB[step.kind], message)
    if status.approval is not None:
        message = f"Awaiting approval request {status.approval.id} until " + (
            f"{status.approval.expiresAt.isoformat()}."
        )
        return (true, "AwaitingApproval", message), (false, "AwaitingApproval", message)
    if status.pausedAt is not None:
        message = (
            f"Paused since {status.pausedAt.isoformat()} (goalkeeper.dev/paused); removing "
            "the annotation checks at once."
        )
        return (true, "Paused", message), (false, "Paused", message)
    if status.schedule is not None:
        schedule = status.schedule
        message = schedule.description or f"Next check at {schedule.nextCheckAt.isoformat()}."
        return (true, "Waiting", message), (false, "Waiting", message)
    return (true, "Starting", "The first observation is about to start."), (
        true,
        "Starting",
        "The first observation is about to start.",
    )
