"""The engine's rules, one test each, and the monitor spec's acceptance cases at unit level."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from tests.support.engine_loop import T0, Loop
from tests.support.observations import (
    AUTHORIZED,
    action,
    contract,
    extraction,
    observation,
    paid_observation,
    result,
)

from goalkeeper.core.engine import (
    TIMER_JOB_GRACE,
    Cancelled,
    EmitReport,
    LaunchStep,
    Notify,
    ObservationAccepted,
    ObservationRejected,
    PublishSchedule,
    Started,
    StepFailed,
    StepFinished,
    StopMonitor,
    TimerDue,
    decide,
    timer_launched,
    timer_step_needs_its_job,
)
from goalkeeper.core.models import (
    GoalState,
    Health,
    LeafKind,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    ObjectFacts,
    Observation,
    StepKind,
    StopReason,
)
from goalkeeper.core.policy import Policy


def kinds(effects: tuple[object, ...]) -> list[str]:
    """The loop's effects; the Events that tell the user about steps are tested apart."""
    return [type(e).__name__ for e in effects if not isinstance(e, Notify)]


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
    assert [r.failureId for r in loop.status.repairsDone] == ["bad-flag"]

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
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    effects = loop.observe(paid_observation(ceiling, estimate, approval, observed))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.paidActionNotApproved
    assert message in stop.message
    assert not any(isinstance(e, LaunchStep) for e in effects)


def test_paid_action_within_ceiling_launches_and_ledger_grows() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    launched(loop.observe(paid_observation(10.0, 3.0)))
    loop.finish("succeeded", actualCost={"amount": 3.5, "currency": "USD"})
    assert loop.status.spend.total is not None and loop.status.spend.total.amount == 3.5
    assert loop.status.spend.entries[-1].estimated is False
    launched(loop.observe(paid_observation(10.0, 3.0, observed=1.0)))
    loop.finish("succeeded")  # no actual cost reported: the estimate is booked
    assert loop.status.spend.total.amount == 6.5
    assert loop.status.spend.entries[-1].estimated is True
    # The ledger, not the target's lower figure, now decides: 6.5 + 4 > 10.
    effects = loop.observe(paid_observation(10.0, 4.0, observed=1.0))
    assert stopped_with(effects).reason is StopReason.paidActionNotApproved
    assert "spent 6.50 + estimated 4.00 > 10.00" in stopped_with(effects).message


@pytest.mark.parametrize(
    ("actual", "booked", "estimated"),
    [(None, 4.0, True), (1.0, 4.0, True), (4.0, 4.0, False), (6.5, 6.5, False)],
)
def test_paid_action_books_the_larger_of_estimate_and_actual_cost(
    actual: float | None, booked: float, estimated: bool
) -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    launched(loop.observe(paid_observation(10.0, 4.0)))
    extra = {} if actual is None else {"actualCost": {"amount": actual, "currency": "USD"}}
    loop.finish("succeeded", **extra)
    assert loop.status.spend.total is not None
    assert loop.status.spend.total.amount == booked
    assert (loop.status.spend.entries[-1].cost.amount, loop.status.spend.entries[-1].estimated) == (
        booked,
        estimated,
    )


def test_a_lower_reported_cost_never_makes_room_under_the_ceiling() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    launched(loop.observe(paid_observation(10.0, 6.0)))
    loop.finish("succeeded", actualCost={"amount": 0.0, "currency": "USD"})
    effects = loop.observe(paid_observation(10.0, 6.0))  # 6 booked + 6 > 10
    assert stopped_with(effects).reason is StopReason.paidActionNotApproved
    acts = [e for e in loop.log if isinstance(e, LaunchStep) and e.kind is StepKind.act]
    assert len(acts) == 1


def test_paid_flag_on_authorized_action_without_estimate_stops() -> None:
    loop = Loop(granted_by_first_observation=True)
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


def test_invalid_observations_are_retried_after_growing_delays_then_end_the_run() -> None:
    loop = Loop(everyMinutes=60)
    loop.start()
    delays = []
    for attempt in range(1, 5):
        effects = loop.send(ObservationRejected(loop.seq, "route: Input should be 'wait'"))
        assert kinds(effects) == ["PublishSchedule"], attempt
        assert loop.status.step is None and loop.status.checks == 0
        schedule = loop.status.schedule
        assert schedule is not None and "was invalid" in schedule.description
        delays.append(schedule.nextCheckAt - loop.now)
        assert launched(loop.retry()).input.check == 1, "a retry is the same check again"
    assert delays == sorted(delays) and len(set(delays)) == 4, delays
    assert timedelta(seconds=22) <= delays[0] <= timedelta(seconds=30)
    effects = loop.send(ObservationRejected(loop.seq, "route: Input should be 'wait'"))
    assert kinds(effects) == ["StopMonitor"]  # no report for a rejected observation
    stop = stopped_with(effects)
    assert stop.reason is StopReason.blocked
    assert "5 times in a row" in stop.message and "GOALKEEPER_INVALID_ANSWERS_LIMIT" in stop.message
    assert "route: Input should be 'wait'" in stop.message
    assert loop.status.checks == 0


def test_the_next_observation_is_told_why_the_last_one_was_refused() -> None:
    loop = Loop(everyMinutes=1)
    loop.start()
    loop.send(ObservationRejected(loop.seq, "Contradicted by the facts: Job build is suspended"))
    step = launched(loop.retry()).input
    assert step.lastRejection == "Contradicted by the facts: Job build is suspended"
    loop.observe(observation("wait"))
    loop.later(1)
    assert launched(loop.send(TimerDue())).input.lastRejection == ""


def test_the_invalid_answer_limit_is_a_setting() -> None:
    loop = Loop(options={"invalid_answers": 1})
    loop.start()
    stop = stopped_with(loop.send(ObservationRejected(loop.seq, "bad")))
    assert "1 times in a row" in stop.message


