"""A weak model cannot make goalkeeper do harm: the engine's guards, under any wrong answers.

A small model errs in the ways seen with the local one: it routes `act` when nothing is
idle or the goal is already complete, names an authorized action that was never recorded,
copies a mutation set from the wrong object, restates the contract wider than the task,
pairs a stop reason with `wait`, or repeats the last answer without reading. Hypothesis
plays such a model over whole monitor runs through the pure engine. Whatever it answers:

- every act or repair step the engine launches carries an action the pinned authority
  covers, and a mutation set the pinned contract neither forbids nor protects;
- the pinned authority never widens;
- every accepted observation gets exactly one report, and the run ends within maxChecks.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.support.engine_loop import Loop
from tests.support.observations import AUTHORIZED, action, contract, observation_dict, result

from goalkeeper.core import guards
from goalkeeper.core.engine import (
    EmitReport,
    LaunchStep,
    ObservationAccepted,
    ObservationRejected,
    StepFinished,
    TimerDue,
)
from goalkeeper.core.models import (
    MonitorState,
    Observation,
    StepKind,
)

MAX_CHECKS = 8
PINNED_IDS = {a["id"] for a in AUTHORIZED}
WIPE_DB = {"id": "wipe-db", "description": "Drop every table.", "paid": False}

ids = st.sampled_from(["resume-build", "fix-config", "wipe-db", "resume-render", ""])
mutation_sets = st.sampled_from(
    [
        ["jobs/build"],
        ["jobs/render-part-2"],
        ["source code"],
        ["the model provider"],
        ["configmaps/build-progress", "jobs/build"],
    ]
)
contracts = st.sampled_from(
    [
        contract(),
        contract(allowedResources=["jobs/build", "deployments/web"]),
        contract(forbiddenChanges=[]),
        contract(costCeiling={"amount": 1e9, "currency": "USD"}),
    ]
)
authorities = st.sampled_from([AUTHORIZED, [*AUTHORIZED, WIPE_DB], AUTHORIZED[:1], []])


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """One wrong (or by chance right) answer of a weak model, not yet validated."""
    route = draw(st.sampled_from(["wait", "act", "stop"]))
    body = observation_dict(
        route,
        goal=draw(st.sampled_from(["complete", "incomplete", "unknown"])),
        work=draw(st.sampled_from(["running", "idle", "waiting", "failed", "complete"])),
        contract=draw(contracts),
        authorizedActions=draw(authorities),
    )
    if draw(st.booleans()):
        body["action"] = action(
            kind=draw(st.sampled_from(["advance", "recover", "repair"])),
            authorizedActionId=draw(ids),
            mutationSet=draw(mutation_sets),
        )
    if draw(st.booleans()):
        body["stopReason"] = draw(st.sampled_from(["goalComplete", "materialBlocker"]))
    return body


def launched(loop: Loop) -> list[LaunchStep]:
    return [e for e in loop.log if isinstance(e, LaunchStep)]


def reports(loop: Loop) -> int:
    return sum(isinstance(e, EmitReport) for e in loop.log)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(answers(), min_size=1, max_size=3 * MAX_CHECKS))
def test_no_wrong_answer_makes_the_monitor_act_outside_its_authority(
    script: list[dict[str, Any]],
) -> None:
    run = Loop(task="Finish Job build.", maxChecks=MAX_CHECKS, everyMinutes=5)
    run.start()
    pinned: tuple[set[str], list[str], list[str]] | None = None
    accepted = 0
    answers_left = iter(script)
    while run.status.monitor is not MonitorState.stopped:
        step = run.status.step
        if step is None:
            run.later(5)
            run.send(TimerDue())
            continue
        if step.kind is not StepKind.observe:
            launch = launched(run)[-1]
            assert launch.kind is step.kind and launch.input.action is not None
            act = launch.input.action
            assert pinned is not None, "an act before any authority was recorded"
            assert act.authorizedActionId in pinned[0], act
            assert guards.authority_violation(run.status, act) is None
            assert guards.forbidden_mutation(run.status, act) is None
            run.send(StepFinished(step.seq, result()))
            continue
        body = next(answers_left, None)
        if body is None:
            break  # the scripted model has no more answers; what it did is judged
        try:
            answer = Observation.model_validate(body)
        except ValidationError as error:
            run.send(ObservationRejected(step.seq, str(error)[:200]))
            continue
        accepted += 1
        before = reports(run)
        run.send(ObservationAccepted(step.seq, answer))
        assert reports(run) == before + 1, "one report per accepted observation"
        recorded = run.status
        if pinned is None and recorded.contract is not None:
            pinned = (
                {a.id for a in recorded.authorizedActions},
                list(recorded.contract.allowedResources),
                list(recorded.contract.forbiddenChanges),
            )
        if pinned is not None and recorded.contract is not None:
            # The record only narrows: no new action, resource, or lifted prohibition.
            assert {a.id for a in recorded.authorizedActions} <= pinned[0]
            assert set(recorded.contract.allowedResources) <= set(pinned[1])
            assert set(pinned[2]) <= set(recorded.contract.forbiddenChanges)
    assert run.status.checks <= MAX_CHECKS
    assert all(s.input.action is None for s in launched(run) if s.kind is StepKind.observe)
    assert accepted <= len(script)


def test_the_driver_reaches_an_act_when_the_answer_is_right() -> None:
    """The property above can fail: a right answer does launch an act step."""
    run = Loop(task="Finish Job build.", maxChecks=MAX_CHECKS, everyMinutes=5)
    run.start()
    assert run.status.step is not None
    run.send(
        ObservationAccepted(
            run.status.step.seq, Observation.model_validate(observation_dict("act"))
        )
    )
    assert [s.kind for s in launched(run)] == [StepKind.observe, StepKind.act]
    act = launched(run)[-1].input.action
    assert act is not None and act.authorizedActionId in PINNED_IDS
