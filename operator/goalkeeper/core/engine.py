"""The engine: a pure function from (spec, status, event, now) to (next status, effects).

Every decision goalkeeper makes lives here. Callers turn cluster facts into events and
carry the effects out; they never decide anything themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from goalkeeper.core import authority, guards, health, wakes
from goalkeeper.core.budget import fit_status
from goalkeeper.core.models import (
    APPROVALS_KEPT,
    PREVIOUS_RUNS_KEPT,
    ActionKind,
    ActionRequest,
    ActionResult,
    Activity,
    ApprovalDecision,
    ApprovalKind,
    ApprovalRecord,
    ApprovalRequest,
    AuthorityExtraction,
    AuthorityRecord,
    Condition,
    ConditionStatus,
    Health,
    HealthState,
    LastAction,
    Money,
    MonitorApprovalSpec,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    Observation,
    Outcome,
    PreviousRun,
    Route,
    Schedule,
    SpendEntry,
    StepInFlight,
    StepInput,
    StepKind,
    StepUsage,
    StopInfo,
    StopReason,
    WatchTarget,
)
from goalkeeper.core.progress import prompt_summary, summary_line, update_tracks
from goalkeeper.core.report import format_report, report_summary, stop_hint

# An invalid observation or an observe step that failed to run is retried this often in a row.
MAX_RETRIES_IN_A_ROW = 2
# The spend ledger keeps this many entries; the total always covers all of them.
LEDGER_ENTRIES = 100

# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """The monitor was created, its spec was edited, or the operator resumed it."""

    generation: int | None = None


@dataclass(frozen=True)
class ObservationAccepted:
    seq: int
    observation: Observation
    usage: StepUsage | None = None


@dataclass(frozen=True)
class ObservationRejected:
    seq: int
    error: str
    usage: StepUsage | None = None


@dataclass(frozen=True)
class AuthorityExtracted:
    """An extract step read the person's words and quoted the grants it found."""

    seq: int
    extraction: AuthorityExtraction
    usage: StepUsage | None = None


@dataclass(frozen=True)
class ExtractionRejected:
    seq: int
    error: str
    usage: StepUsage | None = None


@dataclass(frozen=True)
class StepFinished:
    """An act or repair step ended with a result."""

    seq: int
    result: ActionResult
    usage: StepUsage | None = None


@dataclass(frozen=True)
class StepFailed:
    """A step ended without a result; `permanent` when retrying cannot help."""

    seq: int
    message: str
    permanent: bool = False
    usage: StepUsage | None = None


@dataclass(frozen=True)
class TimerDue:
    pass


@dataclass(frozen=True)
class TargetChanged:
    """A watched target object changed materially while the monitor waits (`change`
    says how, in a few words: `Complete`, `deleted`)."""

    target: WatchTarget
    change: str


@dataclass(frozen=True)
class ApprovalAnswered:
    """A MonitorApproval named `name` answers the monitor's pending approval request."""

    name: str
    answer: MonitorApprovalSpec
    # The uids its ownerReferences name, and this Monitor's own: a name is reused by a
    # recreated Monitor, its uid never is.
    owners: tuple[str, ...]
    monitor_uid: str


@dataclass(frozen=True)
class Cancelled:
    pass


Event = (
    Started
    | ObservationAccepted
    | ObservationRejected
    | AuthorityExtracted
    | ExtractionRejected
    | StepFinished
    | StepFailed
    | TimerDue
    | TargetChanged
    | ApprovalAnswered
    | Cancelled
)

# --- effects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchStep:
    seq: int
    kind: StepKind
    input: StepInput
    # When the decision launched it: the step's startedAt, kept on the MonitorStep so a
    # timer's step, launched without a status write, is found again as it was launched.
    at: datetime


@dataclass(frozen=True)
class PublishSchedule:
    schedule: Schedule


@dataclass(frozen=True)
class EmitReport:
    check: int
    text: str
    # One line for `kubectl get events`; the full report stays in status.
    summary: str = ""
    # A stop report for a check already reported (maxChecks lowered below the count):
    # its own Event, so the check's first report stays the one report of that check.
    final: bool = False


@dataclass(frozen=True)
class StopMonitor:
    reason: StopReason
    message: str
    # What the user can do about it, for the Stopped Event.
    hint: str = ""


@dataclass(frozen=True)
class Notify:
    """Something the user would want to know, as an Event on the Monitor, once (`what`
    names it uniquely within the monitor's life)."""

    what: str
    reason: str
    message: str
    warning: bool = False


Effect = LaunchStep | PublishSchedule | EmitReport | StopMonitor | Notify


@dataclass(frozen=True)
class Decision:
    status: MonitorStatus
    effects: tuple[Effect, ...]
    # True when the status changed only by the timer launching an observe step: the
    # step is found again under its deterministic name (`timer_launched`), so the
    # launch needs no status write and a timed check costs one write, when it is accepted.
    unrecorded: bool = False