def test_invalid_streak_resets_after_an_accepted_observation() -> None:
    loop = Loop(everyMinutes=1)
    loop.start()
    loop.send(ObservationRejected(loop.seq, "bad"))
    loop.retry()
    loop.send(ObservationRejected(loop.seq, "bad"))
    loop.retry()
    loop.observe(observation("wait"))
    assert loop.status.invalidStreak == 0 and loop.status.failingSince is None
    loop.later(1)
    loop.send(TimerDue())
    rejected = loop.send(ObservationRejected(loop.seq, "bad"))
    assert kinds(rejected) == ["PublishSchedule"]
    assert loop.status.schedule is not None
    assert loop.status.schedule.nextCheckAt - loop.now <= timedelta(seconds=30), "first again"


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


# --- pinned authority ------------------------------------------------------------------------

WIPE_DB = {"id": "wipe-db", "description": "Drop every table.", "paid": False}
TEN_USD = {"amount": 10, "currency": "USD"}


def reported(effects: tuple[object, ...]) -> str:
    reports = [e for e in effects if isinstance(e, EmitReport)]
    assert len(reports) == 1, effects
    return reports[0].text


def test_the_recorded_authority_is_pinned_and_a_widening_lie_is_refused() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    # No action, so no object may change: an allowed resource is a typed grant's object.
    granted = contract(costCeiling=TEN_USD, allowedResources=[])
    loop.observe(observation("wait", authorizedActions=[], contract=granted))
    assert loop.status.authorizedActions == []
    assert loop.status.contract is not None and loop.status.contract.costCeiling is not None
    assert (loop.status.contract.costCeiling.amount, loop.status.contract.costCeiling.currency) == (
        10,
        "USD",
    )
    assert loop.status.authorityGeneration == 1
    loop.later(30)
    loop.send(TimerDue())

    lie = observation(
        "act",
        authorizedActions=[{**WIPE_DB, "paid": True}],
        contract=contract(costCeiling={"amount": 1e12, "currency": "USD"}, allowedResources=[]),
        action=action(
            authorizedActionId="wipe-db",
            action="Drop every table of the build database.",
            mutationSet=["database build"],
            estimatedCost={"amount": 5e11, "currency": "USD"},
            approval="approved by the observation itself",
        ),
    )
    effects = loop.observe(lie)
    assert kinds(effects) == ["EmitReport", "StopMonitor"]
    assert not any(isinstance(e, LaunchStep) for e in effects)
    stop = stopped_with(effects)
    assert stop.reason is StopReason.outsideAuthority
    attempt = (
        "The observation tried to add authorized action 'wipe-db' and raise the cost ceiling "
        "from 10 USD to 1e12 USD."
    )
    assert stop.message.startswith(attempt)
    assert attempt in reported(effects)
    # The lie took no effect: the record is the one read from the task.
    assert loop.status.authorizedActions == []
    assert loop.status.contract is not None and loop.status.contract.costCeiling is not None
    assert loop.status.contract.costCeiling.amount == 10
    assert loop.status.spend.total is None


def test_widening_stops_even_on_the_wait_route() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("wait"))
    loop.later(30)
    loop.send(TimerDue())
    widened = contract(allowedSystems=["Job build in namespace default", "every namespace"])
    effects = loop.observe(observation("wait", contract=widened))
    assert kinds(effects) == ["EmitReport", "StopMonitor"]
    stop = stopped_with(effects)
    assert stop.reason is StopReason.outsideAuthority
    assert "add allowed system 'every namespace'" in stop.message
    assert loop.status.schedule is None and loop.status.checks == 2


@pytest.mark.parametrize(
    ("changes", "reason", "attempt"),
    [
        ({"allowedFiles": ["/etc/passwd"]}, "outsideAuthority", "add allowed file '/etc/passwd'"),
        (
            {"allowedResources": ["jobs/build", "secrets/*"]},
            "outsideAuthority",
            "add allowed resource 'secrets/*'",
        ),
        (
            {"allowedRecoveryActions": ["resume the build Job", "delete the namespace"]},
            "outsideAuthority",
            "add allowed recovery action 'delete the namespace'",
        ),
        (
            {"forbiddenChanges": ["the model provider"]},
            "outsideAuthority",
            "remove forbidden change 'source code'",
        ),
        ({"requiredChecks": []}, "outsideAuthority", "remove required check 'outputs verified'"),
        ({"protectedContracts": []}, "protectedContractChange", "remove protected contract"),
        (
            {"costCeiling": {"amount": 10, "currency": "EUR"}},
            "outsideAuthority",
            "change the cost ceiling from 10 USD to 10 EUR",
        ),
    ],
)
def test_every_kind_of_widening_is_refused_and_named(
    changes: dict[str, object], reason: str, attempt: str
) -> None:
    first = contract(costCeiling=TEN_USD, protectedContracts=["provider openai, model gpt-5"])
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(observation("wait", contract=first))
    loop.later(30)
    loop.send(TimerDue())
    effects = loop.observe(observation("wait", contract={**first, **changes}))
    stop = stopped_with(effects)
    assert stop.reason == reason
    assert attempt in stop.message and attempt in reported(effects)
    assert loop.status.contract == observation("wait", contract=first).contract


def test_a_new_cost_ceiling_where_none_was_recorded_is_a_widening() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(observation("wait"))
    loop.later(30)
    loop.send(TimerDue())
    effects = loop.observe(paid_observation(10.0, 1.0))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.outsideAuthority
    assert "set a cost ceiling of 10 USD where none was recorded" in stop.message
    assert not any(isinstance(e, LaunchStep) for e in effects)


def test_paid_to_unpaid_is_a_widening() -> None:
    paid = [{"id": "resume-build", "description": "Resume (GPU hours).", "paid": True}]
    unpaid = [{"id": "resume-build", "description": "Resume (GPU hours).", "paid": False}]
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(observation("wait", authorizedActions=paid))
    loop.later(30)
    loop.send(TimerDue())
    effects = loop.observe(observation("act", authorizedActions=unpaid))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.outsideAuthority
    assert "turn authorized action 'resume-build' from paid to unpaid" in stop.message
    assert not any(isinstance(e, LaunchStep) for e in effects)
    assert loop.status.authorizedActions[0].paid is True


