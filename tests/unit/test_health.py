"""The monitor's health, one reason per test, and that it never flaps faster than a check."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.engine_loop import T0, Loop
from tests.support.observations import action, observation, result, track

from goalkeeper.core.engine import (
    ApprovalAnswered,
    LaunchStep,
    Notify,
    ObservationAccepted,
    Started,
    StepFailed,
    StepFinished,
    StopMonitor,
    TimerDue,
)
from goalkeeper.core.health import FAILING_STEPS
from goalkeeper.core.models import (
    ApprovalRequest,
    ConditionStatus,
    FactKind,
    Health,
    MonitorApprovalSpec,
    MonitorState,
    MonitorStatus,
    NamedIn,
    ObjectFacts,
    Observation,
    StepInput,
    StepKind,
    StopReason,
)
from goalkeeper.core.policy import BRAKE_ACTS, STALL_CHECKS


def check(loop: Loop, obs: Observation) -> tuple[object, ...]:
    """One accepted check; a wait is followed by its timer, so the next check's step runs."""
    effects = loop.observe(obs)
    if loop.status.step is None and loop.status.monitor is MonitorState.active:
        loop.later(30)
        loop.send(TimerDue())
    return effects


def running(done: float, **overrides: Any) -> Observation:
    return observation("wait", progress=[track("modules", done, 27, T0)], **overrides)


def health_events(effects: tuple[object, ...]) -> list[Notify]:
    return [e for e in effects if isinstance(e, Notify) and e.reason == "Health"]


def condition(status: MonitorStatus) -> tuple[ConditionStatus, str]:
    (healthy,) = [c for c in status.conditions if c.type == "Healthy"]
    return healthy.status, healthy.reason


def last_input(loop: Loop) -> StepInput:
    return [e for e in loop.log if isinstance(e, LaunchStep)][-1].input


def test_unknown_before_the_first_check_and_healthy_after_it_without_an_event() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    assert loop.status.health.state is Health.Unknown
    assert condition(loop.status) == (ConditionStatus.unknown, "Unknown")
    first = check(loop, running(21))
    assert loop.status.health.state is Health.Healthy
    assert condition(loop.status) == (ConditionStatus.true, "Healthy")
    assert health_events(first) == []


def test_a_target_whose_progress_moved_then_froze_is_stalled() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    check(loop, running(20))
    check(loop, running(21))
    for _ in range(STALL_CHECKS - 1):
        assert not health_events(check(loop, running(21)))
        assert loop.status.health.state is Health.Healthy
    healthy_since = loop.status.health.since
    stalled = check(loop, running(21))
    assert loop.status.health.state is Health.Stalled
    assert healthy_since is not None and loop.status.health.since == loop.now - timedelta(
        minutes=30
    )
    (event,) = health_events(stalled)
    assert event.warning and event.message.startswith("Health Healthy -> Stalled: ")
    assert condition(loop.status) == (ConditionStatus.false, "Stalled")
    # The next observe step is told, with what it may do about it, keeping the work done.
    note = last_input(loop).health
    assert "has not moved for 3 checks" in note and "kind recover" in note
    assert "keep the work done so far" in note and "never start the work over" in note
    # One more such check changes nothing: no second event.
    assert health_events(check(loop, running(21))) == []


def test_long_work_without_a_progress_signal_is_never_stalled() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    plain = observation("wait", work="running")  # no progress tracks at all
    for _ in range(10 * STALL_CHECKS):
        assert not health_events(check(loop, plain))
        assert loop.status.health.state is Health.Healthy
    frozen = running(21)  # a track that never moved is no signal either
    for _ in range(10 * STALL_CHECKS):
        check(loop, frozen)
        assert loop.status.health.state is Health.Healthy
    assert loop.status.monitor is MonitorState.active


def test_the_observe_step_is_told_once_that_the_target_shows_no_progress_signal() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    plain = observation("wait", work="running")
    notes = []
    for _ in range(6):
        check(loop, plain)
        notes.append(last_input(loop).health)
    told = [n for n in notes if n]
    assert len(told) == 1 and "no progress signal" in told[0]
    assert "never stalled for time alone" in told[0]