def safety_limit_message(max_checks: int) -> str:
    return f"Reached the {max_checks}-check safety limit."


# --- the engine ----------------------------------------------------------------------------


MINUTE = timedelta(minutes=1)


def decide(
    spec: MonitorSpec,
    status: MonitorStatus,
    event: Event,
    now: datetime,
    *,
    minute: timedelta = MINUTE,
    model_spend_cap_usd: float | None = None,
    stall_checks: int = health.STALL_CHECKS,
    wake_interval: timedelta = wakes.WAKE_INTERVAL,
    approval_window: timedelta = timedelta(0),
    namespace: str = "default",
    author: str = "",
    author_denied: str = "",
    confirm_authority: bool = False,
) -> Decision:
    """The next status and the effects to carry out, in order.

    `minute` is the length of one `everyMinutes` minute; only tests shorten it.
    `stall_checks` is how many checks in a row with nothing moved make a target stalled.
    `wake_interval` is the least time between two checks a target change starts early.
    `approval_window` is how long a paid action that needs approval waits for one; zero
    stops the monitor at once.
    `namespace` is the Monitor's, where a mutation-set entry without one lies.
    `author` names who wrote the spec generation, as the API server recorded it;
    `author_denied` says which of the permissions the step this decision launches needs
    the author lacks (the caller asks the API server, see core/permissions.py): that step
    does not launch and the monitor stops as outside authority.
    `confirm_authority`, with approvals on, makes the first act of a spec generation wait
    until a person confirms what was read from the task.
    """
    if status.monitor is MonitorState.stopped:
        if not _restarts(status, event):
            return _after_stop(status, event)
        status = _new_run(status)
    turn = _Turn(spec, status.model_copy(deep=True), now, minute)
    turn.spend_cap = model_spend_cap_usd
    turn.stall_checks = stall_checks
    turn.wake_interval = wake_interval
    turn.approval_window = approval_window
    turn.namespace = namespace
    turn.author = author
    turn.author_denied = author_denied
    turn.confirm_authority = confirm_authority and approval_window > timedelta(0)
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
        case ObservationAccepted(seq, observation):
            if turn.owns(seq, StepKind.observe):
                turn.accept(observation)
        case ObservationRejected(seq, error):
            if turn.owns(seq, StepKind.observe):
                turn.reject(error)
        case StepFinished(seq, result):
            if turn.owns(seq, StepKind.act, StepKind.repair):
                turn.finished(result)
        case StepFailed(seq, message, permanent):
            if turn.owns(seq):
                turn.failed(message, permanent)
        case TimerDue():
            turn.timer_due()
        case TargetChanged(target, change):
            turn.woken(target, change)
        case ApprovalAnswered(name, answer, owners, monitor_uid):
            turn.approval_answered(name, answer, owned=monitor_uid in owners)
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
        or status.checks == 0
        or seq != status.stepSeq + 1
        or at < schedule.nextCheckAt
    ):
        return None
    turn = _Turn(None, status.model_copy(deep=True), at, MINUTE)
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
    turn = _Turn(None, status.model_copy(deep=True), now, MINUTE)
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
    (so no step name is used twice) and the money already spent."""
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
        previousRuns=runs,
        observedGeneration=status.observedGeneration,
    )


def _after_stop(status: MonitorStatus, event: Event) -> Decision:
    # Nothing happens after a stop; only the observed generation still follows the spec.
    if isinstance(event, Started) and event.generation is not None:
        updated = status.model_copy(update={"observedGeneration": event.generation})
        return Decision(updated, ())
    return Decision(status, ())


class _Turn:
    """One decision in progress: a working copy of status and the effects so far."""

    def __init__(
        self, spec: MonitorSpec | None, status: MonitorStatus, now: datetime, minute: timedelta
    ) -> None:
        self._spec = spec
        self.status = status
        self.now = now
        self.minute = minute
        self.effects: list[Effect] = []
        self.quiet = False
        self.unrecorded = False
        self.spend_cap: float | None = None
        self.stall_checks = health.STALL_CHECKS
        self.wake_interval = wakes.WAKE_INTERVAL
        self.approval_window = timedelta(0)
        self.namespace = "default"
        self.author = ""
        self.author_denied = ""
        self.confirm_authority = False
        # The target change that started the check being reported, if any.
        self.woken_by = ""

    @property
    def spec(self) -> MonitorSpec:
        assert self._spec is not None, "only reject_spec decides without a spec"
        return self._spec

    def decision(self) -> Decision:
        if not self.quiet:
            self.status.conditions = _conditions(self.status, self.now)
        self.status.activity = _activity(self.status)
        return Decision(fit_status(self.status), tuple(self.effects), self.unrecorded)

    def count_usage(self, usage: StepUsage) -> None:
        total = self.status.modelUsage
        self.status.modelUsage = total.model_copy(
            update={
                "requests": total.requests + usage.requests,
                "inputTokens": total.inputTokens + usage.inputTokens,
                "outputTokens": total.outputTokens + usage.outputTokens,
                "costUsd": float(total.costUsd) + float(usage.costUsd or 0),
                "unpricedSteps": total.unpricedSteps + (usage.costUsd is None),
            }
        )

    def owns(self, seq: int, *kinds: StepKind) -> bool:
        """True when the event comes from the step in flight, of one of `kinds` when any
        are named; anything else is ignored."""
        step = self.status.step
        if step is None or step.seq != seq:
            return False
        return not kinds or step.kind in kinds

    # --- events ---

    def started(self, generation: int | None) -> None:
        edited = generation is not None and generation != self.status.observedGeneration
        if generation is not None:
            self.status.observedGeneration = generation
        if self.status.step is not None:
            return  # a step is in flight: its result drives the next decision
        if self.status.approval is not None:
            if edited:  # the request answered the old task: observe the new one
                self.status.approval = None
                self.judge_health(self.health_answered())
                self.launch_observe()
            return  # awaiting a person: their answer or the window drives it
        if self.status.schedule is not None and self.status.checks > 0:
            if edited:
                self.edited_while_waiting(self.status.schedule)
            return  # waiting: the timer drives the next decision
        self.launch_observe()

    def edited_while_waiting(self, schedule: Schedule) -> None:
        """A spec edit takes effect at once: a lowered limit stops now, a new interval
        moves the pending check (counted from the last check)."""
        if self.limit_reached():
            self.stop_at_limit()
            return
        if schedule.everyMinutes != self.spec.everyMinutes:
            self.publish_schedule(last_check=schedule.lastCheckAt, watch=schedule.watch)

    def accept(self, observation: Observation) -> None:
        st = self.status
        step = st.step
        assert step is not None  # owns() checked it
        st.step = None
        if not self.current_step(step) or not self.authority_is_current():
            # Made under a spec that has since been edited, or before this generation's
            # authority was read from the task: not a check; read and observe again.
            self.launch_observe()
            return
        self.woken_by = step.wokenBy
        st.invalidStreak = 0
        st.stepFailureStreak = 0
        st.lastRejection = None
        st.checks += 1
        st.goal = observation.goal
        st.work = observation.work
        st.lastObservation = observation
        st.progress = update_tracks(st.progress, observation.progress, self.now)
        st.progressSummary = summary_line(st.progress)
        self.judge_health(
            health.checked(st.health, observation, self.now, stall_checks=self.stall_checks)
        )

        widening = self.record_authority(observation)
        if widening is not None:
            self.report_and_stop(observation, *widening)
        elif observation.route is Route.stop:
            assert observation.stopReason is not None  # guaranteed by the model
            self.report_and_stop(
                observation, StopReason(observation.stopReason.value), observation.reason
            )
        elif health.stalled_again(st.health) and self.approval_window > timedelta(0):
            self.await_stall_decision(observation)
        elif health.stalled_again(st.health):
            self.report_and_stop(
                observation,
                StopReason.blocked,
                f"{st.health.message} It stalled again in the same state after its one "
                "automatic recovery.",
            )
        elif observation.route is Route.wait:
            if self.limit_reached():
                self.report_and_stop(
                    observation, StopReason.safetyLimit, safety_limit_message(self.spec.maxChecks)
                )
            else:
                watch, _ = wakes.wakeable(observation.watch)
                self.report(observation, next_check_minutes=self.spec.everyMinutes, wakes_on=watch)
                self.publish_schedule(watch=observation.watch)
        else:
            assert observation.action is not None  # guaranteed by the model
            self.route_act(observation, observation.action)

    def record_authority(self, observation: Observation) -> tuple[StopReason, str] | None:
        """Record what an observation's restatement of the pinned authority narrows, and
        return the refusal of any attempted widening. The forbidden changes the engine
        found in the task itself stay whatever an observation restates."""
        st = self.status
        assert st.contract is not None
        recorded = st.contract
        review = guards.review_authority(
            authority.without_found(recorded, st.authority),
            st.authorizedActions,
            observation.contract,
            observation.authorizedActions,
        )
        refusal = review.refusal()
        if refusal is None:
            st.contract = authority.with_found(review.contract, recorded)
            st.authorizedActions = review.actions
        return refusal

    def authority_is_current(self) -> bool:
        """True when authority read from this spec generation's words is recorded."""
        st = self.status
        # authorityGeneration is written beside the record for earlier readers; the record's
        # own generation decides.
        return (
            st.contract is not None
            and st.authority is not None
            and st.authority.generation == st.observedGeneration
        )

    def current_step(self, step: StepInFlight) -> bool:
        """False for a step launched under a spec generation that has since been edited."""
        return step.generation is None or step.generation == self.status.observedGeneration

    def extracted(self, extraction: AuthorityExtraction) -> None:
        """Pin the grants the person's words give, then observe the target."""
        st = self.status
        step = st.step
        assert step is not None  # owns() checked it
        st.step = None
        if self.current_step(step):
            st.invalidStreak = 0
            st.stepFailureStreak = 0
            st.lastRejection = None
            pinned = authority.pin(
                self.spec, extraction, generation=st.observedGeneration, author=self.author
            )
            st.contract = pinned.contract
            st.authorizedActions = pinned.actions
            st.authority = pinned.record.model_copy(update={"check": st.checks})
            st.authorityGeneration = st.observedGeneration
            self.effects.append(self.authority_notice(pinned.record))
        self.launch_observe()

    def authority_notice(self, record: AuthorityRecord) -> Notify:
        kept = [f"{g.field} {g.entry}" for g in record.grants]
        text = "Authority read from the task: " + ("; ".join(kept) or "no grant, observe only")
        if record.dropped:
            text += ". Refused: " + "; ".join(record.dropped)
        return Notify(
            f"authority-{self.status.stepSeq}",
            "AuthorityRecorded",
            text[:1000],
            warning=bool(record.dropped),
        )

    def route_act(self, observation: Observation, action: ActionRequest) -> None:
        refusal = self.refusal(observation, action)
        need = None
        if refusal is not None and refusal[0] is StopReason.paidActionNotApproved:
            need = guards.approval_need(self.status, action, observation.observedSpend)
        approvable = need is not None and self.approval_window > timedelta(0)
        if refusal is not None and not approvable:
            self.report_and_stop(observation, *refusal)
        elif self.limit_reached():
            # No check is left to verify the action: not worth asking a person either.
            self.report_and_stop(
                observation, StopReason.safetyLimit, safety_limit_message(self.spec.maxChecks)
            )
        elif refusal is not None:
            assert need is not None
            self.await_approval(observation, action, refusal[1], need)
        elif self.needs_confirmation():
            self.await_confirmation(observation, action)
        else:
            if health.is_stall_recovery(self.status.health, observation):
                self.status.health.recoveredStall = self.status.health.fingerprint
            self.report(observation, next_action=action.action)
            self.launch_action(action)

    def needs_confirmation(self) -> bool:
        record = self.status.authority
        return self.confirm_authority and record is not None and not record.confirmedBy

    def await_confirmation(self, observation: Observation, action: ActionRequest) -> None:
        """Pause the first act of a spec generation until a person confirms what was read
        from the task (an operator setting, with approvals on)."""
        assert self.status.authority is not None
        read = "; ".join(authority.describe(self.status.authority))
        request = self.open_request(
            ApprovalKind.authority,
            f"Before its first act this monitor waits until a person confirms what goalkeeper "
            f"read from the task: {read}. Approving confirms it and runs '{action.action}'; "
            "rejecting stops the monitor.",
            action=action,
        )
        self.report(observation, next_action=f"awaiting confirmation, then: {action.action}")
        self.announce(request)

    def refusal(
        self, observation: Observation, action: ActionRequest
    ) -> tuple[StopReason, str] | None:
        """The first guard the action fails, as a stop reason and message. Every guard
        reads the recorded authority in status, never the observation's own."""
        outside = guards.authority_violation(self.status, action)
        if outside is not None:
            return StopReason.outsideAuthority, outside
        # A forbidden or protected entry is named as such before any coverage question.
        forbidden = guards.forbidden_mutation(self.status, action, self.namespace)
        if forbidden is not None:
            return forbidden
        uncovered = guards.mutation_outside_contract(self.status.contract, action, self.namespace)
        if uncovered is not None:
            return StopReason.outsideAuthority, uncovered
        if guards.repeats_repair(self.status.repairsDone, action):
            return StopReason.repairRepeated, (
                f"Failure '{action.failureId}' in target state '{action.targetStateId}' "
                "returned after a completed repair; the same repair cycle does not run twice."
            )
        spend = guards.spend_violation(self.status, action, observation.observedSpend)
        if spend is not None:
            return StopReason.paidActionNotApproved, spend
        repetition = guards.repetition_violation(self.status.attempts, action)
        if repetition is not None:
            return StopReason.blocked, repetition
        if self.author_denied:
            return StopReason.outsideAuthority, self.author_denied
        return None

    def await_approval(
        self, observation: Observation, action: ActionRequest, why: str, need: guards.ApprovalNeed
    ) -> None:
        """Pause with a durable request for a person's decision on a paid action."""

        def money(value: Money) -> str:
            return f"{float(value.amount):.2f} {value.currency}"

        amount = money(need.amount)
        ceiling = f"the ceiling is {money(need.ceiling)}" if need.ceiling else "no ceiling is set"
        request = self.open_request(
            ApprovalKind.paidAction,
            f"The paid action '{action.action}' needs approval ({why.rstrip('.')}): it is "
            f"estimated at {money(need.estimate)}, {money(need.spent)} is spent and "
            f"{ceiling}. Approving adds {amount} to the cost ceiling for this action only.",
            action=action,
            estimatedCost=need.estimate,
            ceiling=need.ceiling,
            spent=need.spent,
            amount=need.amount,
        )
        self.report(observation, next_action=f"awaiting approval of {amount}: {action.action}")
        self.announce(request)

    def await_stall_decision(self, observation: Observation) -> None:
        """A stall that came back after its one recovery: a person decides whether the run
        goes on (with one more recovery) or stops."""
        request = self.open_request(
            ApprovalKind.stalled,
            f"{self.status.health.message} It stalled again in the same state after its one "
            "automatic recovery. Approving lets the run go on with one more recovery; "
            "rejecting stops it.",
        )
        self.report(observation, next_action="awaiting a person's decision on the stall")
        self.announce(request)

    def open_request(self, kind: ApprovalKind, message: str, **details: Any) -> ApprovalRequest:
        st = self.status
        st.approval = ApprovalRequest(
            id=f"req-{st.stepSeq}",
            kind=kind,
            check=st.checks,
            message=message[:2000],
            requestedAt=self.now,
            expiresAt=self.now + self.approval_window,
            **details,
        )
        self.judge_health(health.awaiting(st.health, message, self.now))
        return st.approval

    def announce(self, request: ApprovalRequest) -> None:
        text = (
            f"{request.message} Answer request {request.id} with `goalkeeper approve` or "
            "`goalkeeper reject` and the Monitor's name, or a MonitorApproval owned by the "
            f"Monitor; without an answer by {request.expiresAt.isoformat()} the monitor stops."
        )
        self.effects.append(
            Notify(f"approval-{request.id}", "ApprovalRequested", text[:1000], warning=True)
        )

    def approval_answered(self, name: str, answer: MonitorApprovalSpec, *, owned: bool) -> None:
        """Take a person's answer to the pending request, given for this Monitor (`owned`);
        anything else is ignored, once, and says why."""
        st = self.status
        request = st.approval
        if request is None or name in request.ignored or any(r.name == name for r in st.approvals):
            return
        problem = None
        if not owned:
            # Request ids restart with a recreated Monitor: only the owner tells them apart.
            problem = (
                "it is not owned by this Monitor (no ownerReference names its uid), so it may "
                "answer an earlier Monitor of the same name; answer with `goalkeeper approve` "
                "or `goalkeeper reject`, which make it owned"
            )
        elif answer.requestId != request.id:
            problem = f"it answers request {answer.requestId}; the pending request is {request.id}"
        elif not answer.approver:
            problem = "it names no approver (the goalkeeper-approvals admission policy sets it)"
        if problem is not None:
            request.ignored = [*request.ignored, name][-16:]
            self.effects.append(
                Notify(
                    f"approval-ignored-{name}",
                    "ApprovalIgnored",
                    f"MonitorApproval {name} was ignored: {problem}."[:1000],
                    warning=True,
                )
            )
            return
        approve = answer.decision is ApprovalDecision.approve
        granted = None
        if approve and request.amount is not None:
            amount = request.amount.amount if answer.amount is None else answer.amount
            granted = Money(amount=amount, currency=request.amount.currency)
        record = ApprovalRecord(
            requestId=request.id,
            name=name,
            decision=answer.decision,
            approver=answer.approver,
            amount=granted,
            reason=answer.reason,
            at=self.now,
        )
        st.approvals = [*st.approvals, record][-APPROVALS_KEPT:]
        st.approval = None
        if request.kind is ApprovalKind.stalled and approve:
            # One more recovery for this stall; the same stall after it asks again.
            st.health.recoveredStall = ""
        self.judge_health(self.health_answered())
        who = f"{answer.approver} (MonitorApproval {name})"
        said = f": {answer.reason}" if answer.reason.strip() else "."
        if request.kind is ApprovalKind.stalled:
            if approve:
                self.launch_observe()
            else:
                self.final_stop(StopReason.blocked, f"{who} stopped the stalled run{said}")
            return
        if request.kind is ApprovalKind.authority:
            assert request.action is not None and st.authority is not None
            if approve:
                st.authority.confirmedBy = who[:600]
                self.launch_action(request.action)
            else:
                self.final_stop(
                    StopReason.outsideAuthority,
                    f"{who} did not confirm the authority read from the task{said}",
                )
            return
        assert request.action is not None and request.amount is not None
        if not approve:
            self.final_stop(
                StopReason.paidActionNotApproved,
                f"{who} rejected the paid action '{request.action.action}'{said}",
            )
            return
        assert granted is not None
        short = guards.approved_short(request.amount, float(granted.amount))
        if short is not None:
            self.final_stop(StopReason.paidActionNotApproved, f"{who} approved too little: {short}")
            return
        grant = f"{float(granted.amount):.2f} {granted.currency}"
        action = request.action.model_copy(
            update={"approval": f"{who} added {grant} to the cost ceiling for this action."}
        )
        self.effects.append(
            Notify(
                f"approval-{request.id}-accepted",
                "ApprovalAccepted",
                f"{who} approved request {request.id}: {grant} for '{action.action}'."[:1000],
            )
        )
        self.launch_action(action)

    def health_answered(self) -> HealthState:
        return health.answered(self.status.health, self.now, stall_checks=self.stall_checks)

    def reject(self, error: str) -> None:
        st = self.status
        assert st.step is not None  # owns() checked it
        kind = st.step.kind
        st.step = None
        st.invalidStreak += 1
        st.lastRejection = error[:4000]
        seq = st.stepSeq
        what = "observation" if kind is StepKind.observe else "task reading"
        self.effects.append(
            Notify(
                f"step-{seq}-rejected",
                "ObservationRejected",
                f"The {what} of step {seq} was invalid and not counted: {error}"[:1000],
                warning=True,
            )
        )
        if st.invalidStreak > MAX_RETRIES_IN_A_ROW:
            self.stop(
                StopReason.blocked,
                f"The {what} was invalid {st.invalidStreak} times in a row: {error}",
            )
        else:
            self.launch_observe()

    def finished(self, result: ActionResult) -> None:
        step = self.status.step
        assert step is not None and step.action is not None
        self.status.step = None
        self.close_action(step, result.outcome, result.evidence, result.actualCost)
        if step.kind is StepKind.repair:
            if result.outcome is Outcome.blocked:
                self.stop(StopReason.blocked, f"The repair could not run: {result.evidence}")
                return
            if result.outcome is Outcome.succeeded:
                self.status.repairsDone = guards.record_repair(
                    self.status.repairsDone, step.action, step.check
                )
        self.launch_observe()

    def failed(self, message: str, permanent: bool) -> None:
        step = self.status.step
        assert step is not None
        self.status.step = None
        self.effects.append(
            Notify(
                f"step-{step.seq}-failed",
                "StepFailed",
                f"The {step.kind} step {step.seq} failed: {message}"[:1000],
                warning=True,
            )
        )
        self.judge_health(
            health.step_failed(self.status.health, self.now, stall_checks=self.stall_checks)
        )
        if permanent:
            self.stop(StopReason.blocked, f"The {step.kind} step cannot run: {message}")
            return
        if step.kind in (StepKind.observe, StepKind.extract):
            self.status.stepFailureStreak += 1
            if self.status.stepFailureStreak > MAX_RETRIES_IN_A_ROW:
                self.stop(
                    StopReason.blocked,
                    f"The {step.kind} step failed {self.status.stepFailureStreak} times in a "
                    "row: "
                    f"{message}",
                )
            else:
                self.launch_observe()
            return
        # The action's effect is unknown: record it as failed and verify by observing.
        self.close_action(step, Outcome.failed, f"The step failed to run: {message}", None)
        self.launch_observe()

    def timer_due(self) -> None:
        request = self.status.approval
        if request is not None:
            if self.now >= request.expiresAt:
                self.status.approval = None
                self.judge_health(self.health_answered())
                paid = request.kind is ApprovalKind.paidAction
                self.final_stop(
                    StopReason.paidActionNotApproved if paid else StopReason.blocked,
                    f"No answer came to approval request {request.id} by "
                    f"{request.expiresAt.isoformat()}: {request.message}",
                )
            return
        schedule = self.status.schedule
        if self.status.step is not None or schedule is None:
            return
        if self.now >= schedule.nextCheckAt:
            self.launch_observe()
            # Nothing but an observe step's launch (no stop at a limit or a cap, no reading
            # of an edited task first): no write is needed.
            self.unrecorded = [
                effect.kind if isinstance(effect, LaunchStep) else None for effect in self.effects
            ] == [StepKind.observe]
        elif schedule.wakeAt is not None and self.now >= schedule.wakeAt:
            self.wake(schedule.wokenBy)

    def woken(self, target: WatchTarget, change: str) -> None:
        """A watched target changed: check now, or once the wake interval since the last
        early check has passed. Only a waiting monitor wakes, and only for what it watches."""
        st = self.status
        schedule = st.schedule
        if st.step is not None or schedule is None or target not in schedule.watch:
            return
        what = wakes.wake_text(target, change)
        earliest = st.lastWakeAt + self.wake_interval if st.lastWakeAt is not None else None
        if earliest is None or self.now >= earliest:
            self.wake(what)
        elif schedule.wakeAt is None:
            schedule.wakeAt = earliest
            schedule.wokenBy = what

    def wake(self, what: str) -> None:
        # Recorded, unlike a timer's launch: nothing else would find why it started.
        self.status.lastWakeAt = self.now
        self.launch_observe(woken_by=what)

    def cancel(self) -> None:
        # The resource is gone: record why, and emit nothing more.
        self.status.monitor = MonitorState.stopped
        self.status.step = None
        self.status.schedule = None
        self.status.stop = StopInfo(
            reason=StopReason.cancelled, message="The monitor was deleted.", at=self.now
        )
        self.quiet = True

    # --- building blocks ---

    def judge_health(self, judged: HealthState) -> None:
        """Record the health; a change is an Event (not the first check's Healthy)."""
        before = self.status.health.state
        self.status.health = judged
        if judged.state is before or (before is Health.Unknown and judged.state is Health.Healthy):
            return
        text = f"Health {before} -> {judged.state}" + (
            f": {judged.message}" if judged.message else "."
        )
        self.effects.append(
            Notify(
                f"health-{self.status.stepSeq}-{judged.state}",
                "Health",
                text[:1000],
                warning=judged.state is not Health.Healthy,
            )
        )

    def limit_reached(self) -> bool:
        return self.status.checks >= self.spec.maxChecks

    def launch_observe(self, woken_by: str = "") -> None:
        """Observe the target; first read the task for its authority when this spec
        generation has none recorded yet."""
        if self.limit_reached():
            # Reachable only when maxChecks was lowered below the checks already made.
            self.stop_at_limit()
            return
        if not self.authority_is_current():
            self.launch(StepKind.extract, self.status.checks, None)
            return
        self.launch(StepKind.observe, self.status.checks + 1, None, woken_by=woken_by)

    def stop_at_limit(self) -> None:
        """Stop at a lowered safety limit with the final report of the last check."""
        self.final_stop(StopReason.safetyLimit, safety_limit_message(self.spec.maxChecks))

    def final_stop(self, reason: StopReason, message: str) -> None:
        """Stop between checks, with a final report of the last check."""
        observation = self.status.lastObservation
        if observation is None:
            self.stop(reason, message)
            return
        stop = self.mark_stopped(reason, message)
        self.report(observation, final=True)
        self.effects.append(StopMonitor(reason, stop.message, stop_hint(reason)))

    def launch_action(self, action: ActionRequest) -> None:
        st = self.status
        kind = StepKind.repair if action.kind is ActionKind.repair else StepKind.act
        st.attempts = guards.record_attempt(st.attempts, action)
        st.lastAction = LastAction(
            kind=action.kind,
            action=action.action,
            failureId=action.failureId,
            targetStateId=action.targetStateId,
            check=st.checks,
            at=self.now,
        )
        self.launch(kind, st.checks, action)

    def launch(
        self, kind: StepKind, check: int, action: ActionRequest | None, woken_by: str = ""
    ) -> None:
        st = self.status
        cap = self.spend_cap
        if cap is not None and float(st.modelUsage.costUsd) >= cap:
            self.stop(
                StopReason.blocked,
                f"The model cost of this monitor reached {float(st.modelUsage.costUsd):.4f} "
                f"USD, the GOALKEEPER_MODEL_SPEND_CAP_USD cap of {cap} USD; no further step "
                "runs.",
            )
            return
        if self.author_denied and kind is not StepKind.observe:
            # The author may not make these writes, or read what the observer reads.
            self.final_stop(StopReason.outsideAuthority, self.author_denied)
            return
        self.record_launch(kind, check, action, woken_by)
        if kind is StepKind.extract:
            # The person's words alone: nothing the target or a model wrote.
            step_input = StepInput(
                kind=kind,
                check=check,
                maxChecks=self.spec.maxChecks,
                task=self.spec.task,
                stopWhen=self.spec.stopWhen,
            )
        else:
            step_input = StepInput(
                kind=kind,
                check=check,
                maxChecks=self.spec.maxChecks,
                task=self.spec.task,
                stopWhen=self.spec.stopWhen,
                previousObservation=st.lastObservation,
                progressSummary=prompt_summary(st.progress, self.now),
                contract=st.contract,
                authorizedActions=st.authorizedActions,
                action=action,
                health=health.note_for_observe(st.health) if kind is StepKind.observe else "",
                wokenBy=woken_by,
                approvals=self.approval_window > timedelta(0),
            )
        self.effects.append(LaunchStep(st.stepSeq, kind, step_input, self.now))
        if kind in (StepKind.observe, StepKind.extract):
            return  # reading changes nothing; each observation is reported when it ends
        self.effects.append(
            Notify(
                f"step-{st.stepSeq}",
                "StepStarted",
                f"{kind} step {st.stepSeq} started for check {check} of {self.spec.maxChecks}.",
            )
        )

    def record_launch(
        self, kind: StepKind, check: int, action: ActionRequest | None, woken_by: str = ""
    ) -> None:
        st = self.status
        st.stepSeq += 1
        st.schedule = None  # no check is pending while a step runs
        st.step = StepInFlight(
            seq=st.stepSeq,
            kind=kind,
            check=check,
            startedAt=self.now,
            generation=st.observedGeneration,
            action=action,
            wokenBy=woken_by,
        )

    def close_action(
        self, step: StepInFlight, outcome: Outcome, evidence: str, actual_cost: Money | None
    ) -> None:
        st = self.status
        action = step.action
        assert action is not None
        if st.lastAction is not None:
            st.lastAction = st.lastAction.model_copy(
                update={"outcome": outcome, "evidence": evidence[:4000]}
            )
        if not guards.is_paid(st, action):
            return
        booked = guards.booked_cost(action.estimatedCost, actual_cost)
        if booked is None:
            return
        cost, estimated = booked
        entry = SpendEntry(check=step.check, action=action.action, cost=cost, estimated=estimated)
        st.spend.total = guards.add_spend(st.spend, entry.cost)
        st.spend.entries = [*st.spend.entries, entry][-LEDGER_ENTRIES:]

    def publish_schedule(
        self, last_check: datetime | None = None, watch: list[WatchTarget] | None = None
    ) -> None:
        """The next check, `everyMinutes` after the last one (by default: now), and the
        objects whose change may start it sooner."""
        last = self.now if last_check is None else last_check
        watched, left = wakes.wakeable(watch or ())
        next_at = last + self.spec.everyMinutes * self.minute
        schedule = Schedule(
            lastCheckAt=last,
            nextCheckAt=next_at,
            everyMinutes=self.spec.everyMinutes,
            watch=watched,
            description=wakes.schedule_text(next_at, watched, left),
        )
        self.status.schedule = schedule
        self.effects.append(PublishSchedule(schedule))

    def report(
        self,
        observation: Observation,
        *,
        next_action: str | None = None,
        next_check_minutes: int | None = None,
        final: bool = False,
        wakes_on: list[WatchTarget] | None = None,
    ) -> None:
        st = self.status
        # The first report of a run that a spec edit restarted says so.
        restarted = st.previousRuns[-1].stop if st.checks == 1 and st.previousRuns else None
        text = format_report(
            monitor=st.monitor,
            goal=st.goal,
            work=st.work,
            tracks=st.progress,
            notes=observation.report,
            last_action=st.lastAction,
            next_action=next_action,
            next_check_minutes=next_check_minutes,
            stop=st.stop,
            now=self.now,
            restarted_after=restarted,
            woken_by=self.woken_by,
            wakes_on=[t.ref for t in wakes_on or ()],
            authority=self.authority_lines(),
        )
        st.report = text
        st.reportedCheck = st.checks
        next_at = (
            self.now + next_check_minutes * self.minute if next_check_minutes is not None else None
        )
        summary = report_summary(
            check=st.checks,
            goal=st.goal,
            work=st.work,
            progress=st.progressSummary,
            next_check=next_at,
            stop=st.stop,
        )
        self.effects.append(EmitReport(check=st.checks, text=text, final=final, summary=summary))

    def authority_lines(self) -> list[str]:
        """What was read from the task, for the first report after it was recorded."""
        record = self.status.authority
        if record is None or self.status.checks != record.check + 1:
            return []
        return authority.describe(record)

    def report_and_stop(self, observation: Observation, reason: StopReason, message: str) -> None:
        stop = self.mark_stopped(reason, message)
        self.report(observation)
        self.effects.append(StopMonitor(reason, stop.message, stop_hint(reason)))

    def stop(self, reason: StopReason, message: str) -> None:
        stop = self.mark_stopped(reason, message)
        self.effects.append(StopMonitor(reason, stop.message, stop_hint(reason)))

    def mark_stopped(self, reason: StopReason, message: str) -> StopInfo:
        st = self.status
        st.monitor = MonitorState.stopped
        st.step = None
        st.schedule = None
        st.approval = None
        st.stop = StopInfo(reason=reason, message=message[:2000], at=self.now)
        return st.stop