def test_paid_flag_comes_from_the_record_not_the_request() -> None:
    # Recorded as paid; the act request names it without any cost: refused as unverifiable.
    paid = [{"id": "resume-build", "description": "Resume (GPU hours).", "paid": True}]
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    first = observation("wait", authorizedActions=paid, contract=contract(costCeiling=TEN_USD))
    loop.observe(first)
    loop.later(30)
    loop.send(TimerDue())
    effects = loop.observe(
        observation("act", authorizedActions=paid, contract=contract(costCeiling=TEN_USD))
    )
    assert stopped_with(effects).reason is StopReason.paidActionNotApproved


def test_a_stated_cost_of_zero_makes_no_paid_action_of_a_recorded_one_that_is_not() -> None:
    free = action(estimatedCost={"amount": 0, "currency": "USD"})
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(observation("wait", contract=contract(costCeiling=TEN_USD)))
    loop.later(30)
    loop.send(TimerDue())
    effects = loop.observe(observation("act", contract=contract(costCeiling=TEN_USD), action=free))
    assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.act], effects
    # A recorded paid action stays paid whatever cost the request states.
    paid = [{**AUTHORIZED[0], "paid": True}]
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(
        observation("wait", authorizedActions=paid, contract=contract(costCeiling=TEN_USD))
    )
    loop.later(30)
    loop.send(TimerDue())
    effects = loop.observe(
        observation(
            "act", authorizedActions=paid, contract=contract(costCeiling=TEN_USD), action=free
        )
    )
    assert not any(isinstance(e, LaunchStep) and e.kind is StepKind.act for e in effects)


def test_narrowing_takes_effect_and_cannot_be_undone() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(observation("wait", contract=contract(costCeiling=TEN_USD)))
    loop.later(30)
    loop.send(TimerDue())
    narrower = contract(
        costCeiling={"amount": 4, "currency": "USD"},
        allowedResources=[],
        forbiddenChanges=["source code", "the model provider", "the build image"],
    )
    fix_only = [AUTHORIZED[1]]
    # The narrowing itself takes effect before the request is judged.
    effects = loop.observe(observation("act", contract=narrower, authorizedActions=fix_only))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.outsideAuthority
    assert "'resume-build' is not among the recorded authorized actions (fix-config)" in (
        stop.message
    )
    recorded = loop.status.contract
    assert recorded is not None and recorded.costCeiling is not None
    assert recorded.costCeiling.amount == 4 and recorded.allowedResources == []
    assert recorded.forbiddenChanges[-1] == "the build image"
    assert [a.id for a in loop.status.authorizedActions] == ["fix-config"]


def test_narrowed_authority_is_what_later_checks_are_held_to() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(observation("wait", contract=contract(costCeiling=TEN_USD)))
    loop.later(30)
    loop.send(TimerDue())
    lower = contract(costCeiling={"amount": 4, "currency": "USD"})
    loop.observe(observation("wait", contract=lower, authorizedActions=[AUTHORIZED[0]]))
    loop.later(30)
    loop.send(TimerDue())
    # Restating what was narrowed away is a widening now.
    effects = loop.observe(observation("act", contract=contract(costCeiling=TEN_USD)))
    stop = stopped_with(effects)
    assert stop.reason is StopReason.outsideAuthority
    assert "add authorized action 'fix-config'" in stop.message
    assert "raise the cost ceiling from 4 USD to 10 USD" in stop.message


def test_restatement_in_other_words_case_or_spacing_is_not_a_widening() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("wait"))
    loop.later(30)
    loop.send(TimerDue())
    restated = contract(
        goal="Finish   the build, whatever it takes, and also wipe the database.",
        allowedSystems=["  job BUILD in namespace   default. "],
        allowedResources=["JOBS/BUILD"],
        forbiddenChanges=["Source Code;", "the  model\nprovider", "source code"],
        requiredChecks=["Outputs verified!"],
        allowedRecoveryActions=["Resume the build job."],
    )
    reworded = [
        {"id": "resume-build", "description": "Resume it, and delete the namespace too."},
        {"id": "fix-config", "description": "Fix the config."},
    ]
    effects = loop.observe(observation("act", contract=restated, authorizedActions=reworded))
    step = launched(effects)
    assert step.kind is StepKind.act
    # The recorded wording stays: the goal and action descriptions are the first check's.
    first = observation("wait").contract
    assert loop.status.contract == first
    assert step.input.contract == first
    # A recorded action is described by its typed grant, not by any model's words.
    assert [a.description for a in step.input.authorizedActions] == [
        "resume Job build",
        "repair the build configuration",
    ]


def test_restart_with_the_same_generation_keeps_the_authority() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act"))
    loop.send(Started(generation=1))  # the operator restarted mid-step
    loop.finish()
    effects = loop.observe(observation("act", authorizedActions=[*AUTHORIZED, WIPE_DB]))
    assert stopped_with(effects).reason is StopReason.outsideAuthority
    assert "add authorized action 'wipe-db'" in stopped_with(effects).message


def test_a_new_generation_extracts_the_authority_again() -> None:
    loop = Loop(granted_by_first_observation=True, everyMinutes=1)
    loop.start()
    loop.observe(observation("wait"))
    loop.spec = loop.spec.model_copy(update={"task": "Also wipe the database."})
    loop.send(Started(generation=2))
    loop.later(1)
    step = launched(loop.send(TimerDue()))
    # The new task is read afresh, from its words alone: no old record, no observation.
    assert step.kind is StepKind.extract and step.input.task == "Also wipe the database."
    assert step.input.contract is None and step.input.authorizedActions == []
    assert step.input.previousObservation is None and step.input.progressSummary == ""
    wipe = action(
        authorizedActionId="wipe-db",
        action="Drop every table.",
        mutationSet=["statefulsets/build-db"],
    )
    widened = contract(allowedResources=["statefulsets/build-db"])
    effects = loop.observe(
        observation("act", authorizedActions=[WIPE_DB], contract=widened, action=wipe)
    )
    act = launched(effects)
    assert act.kind is StepKind.act and [a.id for a in act.input.authorizedActions] == ["wipe-db"]
    assert loop.status.authorityGeneration == 2


