"""Pause, resume and check-now, as the engine takes them from a Monitor's annotations."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.engine_loop import Loop
from tests.support.observations import action, observation

from goalkeeper.core.controls import CHECK_NOW, PAUSED, Controls, controls_of
from goalkeeper.core.engine import (
    ControlsChanged,
    EmitReport,
    LaunchStep,
    Notify,
    PublishSchedule,
    StepFailed,
    TargetChanged,
    TimerDue,
)
from goalkeeper.core.models import Activity, MonitorState, StepKind, WatchTarget
from goalkeeper.core.steps import next_event

BUILD = WatchTarget(apiVersion="batch/v1", kind="Job", name="build")


def launches(effects: tuple[object, ...]) -> list[StepKind]:
    return [e.kind for e in effects if isinstance(e, LaunchStep)]


def control(loop: Loop, **controls: object) -> tuple[object, ...]:
    """Set the annotations; the event they stand for is decided, as the reconciler does."""
    loop.options["controls"] = Controls(**controls)  # type: ignore[arg-type]
    event = next_event(loop.status, 1, None, loop.now, loop.options["controls"])
    assert isinstance(event, ControlsChanged), event
    return loop.send(event)


def nothing_due(loop: Loop) -> bool:
    return next_event(loop.status, 1, None, loop.now, loop.options["controls"]) is None


def test_the_annotations_read_as_controls() -> None:
    assert controls_of(None) == Controls()
    assert controls_of({PAUSED: "true"}).paused and controls_of({PAUSED: " True "}).paused
    assert not controls_of({PAUSED: "false"}).paused and not controls_of({PAUSED: "yes"}).paused
    assert controls_of({CHECK_NOW: "2026-12-02T10:00:00.5Z"}).check_now == "2026-12-02T10:00:00.5Z"
    assert len(controls_of({CHECK_NOW: "x" * 1000}).check_now) == 128


def test_a_pause_while_waiting_cancels_the_timer_and_resuming_checks_at_once() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    loop.observe(observation("wait"))
    effects = control(loop, paused=True)
    assert launches(effects) == [] and loop.status.schedule is None
    assert loop.status.activity is Activity.paused
    (paused,) = [e for e in effects if isinstance(e, Notify) and e.reason == "Paused"]
    assert "goalkeeper resume" in paused.message
    ready = {c.type: c for c in loop.status.conditions}
    assert ready["Ready"].reason == "Paused" and ready["Progressing"].reason == "Paused"
    # Hours later nothing is due: no timer, no wake.
    loop.later(600)
    assert nothing_due(loop)
    assert loop.send(TimerDue()) == ()
    assert launches(loop.send(TargetChanged(BUILD, "Complete"))) == []
    # Removed: a check at once, well before any timer.
    resumed = control(loop, paused=False)
    assert launches(resumed) == [StepKind.observe] and loop.status.pausedAt is None
    assert loop.status.step is not None and "resumed" in loop.status.step.wokenBy


def test_a_step_running_when_paused_finishes_its_result_is_taken_and_nothing_follows() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    assert loop.status.step is not None and loop.status.step.kind is StepKind.observe
    effects = control(loop, paused=True)
    assert launches(effects) == [] and loop.status.step is not None, "the step runs on"
    assert loop.status.activity is Activity.observing and loop.status.pausedAt is not None
    # Its result is a check with its report; the act it asks for waits for the resume.
    effects = loop.observe(observation("act", action=action()))
    assert loop.status.checks == 1 and [e for e in effects if isinstance(e, EmitReport)]
    report = next(e for e in effects if isinstance(e, EmitReport))
    assert "paused" in report.text
    assert launches(effects) == [] and loop.status.activity is Activity.paused
    assert not [e for e in effects if isinstance(e, PublishSchedule)]
    assert nothing_due(loop)
    assert launches(control(loop, paused=False)) == [StepKind.observe]


def test_a_wait_taken_while_paused_publishes_no_timer() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    control(loop, paused=True)
    effects = loop.observe(observation("wait"))
    assert not [e for e in effects if isinstance(e, PublishSchedule)]
    assert loop.status.schedule is None and loop.status.activity is Activity.paused


def test_a_failure_while_paused_schedules_no_retry() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    control(loop, paused=True)
    loop.send(StepFailed(loop.seq, "HTTP 503"))
    assert loop.status.schedule is None and loop.status.activity is Activity.paused
    assert launches(control(loop, paused=False)) == [StepKind.observe]


def test_a_monitor_created_paused_launches_nothing_until_resumed() -> None:
    loop = Loop(options={"controls": Controls(paused=True)})
    loop.start()
    assert loop.status.step is None and loop.status.activity is Activity.paused
    assert launches(control(loop, paused=False)) == [StepKind.extract]


def test_check_now_starts_a_check_when_waiting_and_the_same_value_never_again() -> None:
    loop = Loop(everyMinutes=600)
    loop.start()
    loop.observe(observation("wait"))
    effects = control(loop, check_now="2026-12-02T10:00:00Z")
    assert launches(effects) == [StepKind.observe]
    assert loop.status.checkNowHandled == "2026-12-02T10:00:00Z"
    assert loop.status.step is not None and "check-now" in loop.status.step.wokenBy
    report = next(e for e in loop.observe(observation("wait")) if isinstance(e, EmitReport))
    assert "check-now" in report.text
    assert nothing_due(loop), "the same value is honoured once"
    assert launches(control(loop, check_now="2026-12-02T10:05:00Z")) == [StepKind.observe]


def test_check_now_while_a_step_runs_or_paused_is_taken_without_a_second_step() -> None:
    loop = Loop(everyMinutes=600)
    loop.start()
    assert launches(control(loop, check_now="a")) == [], "the running check is the check"
    loop.observe(observation("wait"))
    assert nothing_due(loop)
    control(loop, paused=True, check_now="b")
    assert loop.status.checkNowHandled == "b" and loop.status.step is None
    assert launches(control(loop, paused=False, check_now="b")) == [StepKind.observe]


def test_neither_control_is_a_new_generation_or_touches_the_check_count() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    loop.observe(observation("wait"))
    before = (loop.status.observedGeneration, loop.status.checks, loop.status.authority)
    control(loop, paused=True)
    control(loop, paused=False)
    assert (loop.status.observedGeneration, loop.status.checks, loop.status.authority) == before


controls = st.builds(Controls, st.booleans(), st.sampled_from(["", "a", "b", "c"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(controls, st.sampled_from(["wait", "act", "fail", "time"])), max_size=25))
def test_while_paused_nothing_ever_launches(script: list[tuple[Controls, str]]) -> None:
    loop = Loop(everyMinutes=5)
    loop.start()
    for wanted, move in script:
        loop.options["controls"] = wanted
        event = next_event(loop.status, 1, None, loop.now, wanted)
        effects: tuple[object, ...] = ()
        if isinstance(event, ControlsChanged):
            effects = loop.send(event)
        elif loop.status.step is not None and loop.status.step.kind is StepKind.observe:
            if move == "fail":
                effects = loop.send(StepFailed(loop.seq, "HTTP 503"))
            else:
                effects = loop.observe(
                    observation("act", action=action()) if move == "act" else observation("wait")
                )
        elif loop.status.step is not None:
            effects = loop.finish()
        else:
            loop.later(10)
            effects = loop.send(TimerDue())
        if wanted.paused:
            assert launches(effects) == [], (wanted, move)
            if loop.status.step is None and loop.status.monitor is MonitorState.active:
                assert loop.status.activity is Activity.paused
                assert loop.status.schedule is None
        if loop.status.monitor is MonitorState.stopped:
            break
        assert loop.status.checks <= loop.spec.maxChecks


def test_an_approval_given_while_paused_is_taken_once_resumed() -> None:
    from goalkeeper.core.engine import ApprovalAnswered
    from goalkeeper.core.models import MonitorApprovalSpec

    loop = Loop(options={"approval_window": timedelta(hours=4)}, granted_by_first_observation=True)
    loop.start()
    paid = observation("act", action=action(estimatedCost={"amount": 5, "currency": "USD"}))
    loop.observe(paid)
    request = loop.status.approval
    assert request is not None
    control(loop, paused=True)
    assert loop.status.approval is not None, "the request stays open while paused"
    answer = MonitorApprovalSpec(
        monitor="build", requestId=request.id, decision="approve", approver="alice", amount=5
    )
    answered = ApprovalAnswered("yes", answer, ("uid-1",), "uid-1")
    assert loop.send(answered) == () and loop.status.approval is not None
    loop.options["controls"] = Controls()
    effects = loop.send(answered)
    assert launches(effects) == [StepKind.act] and loop.status.approvals[-1].name == "yes"


def test_a_pause_longer_than_the_approval_window_does_not_expire_the_request() -> None:
    from goalkeeper.core.engine import ApprovalAnswered
    from goalkeeper.core.models import MonitorApprovalSpec

    loop = Loop(options={"approval_window": timedelta(hours=1)}, granted_by_first_observation=True)
    loop.start()
    paid = observation("act", action=action(estimatedCost={"amount": 5, "currency": "USD"}))
    loop.observe(paid)
    request = loop.status.approval
    assert request is not None
    left = request.expiresAt - loop.now
    control(loop, paused=True)
    loop.later(24 * 60)  # a day paused, far past the window
    assert loop.send(TimerDue()) == () and loop.status.monitor is MonitorState.active
    control(loop, paused=False)
    assert loop.status.approval is not None
    assert loop.status.approval.expiresAt - loop.now == left, "the window resumes where it was"
    answer = MonitorApprovalSpec(
        monitor="build", requestId=request.id, decision="approve", approver="alice", amount=5
    )
    effects = loop.send(ApprovalAnswered("yes", answer, ("uid-1",), "uid-1"))
    assert launches(effects) == [StepKind.act]
