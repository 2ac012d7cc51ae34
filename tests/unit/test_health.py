"""The monitor's health, one reason per test, and that it never flaps faster than a check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.observations import action, observation, result, track

from goalkeeper.core.engine import (
    Decision,
    Event,
    LaunchStep,
    Notify,
    ObservationAccepted,
    Started,
    StepFailed,
    StepFinished,
    StopMonitor,
    TimerDue,
    decide,
)
from goalkeeper.core.health import FAILING_STEPS, LOOP_ACTS, STALL_CHECKS
from goalkeeper.core.models import (
    ConditionStatus,
    Health,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    Observation,
    StepKind,
    StopReason,
)

T0 = datetime(2026, 8, 16, 10, 0, tzinfo=UTC)


class Loop:
    """The engine driven as the operator drives it, with a clock."""

    def __init__(self, **spec: Any) -> None:
        self.spec = MonitorSpec.model_validate({"task": "Finish Job build.", **spec})
        self.status = MonitorStatus()
        self.now = T0
        self.decisions: list[Decision] = []

    def send(self, event: Event, **options: Any) -> Decision:
        decision = decide(self.spec, self.status, event, self.now, **options)
        self.status = decision.status
        self.decisions.append(decision)
        return decision

    @property
    def seq(self) -> int:
        assert self.status.step is not None, "no step in flight"
        return self.status.step.seq

    def observe(self, obs: Observation, **options: Any) -> Decision:
        decision = self.send(ObservationAccepted(self.seq, obs), **options)
        if self.status.step is None and self.status.monitor is MonitorState.active:
            self.now += timedelta(minutes=30)
            self.send(TimerDue())
        return decision


def running(done: float, **overrides: Any) -> Observation:
    return observation("wait", progress=[track("modules", done, 27, T0)], **overrides)


def health_events(decision: Decision) -> list[Notify]:
    return [e for e in decision.effects if isinstance(e, Notify) and e.reason == "Health"]


def condition(status: MonitorStatus) -> tuple[ConditionStatus, str]:
    (healthy,) = [c for c in status.conditions if c.type == "Healthy"]
    return healthy.status, healthy.reason


def launched_input(decision: Decision) -> Any:
    (launch,) = [e for e in decision.effects if isinstance(e, LaunchStep)]
    return launch.input


def test_unknown_before_the_first_check_and_healthy_after_it_without_an_event() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    assert loop.status.health.state is Health.Unknown
    assert condition(loop.status) == (ConditionStatus.unknown, "Unknown")
    first = loop.observe(running(21))
    assert loop.status.health.state is Health.Healthy
    assert condition(loop.status) == (ConditionStatus.true, "Healthy")
    assert health_events(first) == []


def test_a_target_that_claims_running_with_nothing_moving_is_stalled() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    loop.observe(running(21))
    for _ in range(STALL_CHECKS - 1):
        assert not health_events(loop.observe(running(21)))
        assert loop.status.health.state is Health.Healthy
    stalled = loop.observe(running(21))
    assert loop.status.health.state is Health.Stalled
    assert loop.status.health.since == loop.decisions[-2].status.health.since
    (event,) = health_events(stalled)
    assert event.warning and event.message.startswith("Health Healthy -> Stalled: ")
    assert condition(loop.status) == (ConditionStatus.false, "Stalled")
    # The next observe step is told, with what it may do about it.
    note = launched_input(loop.decisions[-1]).health
    assert "nothing it shows moved for 3 checks" in note and "kind recover" in note
    # One more such check changes nothing: no second event.
    assert health_events(loop.observe(running(21))) == []


def test_moving_progress_or_an_idle_target_is_never_stalled() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    for done in range(10, 10 + 3 * STALL_CHECKS):
        loop.observe(running(done))
        assert loop.status.health.state is Health.Healthy
    for _ in range(3 * STALL_CHECKS):
        loop.observe(running(21, work="waiting"))
        assert loop.status.health.state is Health.Healthy


def test_the_stall_threshold_is_a_setting() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    loop.observe(running(21), stall_checks=1)
    loop.observe(running(21), stall_checks=1)
    assert loop.status.health.state is Health.Stalled


def stall(loop: Loop) -> None:
    loop.send(Started(generation=1))
    for _ in range(STALL_CHECKS + 1):
        loop.observe(running(21))
    assert loop.status.health.state is Health.Stalled


def recovery(**overrides: Any) -> Observation:
    return observation(
        "act",
        work="running",
        progress=[track("modules", 21, 27, T0)],
        action=action(kind="recover", failureId="stalled:build", **overrides),
    )


def test_a_stall_gets_one_recovery_and_the_same_stall_after_it_stops_the_monitor() -> None:
    loop = Loop()
    stall(loop)
    acted = loop.observe(recovery())
    assert [e.kind for e in acted.effects if isinstance(e, LaunchStep)] == [StepKind.act]
    assert loop.status.health.recoveredStall == loop.status.health.fingerprint
    loop.send(StepFinished(loop.seq, result()))
    # Observed again at once: still running, still nothing moved, in the same state.
    again = loop.observe(running(21))
    (stop,) = [e for e in again.effects if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.blocked
    assert "stalled again in the same state after its one automatic recovery" in stop.message


def test_a_recovery_that_moves_the_target_ends_the_stall() -> None:
    loop = Loop()
    stall(loop)
    loop.observe(recovery())
    loop.send(StepFinished(loop.seq, result()))
    moved = loop.observe(running(22))
    assert loop.status.monitor is MonitorState.active
    assert loop.status.health.state is Health.Healthy
    (event,) = health_events(moved)
    assert event.message == "Health Stalled -> Healthy." and not event.warning


def test_acts_that_leave_one_target_state_unchanged_are_a_runaway_loop() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    decisions = []
    for n in range(LOOP_ACTS):
        # A different failure each time: the attempt limit per failure never trips.
        decisions.append(
            loop.observe(
                observation(
                    "act", action=action(failureId=f"failure-{n}", targetStateId="build-21")
                )
            )
        )
        if loop.status.step is not None and loop.status.step.kind is StepKind.act:
            loop.send(StepFinished(loop.seq, result()))
    assert loop.status.health.state is Health.RunawayLoop
    assert "3 actions in a row left target state 'build-21' unchanged" in loop.status.health.message
    assert [len(health_events(d)) for d in decisions] == [0, 0, 1]
    # A wait (the target moved on) ends it.
    loop.observe(running(22))
    assert loop.status.health.state is Health.Healthy


def test_steps_that_fail_to_run_are_failing_until_a_check_is_accepted() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    loop.observe(running(21))
    failures = [loop.send(StepFailed(loop.seq, "HTTP 503 from the model")) for _ in range(2)]
    assert FAILING_STEPS == 2
    assert loop.status.health.state is Health.Failing
    assert [len(health_events(d)) for d in failures] == [0, 1]
    assert condition(loop.status) == (ConditionStatus.false, "Failing")
    assert launched_input(failures[-1]).health == "The last 2 steps failed to run."
    loop.observe(running(22))
    assert loop.status.health.state is Health.Healthy


def test_a_spec_edit_starts_the_new_run_with_unknown_health() -> None:
    loop = Loop()
    stall(loop)
    loop.observe(observation("stop", stopReason="materialBlocker", work="blocked"))
    assert loop.status.monitor is MonitorState.stopped
    loop.send(Started(generation=2))
    assert loop.status.health.state is Health.Unknown


events = st.sampled_from(["wait-same", "wait-moved", "idle", "act-same", "act-other", "fail"])


@settings(max_examples=200, deadline=None)
@given(st.lists(events, min_size=1, max_size=40))
def test_health_changes_at_most_once_per_decision_and_between_checks_only_to_failing(
    script: list[str],
) -> None:
    loop = Loop(maxChecks=1000)
    loop.send(Started(generation=1))
    done = 0
    for what in script:
        if loop.status.monitor is MonitorState.stopped:
            break
        if loop.status.step is None:
            loop.now += timedelta(minutes=30)
            loop.send(TimerDue())
            continue
        before = loop.status.health.state
        if loop.status.step.kind is not StepKind.observe:
            decision = loop.send(StepFinished(loop.seq, result()))
            check = False
        elif what == "fail":
            decision = loop.send(StepFailed(loop.seq, "HTTP 503"))
            check = False
        else:
            done += what == "wait-moved"
            if what in ("wait-same", "wait-moved"):
                answer = running(done)
            elif what == "idle":
                answer = running(done, work="waiting")
            elif what == "act-same":
                answer = observation("act", action=action(failureId=f"f{len(loop.decisions)}"))
            else:
                answer = observation("act", action=action(targetStateId=f"s{len(loop.decisions)}"))
            decision = loop.send(ObservationAccepted(loop.seq, answer))
            check = True
        after = decision.status.health.state
        assert len(health_events(decision)) <= 1
        if after is not before and not check:
            assert after is Health.Failing, (before, after, what)