def test_moving_progress_or_an_idle_target_is_never_stalled() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    for done in range(10, 10 + 3 * STALL_CHECKS):
        check(loop, running(done))
        assert loop.status.health.state is Health.Healthy
    for _ in range(3 * STALL_CHECKS):
        check(loop, running(21, work="waiting"))
        assert loop.status.health.state is Health.Healthy


def test_the_stall_threshold_is_a_setting() -> None:
    loop = Loop(options={"stall_checks": 1})
    loop.send(Started(generation=1))
    check(loop, running(20))
    check(loop, running(21))
    check(loop, running(21))
    assert loop.status.health.state is Health.Stalled


def stall(loop: Loop) -> None:
    loop.send(Started(generation=1))
    check(loop, running(20))  # progress moved once: from here on a frozen track is a stall
    for _ in range(STALL_CHECKS + 1):
        check(loop, running(21))
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
    acted = check(loop, recovery())
    assert [e.kind for e in acted if isinstance(e, LaunchStep)] == [StepKind.act]
    assert loop.status.health.recoveredStall == loop.status.health.fingerprint
    loop.send(StepFinished(loop.seq, result()))
    # Observed again at once: still running, still nothing moved, in the same state.
    again = check(loop, running(21))
    (stop,) = [e for e in again if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.blocked
    assert "stalled again in the same state after its one automatic recovery" in stop.message


def test_with_approvals_on_the_same_stall_after_its_recovery_waits_for_a_person() -> None:
    loop = Loop(options={"approval_window": timedelta(hours=1)})
    stall(loop)
    check(loop, recovery())
    loop.send(StepFinished(loop.seq, result()))
    again = check(loop, running(21))
    assert not [e for e in again if isinstance(e, StopMonitor)]
    request = loop.status.approval
    assert request is not None and request.kind.value == "stalled" and request.action is None
    assert loop.status.health.state is Health.AwaitingHuman
    assert "stalled again in the same state" in request.message
    # Approved: the run goes on, observing at once, with one more recovery for the stall.
    answer = MonitorApprovalSpec(
        monitor="build", requestId=request.id, decision="approve", approver="alice"
    )
    effects = loop.send(ApprovalAnswered("go-on", answer, ("uid-1",), "uid-1"))
    assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.observe]
    assert loop.status.health.state is Health.Stalled and not loop.status.health.recoveredStall
    assert [e.kind for e in check(loop, recovery()) if isinstance(e, LaunchStep)] == [StepKind.act]
    # Rejected, the next time: stopped as blocked.
    loop.send(StepFinished(loop.seq, result()))
    check(loop, running(21))
    request = loop.status.approval
    assert request is not None
    answer = MonitorApprovalSpec(
        monitor="build", requestId=request.id, decision="reject", approver="alice"
    )
    (stop,) = [
        e
        for e in loop.send(ApprovalAnswered("stop", answer, ("uid-1",), "uid-1"))
        if isinstance(e, StopMonitor)
    ]
    assert stop.reason is StopReason.userRequested and "stopped the stalled run" in stop.message


def test_a_recovery_that_moves_the_target_ends_the_stall() -> None:
    loop = Loop()
    stall(loop)
    check(loop, recovery())
    loop.send(StepFinished(loop.seq, result()))
    moved = check(loop, running(22))
    assert loop.status.monitor is MonitorState.active
    assert loop.status.health.state is Health.Healthy
    (event,) = health_events(moved)
    assert event.message == "Health Stalled -> Healthy." and not event.warning


