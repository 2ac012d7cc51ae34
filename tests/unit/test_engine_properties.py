"""Invariants of the engine over random event sequences."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.observations import action, contract, observation, result

from goalkeeper.core import guards
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
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    Observation,
    Route,
    StepKind,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    route = draw(st.sampled_from(["wait", "act", "stop"]))
    if route != "act":
        return observation(route)
    ceiling = draw(st.sampled_from([None, 5.0, 20.0]))
    paid = draw(st.sampled_from([True, True, False]))
    overrides: dict[str, object] = {
        "kind": draw(st.sampled_from(["advance", "recover", "repair"])),
        "failureId": draw(st.sampled_from(["f1", "f2"])),
        "targetStateId": draw(st.sampled_from(["s1", "s2"])),
        "authorizedActionId": draw(st.sampled_from(["resume-build"] * 5 + ["other"])),
    }
    if paid:
        overrides["estimatedCost"] = {"amount": draw(st.sampled_from([1.0, 4.0, 9.0]))}
        overrides["approval"] = draw(st.sampled_from([None] + ["approved-budget"] * 4))
    extra: dict[str, object] = {}
    if draw(st.booleans()):
        extra["observedSpend"] = {"amount": draw(st.sampled_from([0.0, 3.0, 12.0]))}
    return observation(
        "act",
        action=action(**overrides),
        contract=contract(
            costCeiling=None if ceiling is None else {"amount": ceiling, "currency": "USD"}
        ),
        **extra,
    )


@st.composite
def moves(draw: st.DrawFn) -> tuple[str, object]:
    kind = draw(
        st.sampled_from(
            [
                "accept",
                "accept",
                "accept",
                "reject",
                "finish",
                "fail",
                "timer",
                "restart",
                "stale",
                "cancel",
            ]
        )
    )
    if kind == "accept":
        return kind, draw(observations())
    if kind == "finish":
        outcome = draw(st.sampled_from(["succeeded", "failed", "blocked"]))
        cost = draw(st.sampled_from([None, 0.5, 3.0]))
        extra = {} if cost is None else {"actualCost": {"amount": cost}}
        return kind, result(outcome, **extra)
    if kind == "timer":
        return kind, draw(st.integers(min_value=0, max_value=90))
    return kind, None


def to_event(status: MonitorStatus, move: tuple[str, object]) -> Event:
    kind, payload = move
    seq = status.step.seq if status.step else 0
    if kind == "accept":
        return ObservationAccepted(seq, payload)  # type: ignore[arg-type]
    if kind == "reject":
        return ObservationRejected(seq, "invalid")
    if kind == "finish":
        return StepFinished(seq, payload)  # type: ignore[arg-type]
    if kind == "fail":
        return StepFailed(seq, "pod failed")
    if kind == "stale":
        return ObservationAccepted(seq + 1000, observation("stop"))
    if kind == "restart":
        return Started()
    if kind == "cancel":
        return Cancelled()
    return TimerDue()


@settings(max_examples=400, deadline=None)
@given(
    max_checks=st.integers(min_value=1, max_value=12),
    every=st.integers(min_value=1, max_value=60),
    script=st.lists(moves(), min_size=4, max_size=40),
)
def test_engine_invariants_hold_over_random_event_sequences(
    max_checks: int, every: int, script: list[tuple[str, object]]
) -> None:
    spec = MonitorSpec(task="Finish the build.", everyMinutes=every, maxChecks=max_checks)
    status = MonitorStatus()
    now = T0
    reports = 0
    first = decide(spec, status, Started(generation=1), now)
    status = first.status
    for move in script:
        if move[0] == "timer":
            now += timedelta(minutes=move[1])  # type: ignore[arg-type]
        event = to_event(status, move)
        before = status
        decision = decide(spec, before, event, now)
        status = decision.status
        effects = decision.effects

        # Nothing after stop.
        if before.monitor is MonitorState.stopped:
            assert effects == ()
            assert status.checks == before.checks

        # No schedule outside the wait route.
        accepted = status.checks == before.checks + 1
        for effect in effects:
            if isinstance(effect, PublishSchedule):
                assert isinstance(event, ObservationAccepted)
                assert event.observation.route is Route.wait
                assert accepted and status.monitor is MonitorState.active

        # Never more accepted checks than maxChecks.
        assert status.checks <= max_checks

        # Exactly one report per accepted observation, and none otherwise.
        emitted = [e for e in effects if isinstance(e, EmitReport)]
        assert len(emitted) == (1 if accepted else 0)
        reports += len(emitted)
        assert reports == status.checks

        # Never a paid launch over the ceiling, without a ceiling, or without approval.
        for effect in effects:
            if isinstance(effect, LaunchStep) and effect.kind is not StepKind.observe:
                assert isinstance(event, ObservationAccepted)
                obs, request = event.observation, effect.input.action
                assert request is not None
                if guards.is_paid(obs, request):
                    ceiling = obs.contract.costCeiling
                    assert ceiling is not None and request.estimatedCost is not None
                    assert request.approval
                    spent = guards.spent_so_far(obs, before.spend)
                    assert spent + request.estimatedCost.amount <= ceiling.amount + 1e-9

        # A launch always leaves exactly that step in flight.
        launches = [e for e in effects if isinstance(e, LaunchStep)]
        assert len(launches) <= 1
        if launches:
            assert status.step is not None and status.step.seq == launches[0].seq
