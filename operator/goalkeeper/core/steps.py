"""What the cluster's current state stands for: one engine event, or none.

The reconciler reads the facts (the Monitor, the MonitorStep and Job of the step in
flight) and `next_event` says what happened, so any trigger, including a periodic
resync after a lost event, leads to the same decision. A step's status is untrusted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from goalkeeper.core.controls import Controls
from goalkeeper.core.engine import (
    AuthorityExtracted,
    ControlsChanged,
    Event,
    ExtractionRejected,
    ObservationAccepted,
    ObservationRejected,
    Started,
    StepFailed,
    StepFinished,
    TimerDue,
)
from goalkeeper.core.facts import contradiction, goal_print
from goalkeeper.core.models import (
    MUTATING_STEPS,
    ActionResult,
    AuthorityExtraction,
    AuthorizedAction,
    GoalRule,
    MonitorState,
    MonitorStatus,
    MonitorStepStatus,
    Observation,
    StepErrorKind,
    StepInFlight,
    StepKind,
    StepPhase,
    StepUsage,
)

NO_CONTROLS = Controls()
# How long a recorded act or repair step that is not there yet is waited for, when the
# monitor may have just come from another shard that recorded it and is still making it.
HANDOVER_GRACE = timedelta(seconds=60)
TERMINAL_PHASES = frozenset({StepPhase.Succeeded.value, StepPhase.Failed.value})


@dataclass(frozen=True)
class StepFacts:
    """What the cluster shows of the step in flight, named `name`."""

    name: str
    found: bool
    # Set when the object found under the step's name belongs to someone else.
    foreign: str | None = None
    # The step's status as written by its pod (untrusted).
    status: Mapping[str, Any] | None = None
    # Why a terminal result was not written by the step's own pod.
    forged: str | None = None
    # Set with `forged` when the pod or Job the result names is gone (deleted after the
    # step wrote it): the result cannot be verified, which says nothing of what it did.
    unverifiable: bool = False
    # Why the step's Job ended (failed, deleted) without a result.
    job_ended: str | None = None

    @property
    def terminal(self) -> bool:
        return (self.status or {}).get("phase") in TERMINAL_PHASES


def next_event(
    status: MonitorStatus,
    generation: int | None,
    step: StepFacts | None,
    now: datetime,
    controls: Controls = NO_CONTROLS,
) -> Event | None:
    """The event the monitor's current state stands for; None when nothing is due.

    `step` describes `status.step` and is needed only while a step is in flight;
    `controls` are what the Monitor's annotations set now.
    """
    if status.observedGeneration != generation:
        return Started(generation)
    if status.monitor is MonitorState.stopped:
        return None
    if controls_changed(status, controls):
        return ControlsChanged()
    in_flight = status.step
    if in_flight is not None:
        if step is None:
            return None
        if not step.found:
            return StepFailed(
                in_flight.seq,
                f"MonitorStep {step.name} vanished before it wrote a result.",
                effect_unknown=True,
            )
        if step.foreign is not None:
            return StepFailed(in_flight.seq, step.foreign, permanent=True)
        if step.terminal:
            return step_event(
                in_flight.kind,
                in_flight.seq,
                step.status,
                forged=step.forged,
                unverifiable=step.unverifiable,
                goal_rule=status.authority.goal if status.authority is not None else None,
                check=in_flight.check,
                actions=status.authorizedActions,
            )
        if step.job_ended is not None:
            return StepFailed(in_flight.seq, step.job_ended, effect_unknown=True)
        return None
    if status.approval is not None:
        return TimerDue() if now >= status.approval.expiresAt else None
    if status.pausedAt is not None:
        return None  # nothing is due until the pause is lifted
    if status.schedule is not None:
        return TimerDue() if now >= status.schedule.due_at else None
    return Started(None)


# How much of a step pod's termination message the recorded reason keeps.
POD_SAID_MAX = 600


def job_failure(name: str, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the step's Job `job` ended without a result: its Failed condition, and how its
    last pod's container ended (reason, exit code, termination message). None while the
    Job has not failed: its pod may still write the result."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            reason = condition.get("reason") or "Failed"
            detail = condition.get("message") or "the step's pod failed"
            return f"Job {name} failed ({reason}): {detail}; {pod_said(pods)}"
    return None


def pod_said(pods: Sequence[Mapping[str, Any]]) -> str:
    """How the last of a step Job's pods ended, in its container's words."""
    if not pods:
        return "no pod of the Job is left to say how it ended"
    pod = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    name = (pod.get("metadata") or {}).get("name") or "?"
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            ended = state.get("terminated")
            if isinstance(ended, Mapping):
                said = " ".join(str(ended.get("message") or "").split())
                if len(said) > POD_SAID_MAX:
                    said = said[: POD_SAID_MAX - 1] + "…"
                how = f"pod {name} ended {ended.get('reason') or 'Error'} (exit code "
                how += f"{ended.get('exitCode')})"
                return f"{how}: {said}" if said else f"{how} with no termination message"
    return f"pod {name} is {status.get('phase') or 'Unknown'} with no container ended"


def may_still_be_made(step: StepInFlight, now: datetime) -> bool:
    """Whether a recorded step that was not found may still appear: an act or repair step
    recorded less than HANDOVER_GRACE ago, which the shard that recorded it creates after
    its status write. Declared vanished now, it could run beside a second action."""
    return step.kind in MUTATING_STEPS and now - step.startedAt < HANDOVER_GRACE


def controls_changed(status: MonitorStatus, controls: Controls) -> bool:
    """Whether the annotations ask for what the status has not taken yet: a pause, a
    resume, or a check-now value not yet honoured."""
    paused = status.pausedAt is not None
    asked = bool(controls.check_now) and controls.check_now != status.checkNowHandled
    return controls.paused != paused or asked


ERROR_LIMIT = 2000


def describe_errors(error: ValidationError, limit: int = ERROR_LIMIT) -> str:
    """Field paths and messages only: the input itself is untrusted and may be large."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def step_event(
    kind: StepKind,
    seq: int,
    raw_status: Mapping[str, Any] | None,
    *,
    forged: str | None = None,
    unverifiable: bool = False,
    goal_rule: GoalRule | None = None,
    check: int = 0,
    actions: Sequence[AuthorizedAction] | None = None,
) -> Event | None:
    """The event a MonitorStep's status stands for, or None while the step has not ended.

    `forged` says why the status was not written by the step's own pod (the caller checks
    provenance); such a result is never accepted: an observation is rejected, an act or
    repair step counts as failed, so the next observation verifies what really happened.
    When its pod or Job is gone (`unverifiable`) the act's outcome is unknown instead.
    """
    try:
        status = MonitorStepStatus.model_validate(raw_status or {})
    except ValidationError as error:
        message = f"The step wrote an invalid status: {describe_errors(error)}"
        return _rejected(kind, seq, message)
    # The step's own account of its model usage; a forged status's is not counted.
    usage = status.usage
    if forged is not None and status.phase in (StepPhase.Succeeded, StepPhase.Failed):
        if unverifiable:
            message = f"The step's result cannot be verified: {forged}"
        else:
            message = f"The step's result was not written by its own pod: {forged}"
        return _rejected(kind, seq, message, effect_unknown=unverifiable)
    if status.phase is StepPhase.Failed:
        message = status.error or "The step failed without saying why."
        if status.errorKind is StepErrorKind.invalidOutput and kind in _READS:
            return _rejected(kind, seq, message, usage)
        # A configuration error (a key refused, a model unknown) is fixed outside the run,
        # like any infrastructure failure: the run waits for it within the failure window.
        return StepFailed(seq, message, usage=usage)
    if status.phase is not StepPhase.Succeeded:
        return None
    if kind is StepKind.extract:
        try:
            extraction = AuthorityExtraction.model_validate(status.result or {})
            return AuthorityExtracted(seq, extraction, usage=usage)
        except ValidationError as error:
            message = f"Invalid task reading: {describe_errors(error)}"
            return ExtractionRejected(seq, message, usage=usage)
    if kind is StepKind.observe:
        try:
            observation = Observation.model_validate(status.result or {})
        except ValidationError as error:
            message = f"Invalid observation: {describe_errors(error)}"
            return ObservationRejected(seq, message, usage=usage)
        unanswerable = observation.unanswerable_stop()
        if unanswerable is not None:
            return ObservationRejected(seq, f"Invalid observation: {unanswerable}", usage=usage)
        refuted = contradiction(observation, status.facts, goal_rule, check, actions)
        if refuted is not None:
            return ObservationRejected(seq, f"Contradicted by the facts: {refuted}", usage=usage)
        return ObservationAccepted(
            seq,
            observation,
            usage=usage,
            facts_print=goal_print(status.facts),
            facts=tuple(status.facts),
        )
    try:
        return StepFinished(seq, ActionResult.model_validate(status.result or {}), usage=usage)
    except ValidationError as error:
        return StepFailed(seq, f"Invalid action result: {describe_errors(error)}", usage=usage)


# Steps whose answer is a reading: an invalid one is rejected and read again.
_READS = frozenset({StepKind.extract, StepKind.observe})


def _rejected(
    kind: StepKind,
    seq: int,
    message: str,
    usage: StepUsage | None = None,
    *,
    effect_unknown: bool = False,
) -> Event:
    """A result that cannot be taken: a reading is rejected, an action counts as failed
    (its outcome unknown when the result says nothing either way)."""
    if kind is StepKind.extract:
        return ExtractionRejected(seq, message, usage=usage)
    if kind is StepKind.observe:
        return ObservationRejected(seq, message, usage=usage)
    return StepFailed(seq, message, usage=usage, effect_unknown=effect_unknown)