def test_acts_that_leave_what_the_checks_see_unchanged_are_braked_whatever_their_ids() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    decisions = []
    for n in range(BRAKE_ACTS):
        # The model renames its failure and target-state IDs each time: no guard resets.
        asked = action(failureId=f"failure-{n}", targetStateId=f"build-{n}")
        decisions.append(check(loop, observation("act", action=asked)))
        assert [e.kind for e in decisions[-1] if isinstance(e, LaunchStep)] == [StepKind.act]
        loop.send(StepFinished(loop.seq, result()))
    assert loop.status.health.state is Health.RunawayLoop
    assert "2 acts in a row left what the checks see unchanged" in loop.status.health.message
    assert [len(health_events(d)) for d in decisions] == [0, 0, 1]
    # The next check asks again and sees the same: the brake stops the monitor.
    braked = check(loop, observation("act", action=action(failureId="x", targetStateId="y")))
    assert not [e for e in braked if isinstance(e, LaunchStep)]
    (stop,) = [e for e in braked if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.blocked
    assert "3 acts in a row left what the checks see unchanged" in stop.message
    assert stop.message.count("check ") == 3, "the report lists the acts"


def test_an_act_that_would_change_nothing_the_facts_show_waits_and_never_brakes() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    for n in range(BRAKE_ACTS):
        check(loop, observation("act", action=action(failureId=f"f-{n}", targetStateId="t")))
        loop.send(StepFinished(loop.seq, result()))
    assert loop.status.health.state is Health.RunawayLoop
    # Job build runs: a resume would change nothing, so the check waits instead of braking.
    runs = ObjectFacts(kind=FactKind.Job, name="build", namedIn=[NamedIn.task], active=1)
    effects = loop.send(ObservationAccepted(loop.seq, observation("act"), facts=(runs,)))
    assert not [e for e in effects if isinstance(e, (LaunchStep, StopMonitor))]
    assert loop.status.monitor is MonitorState.active and loop.status.schedule is not None


def test_act_steps_that_fail_to_run_never_brake_the_run() -> None:
    # An act step killed or deleted before it answers is an infrastructure failure: the
    # run verifies by observing and asks again, however often that happens.
    loop = Loop()
    loop.send(Started(generation=1))
    for n in range(BRAKE_ACTS + 2):
        decided = check(loop, observation("act", action=action(targetStateId=f"build-{n}")))
        assert [e.kind for e in decided if isinstance(e, LaunchStep)] == [StepKind.act]
        loop.send(StepFailed(loop.seq, "Job fleet-act was deleted"))
    assert loop.status.monitor is MonitorState.active
    assert loop.status.health.brakeActs == []
    # An act that runs and changes nothing still counts.
    check(loop, observation("act", action=action()))
    loop.send(StepFinished(loop.seq, result()))
    assert len(loop.status.health.brakeActs) == 1


def test_an_act_that_changes_what_the_checks_see_releases_the_brake() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    for n in range(BRAKE_ACTS - 1):
        check(loop, observation("act", action=action(failureId=f"f{n}")))
        loop.send(StepFinished(loop.seq, result()))
    assert len(loop.status.health.brakeActs) == BRAKE_ACTS - 1
    # The target moved: the next check that asks for an act sees new progress, and the
    # row starts again from its act.
    check(loop, running(22))
    moved = [track("modules", 22, 27, T0)]
    check(loop, observation("act", progress=moved, action=action(failureId="later")))
    assert loop.status.health.state is Health.Healthy
    assert [a.check for a in loop.status.health.brakeActs] == [loop.status.checks]


def braked_with_approvals_on() -> tuple[Loop, ApprovalRequest]:
    """A run whose brake held the act asked after BRAKE_ACTS acts, for a person to decide."""
    loop = Loop(options={"approval_window": timedelta(hours=1)})
    loop.send(Started(generation=1))
    for n in range(BRAKE_ACTS):
        check(loop, observation("act", action=action(failureId=f"f{n}")))
        loop.send(StepFinished(loop.seq, result()))
    check(loop, observation("act", action=action(failureId="again")))
    request = loop.status.approval
    assert request is not None and request.kind.value == "repeatedActs"
    return loop, request


def test_with_approvals_on_the_brake_asks_a_person_and_approval_runs_the_act() -> None:
    loop, request = braked_with_approvals_on()
    assert request.action is not None and request.action.failureId == "again"
    answer = MonitorApprovalSpec(
        monitor="build", requestId=request.id, decision="approve", approver="alice"
    )
    effects = loop.send(ApprovalAnswered("go-on", answer, ("uid-1",), "uid-1"))
    assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.act]
    assert len(loop.status.health.brakeActs) == 1, "the row counts anew from the approved act"


