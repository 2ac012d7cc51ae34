"""Human approvals in the engine: a paid action that needs one waits for a person, takes
exactly the amount they approve for that action, and stops on a rejection or no answer."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.support.engine_loop import Loop
from tests.support.observations import (
    AUTHORIZED,
    TASK,
    contract,
    observation,
    paid_observation,
)

from goalkeeper.approvals import approval_body
from goalkeeper.core.engine import (
    ApprovalAnswered,
    EmitReport,
    LaunchStep,
    Notify,
    ObservationAccepted,
    Started,
    StopMonitor,
    TimerDue,
)
from goalkeeper.core.models import (
    Activity,
    ApprovalDecision,
    FactKind,
    Health,
    JobEnd,
    MonitorApprovalSpec,
    MonitorState,
    MonitorStatus,
    NamedIn,
    ObjectFacts,
    Observation,
    StepKind,
    StopReason,
)
from goalkeeper.core.steps import next_event

WINDOW = timedelta(hours=24)
ALICE = "alice@example.com"
MONITOR_UID = "3f0c9a52-monitor-uid"


def awaiting(ceiling: float | None = 10.0, estimate: float = 15.0, **kw: Any) -> Loop:
    # The task grants the paid action and the ceiling the first observation restates.
    loop = Loop(
        options={"approval_window": WINDOW}, everyMinutes=30, granted_by_first_observation=True
    )
    loop.start()
    loop.effects = loop.observe(paid_observation(ceiling, estimate, **kw))
    return loop


def answer(
    loop: Loop,
    decision: str = "approve",
    name: str = "build-x1",
    owners: tuple[str, ...] = (MONITOR_UID,),
    **spec: Any,
) -> tuple[object, ...]:
    """The MonitorApproval `name`, owned by `owners`, answering the open request."""
    assert loop.status.approval is not None
    body = {
        "monitor": "build",
        "requestId": loop.status.approval.id,
        "decision": decision,
        "approver": ALICE,
        **spec,
    }
    return loop.send(ApprovalAnswered(name, MonitorApprovalSpec(**body), owners, MONITOR_UID))


def notes(effects: tuple[object, ...], reason: str) -> list[Notify]:
    return [e for e in effects if isinstance(e, Notify) and e.reason == reason]


def test_without_a_window_a_paid_action_over_the_ceiling_stops_as_before() -> None:
    loop = Loop(granted_by_first_observation=True)
    loop.start()
    effects = loop.observe(paid_observation(10.0, 15.0))
    assert loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.paidActionNotApproved
    assert loop.status.approval is None and not notes(effects, "ApprovalRequested")


def test_a_paid_action_over_the_ceiling_waits_with_a_durable_request() -> None:
    loop = awaiting(ceiling=10.0, estimate=15.0)
    status = loop.status
    request = status.approval
    assert request is not None and status.monitor is MonitorState.active
    assert status.step is None and status.schedule is None
    assert (float(request.amount.amount), request.amount.currency) == (5.0, "USD")
    assert float(request.estimatedCost.amount) == 15.0 and request.ceiling is not None
    assert request.expiresAt == loop.now + WINDOW and request.action.authorizedActionId
    assert "would exceed the cost ceiling" in request.message
    assert status.activity is Activity.awaitingApproval
    assert status.health.state is Health.AwaitingHuman
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.reason == "AwaitingApproval"
    # One report for the check, one Event asking, one for the health.
    (report,) = [e for e in loop.effects if isinstance(e, EmitReport)]
    assert "Next action: awaiting approval of 5.00 USD" in report.text
    (asked,) = notes(loop.effects, "ApprovalRequested")
    assert "goalkeeper approve" in asked.message and request.id in asked.message
    assert notes(loop.effects, "Health")[0].warning
    # It survives a restart: the status alone holds it, and nothing is due before the end.
    again = MonitorStatus.model_validate(status.model_dump(mode="json"))
    assert again == status
    assert next_event(again, 1, None, loop.now + timedelta(hours=23)) is None


def test_an_approval_adds_exactly_its_amount_for_that_action_and_acts() -> None:
    loop = awaiting(ceiling=10.0, estimate=15.0)
    request = loop.status.approval
    assert request is not None
    effects = answer(loop, reason="GPU budget for the quarter")
    (launch,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert launch.kind is StepKind.act and launch.input.action is not None
    assert launch.input.action.action == request.action.action
    assert f"{ALICE} (MonitorApproval build-x1) added 5.00 USD" in (
        launch.input.action.approval or ""
    )
    status = loop.status
    assert status.approval is None and status.health.state is Health.Healthy
    (record,) = status.approvals
    assert (record.approver, record.requestId, float(record.amount.amount)) == (  # type: ignore[union-attr]
        ALICE,
        request.id,
        5.0,
    )
    # The recorded ceiling is not raised: the next paid action needs its own approval.
    assert status.contract is not None and status.contract.costCeiling is not None
    assert float(status.contract.costCeiling.amount) == 10.0
    loop.finish(actualCost={"amount": 15.0, "currency": "USD"})
    assert float(loop.status.spend.total.amount) == 15.0  # type: ignore[union-attr]
    loop.observe(paid_observation(10.0, 1.0))
    assert loop.status.approval is not None and float(loop.status.approval.amount.amount) == 6.0


def test_too_small_an_approval_or_a_rejection_stops_with_a_final_report() -> None:
    loop = awaiting()
    effects = answer(loop, amount=2)
    (stop,) = [e for e in effects if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.paidActionNotApproved and "approved too little" in stop.message
    assert [e.final for e in effects if isinstance(e, EmitReport)] == [True]

    loop = awaiting()
    effects = answer(loop, "reject", reason="not this month")
    (stop,) = [e for e in effects if isinstance(e, StopMonitor)]
    assert stop.message.endswith(
        "rejected the paid action 'Resume Job build (set spec.suspend=false).': not this month"
    )
    assert [e.final for e in effects if isinstance(e, EmitReport)] == [True]
    assert loop.status.health.state is not Health.AwaitingHuman
    assert not [e for e in effects if isinstance(e, LaunchStep)]


def test_no_answer_within_the_window_stops() -> None:
    loop = awaiting()
    loop.now += WINDOW
    assert next_event(loop.status, 1, None, loop.now) == TimerDue()
    effects = loop.send(TimerDue())
    assert loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.paidActionNotApproved
    assert "No answer came to approval request" in loop.status.stop.message
    assert [e.final for e in effects if isinstance(e, EmitReport)] == [True]


def test_an_answer_to_another_request_or_without_approver_is_ignored_once_and_says_so() -> None:
    loop = awaiting()
    effects = answer(loop, name="stale", requestId="req-0")
    (ignored,) = notes(effects, "ApprovalIgnored")
    assert "answers request req-0" in ignored.message and ignored.warning
    assert loop.status.approval is not None and loop.status.approval.ignored == ["stale"]
    # The same object again changes nothing and says nothing more.
    assert answer(loop, name="stale", requestId="req-0") == ()
    effects = answer(loop, name="forged", approver="")
    assert "names no approver" in notes(effects, "ApprovalIgnored")[0].message
    assert loop.status.approval is not None and loop.status.step is None
    # The real answer still works.
    assert [e for e in answer(loop, name="real") if isinstance(e, LaunchStep)]


@pytest.mark.parametrize(
    "owners", [(), ("uid-of-an-earlier-monitor-named-build",)], ids=["no-owner", "other-owner"]
)
def test_an_approval_not_owned_by_this_monitor_is_ignored_once_and_says_so(
    owners: tuple[str, ...],
) -> None:
    """Request ids restart at req-1 for a recreated Monitor: an approval made for an
    earlier Monitor of the same name names the open request id, and still answers nothing."""
    loop = awaiting()
    effects = answer(loop, name="earlier", owners=owners)
    (ignored,) = notes(effects, "ApprovalIgnored")
    assert "MonitorApproval earlier was ignored: it is not owned by this Monitor" in (
        ignored.message
    )
    assert "goalkeeper approve" in ignored.message and ignored.warning
    assert not [e for e in effects if isinstance(e, LaunchStep | StopMonitor)]
    request = loop.status.approval
    assert request is not None and request.ignored == ["earlier"] and not loop.status.approvals
    assert answer(loop, name="earlier", owners=owners) == ()
    # Owned by this Monitor among others, the real answer is taken.
    effects = answer(loop, name="real", owners=("some-other-owner", MONITOR_UID))
    assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.act]
    assert [r.name for r in loop.status.approvals] == ["real"]


def test_the_cli_makes_an_approval_owned_by_the_monitor_it_answers() -> None:
    monitor = {"metadata": {"name": "build", "uid": MONITOR_UID}}
    body = approval_body(monitor, "req-2", ApprovalDecision.approve, approver=ALICE)
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Monitor", "build", MONITOR_UID)


def test_an_unowned_approval_is_ignored_whatever_else_it_says() -> None:
    loop = awaiting()
    effects = answer(loop, "reject", name="stale", owners=(), requestId="req-0")
    (ignored,) = notes(effects, "ApprovalIgnored")
    assert "not owned by this Monitor" in ignored.message
    assert loop.status.approval is not None and loop.status.stop is None


def test_a_spec_edit_withdraws_the_request_and_observes_the_new_task() -> None:
    loop = awaiting()
    effects = loop.send(Started(generation=2))
    assert loop.status.approval is None
    # The new generation's words are read for their authority first, then observed.
    assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.extract]
    assert [e.kind for e in loop.extract() if isinstance(e, LaunchStep)] == [StepKind.observe]


@pytest.mark.parametrize("observed", [None, 3.0])
def test_no_estimate_or_mixed_currencies_cannot_be_approved(observed: float | None) -> None:
    loop = Loop(options={"approval_window": WINDOW}, granted_by_first_observation=True)
    loop.start()
    paid = [{"id": "resume-build", "description": "Resume (GPU hours).", "paid": True}]
    obs = (
        observation("act", authorizedActions=paid)
        if observed is None
        else Observation.model_validate(
            {
                **paid_observation(10.0, 15.0).model_dump(mode="json"),
                "observedSpend": {"amount": observed, "currency": "EUR"},
            }
        )
    )
    loop.observe(obs)
    assert loop.status.approval is None and loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.paidActionNotApproved


def test_at_the_safety_limit_no_person_is_asked() -> None:
    loop = Loop(options={"approval_window": WINDOW}, maxChecks=1, granted_by_first_observation=True)
    loop.start()
    loop.observe(paid_observation(10.0, 15.0))
    assert loop.status.approval is None and loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.safetyLimit


PRICED = (
    f"{TASK} Each run of Job build costs about 12 USD. Spending is capped at 5 USD unless a "
    "person approves more."
)


def priced_act() -> Observation:
    """An act on the resume the task prices, as the observation restates it: paid (the
    price names the build, so both recorded actions are), no estimate."""
    paid = [{**a, "paid": True} for a in AUTHORIZED]
    ceiling = contract(costCeiling={"amount": 5, "currency": "USD"})
    return observation("act", authorizedActions=paid, contract=ceiling)


def test_a_paid_action_without_an_estimate_asks_for_the_price_the_task_states() -> None:
    """Seen from a small model: it asked for the priced resume with no estimate, and the
    run stopped where the task said to ask for approval."""
    loop = Loop(options={"approval_window": WINDOW}, task=PRICED)
    loop.start()
    assert [a.paid for a in loop.status.authorizedActions if a.id == "resume-build"] == [True]
    effects = loop.observe(priced_act())
    request = loop.status.approval
    assert loop.status.stop is None and request is not None, effects
    assert request.estimatedCost is not None and float(request.estimatedCost.amount) == 12
    assert request.amount is not None and float(request.amount.amount) == 7
    assert notes(effects, "ApprovalRequested")


def test_a_rate_is_no_estimate_and_the_paid_action_stops() -> None:
    loop = Loop(
        options={"approval_window": WINDOW},
        task=PRICED.replace("about 12 USD", "12 USD per hour"),
    )
    loop.start()
    loop.observe(priced_act())
    assert loop.status.stop is not None and loop.status.approval is None
    assert loop.status.stop.reason is StopReason.paidActionNotApproved
    assert "no cost estimate" in loop.status.stop.message


BUILD_SUSPENDED = (
    ObjectFacts(kind=FactKind.Job, name="build", namedIn=[NamedIn.stopWhen], suspended=True),
)
BUILD_RUNNING = (BUILD_SUSPENDED[0].model_copy(update={"suspended": False, "active": 1}),)


def stopped_for_a_paid_act(task: str, facts: tuple[ObjectFacts, ...]) -> Loop:
    """A run of `task` whose first check the model answers with a stop for a paid act's
    approval, over `facts`."""
    loop = Loop(
        options={"approval_window": WINDOW},
        task=task,
        stopWhen="Stop when Job build has succeeded.",
    )
    loop.start()
    loop.send(ObservationAccepted(loop.seq, paid_stop(), facts=facts))
    return loop


def paid_stop() -> Observation:
    return observation(
        "stop",
        goal="incomplete",
        work="blocked",
        stopReason="paidActionNotApproved",
        reason="Resuming the build costs money.",
        contract=None,
        authorizedActions=None,
    )


def test_a_stop_for_a_paid_acts_approval_is_the_cost_guards_to_decide() -> None:
    # The model stops short of the one paid act its stop rule needs: the engine routes the
    # check to that act, and the cost guard (not the model) asks for the approval.
    loop = stopped_for_a_paid_act(PRICED, BUILD_SUSPENDED)
    request = loop.status.approval
    assert loop.status.stop is None and request is not None
    assert request.action is not None and request.action.authorizedActionId == "resume-build"
    assert request.amount is not None and float(request.amount.amount) == 7


def test_a_paid_stop_with_no_paid_act_to_take_stands() -> None:
    loop = stopped_for_a_paid_act(PRICED, BUILD_RUNNING)
    assert loop.status.stop is not None and loop.status.approval is None
    assert loop.status.stop.reason is StopReason.paidActionNotApproved


def test_a_paid_stop_when_nothing_authorized_costs_money_is_for_want_of_a_grant() -> None:
    # Seen from a small model on an observe-only task: it stopped for a paid act's approval.
    # Job build failed: nothing brings its success about with no act, so the stop stands.
    failed = BUILD_SUSPENDED[0].model_copy(
        update={"suspended": False, "failed": 1, "ended": JobEnd.Failed}
    )
    loop = stopped_for_a_paid_act(TASK, (failed,))
    assert not any(a.paid for a in loop.status.authorizedActions)
    assert loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.outsideAuthority
    assert loop.status.stop.message.startswith("No action the words authorize costs money")
