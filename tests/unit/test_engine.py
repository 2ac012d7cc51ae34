"""The engine's rules, one test each, and the monitor spec's acceptance cases at unit level."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tests.support.observations import action, contract, observation, result

from goalkeeper.core.engine import (
    Cancelled,
    EmitReport,
    Event,
    LaunchStep,
    ObservationAccepted,
    ObservationRejected,
    PublishSchedule,
    Started,
    StepFailed,
    StepFinished,
    StopMonitor,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    Observation,
    StepKind,
    StopReason,
)

T0 = datetime(2026, 8, 16, 10, 15, 30, tzinfo=UTC)


class Loop:
    """Drives the engine as the operator would, keeping status and a clock."""

    def __init__(self, **spec: object) -> None:
        self.spec = MonitorSpec.model_validate({"task": "Finish the nightly build.", **spec})
        self.status = MonitorStatus()
        self.now = T0
        self.log: list[object] = []

    def send(self, event: Event) -> tuple[object, ...]:
        decision = decide(self.spec, self.status, event, self.now)
        self.status = decision.status
        self.log.extend(decision.effects)
        return decision.effects

    @property
    def seq(self) -> int:
        assert self.status.step is not None, "no step in flight"
        return self.status.step.seq

    def start(self) -> tuple[object, ...]:
        return self.send(Started(generation=1))

    def observe(self, obs: Observation) -> tuple[object, ...]:
        return self.send(ObservationAccepted(self.seq, obs))

    def finish(self, outcome: str = "succeeded", **kw: object) -> tuple[object, ...]:
        return self.send(StepFinished(self.seq, result(outcome, **kw)))

    def later(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


def kinds(effects: tuple[object, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


def launched(effects: tuple[object, ...]) -> LaunchStep:
    steps = [e for e in effects if isinstance(e, LaunchStep)]
    assert len(steps) == 1, effects
    return steps[0]


def stopped_with(effects: tuple[object, ...]) -> StopMonitor:
    stops = [e for e in effects if isinstance(e, StopMonitor)]
    assert len(stops) == 1, effects
    return stops[0]


# --- the engine's rules ----------------------------------------------------------------------


def test_first_observation_starts_immediately_and_interval_applies_only_after_wait() -> None:
    loop = Loop(everyMinutes=15)
    effects = loop.start()
    assert kinds(effects) == ["LaunchStep"]
    assert launched(effects).kind is StepKind.observe
    assert launched(effects).input.check == 1
    assert loop.status.schedule is None

    effects = loop.observe(observation("act"))
    assert "PublishSchedule" not in kinds(effects)
    effects = loop.finish()
    assert kinds(effects) == ["LaunchStep"]  # observe again at once, no interval
    effects = loop.observe(observation("wait"))
    schedule = next(e for e in effects if isinstance(e, PublishSchedule)).schedule
    assert schedule.nextCheckAt - schedule.lastCheckAt == timedelta(minutes=15)


def test_wait_emits_one_report_then_schedule_then_timer() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    effects = loop.observe(observation("wait"))
    assert kinds(effects) == ["EmitReport", "PublishSchedule"]
    schedule = effects[1].schedule  # type: ignore[attr-defined]
    assert schedule.lastCheckAt == T0
    assert schedule.nextCheckAt == T0 + timedelta(minutes=30)
    assert schedule.everyMinutes == 30
    dumped = schedule.model_dump(mode="json")
    assert dumped["lastCheckAt"] == "2026-08-16T10:15:30Z"
    assert dumped["nextCheckAt"] == "2026-08-16T10:45:30Z"

    loop.later(29)
    assert loop.send(TimerDue()) == ()  # not due yet
    loop.later(1)
    effects = loop.send(TimerDue())
    assert launched(effects).kind is StepKind.observe
    assert launched(effects).input.check == 2


def test_no_schedule_is_published_on_act_or_stop() -> None:
    loop = Loop()
    loop.start()
    assert "PublishSchedule" not in kinds(loop.observe(observation("act")))
    loop.finish()
    assert "PublishSchedule" not in kinds(loop.observe(observation("stop")))


@pytest.mark.parametrize("kind", ["advance", "recover"])
@pytest.mark.parametrize("outcome", ["succeeded", "failed", "blocked"])
def test_direct_action_launches_one_act_step_then_observes_immediately(
    kind: str, outcome: str
) -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("act", action=action(kind=kind)))
    assert kinds(effects) == ["EmitReport", "LaunchStep"]
    step = launched(effects)
    assert step.kind is StepKind.act
    assert step.input.action is not None and step.input.action.kind == kind
    effects = loop.finish(outcome)
    assert kinds(effects) == ["LaunchStep"]
    assert launched(effects).kind is StepKind.observe
    assert loop.status.lastAction is not None and loop.status.lastAction.outcome == outcome
    assert not any(isinstance(e, LaunchStep) and e.kind is StepKind.repair for e in loop.log), (
        "advance and recover never launch the repair workflow"
    )


def test_repair_observes_immediately_and_stops_when_same_failure_returns() -> None:
    loop = Loop()
    loop.start()
    repair = action(kind="repair", authorizedActionId="fix-config", failureId="bad-flag")
    effects = loop.observe(observation("act", action=repair))
    assert launched(effects).kind is StepKind.repair
    effects = loop.finish("succeeded")
    assert launched(effects).kind is StepKind.observe
    assert loop.status.repairGuard is not None
    assert loop.status.repairGuard.failureId == "bad-flag"

    effects = loop.observe(observation("act", action=repair))
    assert stopped_with(effects).reason is StopReason.repairRepeated
    assert not any(isinstance(e, LaunchStep) for e in effects)
    repairs = [e for e in loop.log if isinstance(e, LaunchStep) and e.kind is StepKind.repair]
    assert len(repairs) == 1, "the same repair cycle never runs twice"


def test_repair_of_a_different_failure_after_a_repair_may_run() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act", action=action(kind="repair", failureId="bad-flag")))
    loop.finish("succeeded")
    other = action(kind="repair", failureId="missing-volume")
    assert launched(loop.observe(observation("act", action=other))).kind is StepKind.repair


def test_blocked_repair_stops_with_its_evidence() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act", action=action(kind="repair")))
    effects = loop.finish("blocked", evidence="No repair workflow is configured.")
    stop = stopped_with(effects)
    assert stop.reason is StopReason.blocked
    assert "No repair workflow is configured." in stop.message


def test_same_failure_and_target_state_is_acted_on_at_most_twice() -> None:
    loop = Loop()
    loop.start()
    for _ in range(2):
        launched(loop.observe(observation("act", action=action(kind="recover"))))
        loop.finish("failed")
    effects = loop.observe(observation("act", action=action(kind="recover")))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.blocked
    assert "build-suspended" in stop.message and "2 times" in stop.message
    acts = [e for e in loop.log if isinstance(e, LaunchStep) and e.kind is StepKind.act]
    assert len(acts) == 2


def test_failed_action_may_lead_to_a_new_recovery() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act"))
    loop.finish("failed")
    recovery = action(kind="recover", failureId="build-oom", targetStateId="build-21-oom")
    assert launched(loop.observe(observation("act", action=recovery))).kind is StepKind.act


@pytest.mark.parametrize(
    ("overrides", "missing"),
    [
        ({"authorizedActionId": "delete-everything"}, "'delete-everything' is not among"),
        ({"authorizedActionId": ""}, "names no authorized action"),
        ({"authorityBasis": ""}, "no authority basis"),
        ({"mutationSet": []}, "no mutation set"),
    ],
)
def test_action_outside_authority_stops_and_names_missing_decision(
    overrides: dict[str, object], missing: str
) -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("act", action=action(**overrides)))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.outsideAuthority
    assert missing in stop.message
    assert kinds(effects) == ["EmitReport", "StopMonitor"]


def paid_observation(
    ceiling: float | None,
    estimate: float,
    approval: str | None = "budget-42",
    observed: float | None = None,
) -> Observation:
    extra = (
        {"observedSpend": {"amount": observed, "currency": "USD"}} if observed is not None else {}
    )
    return observation(
        "act",
        contract=contract(
            costCeiling=None if ceiling is None else {"amount": ceiling, "currency": "USD"}
        ),
        action=action(estimatedCost={"amount": estimate, "currency": "USD"}, approval=approval),
        **extra,
    )


@pytest.mark.parametrize(
    ("ceiling", "estimate", "approval", "observed", "message"),
    [
        (None, 5.0, "budget-42", None, "no cost ceiling"),
        (10.0, 5.0, None, None, "names no spending approval"),
        (10.0, 5.0, "  ", None, "names no spending approval"),
        (10.0, 11.0, "budget-42", None, "would exceed the cost ceiling"),
        (10.0, 5.0, "budget-42", 6.0, "spent 6.00 + estimated 5.00 > 10.00"),
    ],
)
def test_paid_action_launches_only_with_ceiling_approval_and_room(
    ceiling: float | None,
    estimate: float,
    approval: str | None,
    observed: float | None,
    message: str,
) -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(paid_observation(ceiling, estimate, approval, observed))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.paidActionNotApproved
    assert message in stop.message
    assert not any(isinstance(e, LaunchStep) for e in effects)


def test_paid_action_within_ceiling_launches_and_ledger_grows() -> None:
    loop = Loop()
    loop.start()
    launched(loop.observe(paid_observation(10.0, 4.0)))
    loop.finish("succeeded", actualCost={"amount": 3.5, "currency": "USD"})
    assert loop.status.spend.total is not None and loop.status.spend.total.amount == 3.5
    assert loop.status.spend.entries[-1].estimated is False
    launched(loop.observe(paid_observation(10.0, 4.0, observed=1.0)))
    loop.finish("succeeded")  # no actual cost reported: the estimate is booked
    assert loop.status.spend.total.amount == 7.5
    assert loop.status.spend.entries[-1].estimated is True
    # The ledger, not the target's lower figure, now decides: 7.5 + 4 > 10.
    effects = loop.observe(paid_observation(10.0, 4.0, observed=1.0))
    assert stopped_with(effects).reason is StopReason.paidActionNotApproved


def test_paid_flag_on_authorized_action_without_estimate_stops() -> None:
    loop = Loop()
    loop.start()
    paid_actions = [{"id": "resume-build", "description": "Resume (GPU hours).", "paid": True}]
    effects = loop.observe(observation("act", authorizedActions=paid_actions))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.paidActionNotApproved
    assert "no cost estimate" in stop.message


def test_max_checks_reports_real_state_then_stops_with_safety_limit() -> None:
    loop = Loop(maxChecks=2, everyMinutes=1)
    loop.start()
    loop.observe(observation("wait"))
    loop.later(1)
    loop.send(TimerDue())
    effects = loop.observe(observation("wait", work="waiting"))
    assert kinds(effects) == ["EmitReport", "StopMonitor"]
    report = effects[0]
    assert isinstance(report, EmitReport)
    assert "Goal: incomplete" in report.text and "Work: waiting" in report.text
    assert stopped_with(effects).message == "Reached the 2-check safety limit."
    assert loop.status.checks == 2


def test_max_checks_stops_before_an_action_it_could_not_verify() -> None:
    loop = Loop(maxChecks=1)
    loop.start()
    effects = loop.observe(observation("act"))
    assert stopped_with(effects).reason is StopReason.safetyLimit
    assert not any(isinstance(e, LaunchStep) for e in effects)


def test_lowered_max_checks_stops_at_the_next_timer_without_a_new_check() -> None:
    loop = Loop(maxChecks=5, everyMinutes=1)
    loop.start()
    loop.observe(observation("wait"))
    loop.spec = loop.spec.model_copy(update={"maxChecks": 1})
    loop.later(1)
    effects = loop.send(TimerDue())
    assert stopped_with(effects).message == "Reached the 1-check safety limit."
    assert loop.status.checks == 1


def test_stop_emits_final_report_before_stopping() -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("stop"))
    assert kinds(effects) == ["EmitReport", "StopMonitor"]
    text = effects[0].text  # type: ignore[attr-defined]
    assert "Monitor: stopped" in text and "Goal: complete" in text and "Work: complete" in text
    assert loop.status.monitor is MonitorState.stopped
    assert loop.status.stop is not None and loop.status.stop.reason is StopReason.goalComplete


def test_cancelled_emits_nothing_more() -> None:
    loop = Loop()
    loop.start()
    assert loop.send(Cancelled()) == ()
    assert loop.status.monitor is MonitorState.stopped
    assert loop.status.stop is not None and loop.status.stop.reason is StopReason.cancelled
    assert loop.send(TimerDue()) == ()


def test_invalid_observation_is_not_a_check_and_is_retried_twice_then_blocks() -> None:
    loop = Loop()
    loop.start()
    for attempt in (1, 2):
        effects = loop.send(ObservationRejected(loop.seq, "route: Input should be 'wait'"))
        assert kinds(effects) == ["LaunchStep"], attempt
        assert launched(effects).input.check == 1
        assert loop.status.checks == 0
    effects = loop.send(ObservationRejected(loop.seq, "route: Input should be 'wait'"))
    assert kinds(effects) == ["StopMonitor"]  # no report for a rejected observation
    stop = stopped_with(effects)
    assert stop.reason is StopReason.blocked
    assert "route: Input should be 'wait'" in stop.message
    assert loop.status.checks == 0


def test_invalid_streak_resets_after_an_accepted_observation() -> None:
    loop = Loop(everyMinutes=1)
    loop.start()
    loop.send(ObservationRejected(loop.seq, "bad"))
    loop.send(ObservationRejected(loop.seq, "bad"))
    loop.observe(observation("wait"))
    assert loop.status.invalidStreak == 0
    loop.later(1)
    loop.send(TimerDue())
    assert kinds(loop.send(ObservationRejected(loop.seq, "bad"))) == ["LaunchStep"]


def test_work_is_running_only_when_the_observation_says_so() -> None:
    loop = Loop()
    loop.start()
    assert loop.status.work == "unknown"  # an active monitor implies nothing
    loop.observe(observation("act", work="idle"))
    assert loop.status.monitor is MonitorState.active
    assert loop.status.work == "idle"
    loop.finish()
    assert loop.status.work == "idle"  # a finished action is not evidence either
    loop.observe(observation("wait", work="running"))
    assert loop.status.work == "running"


# --- the edges of the loop ----------------------------------------------------------------------


def test_result_from_a_step_not_in_flight_is_ignored() -> None:
    loop = Loop()
    loop.start()
    stale = loop.seq
    loop.send(ObservationRejected(stale, "bad"))
    before = loop.status
    assert loop.send(ObservationAccepted(stale, observation("stop"))) == ()
    assert loop.status == before
    assert loop.send(StepFinished(loop.seq, result())) == ()  # an act result for an observe step


def test_restart_with_a_step_in_flight_or_a_schedule_launches_nothing() -> None:
    loop = Loop()
    loop.start()
    assert loop.send(Started(generation=1)) == ()
    loop.observe(observation("wait"))
    assert loop.send(Started(generation=2)) == ()
    assert loop.status.observedGeneration == 2


def test_spec_edit_takes_effect_from_the_next_decision() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    loop.spec = loop.spec.model_copy(update={"everyMinutes": 5, "task": "A new task."})
    loop.send(Started(generation=2))
    effects = loop.observe(observation("wait"))
    assert effects[1].schedule.everyMinutes == 5  # type: ignore[attr-defined]
    loop.later(5)
    assert launched(loop.send(TimerDue())).input.task == "A new task."


def test_observe_step_that_fails_to_run_is_retried_twice_then_blocks() -> None:
    loop = Loop()
    loop.start()
    loop.send(StepFailed(loop.seq, "pod failed"))
    loop.send(StepFailed(loop.seq, "pod failed"))
    stop = stopped_with(loop.send(StepFailed(loop.seq, "Job deadline exceeded")))
    assert stop.reason is StopReason.blocked and "Job deadline exceeded" in stop.message


def test_permanent_step_failure_stops_at_once() -> None:
    loop = Loop()
    loop.start()
    effects = loop.send(StepFailed(loop.seq, "ServiceAccount goalkeeper-observer is missing", True))
    stop = stopped_with(effects)
    assert "goalkeeper-observer" in stop.message


def test_act_step_that_fails_to_run_counts_as_failed_and_is_verified() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act"))
    effects = loop.send(StepFailed(loop.seq, "pod evicted"))
    assert launched(effects).kind is StepKind.observe
    assert loop.status.lastAction is not None and loop.status.lastAction.outcome == "failed"


def test_conditions_follow_the_loop() -> None:
    loop = Loop()
    loop.start()
    ready = {c.type: c for c in loop.status.conditions}
    assert ready["Ready"].reason == "Observing" and ready["Progressing"].status == "True"
    assert ready["Ready"].observedGeneration == 1
    loop.observe(observation("wait"))
    conds = {c.type: c for c in loop.status.conditions}
    assert conds["Progressing"].status == "False" and conds["Progressing"].reason == "Waiting"
    assert conds["Ready"].lastTransitionTime == T0
    loop.later(30)
    loop.send(TimerDue())
    loop.observe(observation("stop"))
    conds = {c.type: c for c in loop.status.conditions}
    assert conds["Ready"].reason == "GoalComplete" and conds["Progressing"].reason == "Stopped"


# --- the monitor spec's acceptance cases, at engine level ---------------------------------------


def test_acceptance_01_goal_already_complete() -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("stop"))
    assert kinds(effects) == ["EmitReport", "StopMonitor"]
    assert [e.kind for e in loop.log if isinstance(e, LaunchStep)] == [StepKind.observe]


def test_acceptance_02_work_active_so_monitor_waits() -> None:
    loop = Loop(everyMinutes=15)
    loop.start()
    assert kinds(loop.observe(observation("wait"))) == ["EmitReport", "PublishSchedule"]
    assert loop.status.work == "running" and loop.status.monitor is MonitorState.active


def test_acceptance_03_work_idle_so_monitor_starts_it() -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("act", action=action(action="Start Job build.")))
    assert "Next action: Start Job build." in effects[0].text  # type: ignore[attr-defined]
    assert launched(effects).kind is StepKind.act


def test_acceptance_04_saved_work_exists_so_monitor_resumes_it() -> None:
    loop = Loop()
    loop.start()
    resume = action(action="Resume Job build from the 21 saved outputs.", kind="recover")
    step = launched(loop.observe(observation("act", action=resume)))
    assert step.input.action is not None and "saved outputs" in step.input.action.action


def test_acceptance_05_action_succeeds_so_monitor_observes_immediately() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act"))
    effects = loop.finish("succeeded")
    assert kinds(effects) == ["LaunchStep"] and launched(effects).kind is StepKind.observe


def test_acceptance_06_action_fails_once_then_recovery_succeeds() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act"))
    loop.finish("failed")
    loop.observe(observation("act", action=action(kind="recover", failureId="oom")))
    loop.finish("succeeded")
    effects = loop.observe(observation("wait"))
    assert kinds(effects) == ["EmitReport", "PublishSchedule"]


def test_acceptance_07_same_repaired_failure_returns_so_monitor_stops() -> None:
    test_repair_observes_immediately_and_stops_when_same_failure_returns()


def test_acceptance_08_action_outside_authority_so_monitor_stops() -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("act", action=action(authorizedActionId="rewrite-src")))
    assert stopped_with(effects).reason is StopReason.outsideAuthority
    assert [e.kind for e in loop.log if isinstance(e, LaunchStep)] == [StepKind.observe]


def test_acceptance_09_paid_action_exceeds_limit_so_not_launched() -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(paid_observation(10.0, 25.0))
    assert stopped_with(effects).reason is StopReason.paidActionNotApproved
    assert [e.kind for e in loop.log if isinstance(e, LaunchStep)] == [StepKind.observe]


def test_acceptance_10_monitor_active_while_target_idle() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act", work="idle"))
    assert (loop.status.monitor, loop.status.work) == (MonitorState.active, "idle")


def test_acceptance_11_target_completes_between_timed_observations() -> None:
    loop = Loop(everyMinutes=10)
    loop.start()
    loop.observe(observation("wait"))
    loop.later(10)
    loop.send(TimerDue())
    effects = loop.observe(observation("stop"))
    assert stopped_with(effects).reason is StopReason.goalComplete
    assert loop.status.goal == "complete"


def test_acceptance_12_unknown_input_fields_fail_before_run_creation() -> None:
    from pydantic import ValidationError

    for field in ("audience", "repair", "checkTimeoutMinutes"):
        with pytest.raises(ValidationError, match=field):
            MonitorSpec.model_validate({"task": "x", field: 1})


def test_acceptance_13_normal_restart_does_not_use_repair() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act", action=action(kind="recover", action="Restart Job build.")))
    assert loop.status.step is not None and loop.status.step.kind is StepKind.act


def test_acceptance_14_real_defect_uses_repair_path() -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("act", action=action(kind="repair")))
    assert launched(effects).kind is StepKind.repair


def test_acceptance_15_no_target_specific_api_required() -> None:
    # Observations carry plain facts; nothing in the loop needs a target-side API.
    loop = Loop()
    loop.start()
    obs = observation("wait", progress=None)
    assert kinds(loop.observe(obs)) == ["EmitReport", "PublishSchedule"]


def test_invalid_stored_spec_stops_as_blocked_naming_the_problem() -> None:
    from goalkeeper.core.engine import reject_spec

    decision = reject_spec(MonitorStatus(), "everyMinutes: less than or equal to 1440", T0)
    stop = stopped_with(decision.effects)
    assert stop.reason is StopReason.blocked and "everyMinutes" in stop.message
    assert reject_spec(decision.status, "again", T0).effects == ()