@pytest.mark.parametrize(
    ("mutation", "reason", "entry"),
    [
        # Prose names no object: it is outside the typed grants' objects, whatever it says.
        (["jobs/build", "Source code of the build"], "outsideAuthority", "Source code"),
        (["the model"], "outsideAuthority", "the model"),
        (["Provider OpenAI."], "outsideAuthority", "Provider OpenAI."),
        # An object a prohibition names is refused as forbidden, before any coverage.
        (["deployments/db"], "outsideAuthority", "'deployments/db'"),
    ],
)
def test_mutation_set_naming_a_forbidden_or_protected_entry_is_refused(
    mutation: list[str], reason: str, entry: str
) -> None:
    pinned = contract(
        protectedContracts=["provider openai, model gpt-5"],
        forbiddenChanges=["source code", "the model provider", "deployments/db"],
    )
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    effects = loop.observe(observation("act", contract=pinned, action=action(mutationSet=mutation)))
    stop = stopped_with(effects)
    assert stop.reason == reason
    assert entry in stop.message
    assert not any(isinstance(e, LaunchStep) for e in effects)


def test_step_input_carries_the_recorded_authority() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    loop.observe(observation("wait", contract=contract(costCeiling=TEN_USD)))
    loop.later(30)
    step = launched(loop.send(TimerDue()))
    assert step.input.contract == loop.status.contract
    assert step.input.authorizedActions == loop.status.authorizedActions
    narrower = contract(costCeiling={"amount": 2, "currency": "USD"})
    act = launched(loop.observe(observation("act", contract=narrower)))
    assert act.input.contract is not None and act.input.contract.costCeiling is not None
    assert act.input.contract.costCeiling.amount == 2


# --- repair memory ------------------------------------------------------------------------------


def test_repair_a_then_b_then_a_again_stops_with_repair_repeated() -> None:
    loop = Loop()
    loop.start()
    first = action(kind="repair", authorizedActionId="fix-config", failureId="bad-flag")
    second = action(kind="repair", authorizedActionId="fix-config", failureId="missing-volume")
    assert launched(loop.observe(observation("act", action=first))).kind is StepKind.repair
    loop.finish("succeeded")
    assert launched(loop.observe(observation("act", action=second))).kind is StepKind.repair
    loop.finish("succeeded")
    assert [r.failureId for r in loop.status.repairsDone] == ["bad-flag", "missing-volume"]
    effects = loop.observe(observation("act", action=first))
    assert stopped_with(effects).reason is StopReason.repairRepeated
    assert "bad-flag" in stopped_with(effects).message
    repairs = [e for e in loop.log if isinstance(e, LaunchStep) and e.kind is StepKind.repair]
    assert len(repairs) == 2


def test_repair_memory_is_bounded() -> None:
    from goalkeeper.core.guards import record_repair
    from goalkeeper.core.models import REPAIRS_KEPT, ActionRequest, RepairDone

    done: list[RepairDone] = []
    for i in range(REPAIRS_KEPT + 5):
        request = ActionRequest.model_validate(action(kind="repair", failureId=f"f{i}"))
        done = record_repair(done, request, i)
    assert len(done) == REPAIRS_KEPT
    assert done[0].failureId == "f5" and done[-1].failureId == f"f{REPAIRS_KEPT + 4}"
    MonitorStatus(repairsDone=done)  # fits the status bound


# --- the edges of the loop ----------------------------------------------------------------------


def test_result_from_a_step_not_in_flight_is_ignored() -> None:
    loop = Loop()
    loop.start()
    stale = loop.seq
    loop.send(ObservationRejected(stale, "bad"))
    before = loop.status
    assert loop.send(ObservationAccepted(stale, observation("stop"))) == ()
    assert loop.status == before
    loop.retry()
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
    loop.observe(observation("wait"))
    loop.spec = loop.spec.model_copy(update={"everyMinutes": 5, "task": "A new task."})
    loop.send(Started(generation=2))
    loop.later(30)
    assert launched(loop.send(TimerDue())).input.task.startswith("A new task.")
    effects = loop.observe(observation("wait"))
    assert effects[1].schedule.everyMinutes == 5  # type: ignore[attr-defined]
    loop.later(5)
    assert launched(loop.send(TimerDue())).input.task.startswith("A new task.")


def test_observation_made_before_a_spec_edit_is_set_aside_and_made_again() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    loop.spec = loop.spec.model_copy(update={"everyMinutes": 5, "task": "A new task."})
    loop.send(Started(generation=2))
    # The step in flight answered the old task: not a check, no report; the new task is
    # read for its authority, then observed.
    effects = loop.observe(observation("act", authorizedActions=[WIPE_DB]))
    step = launched(effects)
    assert kinds(effects) == ["LaunchStep"] and step.kind is StepKind.extract
    assert step.input.task == "A new task."
    assert loop.status.checks == 0 and loop.status.authorityGeneration == 1
    effects = loop.observe(observation("wait"))
    assert effects[1].schedule.everyMinutes == 5  # type: ignore[attr-defined]
    assert loop.status.authorityGeneration == 2 and loop.status.checks == 1


