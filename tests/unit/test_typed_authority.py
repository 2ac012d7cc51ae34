"""What the engine does with a typed reading: unclear words hold every act for a person, a
person confirms or corrects the reading (before or when an act asks), a grant's condition
holds its act until the facts show it, and the act step is told the typed grant."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.engine_loop import Loop
from tests.support.observations import TASK, action, extraction, observation

from goalkeeper.core import authority
from goalkeeper.core.engine import (
    ApprovalAnswered,
    EmitReport,
    LaunchStep,
    ObservationAccepted,
    StepFinished,
    TimerDue,
)
from goalkeeper.core.models import (
    ActionResult,
    ApprovalDecision,
    ApprovalKind,
    ConditionStatus,
    FactKind,
    GrantVerb,
    JobEnd,
    MonitorApprovalSpec,
    NamedIn,
    ObjectFacts,
    Observation,
    StepKind,
    StopReason,
    SyncedBy,
)

UID = "monitor-uid"
UNCLEAR = "Deployment web is frozen this week."


def launched(effects: tuple[object, ...]) -> list[StepKind]:
    return [e.kind for e in effects if isinstance(e, LaunchStep)]


def answer(loop: Loop, request_id: str, **spec: Any) -> tuple[object, ...]:
    body = MonitorApprovalSpec(
        monitor="build", requestId=request_id, decision=ApprovalDecision.approve, approver="alice"
    ).model_copy(update=spec)
    return loop.send(ApprovalAnswered(f"ok-{request_id}", body, (UID,), UID))


def confirmed_condition(loop: Loop) -> tuple[ConditionStatus, str]:
    [found] = [c for c in loop.status.conditions if c.type == "AuthorityConfirmed"]
    return found.status, found.message


def test_a_reading_read_whole_acts_without_a_person() -> None:
    loop = Loop()
    loop.start()
    assert confirmed_condition(loop)[0] is ConditionStatus.true
    assert launched(loop.observe(observation("act"))) == [StepKind.act]


def test_unclear_words_hold_the_act_until_a_person_confirms_it() -> None:
    loop = Loop(task=f"{TASK} {UNCLEAR}")
    loop.start()
    state, message = confirmed_condition(loop)
    assert state is ConditionStatus.false and UNCLEAR in message
    effects = loop.observe(observation("act"))
    assert launched(effects) == []
    request = loop.status.approval
    assert request is not None and request.kind is ApprovalKind.authority
    assert UNCLEAR in request.message
    effects = answer(loop, request.id)
    assert launched(effects) == [StepKind.act]
    assert loop.status.authority is not None
    assert loop.status.authority.confirmedBy.startswith("alice")
    assert confirmed_condition(loop)[0] is ConditionStatus.true


def test_a_person_confirms_before_any_act_and_corrects_the_grants() -> None:
    loop = Loop(task=f"{TASK} {UNCLEAR}")
    loop.start()
    effects = answer(
        loop,
        authority.READING_REQUEST,
        grants=["restart Deployment web once"],
        denied=["fix-config"],
    )
    assert launched(effects) == [], "a confirmation launches nothing by itself"
    record = loop.status.authority
    assert record is not None and record.confirmedBy.startswith("alice")
    assert [(g.id, g.verb, g.confirmedBy[:5]) for g in record.typedGrants] == [
        ("resume-build", GrantVerb.resume, ""),
        ("restart-web", GrantVerb.restart, "alice"),
    ]
    assert [a.id for a in loop.status.authorizedActions] == ["resume-build", "restart-web"]
    assert loop.status.contract is not None
    assert loop.status.contract.allowedResources == ["jobs/build", "deployments/web"]
    # Confirmed: the next act runs without asking.
    restart = action(authorizedActionId="restart-web", mutationSet=["deployments/web"])
    act = observation("act", action=restart, contract=None, authorizedActions=None)
    assert launched(loop.observe(act)) == [StepKind.act]


CONDITIONAL = (
    "Finish the load. You may resume Job build once Job extract has succeeded. Do not change "
    "anything else."
)


def build_facts(**state: Any) -> tuple[ObjectFacts, ...]:
    return (ObjectFacts(kind=FactKind.Job, name="build", namedIn=[NamedIn.task], **state),)


BUILD = build_facts(suspended=True)


def extract_facts(ended: JobEnd | None) -> tuple[ObjectFacts, ...]:
    return (ObjectFacts(kind=FactKind.Job, name="extract", namedIn=[NamedIn.task], ended=ended),)


def test_a_conditional_grant_acts_only_once_its_condition_holds_in_the_facts() -> None:
    grant = {**extraction()["authorizedActions"][0], "quote": CONDITIONAL.split(". ")[1] + "."}
    loop = Loop(task=CONDITIONAL, extraction=extraction(authorizedActions=[grant]))
    loop.start()
    [typed] = loop.status.authority.typedGrants  # type: ignore[union-attr]
    assert str(typed.condition) == "job extract succeeded"
    assert loop.status.contract is not None
    assert loop.status.contract.allowedResources == ["jobs/build"], "Job extract is not writable"
    # The observation does not restate the authority: the recorded one is the reading's.
    act = observation("act", contract=None, authorizedActions=None)
    effects = loop.send(ObservationAccepted(loop.seq, act, facts=extract_facts(None) + BUILD))
    assert launched(effects) == [] and loop.status.schedule is not None
    assert "applies once job extract succeeded" in effects[0].text  # type: ignore[attr-defined]
    loop.later(60)
    loop.send(TimerDue())
    done = extract_facts(JobEnd.Complete) + BUILD
    effects = loop.send(ObservationAccepted(loop.seq, act, facts=done))
    [step] = [e for e in effects if isinstance(e, LaunchStep)]
    assert step.kind is StepKind.act
    # The act step is told the typed grant it does, so it does it by code.
    assert step.input.grant is not None and step.input.grant.id == "resume-build"


STOP_SHORT = observation(
    "stop",
    goal="incomplete",
    work="blocked",
    stopReason="outsideAuthority",
    contract=None,
    authorizedActions=None,
)


def conditional_loop() -> Loop:
    grant = {**extraction()["authorizedActions"][0], "quote": CONDITIONAL.split(". ")[1] + "."}
    loop = Loop(
        task=CONDITIONAL,
        stopWhen="Stop when Job build has succeeded.",
        extraction=extraction(authorizedActions=[grant]),
    )
    loop.start()
    return loop


def extract_running() -> tuple[ObjectFacts, ...]:
    return (
        ObjectFacts(
            kind=FactKind.Job, name="extract", namedIn=[NamedIn.task], suspended=False, active=1
        ),
    )


def test_an_observe_step_carries_the_stop_rule_and_the_typed_grants_in_force() -> None:
    # By them the step answers a check the model leaves unanswered (step/agent.py).
    loop = Loop(stopWhen="Stop when Job build has succeeded.")
    effects = loop.start()
    (step,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert step.kind is StepKind.observe
    record = loop.status.authority
    assert record is not None and record.typedGrants
    assert step.input.grants == record.typedGrants and step.input.goal == record.goal


def test_a_stop_short_while_a_grant_waits_for_a_running_job_is_a_wait_on_that_job() -> None:
    loop = conditional_loop()
    effects = loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=extract_running() + BUILD))
    assert loop.status.stop is None and launched(effects) == []
    schedule = loop.status.schedule
    assert schedule is not None and [w.ref for w in schedule.watch] == ["Job/extract"]
    assert loop.status.lastObservation is not None
    assert "grant resume-build makes it hold once job extract succeeded" in (
        loop.status.lastObservation.reason
    )
    # Job extract succeeded: the same stop short is overruled by the grant's act.
    loop.later(60)
    loop.send(TimerDue())
    done = extract_facts(JobEnd.Complete) + BUILD
    effects = loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=done))
    assert launched(effects) == [StepKind.act]


def test_a_stop_short_while_the_goals_own_job_runs_is_a_wait_on_that_job() -> None:
    # Seen from a small model: the Job it had resumed read as "suspended", and it stopped.
    loop = Loop(stopWhen="Stop when Job build has succeeded.")
    loop.start()
    runs = build_facts(suspended=False, active=1)
    effects = loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=runs))
    assert loop.status.stop is None and launched(effects) == []
    schedule = loop.status.schedule
    assert schedule is not None and [w.ref for w in schedule.watch] == ["Job/build"]
    assert loop.status.lastObservation is not None
    assert '"Job build has succeeded" does not hold yet' in loop.status.lastObservation.reason
    # Job build failed: nothing comes by itself any more, and the stop stands.
    loop.later(60)
    loop.send(TimerDue())
    failed = build_facts(suspended=False, failed=1, ended=JobEnd.Failed)
    loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=failed))
    assert loop.status.stop is not None


def test_a_blocker_read_while_the_goals_own_job_runs_stands() -> None:
    # A running Job may be stuck in a way only its log tells: the model's blocker is its own.
    loop = Loop(stopWhen="Stop when Job build has succeeded.")
    loop.start()
    blocker = observation(
        "stop", goal="incomplete", work="blocked", stopReason="materialBlocker", contract=None,
        authorizedActions=None,
    )  # fmt: skip
    runs = build_facts(suspended=False, active=1)
    loop.send(ObservationAccepted(loop.seq, blocker, facts=runs))
    assert loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.materialBlocker


@pytest.mark.parametrize(
    "extract",
    [
        pytest.param(extract_facts(JobEnd.Failed), id="failed"),
        pytest.param(
            (
                ObjectFacts(
                    kind=FactKind.Job, name="extract", namedIn=[NamedIn.task], suspended=True
                ),
            ),
            id="suspended",
        ),
    ],
)
def test_a_stop_short_stands_when_the_condition_cannot_come_without_an_act(
    extract: tuple[ObjectFacts, ...],
) -> None:
    loop = conditional_loop()
    loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=extract + BUILD))
    assert loop.status.stop is not None and loop.status.stop.reason is StopReason.outsideAuthority


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(observation("wait", contract=None, authorizedActions=None), id="wait"),
        # Seen from a small model: the second link's act, asked for before its condition.
        pytest.param(observation("act", contract=None, authorizedActions=None), id="act-too-soon"),
    ],
)
def test_a_chain_of_grants_runs_in_order_each_link_once_its_condition_holds(
    answer: Observation,
) -> None:
    first, second = "You may resume Job extract.", CONDITIONAL.split(". ")[1] + "."
    grants = [
        {"id": "resume-extract", "description": "Resume Job extract.", "quote": first},
        {**extraction()["authorizedActions"][0], "quote": second},
    ]
    loop = Loop(
        task=f"{first} {second}",
        stopWhen="Stop when Job build has succeeded.",
        extraction=extraction(authorizedActions=grants),
    )
    loop.start()
    held = (ObjectFacts(kind=FactKind.Job, name="extract", namedIn=[NamedIn.task], suspended=True),)
    # Job build waits for Job extract, which only the first grant moves: the check does it.
    effects = loop.send(ObservationAccepted(loop.seq, answer, facts=held + BUILD))
    [step] = [e for e in effects if isinstance(e, LaunchStep)]
    assert step.kind is StepKind.act and step.input.grant is not None
    assert step.input.grant.id == "resume-extract"


def test_of_several_grants_that_move_the_goal_a_wait_acts_on_the_first_then_the_next() -> None:
    first, second = "You may resume Job build.", "You may scale Deployment old-web to 0."
    grants = [
        {**extraction()["authorizedActions"][0], "quote": first},
        {"id": "scale-old-web", "description": "Scale old-web to 0.", "quote": second},
    ]
    loop = Loop(
        task=f"{first} {second}",
        stopWhen="Stop when Job build has succeeded and Deployment old-web has 0 replicas.",
        extraction=extraction(authorizedActions=grants),
    )
    loop.start()
    wait = observation("wait", contract=None, authorizedActions=None)
    old_web = ObjectFacts(
        kind=FactKind.Deployment, name="old-web", namedIn=[NamedIn.stopWhen], replicas=2
    )
    effects = loop.send(ObservationAccepted(loop.seq, wait, facts=(*BUILD, old_web)))
    [step] = [e for e in effects if isinstance(e, LaunchStep)]
    assert step.kind is StepKind.act and step.input.grant is not None
    assert step.input.grant.id == "resume-build"
    loop.finish()
    running = build_facts(suspended=False, active=1)
    effects = loop.send(ObservationAccepted(loop.seq, wait, facts=(*running, old_web)))
    [step] = [e for e in effects if isinstance(e, LaunchStep)]
    assert step.input.grant is not None and step.input.grant.id == "scale-old-web"


def test_an_act_the_reading_missed_goes_to_the_person_who_may_grant_it() -> None:
    # "it" is no object: the grant is not read, and the reading waits for a person.
    task = "Deployment web is stuck. You may restart it."
    loop = Loop(task=task, extraction=extraction(authorizedActions=[]))
    loop.start()
    assert loop.status.authorizedActions == []
    restart = action(authorizedActionId="restart-web", mutationSet=["deployments/web"])
    act = observation("act", action=restart, contract=None, authorizedActions=None)
    effects = loop.observe(act)
    assert launched(effects) == [] and loop.status.monitor == "active"
    request = loop.status.approval
    assert request is not None and request.kind is ApprovalKind.authority
    # The person names the grant as the act does, in words the reading parses whole.
    effects = answer(loop, request.id, grants=["restart-web=restart Deployment web"])
    assert launched(effects) == [StepKind.act]
    [step] = [e for e in effects if isinstance(e, LaunchStep)]
    assert step.input.grant is not None and step.input.grant.confirmedBy.startswith("alice")


def test_a_confirmation_that_still_misses_the_act_stops_outside_authority() -> None:
    loop = Loop(
        task="Deployment web is stuck. You may restart it.",
        extraction=extraction(authorizedActions=[]),
    )
    loop.start()
    restart = action(authorizedActionId="restart-web", mutationSet=["deployments/web"])
    loop.observe(observation("act", action=restart, contract=None, authorizedActions=None))
    assert loop.status.approval is not None
    answer(loop, loop.status.approval.id)
    assert loop.status.stop is not None and loop.status.stop.reason == "outsideAuthority"
    assert "restart-web" in loop.status.stop.message


RESTART_WEB = action(authorizedActionId="restart-web", mutationSet=["deployments/web"])


@pytest.mark.parametrize(
    "said",
    [
        # An act no grant covers while unclear words wait for a person: the refusal stands.
        observation("act", action=RESTART_WEB, contract=None, authorizedActions=None),
        # A stop for want of authority: the model's reason stands.
        observation(
            "stop",
            goal="incomplete",
            stopReason="outsideAuthority",
            contract=None,
            authorizedActions=None,
        ),
    ],
    ids=["act", "stop"],
)
def test_no_person_is_asked_at_the_safety_limit(said: Observation) -> None:
    """A person's answer would need a check to act on or verify it; at the last check the
    run stops, and the one report of that check is the last (no final report follows)."""
    loop = Loop(task=f"{TASK} {UNCLEAR}", maxChecks=1)
    loop.start()
    effects = loop.observe(said)
    assert loop.status.approval is None
    assert loop.status.stop is not None and loop.status.stop.reason == "outsideAuthority"
    assert [e.check for e in effects if isinstance(e, EmitReport)] == [1]
    # The same answer one check earlier waits for the person.
    earlier = Loop(task=f"{TASK} {UNCLEAR}", maxChecks=2)
    earlier.start()
    earlier.observe(said)
    assert earlier.status.approval is not None and earlier.status.stop is None


ARGO = SyncedBy(controller="Argo CD", source="application shop")


@pytest.mark.parametrize(
    ("facts", "waits_for"),
    [
        (build_facts(suspended=True), None),
        (build_facts(suspended=False, active=1), "Job build is not suspended"),
        # The facts hold a Job, not this one: it is gone.
        (extract_facts(None), "Job build was not found"),
        # No Job read at all (the observe step could not list them): the act step reads it.
        ((), None),
    ],
)
def test_a_typed_act_that_would_change_nothing_the_facts_show_is_a_wait(
    facts: tuple[ObjectFacts, ...], waits_for: str | None
) -> None:
    loop = Loop()
    loop.start()
    effects = loop.send(ObservationAccepted(loop.seq, observation("act"), facts=facts))
    if waits_for is None:
        assert launched(effects) == [StepKind.act]
        return
    assert launched(effects) == [] and loop.status.schedule is not None
    assert loop.status.monitor == "active"
    assert f"not acting: grant resume-build (resume Job build): {waits_for}" in (
        effects[0].text  # type: ignore[attr-defined]
    )


def test_an_act_on_an_object_a_gitops_controller_keeps_in_sync_is_refused_before_launch() -> None:
    loop = Loop()
    loop.start()
    facts = build_facts(suspended=True, syncedBy=ARGO)
    effects = loop.send(ObservationAccepted(loop.seq, observation("act"), facts=facts))
    assert launched(effects) == []
    assert loop.status.stop is not None and loop.status.stop.reason is StopReason.blocked
    message = loop.status.stop.message
    assert "Job build is kept in sync by Argo CD (application shop)" in message
    assert "even though Argo CD manages it" in message


def test_a_grant_whose_words_know_the_gitops_controller_acts_on_its_object() -> None:
    words = "You may resume Job build even though Argo CD manages it."
    grant = {**extraction()["authorizedActions"][0], "quote": words}
    loop = Loop(task=f"Finish Job build. {words}", extraction=extraction(authorizedActions=[grant]))
    loop.start()
    [typed] = loop.status.authority.typedGrants  # type: ignore[union-attr]
    assert typed.gitopsAcknowledged
    facts = build_facts(suspended=True, syncedBy=ARGO)
    # The observation does not restate the authority: the recorded one is the reading's.
    act = observation("act", contract=None, authorizedActions=None)
    effects = loop.send(ObservationAccepted(loop.seq, act, facts=facts))
    assert launched(effects) == [StepKind.act]


def test_a_confirmed_act_is_checked_on_the_facts_of_the_check_that_asked_for_it() -> None:
    task = "Deployment web is stuck. You may restart it."
    restart = action(authorizedActionId="restart-web", mutationSet=["deployments/web"])
    act = observation("act", action=restart, contract=None, authorizedActions=None)
    web = ObjectFacts(
        kind=FactKind.Deployment, name="web", namedIn=[NamedIn.task], replicas=1, syncedBy=ARGO
    )
    loop = Loop(task=task, extraction=extraction(authorizedActions=[]))
    loop.start()
    loop.send(ObservationAccepted(loop.seq, act, facts=(web,)))
    assert loop.status.approval is not None and loop.status.approval.facts == [web]
    # The person grants the restart, but not on an object Argo CD keeps in sync.
    effects = answer(loop, loop.status.approval.id, grants=["restart-web=restart Deployment web"])
    assert launched(effects) == []
    assert loop.status.stop is not None and loop.status.stop.reason is StopReason.blocked
    assert "kept in sync by Argo CD (application shop)" in loop.status.stop.message


def test_a_conditional_grant_a_person_adds_waits_for_its_condition() -> None:
    task = "Job build loads what Job extract writes. You may resume it after that."
    loop = Loop(task=task, extraction=extraction(authorizedActions=[]))
    loop.start()
    act = observation("act", contract=None, authorizedActions=None)
    loop.send(ObservationAccepted(loop.seq, act, facts=extract_facts(None) + BUILD))
    assert loop.status.approval is not None
    grant = "resume-build=resume Job build once Job extract has succeeded"
    effects = answer(loop, loop.status.approval.id, grants=[grant])
    # Job extract has not ended in the facts the check read: a fresh check decides.
    assert launched(effects) == [StepKind.observe]
    effects = loop.send(ObservationAccepted(loop.seq, act, facts=extract_facts(None) + BUILD))
    assert launched(effects) == [] and "applies once job extract succeeded" in (
        effects[0].text  # type: ignore[attr-defined]
    )


def test_a_stop_for_want_of_a_grant_goes_to_the_person_while_the_reading_waits() -> None:
    # Nothing is granted until a person reads "it"; the model sees no grant and would stop.
    loop = Loop(
        task="Deployment web is stuck. You may restart it.",
        extraction=extraction(authorizedActions=[]),
    )
    loop.start()
    stop = STOP_SHORT
    effects = loop.observe(stop)
    assert loop.status.monitor == "active" and loop.status.stop is None
    request = loop.status.approval
    assert request is not None and request.kind is ApprovalKind.authority
    assert request.action is None and "checks again" in request.message
    texts = [getattr(e, "text", "") for e in effects]
    assert any("awaiting confirmation, then: a fresh check" in t for t in texts)
    effects = answer(loop, request.id, grants=["restart-web=restart Deployment web"])
    assert launched(effects) == [StepKind.observe]
    assert [g.id for g in loop.status.authority.typedGrants] == ["restart-web"]  # type: ignore[union-attr]
    # Once confirmed, a stop of the model's own ends the run as it says.
    loop.observe(stop)
    assert loop.status.stop is not None and loop.status.stop.reason == "outsideAuthority"


FLAGS_TASK = "You may set key mode of ConfigMap flags to live. Not before the review is done."
SHADOW = (
    ObjectFacts(
        kind=FactKind.ConfigMap, name="flags", namedIn=[NamedIn.stopWhen], data={"mode": "shadow"}
    ),
)


def held_back_loop() -> Loop:
    # "Not before the review is done" limits, and names no object: the grant is held back.
    loop = Loop(
        task=FLAGS_TASK,
        stopWhen="Stop when ConfigMap flags has key mode set to live.",
        extraction=extraction(authorizedActions=[]),
    )
    loop.start()
    record = loop.status.authority
    assert record is not None and record.typedGrants == []
    assert [g.id for g in record.heldBack] == ["set-key-flags"]
    return loop


def test_a_wait_on_a_leaf_only_a_held_back_grant_moves_asks_the_person_at_once() -> None:
    loop = held_back_loop()
    wait = observation("wait", contract=None, authorizedActions=None)
    loop.send(ObservationAccepted(loop.seq, wait, facts=SHADOW))
    request = loop.status.approval
    assert request is not None and request.kind is ApprovalKind.authority
    assert loop.status.schedule is None and loop.status.stop is None
    assert "set-key ConfigMap flags key mode to live" in request.message
    assert "--grant set-key-flags=WORDS" in request.message
    # The person grants it in their own words: the next check acts on it by code.
    effects = answer(loop, request.id, grants=["mode-live=set key mode of ConfigMap flags to live"])
    assert launched(effects) == [StepKind.observe]
    effects = loop.send(ObservationAccepted(loop.seq, wait, facts=SHADOW))
    assert launched(effects) == [StepKind.act]


def test_a_confirmation_without_the_held_back_grant_leaves_the_run_waiting() -> None:
    loop = held_back_loop()
    wait = observation("wait", contract=None, authorizedActions=None)
    loop.send(ObservationAccepted(loop.seq, wait, facts=SHADOW))
    assert loop.status.approval is not None
    answer(loop, loop.status.approval.id)
    loop.send(ObservationAccepted(loop.seq, wait, facts=SHADOW))
    # Asked once: the person's reading stands, and nothing acts on the held-back grant.
    assert loop.status.approval is None and loop.status.schedule is not None
    assert loop.status.step is None


def test_a_held_back_grant_the_facts_do_not_need_asks_nobody() -> None:
    loop = held_back_loop()
    live = (SHADOW[0].model_copy(update={"data": {"mode": "live"}}),)
    wait = observation("wait", contract=None, authorizedActions=None)
    loop.send(ObservationAccepted(loop.seq, wait, facts=live))
    # Nobody is asked: the facts meet the stop rule, which ends the run complete.
    assert loop.status.approval is None and loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.goalComplete


RESTART = "You may restart Deployment web."
JUDGED = "Stop when every running pod of web reads the new settings."


def offered_loop(stop_when: str = JUDGED) -> Loop:
    grant = {"id": "restart-web", "description": "Restart Deployment web.", "quote": RESTART}
    loop = Loop(
        task=RESTART,
        stopWhen=stop_when,
        extraction=extraction(
            authorizedActions=[grant],
            allowedResources=[{"entry": "deployments/web", "quote": RESTART}],
        ),
    )
    loop.start()
    return loop


WEB = (
    ObjectFacts(
        kind=FactKind.Deployment,
        name="web",
        namedIn=[NamedIn.stopWhen, NamedIn.task],
        replicas=1,
        availableReplicas=1,
        updatedReplicas=1,
    ),
)


def test_a_stop_for_want_of_authority_while_the_persons_grant_applies_is_offered_to_them() -> None:
    """A judged stop rule: no typed leaf says whether the restart moves the goal. The model
    saw no grant; the person's own restart applies now to web, which their rule names: they
    are asked, and their approval runs it, once a run."""
    loop = offered_loop()
    assert loop.status.authority is not None and [
        g.id for g in loop.status.authority.typedGrants
    ] == ["restart-web"]
    effects = loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=WEB))
    assert loop.status.stop is None and launched(effects) == []
    request = loop.status.approval
    assert request is not None and request.action is not None
    assert request.action.authorizedActionId == "restart-web"
    assert "the model found no grant for what the goal needs" in request.message
    effects = answer(loop, request.id)
    assert launched(effects) == [StepKind.act]
    loop.send(StepFinished(loop.seq, ActionResult(outcome="succeeded", evidence="restarted")))
    # The same stop after the act stands: the offer is made once a run.
    effects = loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=WEB))
    assert loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.outsideAuthority


@pytest.mark.parametrize(
    ("stop_when", "facts", "answer_"),
    [
        pytest.param(JUDGED, WEB, "materialBlocker", id="a-blocker-is-the-models"),
        pytest.param(
            "Stop when Deployment web has 3 available replicas.",
            WEB,
            "outsideAuthority",
            id="typed-leaves-decide-by-moves",
        ),
        pytest.param(
            JUDGED,
            (WEB[0].model_copy(update={"namedIn": [NamedIn.task]}),),
            "outsideAuthority",
            id="an-object-the-rule-does-not-name",
        ),
    ],
)
def test_no_act_is_offered_where_the_grant_is_not_in_question(
    stop_when: str, facts: tuple[ObjectFacts, ...], answer_: str
) -> None:
    loop = offered_loop(stop_when)
    stop = observation(
        "stop", goal="incomplete", work="blocked", stopReason=answer_, contract=None,
        authorizedActions=None,
    )  # fmt: skip
    loop.send(ObservationAccepted(loop.seq, stop, facts=facts))
    assert loop.status.approval is None
    assert loop.status.stop is not None


def test_a_wait_on_objects_that_read_the_same_is_offered_the_persons_grant_at_the_third() -> None:
    loop = offered_loop()
    waiting = observation("wait", contract=None, authorizedActions=None)
    for check in (1, 2):
        loop.send(ObservationAccepted(loop.seq, waiting, facts=WEB, facts_print="same"))
        assert loop.status.approval is None and loop.status.checks == check
        loop.later(60)
        loop.send(TimerDue())
    # A third check reads the same: waiting on would only reach the safety limit.
    loop.send(ObservationAccepted(loop.seq, waiting, facts=WEB, facts_print="same"))
    request = loop.status.approval
    assert request is not None and request.action is not None
    assert request.action.authorizedActionId == "restart-web"
    assert "the goal's objects read the same for 3 checks" in request.message
    assert launched(answer(loop, request.id)) == [StepKind.act]


def test_a_wait_on_objects_that_move_is_not_offered_anything() -> None:
    loop = offered_loop()
    waiting = observation("wait", contract=None, authorizedActions=None)
    for check in (1, 2, 3, 4):
        loop.send(ObservationAccepted(loop.seq, waiting, facts=WEB, facts_print=f"p{check}"))
        assert loop.status.approval is None
        loop.later(60)
        loop.send(TimerDue())


def test_an_act_a_guard_refuses_is_never_offered() -> None:
    # web is kept in sync by Argo CD: a restart would be reverted, so none is offered.
    loop = offered_loop()
    synced = WEB[0].model_copy(update={"syncedBy": SyncedBy(controller="Argo CD", source="shop")})
    loop.send(ObservationAccepted(loop.seq, STOP_SHORT, facts=(synced,)))
    assert loop.status.approval is None
    assert loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.outsideAuthority