def _activity(status: MonitorStatus) -> Activity:
    if status.monitor is MonitorState.stopped:
        return Activity.stopped
    if status.approval is not None:
        return Activity.awaitingApproval
    if status.step is not None:
        return {
            StepKind.extract: Activity.extracting,
            StepKind.observe: Activity.observing,
            StepKind.act: Activity.acting,
            StepKind.repair: Activity.repairing,
        }[status.step.kind]
    return Activity.waiting if status.schedule is not None else Activity.starting


# --- conditions ----------------------------------------------------------------------------


def _conditions(status: MonitorStatus, now: datetime) -> list[Condition]:
    """`Ready`, `Progressing` and `Healthy`, keeping lastTransitionTime while a status is
    unchanged."""
    ready, progressing = _condition_values(status)
    previous = {c.type: c for c in status.conditions}
    result = []
    values = (("Ready", ready), ("Progressing", progressing), ("Healthy", _healthy(status)))
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
        verb = {
            StepKind.extract: "Extracting",
            StepKind.observe: "Observing",
            StepKind.act: "Acting",
            StepKind.repair: "Repairing",
        }
        message = f"{step.kind} step {step.seq} for check {step.check} is running."
        return (true, verb[step.kind], message), (true, verb[step.kind], message)
    if status.approval is not None:
        message = f"Awaiting approval request {status.approval.id} until " + (
            f"{status.approval.expiresAt.isoformat()}."
        )
        return (true, "AwaitingApproval", message), (false, "AwaitingApproval", message)
    if status.schedule is not None:
        schedule = status.schedule
        message = schedule.description or f"Next check at {schedule.nextCheckAt.isoformat()}."
        return (true, "Waiting", message), (false, "Waiting", message)
    return (true, "Starting", "The first observation is about to start."), (
        true,
        "Starting",
        "The first observation is about to start.",
    )