def test_failed_observe_steps_back_off_and_the_run_survives_a_two_hour_outage() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    loop.observe(observation("wait"))
    loop.later(30)
    loop.send(TimerDue())
    outage_ends = loop.now + timedelta(hours=2)
    delays = []
    while loop.now < outage_ends:
        effects = loop.send(StepFailed(loop.seq, "HTTP 503 from the model provider"))
        assert loop.status.monitor is MonitorState.active
        assert kinds(effects)[-1] == "PublishSchedule", "a retry, never back to back"
        schedule = loop.status.schedule
        assert schedule is not None and "HTTP 503" in schedule.description
        delays.append(schedule.nextCheckAt - loop.now)
        assert loop.status.activity.value == "waiting"
        loop.retry()
    assert loop.status.health.state is Health.Failing
    growing = delays[: delays.index(max(delays)) + 1]
    assert growing == sorted(growing) and max(delays) <= timedelta(minutes=30)
    assert len(delays) < 12, "capped at the interval, not hammering the provider"
    assert loop.status.checks == 1, "failed checks never count"
    loop.observe(observation("wait"))
    assert loop.status.checks == 2 and loop.status.health.state is Health.Healthy
    assert loop.status.failingSince is None and loop.status.stepFailureStreak == 0


def test_steps_failing_for_the_whole_window_end_the_run() -> None:
    loop = Loop(everyMinutes=60, options={"failure_window": timedelta(hours=6)})
    loop.start()
    began = loop.now
    stop = None
    while stop is None:
        effects = loop.send(StepFailed(loop.seq, "Job deadline exceeded"))
        stop = next((e for e in effects if isinstance(e, StopMonitor)), None)
        if stop is None:
            loop.retry()
    assert loop.now - began >= timedelta(hours=6)
    assert loop.now - began < timedelta(hours=7), "ends once the window is over"
    assert stop.reason is StopReason.blocked and "Job deadline exceeded" in stop.message
    assert "GOALKEEPER_FAILURE_WINDOW_SECONDS" in stop.message


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


def test_act_step_that_ended_without_a_result_has_an_unknown_outcome() -> None:
    loop = Loop()
    loop.start()
    loop.observe(observation("act"))
    why = (
        "Job m-3-act failed (BackoffLimitExceeded): Job has reached the specified backoff "
        "limit; pod m-3-act-abcde: act Succeeded: outcome=succeeded | the result was not "
        "written: HTTP 503"
    )
    effects = loop.send(StepFailed(loop.seq, why, effect_unknown=True))
    assert launched(effects).kind is StepKind.observe, "the next observation decides"
    last = loop.status.lastAction
    assert last is not None and last.outcome == "unknown"
    assert "BackoffLimitExceeded" in last.evidence and "the result was not written" in last.evidence
    assert "the next observation decides" in last.evidence
    [told] = [n for n in notices(effects) if n.reason == "StepFailed"]
    assert "ended without a result" in told.message and "unknown" in told.message
    assert "failed:" not in told.message.split("decides")[0]
    # The report of the check that follows says so, and never that the act failed.
    report = next(e for e in loop.observe(observation("wait")) if isinstance(e, EmitReport))
    assert (
        "Last action outcome: unknown: Whether the action took effect is unknown; the next "
        "observation decides. The step ended without a result to take: Job m-3-act failed"
    ) in report.text
    assert "Last action outcome: failed" not in report.text
    assert loop.status.lastAction is not None and loop.status.lastAction.outcome == "unknown"


def test_a_reading_step_that_ended_without_a_result_is_retried_as_before() -> None:
    loop = Loop()
    loop.start()
    effects = loop.send(StepFailed(loop.seq, "Job m-2-observe failed", effect_unknown=True))
    assert kinds(effects)[-1] == "PublishSchedule" and loop.status.lastAction is None
    assert loop.status.stepFailureStreak == 1


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
    loop = Loop(granted_by_first_observation=True)
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


# --- spec edits take effect at once -------------------------------------------------------


def waiting_loop(**spec: object) -> Loop:
    loop = Loop(**spec)
    loop.start()
    loop.observe(observation("wait"))
    assert loop.status.schedule is not None and loop.status.step is None
    return loop


def test_a_new_interval_moves_the_pending_check_from_the_last_one() -> None:
    loop = waiting_loop(everyMinutes=30)
    last = loop.status.schedule.lastCheckAt  # type: ignore[union-attr]
    loop.later(5)
    loop.spec = loop.spec.model_copy(update={"everyMinutes": 10})
    effects = loop.send(Started(generation=2))
    assert kinds(effects) == ["PublishSchedule"]
    schedule = loop.status.schedule
    assert schedule is not None and schedule.lastCheckAt == last
    assert schedule.nextCheckAt == last + timedelta(minutes=10)
    assert schedule.everyMinutes == 10
    # A restart with the same generation leaves the timer where it is.
    assert loop.send(Started(generation=2)) == ()


def test_a_limit_lowered_to_the_count_stops_with_a_final_report() -> None:
    loop = waiting_loop(maxChecks=10)
    loop.spec = loop.spec.model_copy(update={"maxChecks": 1})
    effects = loop.send(Started(generation=2))
    assert kinds(effects) == ["EmitReport", "StopMonitor"]
    report = effects[0]
    assert isinstance(report, EmitReport) and report.final and report.check == 1
    assert "Monitor: stopped" in report.text and "Work: running" in report.text
    assert stopped_with(effects).reason is StopReason.safetyLimit
    assert loop.status.reportedCheck == 1 and loop.status.checks == 1


def test_no_check_is_pending_while_a_step_runs() -> None:
    loop = waiting_loop()
    loop.later(31)
    launched(loop.send(TimerDue()))
    assert loop.status.step is not None and loop.status.schedule is None


# --- what a user sees ---------------------------------------------------------------------


def notices(effects: tuple[object, ...]) -> list[Notify]:
    return [e for e in effects if isinstance(e, Notify)]