def test_with_approvals_on_a_person_who_rejects_the_braked_act_stops_the_run_as_asked() -> None:
    loop, request = braked_with_approvals_on()
    answer = MonitorApprovalSpec(
        monitor="build", requestId=request.id, decision="reject", approver="alice"
    )
    effects = loop.send(ApprovalAnswered("stop", answer, ("uid-1",), "uid-1"))
    assert not [e for e in effects if isinstance(e, LaunchStep)]
    (stop,) = [e for e in effects if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.userRequested and "stopped the repeated acts" in stop.message


def test_steps_that_fail_to_run_are_failing_until_a_check_is_accepted() -> None:
    loop = Loop()
    loop.send(Started(generation=1))
    check(loop, running(21))
    failures = []
    for _ in range(2):
        failures.append(loop.send(StepFailed(loop.seq, "HTTP 503 from the model")))
        loop.retry()
    assert FAILING_STEPS == 2
    assert loop.status.health.state is Health.Failing
    assert [len(health_events(d)) for d in failures] == [0, 1]
    assert condition(loop.status) == (ConditionStatus.false, "Failing")
    assert last_input(loop).health == "The last 2 steps failed to run."
    check(loop, running(22))
    assert loop.status.health.state is Health.Healthy


def test_a_spec_edit_starts_the_new_run_with_unknown_health() -> None:
    loop = Loop()
    stall(loop)
    check(loop, observation("stop", stopReason="materialBlocker", work="blocked"))
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
            loop.now += timedelta(minutes=30)  # past any retry too: the interval caps it
            loop.send(TimerDue())
            continue
        before = loop.status.health.state
        if loop.status.step.kind is not StepKind.observe:
            effects = loop.send(StepFinished(loop.seq, result()))
            check = False
        elif what == "fail":
            effects = loop.send(StepFailed(loop.seq, "HTTP 503"))
            check = False
        else:
            done += what == "wait-moved"
            if what in ("wait-same", "wait-moved"):
                answer = running(done)
            elif what == "idle":
                answer = running(done, work="waiting")
            elif what == "act-same":
                answer = observation("act", action=action(failureId=f"f{len(loop.log)}"))
            else:
                answer = observation("act", action=action(targetStateId=f"s{len(loop.log)}"))
            effects = loop.send(ObservationAccepted(loop.seq, answer))
            check = True
        after = loop.status.health.state
        assert len(health_events(effects)) <= 1
        if after is not before and not check:
            assert after is Health.Failing, (before, after, what)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["running", "waiting"]), st.booleans()),
        min_size=1,
        max_size=60,
    ),
    st.integers(min_value=1, max_value=5),
)
def test_work_whose_progress_never_moves_is_never_stalled_however_long_it_runs(
    script: list[tuple[str, bool]], stall_checks: int
) -> None:
    loop = Loop(maxChecks=1000, options={"stall_checks": stall_checks})
    loop.send(Started(generation=1))
    for work, with_track in script:
        obs = running(21, work=work) if with_track else observation("wait", work=work)
        check(loop, obs)
        assert loop.status.health.state is not Health.Stalled
        assert loop.status.monitor is MonitorState.active


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=6))
def test_a_track_that_moved_and_then_froze_is_stalled_after_exactly_the_threshold(
    stall_checks: int, moves: int
) -> None:
    loop = Loop(maxChecks=1000, options={"stall_checks": stall_checks})
    loop.send(Started(generation=1))
    for done in range(moves + 2):
        check(loop, running(done))
        assert loop.status.health.state is Health.Healthy
    for n in range(1, stall_checks + 1):
        check(loop, running(moves + 1))
        stalled = loop.status.health.state is Health.Stalled
        assert stalled is (n == stall_checks), n


