"""The engine: a pure function from (spec, status, event, now) to (next status, effects).

Every decision goalkeeper makes lives here and in `core/turn/`, one file per concern.
Callers turn cluster facts into events and carry the effects out; they never decide
anything themselves.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from goalkeeper.core.events import (
    ApprovalAnswered,
    AuthorityExtracted,
    Cancelled,
    ControlsChanged,
    Decision,
    Effect,
    EmitReport,
    Event,
    ExtractionRejected,
    LaunchStep,
    Notify,
    ObservationAccepted,
    ObservationRejected,
    PublishSchedule,
    Started,
    StepFailed,
    StepFinished,
    StopMonitor,
    TargetChanged,
    TimerDue,
)
from goalkeeper.core.migrate import Read, count_of
from goalkeeper.core.modelconfig import ModelChoice
from goalkeeper.core.models import (
    PREVIOUS_RUNS_KEPT,
    Condition,
    ConditionStatus,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    PreviousRun,
    StepKind,
    StopInfo,
    StopReason,
)
from goalkeeper.core.policy import Context, Policy
from goalkeeper.core.report import stop_hint
from goalkeeper.core.turn.base import safety_limit_message
from goalkeeper.core.turn.checks import Turn

__all__ = [
    "ApprovalAnswered",
    "AuthorityExtracted",
    "Cancelled",
    "Context",
    "ControlsChanged",
    "Decision",
    "Effect",
    "EmitReport",
    "Event",
    "ExtractionRejected",
    "LaunchStep",
    "Notify",
    "ObservationAccepted",
    "ObservationRejected",
    "Policy",
    "PublishSchedule",
    "Started",
    "StepFailed",
    "StepFinished",
    "StopMonitor",
    "TargetChanged",
    "TimerDue",
    "decide",
    "safety_limit_message",
]

DEFAULT_POLICY = Policy()
NO_CONTEXT = Context()


def decide(
    spec: MonitorSpec,
    status: MonitorStatus,
    event: Event,
    now: datetime,
    policy: Policy = DEFAULT_POLICY,
    context: Context = NO_CONTEXT,
) -> Decision:
    """The next status and the effects to carry out, in order (see core/policy.py for what
    `policy` and `context` hold)."""
    if status.monitor is MonitorState.stopped:
        if not _restarts(status, event):
            return _after_stop(status, event)
        status = _new_run(status)
    turn = Turn(spec, status.model_copy(deep=True), now, policy, context)
    # A finished step's model usage counts once, when the step in flight reports it.
    usage, seq = getattr(event, "usage", None), getattr(event, "seq", None)
    if usage is not None and seq is not None and turn.owns(seq):
        turn.count_usage(usage)
    match event:
        case Started(generation):
            turn.started(generation)
        case AuthorityExtracted(seq, extraction):
            if turn.owns(seq, StepKind.extract):
                turn.extracted(extraction)
        case ExtractionRejected(seq, error):
            if turn.owns(seq, StepKind.extract):
                turn.reject(error)
        case ObservationAccepted(seq, observation, _, facts_print, facts):
            if turn.owns(seq, StepKind.observe):
                turn.accept(observation, facts_print, facts)
        case ObservationRejected(seq, error):
            if turn.owns(seq, StepKind.observe):
                turn.reject(error)
        case StepFinished(seq, result):
            if turn.owns(seq, StepKind.act, StepKind.repair):
                turn.finished(result)
        case StepFailed(seq, message, permanent, _, effect_unknown):
            if turn.owns(seq):
                turn.failed(message, permanent, effect_unknown=effect_unknown)
        case TimerDue():
            turn.timer_due()
        case TargetChanged(target, change):
            turn.woken(target, change)
        case ApprovalAnswered(name, answer, owners, monitor_uid):
            turn.approval_answered(name, answer, owned=monitor_uid in owners)
        case ControlsChanged():
            turn.controls_changed()
        case Cancelled():
            turn.cancel()
    return turn.decision()


# A timer's step is launched without a status write, so a later round finds it by name.
# Found unfinished without its Job this soon after its launch, its Job create has yet to
# succeed (a retry, a restart) and the timer launches it again; later, the Job was deleted
# and the step is in flight until that ends it as failed.
TIMER_JOB_GRACE = timedelta(minutes=2)


def timer_step_needs_its_job(at: datetime, now: datetime, *, finished: bool) -> bool:
    """Whether a timer's step, launched at `at`, is taken as in flight only once its Job is
    found: an unfinished step within the grace."""
    return not finished and now - at < TIMER_JOB_GRACE


def timer_launched(
    status: MonitorStatus, seq: int, at: datetime, *, job_missing: bool = False
) -> MonitorStatus | None:
    """The status with observe step `seq` in flight, launched by the timer at `at` without
    a status write (see `Decision.unrecorded`): the same status that decision had. None
    when `seq` is not the step the timer launches next from `status`, or when its Job is
    missing within the grace (`timer_step_needs_its_job`): the timer launches it again.
    """
    schedule = status.schedule
    if (
        job_missing
        or status.monitor is MonitorState.stopped
        or status.step is not None
        or schedule is None
        or status.pausedAt is not None
        or seq != status.stepSeq + 1
        or at < schedule.nextCheckAt
    ):
        return None
    # Unrecorded only with the model config of the launch before it (turn/schedule.py).
    same_model = Context(model=ModelChoice(status.modelConfig))
    turn = Turn(None, status.model_copy(deep=True), at, DEFAULT_POLICY, same_model)
    turn.record_launch(StepKind.observe, status.checks + 1, None)
    return turn.decision().status


def reject_spec(status: MonitorStatus, message: str, now: datetime) -> Decision:
    """A stored spec that fails validation (written before the CRD rules existed) stops."""
    return halt(status, f"The Monitor spec is invalid: {message}", now)


def halt(status: MonitorStatus, message: str, now: datetime) -> Decision:
    """Stop as blocked for a reason found outside the loop (the caller names it); nothing
    happens when the monitor has already stopped."""
    if status.monitor is MonitorState.stopped:
        return Decision(status, ())
    turn = Turn(None, status.model_copy(deep=True), now, DEFAULT_POLICY, NO_CONTEXT)
    turn.stop(StopReason.blocked, message)
    return turn.decision()


API_REFUSED = "ApiRefused"


def api_refused(status: MonitorStatus, message: str, now: datetime) -> MonitorStatus:
    """The status with a `Degraded` condition naming a refusal of the API server that no
    retry can fix (RBAC, an admission policy, a rejected manifest); the loop keeps retrying,
    and the next decision, or `api_recovered`, clears it."""
    text = message[:4000]
    kept = [c for c in status.conditions if c.type != "Degraded"]
    before = next((c for c in status.conditions if c.type == "Degraded"), None)
    since = before.lastTransitionTime if before is not None else now
    degraded = Condition(
        type="Degraded",
        status=ConditionStatus.true,
        reason=API_REFUSED,
        message=text,
        lastTransitionTime=since,
        observedGeneration=status.observedGeneration,
    )
    return status.model_copy(update={"conditions": [*kept, degraded][-8:]})


def api_recovered(status: MonitorStatus) -> MonitorStatus:
    """The status without the `Degraded` condition of an earlier refusal."""
    kept = [c for c in status.conditions if c.type != "Degraded"]
    return status.model_copy(update={"conditions": kept})


def _restarts(status: MonitorStatus, event: Event) -> bool:
    """A spec edit (a new generation) of a stopped monitor starts a new run; a deleted
    monitor never restarts."""
    return (
        isinstance(event, Started)
        and event.generation is not None
        and event.generation != status.observedGeneration
        and (status.stop is None or status.stop.reason is not StopReason.cancelled)
    )


def _new_run(status: MonitorStatus) -> MonitorStatus:
    """A fresh run that keeps the previous run's last report and stop, the step sequence
    (so no step name is used twice) and the money already spent, model spend included."""
    runs = list(status.previousRuns)
    if status.stop is not None:
        last = PreviousRun(
            generation=status.observedGeneration,
            checks=status.checks,
            stop=status.stop,
            report=status.report,
        )
        runs = [*runs, last][-PREVIOUS_RUNS_KEPT:]
    return MonitorStatus(
        stepSeq=status.stepSeq,
        spend=status.spend,
        # What went through each ModelConfig stays counted against its spend cap.
        usageByConfig=status.usageByConfig,
        previousRuns=runs,
        observedGeneration=status.observedGeneration,
    )


def _after_stop(status: MonitorStatus, event: Event) -> Decision:
    # Nothing happens after a stop; only the observed generation still follows the spec.
    if isinstance(event, Started) and event.generation is not None:
        updated = status.model_copy(update={"observedGeneration": event.generation})
        return Decision(updated, ())
    return Decision(status, ())


def unreadable(
    found: dict[str, object] | None, read: Read, generation: int | None, now: datetime
) -> Decision:
    """A status no migration could read: the monitor stops with the reason and a final
    report, keeping its step sequence and check count, so nothing it ran is lost or run
    again under the same name."""
    message = (
        "The Monitor's status cannot be read by this goalkeeper version, so the run "
        f"cannot carry on safely: {read.error}"
    )
    stop = StopInfo(reason=StopReason.blocked, message=message[:2000], at=now)
    stopped = MonitorStatus(
        stepSeq=count_of(found, "stepSeq"),
        checks=count_of(found, "checks"),
        monitor=MonitorState.stopped,
        stop=stop,
        # The generation it stopped on: only a spec edit starts it again.
        observedGeneration=generation,
    )
    report = f"Monitor: stopped\nStopped: {stop.message}"[:4000]
    stopped.report = report
    stopped.reportedCheck = stopped.checks
    turn = Turn(None, stopped, now, DEFAULT_POLICY, NO_CONTEXT)
    effects: tuple[Effect, ...] = (
        EmitReport(
            check=stopped.checks, text=report, summary="stopped: unreadable status", final=True
        ),
        StopMonitor(StopReason.blocked, message[:2000], stop_hint(StopReason.blocked)),
    )
    return Decision(turn.decision().status, effects)