def test_each_mutation_start_failure_and_rejection_is_one_event() -> None:
    loop = Loop()
    started = [n.reason for n in notices(loop.start())]
    assert started == ["AuthorityRecorded"], "an observation is reported when it ends, not before"
    started = notices(loop.observe(observation("act")))
    assert [(n.what, n.reason, n.warning) for n in started] == [("step-3", "StepStarted", False)]
    assert "act step 3 started for check 1" in started[0].message
    loop.finish()
    rejected = notices(loop.send(ObservationRejected(loop.seq, "route: Input should be 'wait'")))
    assert next((n.what, n.reason, n.warning) for n in rejected) == (
        "step-4-rejected",
        "ObservationRejected",
        True,
    )
    assert "route: Input should be 'wait'" in rejected[0].message
    loop.retry()
    failed = notices(
        loop.send(
            StepFailed(loop.seq, "Model request limit reached; raise GOALKEEPER_REQUEST_LIMIT")
        )
    )
    assert failed[0].what == "step-5-failed" and failed[0].warning
    assert "GOALKEEPER_REQUEST_LIMIT" in failed[0].message


def test_reports_carry_a_one_line_summary_and_stops_a_next_step() -> None:
    loop = Loop(everyMinutes=15)
    loop.start()
    report = next(e for e in loop.observe(observation("wait")) if isinstance(e, EmitReport))
    assert report.summary.startswith("check 1: goal incomplete, work running")
    assert report.summary.endswith("next 10:30Z") and "\n" not in report.summary
    assert loop.status.activity.value == "waiting"
    loop.later(16)
    loop.send(TimerDue())
    assert loop.status.activity.value == "observing"
    stop = stopped_with(
        loop.observe(
            observation("stop", goal="complete", work="complete", stopReason="goalComplete")
        )
    )
    assert stop.hint and loop.status.activity.value == "stopped"


def test_a_spec_edit_restarts_a_stopped_monitor_as_a_new_run() -> None:
    loop = Loop(maxChecks=1)
    loop.start()
    loop.observe(observation("wait"))
    assert loop.status.stop is not None and loop.status.stop.reason is StopReason.safetyLimit
    last_report, last_seq = loop.status.report, loop.status.stepSeq
    loop.spec = loop.spec.model_copy(update={"maxChecks": 5})
    effects = loop.send(Started(generation=2))
    assert kinds(effects) == ["LaunchStep"]
    st = loop.status
    assert st.monitor is MonitorState.active and st.checks == 0 and st.observedGeneration == 2
    assert st.stepSeq == last_seq + 1, "step names are never reused"
    assert st.previousRuns[-1].report == last_report
    assert st.previousRuns[-1].stop.reason is StopReason.safetyLimit
    first = next(e for e in loop.observe(observation("wait")) if isinstance(e, EmitReport))
    assert "Restarted: a spec edit began a new run after a stop (safetyLimit)" in first.text
    # The same generation again (an operator restart) changes nothing more.
    assert loop.send(Started(generation=2)) == ()


def test_a_deleted_monitor_never_restarts() -> None:
    loop = Loop()
    loop.start()
    loop.send(Cancelled())
    assert loop.send(Started(generation=2)) == ()
    assert loop.status.monitor is MonitorState.stopped and loop.status.previousRuns == []


def test_model_usage_adds_up_and_a_spend_cap_stops_before_the_next_step() -> None:
    from goalkeeper.core.models import StepUsage

    loop = Loop(everyMinutes=1)
    loop.start()
    usage = StepUsage(requests=2, inputTokens=900, outputTokens=60, costUsd=0.5)
    decision = decide(
        loop.spec,
        loop.status,
        ObservationAccepted(loop.seq, observation("wait"), usage=usage),
        loop.now,
        policy=Policy(model_spend_cap_usd=1.0),
    )
    total = decision.status.modelUsage
    assert (total.requests, total.inputTokens, total.outputTokens) == (2, 900, 60)
    assert total.costUsd == 0.5 and total.unpricedSteps == 0
    # A second report of the same step (a retried reconcile) counts nothing again.
    again = decide(
        loop.spec, decision.status, ObservationAccepted(1, observation(), usage=usage), loop.now
    )
    assert again.status.modelUsage == total
    status = decision.status
    now = loop.now + timedelta(minutes=2)
    second = decide(loop.spec, status, TimerDue(), now, policy=Policy(model_spend_cap_usd=1.0))
    seq = second.status.step.seq  # type: ignore[union-attr]
    unpriced = StepUsage(requests=1, inputTokens=10, outputTokens=1, costUsd=0.6)
    third = decide(
        loop.spec,
        second.status,
        ObservationAccepted(seq, observation(), usage=unpriced),
        now + timedelta(minutes=2),
        policy=Policy(model_spend_cap_usd=1.0),
    )
    later = decide(
        loop.spec,
        third.status,
        TimerDue(),
        now + timedelta(minutes=5),
        policy=Policy(model_spend_cap_usd=1.0),
    )
    stop = stopped_with(later.effects)
    assert stop.reason is StopReason.blocked and "GOALKEEPER_MODEL_SPEND_CAP_USD" in stop.message
    assert not [e for e in later.effects if isinstance(e, LaunchStep)]


# --- a timed check's launch needs no status write ------------------------------------------


def test_only_a_timer_launch_of_an_observe_step_goes_unrecorded() -> None:
    loop = Loop(everyMinutes=15)
    assert not decide(loop.spec, loop.status, Started(generation=1), loop.now).unrecorded
    loop.start()
    accepted = decide(
        loop.spec, loop.status, ObservationAccepted(loop.seq, observation("wait")), loop.now
    )
    assert not accepted.unrecorded, "the observation is written"
    loop.observe(observation("wait"))
    assert not decide(loop.spec, loop.status, TimerDue(), loop.now).unrecorded, "not due yet"
    loop.later(15)
    waiting = loop.status
    due = decide(loop.spec, waiting, TimerDue(), loop.now)
    assert due.unrecorded and kinds(due.effects) == ["LaunchStep"]
    step = launched(due.effects)
    assert step.at == loop.now and step.seq == waiting.stepSeq + 1
    # The status that decision stands for is found again from the waiting status alone.
    assert timer_launched(waiting, step.seq, step.at) == due.status
    assert timer_launched(waiting, step.seq + 1, step.at) is None, "not the next step"
    early = waiting.schedule.nextCheckAt - timedelta(seconds=1)  # type: ignore[union-attr]
    assert timer_launched(waiting, step.seq, early) is None, "launched before it was due"
    assert timer_launched(due.status, step.seq, step.at) is None, "already in flight"
    missing = timer_launched(waiting, step.seq, step.at, job_missing=True)
    assert missing is None, "its Job is yet to be made: the timer launches it again"