def test_a_finished_track_or_a_status_change_is_no_progress_signal() -> None:
    loop = Loop(maxChecks=1000)
    loop.send(Started(generation=1))
    # A counted phase moves and completes; the next phase runs with no counter of its own.
    check(loop, running(50))
    done = [track("modules", 100, 100, T0, status="complete")]
    check(loop, observation("wait", work="running", progress=done))
    for _ in range(5 * STALL_CHECKS):
        check(loop, observation("wait", work="running", progress=done))
        assert loop.status.health.state is not Health.Stalled
    # A track without numbers that changes status is no signal either.
    loop = Loop(maxChecks=1000)
    loop.send(Started(generation=1))
    for status in ["waiting", "running", "running", "running", "running", "running"]:
        untracked = [track("phase", 0, None, T0, status=status) | {"completed": None}]
        check(loop, observation("wait", work="running", progress=untracked))
        assert loop.status.health.state is not Health.Stalled


def test_the_brake_holds_across_waits_and_respellings_of_the_same_object() -> None:
    loop = Loop(maxChecks=1000)
    loop.send(Started(generation=1))
    spellings = ["jobs/build", "default/jobs/build", "jobs.batch/build", "jobs/build"]
    stop, n = None, 0
    for n, spelling in enumerate(spellings):
        asked = action(failureId=f"f{n}", targetStateId=f"s{n}", mutationSet=[spelling])
        effects = check(loop, observation("act", action=asked))
        stop = next((e for e in effects if isinstance(e, StopMonitor)), None)
        if stop is not None:
            break
        loop.send(StepFinished(loop.seq, result()))
        # A wait in between, whatever it sees, does not reset the row.
        check(loop, observation("wait", work="running"))
    assert stop is not None and n == BRAKE_ACTS, (n, loop.status.health.brakeActs)
    assert stop.reason is StopReason.blocked


def test_acts_on_other_objects_each_get_their_own_count() -> None:
    from tests.support.observations import contract

    both = contract(allowedResources=["jobs/build", "jobs/lint"])
    loop = Loop(maxChecks=1000, granted_by_first_observation=True)
    loop.send(Started(generation=1))
    for n in range(2 * BRAKE_ACTS):
        target = ["jobs/build", "jobs/lint"][n % 2]
        asked = action(failureId=f"f{n}", mutationSet=[target])
        effects = check(loop, observation("act", contract=both, action=asked))
        assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.act], n
        loop.send(StepFinished(loop.seq, result()))
    again = action(failureId="again", mutationSet=["jobs/build"])
    braked = check(loop, observation("act", contract=both, action=again))
    assert [e for e in braked if isinstance(e, StopMonitor)], "build's next act is braked"


def test_acts_days_apart_with_progress_between_them_never_brake() -> None:
    # A long run: each day the same act is asked in the same state, and between the acts
    # the work makes progress. That is no loop.
    loop = Loop(maxChecks=1000)
    loop.send(Started(generation=1))
    for day in range(3 * BRAKE_ACTS):
        effects = check(loop, observation("act", action=action(failureId=f"day-{day}")))
        assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.act], day
        loop.send(StepFinished(loop.seq, result()))
        for done in (5, 15, 25):
            check(loop, running(done))
    assert loop.status.monitor is MonitorState.active


def test_the_row_of_checks_that_read_the_goals_objects_the_same_reaches_the_next_step() -> None:
    loop = Loop()
    loop.start()

    def read(facts_print: str) -> StepInput:
        loop.send(ObservationAccepted(loop.seq, observation("wait"), facts_print=facts_print))
        loop.later(30)
        [launch] = [e for e in loop.send(TimerDue()) if isinstance(e, LaunchStep)]
        return launch.input

    rows = [(p, (s := read(p)).factsPrint, s.factsSince, s.check) for p in "aabb" + "c"]
    assert rows == [
        ("a", "a", 1, 2),
        ("a", "a", 1, 3),  # two checks in a row read the same: the row began at check 1
        ("b", "b", 3, 4),
        ("b", "b", 3, 5),
        ("c", "c", 5, 6),
    ]
    # A check whose step read none of them ends the row.
    assert (read("").factsPrint, loop.status.health.factsSince) == ("", 0)
