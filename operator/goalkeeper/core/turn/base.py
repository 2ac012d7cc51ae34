"""The decision's working copy of status, its effects so far, and how a turn reports and
stops. Every other layer of the turn builds on this one."""

from __future__ import annotations

from datetime import datetime

from goalkeeper.core import authority, health, modelconfig, reading
from goalkeeper.core.budget import fit_status
from goalkeeper.core.conditions import activity, conditions
from goalkeeper.core.events import Decision, Effect, EmitReport, Notify, StopMonitor
from goalkeeper.core.models import (
    ActionRequest,
    Health,
    HealthState,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    ObjectFacts,
    Observation,
    StepInFlight,
    StepKind,
    StepUsage,
    StopInfo,
    StopReason,
    WatchTarget,
)
from goalkeeper.core.policy import Context, Policy
from goalkeeper.core.report import format_report, report_summary, stop_hint


def safety_limit_message(max_checks: int) -> str:
    return f"Reached the {max_checks}-check safety limit."


class TurnBase:
    """One decision in progress: a working copy of status and the effects so far."""

    def __init__(
        self,
        spec: MonitorSpec | None,
        status: MonitorStatus,
        now: datetime,
        policy: Policy,
        context: Context,
    ) -> None:
        self._spec = spec
        self.status = status
        self.now = now
        self.policy = policy
        self.context = context
        self.effects: list[Effect] = []
        self.quiet = False
        self.unrecorded = False
        # The target change (or the person's request) that started the check being
        # reported, if any.
        self.woken_by = ""
        # The named objects as the accepted observation's step read them.
        self.facts: tuple[ObjectFacts, ...] = ()

    @property
    def spec(self) -> MonitorSpec:
        assert self._spec is not None, "only reject_spec decides without a spec"
        return self._spec

    def decision(self) -> Decision:
        if not self.quiet:
            self.status.conditions = conditions(self.status, self.now)
        self.status.activity = activity(self.status)
        return Decision(fit_status(self.status), tuple(self.effects), self.unrecorded)

    def count_usage(self, usage: StepUsage) -> None:
        step = self.status.step
        config = step.modelConfig if step is not None else ""
        self.status.usageByConfig = modelconfig.add_usage(self.status.usageByConfig, config, usage)
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

    def current_step(self, step: StepInFlight) -> bool:
        """False for a step launched under a spec generation that has since been edited."""
        return step.generation is None or step.generation == self.status.observedGeneration

    def authority_is_current(self) -> bool:
        """True when authority read from this spec generation's words is recorded."""
        return authority.is_current(self.status, self.status.observedGeneration)

    def condition_unmet(self, action: ActionRequest) -> str | None:
        """Why the grant the action names does not apply yet: its condition over a named
        object does not hold in the facts the observe step read (or they lack the object)."""
        grant = authority.grant_named(self.status.authority, action.authorizedActionId)
        if grant is None or grant.condition is None:
            return None
        holds = authority.condition_holds(grant.condition, self.facts)
        if holds:
            return None
        state = "the check did not read it" if holds is None else "it does not hold yet"
        return f"grant {grant.id} applies once {grant.condition}; {state}"

    def precondition_unmet(self, action: ActionRequest) -> str | None:
        """Why the typed act the action names would do nothing on the objects as the observe
        step read them (a resume of a Job that is not suspended, ...)."""
        grant = authority.grant_named(self.status.authority, action.authorizedActionId)
        if grant is None:
            return None
        why = authority.precondition_unmet(grant, self.facts)
        return None if why is None else f"grant {grant.id} ({reading.grant_line(grant)}): {why}"

    def synced_refusal(self, action: ActionRequest) -> str | None:
        """Why the typed act is refused on an object a GitOps controller keeps in sync."""
        grant = authority.grant_named(self.status.authority, action.authorizedActionId)
        if grant is None or grant.object is None:
            return None
        fact = authority.fact_of(grant.object, self.facts)
        return authority.unsynced_refusal(grant, None if fact is None else fact.syncedBy)

    def limit_reached(self) -> bool:
        return self.status.checks >= self.spec.maxChecks

    def person_can_answer(self) -> bool:
        """Whether a person is worth asking: only while a check is left to act on (or
        verify) their answer; at the safety limit the run stops instead."""
        return not self.limit_reached()

    def notify(self, what: str, reason: str, message: str, *, warning: bool = False) -> None:
        self.effects.append(Notify(what, reason, message[:1000], warning=warning))

    # --- health ---

    def judge_health(self, judged: HealthState) -> None:
        """Record the health; a change is an Event (not the first check's Healthy)."""
        before = self.status.health.state
        self.status.health = judged
        if judged.state is before or (before is Health.Unknown and judged.state is Health.Healthy):
            return
        text = f"Health {before} -> {judged.state}" + (
            f": {judged.message}" if judged.message else "."
        )
        self.notify(
            f"health-{self.status.stepSeq}-{judged.state}",
            "Health",
            text,
            warning=judged.state is not Health.Healthy,
        )

    def health_answered(self) -> HealthState:
        return health.answered(self.status.health, self.now, self.policy)

    # --- reports and stops ---

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
            self.now + next_check_minutes * self.policy.minute
            if next_check_minutes is not None
            else None
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

    def final_stop(self, reason: StopReason, message: str) -> None:
        """Stop between checks, with a final report of the last check."""
        observation = self.status.lastObservation
        if observation is None:
            self.stop(reason, message)
            return
        stop = self.mark_stopped(reason, message)
        self.report(observation, final=True)
        self.effects.append(StopMonitor(reason, stop.message, stop_hint(reason)))

    def stop_at_limit(self) -> None:
        """Stop at a lowered safety limit with the final report of the last check."""
        self.final_stop(StopReason.safetyLimit, safety_limit_message(self.spec.maxChecks))

    def stop(self, reason: StopReason, message: str) -> None:
        stop = self.mark_stopped(reason, message)
        self.effects.append(StopMonitor(reason, stop.message, stop_hint(reason)))

    def mark_stopped(self, reason: StopReason, message: str) -> StopInfo:
        st = self.status
        st.monitor = MonitorState.stopped
        st.step = None
        st.schedule = None
        st.approval = None
        st.pausedAt = None
        st.stop = StopInfo(reason=reason, message=message[:2000], at=self.now)
        return st.stop