def test_a_timer_step_waits_for_its_job_only_unfinished_and_within_the_grace() -> None:
    at = T0
    assert timer_step_needs_its_job(at, at, finished=False)
    just_inside = at + TIMER_JOB_GRACE - timedelta(seconds=1)
    assert timer_step_needs_its_job(at, just_inside, finished=False)
    assert not timer_step_needs_its_job(at, at + TIMER_JOB_GRACE, finished=False)
    assert not timer_step_needs_its_job(at, at, finished=True), "a result needs no Job"


def test_a_timer_that_stops_at_the_limit_is_written() -> None:
    loop = Loop(everyMinutes=15, maxChecks=2)
    loop.start()
    loop.observe(observation("wait"))
    loop.spec = loop.spec.model_copy(update={"maxChecks": 1})
    loop.later(15)
    due = decide(loop.spec, loop.status, TimerDue(), loop.now)
    assert not due.unrecorded and due.status.monitor.value == "stopped"


def _accepted(loop: Loop, obs: Observation, *facts: ObjectFacts) -> tuple[object, ...]:
    if loop.reading():
        loop.extract()
    return loop.send(ObservationAccepted(loop.seq, obs, facts=facts))


def _build(**numbers: object) -> ObjectFacts:
    base: dict[str, object] = {"suspended": False, "active": 0, "succeeded": 0, "failed": 0}
    return ObjectFacts.model_validate(
        {"kind": "Job", "name": "build", "namedIn": ["stopWhen"], **base, **numbers}
    )


@pytest.mark.parametrize(
    ("stop_when", "facts", "checks", "reason", "said"),
    [
        (
            "Stop when Job build has succeeded, or give up if Job build fails.",
            {"failed": 1, "ended": "Failed"},
            1,
            StopReason.failed,
            '"Job build fails" holds',
        ),
        (
            "Stop when Job build has succeeded, or after 3 checks.",
            {"active": 1},
            3,
            StopReason.safetyLimit,
            "3 checks accepted, the limit is 3",
        ),
    ],
)
def test_a_give_up_leaf_that_holds_ends_the_run_whatever_route_the_model_chose(
    stop_when: str, facts: dict[str, object], checks: int, reason: StopReason, said: str
) -> None:
    loop = Loop(stopWhen=stop_when, everyMinutes=1)
    loop.start()
    for _ in range(checks - 1):
        effects = _accepted(loop, observation("wait"), _build(active=1))
        assert "StopMonitor" not in kinds(effects)
        loop.later(1)
        loop.send(TimerDue())
    effects = _accepted(loop, observation("wait"), _build(**facts))
    stop = stopped_with(effects)
    assert stop.reason is reason and said in stop.message
    assert loop.status.stop is not None and loop.status.stop.reason is reason


def test_crash_looping_pods_stop_the_run_blocked_naming_the_pods_own_message() -> None:
    loop = Loop(
        stopWhen="Stop when Deployment api is available, or give up if its pods keep crashing.",
        everyMinutes=1,
    )
    loop.start()

    def api(waiting: str | None) -> ObjectFacts:
        last = {"pod": "api-7f", "exitCode": 3, "reason": "Error", "message": "missing DB_URL"}
        return ObjectFacts.model_validate(
            {
                "kind": "Deployment",
                "name": "api",
                "namedIn": ["stopWhen"],
                "replicas": 2,
                "availableReplicas": 0,
                "pods": {"count": 2, "restarts": 3, "waiting": waiting, "lastExit": last},
            }
        )

    effects = _accepted(loop, observation("wait"), api(None))
    assert "StopMonitor" not in kinds(effects), "restarted, but not backing off: not a loop"
    loop.later(1)
    loop.send(TimerDue())
    stop = stopped_with(_accepted(loop, observation("wait"), api("CrashLoopBackOff")))
    assert stop.reason is StopReason.blocked
    assert '"its pods keep crashing" holds' in stop.message
    assert 'pod api-7f last exited 3 (Error): "missing DB_URL"' in stop.message


def test_a_time_limit_counts_from_when_the_stop_rule_was_recorded() -> None:
    loop = Loop(stopWhen="Stop when Job build has succeeded, or after 30 minutes.", everyMinutes=20)
    loop.start()
    effects = _accepted(loop, observation("wait"), _build(active=1))
    assert "StopMonitor" not in kinds(effects)
    assert loop.status.authority is not None and loop.status.authority.recordedAt is not None
    loop.later(20)
    loop.send(TimerDue())
    effects = _accepted(loop, observation("wait"), _build(active=1))
    assert "StopMonitor" not in kinds(effects), "20 minutes in"
    loop.later(20)
    loop.send(TimerDue())
    stop = stopped_with(_accepted(loop, observation("wait"), _build(active=1)))
    assert stop.reason is StopReason.safetyLimit
    assert "40 minutes into the run, the limit is 30" in stop.message


@pytest.mark.parametrize(
    "answer",
    [
        observation("wait"),
        observation("stop", work="blocked", stopReason="outsideAuthority"),
        observation("stop", work="blocked", stopReason="materialBlocker"),
    ],
)
def test_a_done_group_the_facts_meet_completes_the_run_whatever_the_model_answered(
    answer: Observation,
) -> None:
    # Seen: the Job succeeded while the model answered, which stopped 'outsideAuthority'.
    loop = Loop(stopWhen="Stop when Job build has succeeded, or after 1 checks.")
    loop.start()
    stop = stopped_with(_accepted(loop, answer, _build(succeeded=1, ended="Complete")))
    assert stop.reason is StopReason.goalComplete
    assert loop.status.goal is GoalState.complete
    report = loop.status.lastObservation
    assert report is not None and '"Job build has succeeded" holds' in report.report


