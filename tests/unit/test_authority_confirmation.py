"""With GOALKEEPER_CONFIRM_AUTHORITY and approvals on, the first act of a spec generation
waits until a person confirms what was read from the task."""

from __future__ import annotations

from datetime import timedelta

from tests.support.engine_loop import Loop
from tests.support.observations import RESUME, observation

from goalkeeper.core.engine import ApprovalAnswered, LaunchStep, Notify, Started, StopMonitor
from goalkeeper.core.models import (
    ApprovalDecision,
    ApprovalKind,
    MonitorApprovalSpec,
    StepKind,
    StopReason,
)

WINDOW = timedelta(minutes=10)
UID = "monitor-uid"


def confirming(**options: object) -> Loop:
    loop = Loop(options={"approval_window": WINDOW, "confirm_authority": True, **options})
    loop.start()
    return loop


def answer(loop: Loop, decision: ApprovalDecision, name: str = "ok") -> tuple[object, ...]:
    assert loop.status.approval is not None
    spec = MonitorApprovalSpec(
        monitor="build",
        requestId=loop.status.approval.id,
        decision=decision,
        approver="alice",
    )
    return loop.send(ApprovalAnswered(name, spec, (UID,), UID))


def launched(effects: tuple[object, ...]) -> list[StepKind]:
    return [e.kind for e in effects if isinstance(e, LaunchStep)]


def test_the_first_act_waits_for_a_person_to_confirm_the_record() -> None:
    loop = confirming()
    effects = loop.observe(observation("act"))
    assert launched(effects) == []
    request = loop.status.approval
    assert request is not None and request.kind is ApprovalKind.authority
    assert RESUME in request.message, "the request shows the words that grant"
    assert loop.status.activity == "awaitingApproval"
    [notice] = [e for e in effects if isinstance(e, Notify) and e.reason == "ApprovalRequested"]
    assert "confirms what goalkeeper read from the task" in notice.message

    effects = answer(loop, ApprovalDecision.approve)
    assert launched(effects) == [StepKind.act]
    assert loop.status.authority is not None
    assert loop.status.authority.confirmedBy.startswith("alice")
    # Confirmed once for the generation: the next act runs without asking.
    loop.finish()
    effects = loop.observe(observation("act"))
    assert launched(effects) == [StepKind.act] and loop.status.approval is None


def test_a_rejection_stops_the_monitor_as_outside_authority() -> None:
    loop = confirming()
    loop.observe(observation("act"))
    effects = answer(loop, ApprovalDecision.reject)
    [stop] = [e for e in effects if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.outsideAuthority
    assert "did not confirm the authority read from the task" in stop.message
    assert launched(effects) == []


def test_a_new_spec_generation_asks_again() -> None:
    loop = confirming(minute=timedelta(seconds=1))
    loop.observe(observation("act"))
    answer(loop, ApprovalDecision.approve)
    loop.finish()
    loop.spec = loop.spec.model_copy(update={"everyMinutes": 5})
    loop.send(Started(generation=2))
    loop.observe(observation("wait"))  # answers the old task: set aside, the new one is read
    loop.observe(observation("wait"))
    assert loop.status.authority is not None and loop.status.authority.confirmedBy == ""
    loop.later(5)
    from goalkeeper.core.engine import TimerDue

    loop.send(TimerDue())
    effects = loop.observe(observation("act"))
    assert launched(effects) == [] and loop.status.approval is not None


def test_without_approvals_the_setting_changes_nothing() -> None:
    loop = Loop(options={"confirm_authority": True})
    loop.start()
    assert launched(loop.observe(observation("act"))) == [StepKind.act]