def test_pods_crashing_while_ready_give_up_even_though_the_done_leaf_holds() -> None:
    loop = Loop(
        stopWhen="Stop when Deployment api is available, or give up if its pods keep crashing."
    )
    loop.start()
    crashing = ObjectFacts.model_validate(
        {
            "kind": "Deployment",
            "name": "api",
            "namedIn": ["stopWhen"],
            "replicas": 1,
            "availableReplicas": 1,
            "pods": {"count": 1, "restarts": 4, "waiting": "CrashLoopBackOff"},
        }
    )
    assert stopped_with(_accepted(loop, observation("wait"), crashing)).reason is StopReason.blocked


def _storefront(started: datetime, rolling_out: bool = False) -> ObjectFacts:
    return ObjectFacts.model_validate(
        {
            "kind": "Deployment",
            "name": "storefront",
            "namedIn": ["stopWhen", "task"],
            "replicas": 1,
            "availableReplicas": 1,
            "updatedReplicas": 1,
            "rollingOut": rolling_out,
            "pods": {"count": 1, "restarts": 0, "oldestStart": started.isoformat()},
        }
    )


def test_the_restart_a_rule_on_pod_starts_needs_is_the_engines_own_act_and_done_once() -> None:
    """ "Every running pod of storefront started after this Monitor did": the run's start is
    stamped into the leaf as the rule is recorded; older pods are restarted by the person's
    grant whatever the model said, the check waits while the rollout replaces them, and the
    run completes once the newest run, whatever the model says then."""
    loop = Loop(
        task="You may restart Deployment storefront once.",
        stopWhen="Stop when every running pod of storefront started after this Monitor did.",
        extraction=extraction(
            allowedSystems=[], allowedResources=[], allowedRecoveryActions=[], authorizedActions=[]
        ),
    )
    loop.start()

    def said(route: str, **overrides: object) -> Observation:
        return observation(route, contract=None, authorizedActions=[], **overrides)

    assert loop.status.authority is not None and loop.status.authority.goal is not None
    [[leaf]] = loop.status.authority.goal.done
    assert leaf.kind is LeafKind.podsStartedAfter and leaf.since == T0
    step = launched(_accepted(loop, said("wait"), _storefront(T0 - timedelta(hours=1))))
    assert step.kind is StepKind.act and step.input.action is not None
    assert step.input.action.authorizedActionId == "restart-storefront"
    assert step.input.action.mutationSet == ["deployments/storefront"]
    loop.finish()  # observed again at once
    for answer in (
        said("wait"),
        said("stop", goal="incomplete", work="blocked", stopReason="outsideAuthority"),
    ):
        rolling = _storefront(T0 - timedelta(hours=1), rolling_out=True)
        effects = _accepted(loop, answer, rolling)
        assert "LaunchStep" not in kinds(effects) and "StopMonitor" not in kinds(effects)
        assert loop.status.schedule is not None
        loop.now = loop.status.schedule.nextCheckAt
        loop.send(TimerDue())
    renewed = _storefront(loop.now)
    stop = stopped_with(_accepted(loop, said("wait"), renewed))
    assert stop.reason is StopReason.goalComplete
    assert [(a.targetStateId, a.count) for a in loop.status.attempts] == [
        ("restart-storefront-g1", 1)
    ]


def test_a_done_group_the_facts_do_not_meet_leaves_the_models_answer_to_the_engine() -> None:
    loop = Loop(stopWhen="Stop when Job build has succeeded.")
    loop.start()
    effects = _accepted(loop, observation("wait"), _build(active=1))
    assert "StopMonitor" not in kinds(effects) and loop.status.goal is not GoalState.complete
    judged = Loop(stopWhen="Stop when the build looks right to a reviewer.")
    judged.start()
    effects = _accepted(judged, observation("wait"), _build(succeeded=1, ended="Complete"))
    assert "StopMonitor" not in kinds(effects), "a judged leaf is the model's to affirm"


def test_a_completion_the_model_reports_wins_over_a_limit_reached_at_the_same_check() -> None:
    loop = Loop(stopWhen="Stop when Job build has succeeded, or after 1 checks.")
    loop.start()
    done = _build(succeeded=1, ended="Complete")
    finished = observation("stop", goal="complete", stopReason="goalComplete")
    effects = _accepted(loop, finished, done)
    assert stopped_with(effects).reason is StopReason.goalComplete


@pytest.mark.parametrize(
    "answer",
    [
        observation("wait"),
        observation("stop", goal="incomplete", work="blocked", stopReason="materialBlocker"),
        observation("stop", goal="incomplete", work="blocked", stopReason="outsideAuthority"),
        observation("stop", goal="incomplete", work="blocked", stopReason="paidActionNotApproved"),
    ],
    ids=["wait", "blocker", "no-authority-seen", "approval-with-nothing-paid"],
)
def test_the_one_grant_that_makes_a_false_leaf_true_is_acted_on_whatever_the_model_said(
    answer: Observation,
) -> None:
    """Job build is suspended, the words allow resuming it, and the stop rule's only leaf is
    'Job build succeeded': the check resumes it, though the model waited or stopped short."""
    loop = Loop(stopWhen="Stop when Job build has succeeded.")
    loop.start()
    effects = _accepted(loop, answer, _build(suspended=True))
    step = launched(effects)
    assert step.kind is StepKind.act and step.input.action is not None
    assert step.input.action.authorizedActionId == "resume-build"
    assert step.input.action.mutationSet == ["jobs/build"]
    assert loop.status.lastObservation is not None
    assert (
        "grant resume-build (resume Job build) makes it hold" in loop.status.lastObservation.reason
    )
    # Running: the grant's act would change nothing; the model's wait stands.
    loop.finish()
    effects = _accepted(loop, observation("wait"), _build(active=1))
    assert "LaunchStep" not in kinds(effects) and "PublishSchedule" in kinds(effects)
