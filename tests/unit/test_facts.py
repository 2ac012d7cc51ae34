"""Facts beat words: the engine refuses an observation the named objects' state contradicts,
as an invalid answer, and takes every observation the state allows."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.observations import action, observation_dict

from goalkeeper.core.engine import ObservationAccepted, ObservationRejected
from goalkeeper.core.facts import (
    action_names,
    contradiction,
    goal_objects,
    goal_print,
    names_in,
)
from goalkeeper.core.goals import read_stop_rule
from goalkeeper.core.models import (
    AuthorizedAction,
    FactKind,
    GrantVerb,
    JobEnd,
    NamedIn,
    ObjectFacts,
    Observation,
    StepKind,
)
from goalkeeper.core.steps import step_event


def job(name: str = "build", *where: NamedIn, **numbers: Any) -> ObjectFacts:
    base: dict[str, Any] = {"suspended": False, "active": 0, "succeeded": 0, "failed": 0}
    return ObjectFacts(
        kind=FactKind.Job, name=name, namedIn=list(where or [NamedIn.stopWhen]), **base | numbers
    )


def deployment(name: str = "web", *where: NamedIn, **numbers: Any) -> ObjectFacts:
    base = {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2}
    return ObjectFacts(
        kind=FactKind.Deployment,
        name=name,
        namedIn=list(where or [NamedIn.stopWhen]),
        **base | numbers,
    )


def seen(route: str = "wait", **overrides: Any) -> Observation:
    return Observation.model_validate(observation_dict(route, **overrides))


DONE = {"goal": "complete", "work": "complete", "stopReason": "goalComplete"}


def test_names_are_read_as_kubernetes_spells_them() -> None:
    text = "Finish Job render-part-2 (namespace default). Stop when web.v2 is Ready."
    assert {"render-part-2", "default", "web.v2", "finish"} - names_in(text) == {"finish"}
    assert action_names(["jobs/build", "Deployment web", "ci/jobs/other", "jobs/b*"], "ci") == {
        (FactKind.Job, "build"),
        (FactKind.Deployment, "web"),
        (FactKind.Job, "other"),
    }


def test_the_goal_is_about_what_the_stop_rule_names_else_the_task() -> None:
    a, b = job("a", NamedIn.task), job("b", NamedIn.stopWhen, NamedIn.task)
    assert goal_objects([a, b]) == [b]
    assert goal_objects([a]) == [a]
    assert goal_objects([job("c", NamedIn.action)]) == []


@pytest.mark.parametrize(
    "fact",
    [
        job(suspended=True),
        job(failed=1, ended="Failed"),  # the stop rule may end the run; the goal is not met
        job(active=1),
        job(active=0),  # resumed, no pod yet
        deployment(availableReplicas=0, readyReplicas=0),
        deployment(updatedReplicas=1),
    ],
)
def test_goal_complete_is_refused_while_the_named_target_is_not_done(fact: ObjectFacts) -> None:
    refused = contradiction(seen("stop", **DONE), [fact])
    assert refused is not None and "goal 'complete'" in refused and fact.name in refused


@pytest.mark.parametrize(
    "fact",
    [
        job(succeeded=1, ended="Complete"),
        job(succeeded=1, failed=1, ended="Complete"),  # a retry within the Job succeeded
        deployment(),
        deployment(replicas=0, readyReplicas=0, availableReplicas=0, updatedReplicas=0),
        # Pods on a ConfigMap's earlier data: whether that matters, only the stop rule says.
        deployment(staleConfig=["pricing-config"]),
    ],
)
def test_goal_complete_is_taken_when_the_state_allows_it(fact: ObjectFacts) -> None:
    assert contradiction(seen("stop", **DONE), [fact]) is None


def test_a_target_named_only_in_the_task_does_not_hold_back_a_goal_the_stop_rule_names() -> None:
    other = job("other", NamedIn.task, suspended=True)
    done = job("build", NamedIn.stopWhen, succeeded=1, ended="Complete")
    assert contradiction(seen("stop", **DONE), [done, other]) is None


def test_idle_work_is_refused_while_the_job_runs() -> None:
    refused = contradiction(seen("act", action=action(kind="recover")), [job(active=1)])
    assert refused is not None and "work 'idle'" in refused
    assert contradiction(seen("act", action=action(kind="recover")), [job(suspended=True)]) is None


def test_running_work_is_refused_while_every_named_job_is_suspended_and_empty() -> None:
    assert "work 'running'" in (contradiction(seen("wait"), [job(suspended=True)]) or "")
    # Pods of a suspended Job may still be stopping: that is not a contradiction.
    assert contradiction(seen("wait"), [job(suspended=True, active=1)]) is None
    assert contradiction(seen("wait"), [job(suspended=True), deployment()]) is None
    assert contradiction(seen("wait"), [job(active=1)]) is None


@pytest.mark.parametrize(
    "fact", [job("build", NamedIn.action, active=1), job("build", NamedIn.action, ended="Failed")]
)
def test_resuming_a_job_that_runs_or_ended_is_refused(fact: ObjectFacts) -> None:
    refused = contradiction(seen("act"), [fact])
    assert refused is not None and "'advance'" in refused


@pytest.mark.parametrize("kind", ["advance", "recover"])
def test_starting_or_recovering_a_job_that_succeeded_is_refused(kind: str) -> None:
    done = job("build", NamedIn.action, succeeded=1, ended="Complete")
    refused = contradiction(seen("act", action=action(kind=kind)), [done])
    assert refused is not None and "has succeeded changes nothing" in refused
    # A repair goes through the repair workflow, which may fix more than the Job.
    assert contradiction(seen("act", action=action(kind="repair")), [done]) is None
    # A failed Job may well be recovered.
    failed = job("build", NamedIn.action, failed=1, ended="Failed")
    assert contradiction(seen("act", action=action(kind="recover")), [failed]) is None


def test_resuming_a_suspended_job_is_taken() -> None:
    assert contradiction(seen("act"), [job("build", NamedIn.action, suspended=True)]) is None


def test_no_facts_refuse_nothing() -> None:
    assert contradiction(seen("stop", **DONE), []) is None


def test_a_contradicted_observation_is_an_invalid_answer_naming_the_fact() -> None:
    status = {
        "phase": "Succeeded",
        "result": observation_dict("stop", **DONE),
        "facts": [job(suspended=True).model_dump(mode="json")],
    }
    event = step_event(StepKind.observe, 4, status)
    assert isinstance(event, ObservationRejected)
    assert "Contradicted by the facts" in event.error and "Job build is suspended" in event.error
    status["facts"] = [job(succeeded=1, ended="Complete").model_dump(mode="json")]
    assert isinstance(step_event(StepKind.observe, 4, status), ObservationAccepted)


def test_an_accepted_observation_carries_the_print_of_the_goals_objects() -> None:
    def accepted(*facts: ObjectFacts) -> str:
        status = {
            "phase": "Succeeded",
            "result": observation_dict("wait"),
            "facts": [f.model_dump(mode="json") for f in facts],
        }
        event = step_event(StepKind.observe, 4, status)
        assert isinstance(event, ObservationAccepted)
        return event.facts_print

    running = job(active=1)
    assert accepted(running) == goal_print([running]) != ""
    # Only the goal's objects count: one the task alone names may change freely.
    assert accepted(running, deployment("other", NamedIn.task, replicas=5)) == accepted(running)
    assert accepted(job(active=1, succeeded=1)) != accepted(running)
    assert accepted() == ""


def test_the_stop_rules_own_replica_count_holds_back_a_goal_complete() -> None:
    # Scaled to zero, its rollout is trivially whole; the stop rule asked for 2.
    idle = deployment(
        "checkout-api", replicas=0, readyReplicas=0, availableReplicas=0, updatedReplicas=0
    )
    rule = read_stop_rule("Stop when Deployment checkout-api has 2 available replicas.", "")
    refused = contradiction(seen("stop", **DONE), [idle], rule)
    assert refused == (
        "goal 'complete' contradicts the stop rule: \"Deployment checkout-api has 2 available "
        'replicas" does not hold (Deployment checkout-api: available 0, wanted at least 2).'
    )
    scaled = deployment("checkout-api", replicas=2, availableReplicas=2, readyReplicas=2)
    assert contradiction(seen("stop", **DONE), [scaled], rule) is None
    # A rule the grammar leaves to a model, or about an object not read, holds nothing back.
    for other in (
        "Stop when checkout-api is scaled back up.",
        "Stop when Deployment checkout-api-v2 has 2 available replicas.",
    ):
        found = contradiction(seen("stop", **DONE), [idle], read_stop_rule(other, ""))
        assert found is None, other


def test_the_step_in_flight_is_held_against_the_monitors_stop_rule() -> None:
    idle = deployment("checkout-api", replicas=0, readyReplicas=0, availableReplicas=0)
    status = {
        "phase": "Succeeded",
        "result": observation_dict("stop", **DONE),
        "facts": [idle.model_dump(mode="json")],
    }
    rule = read_stop_rule("Stop when Deployment checkout-api has 2 available replicas.", "")
    event = step_event(StepKind.observe, 4, status, goal_rule=rule)
    assert isinstance(event, ObservationRejected) and "checkout-api" in event.error
    assert isinstance(step_event(StepKind.observe, 4, status), ObservationAccepted)


def test_running_work_is_refused_while_every_named_workload_is_scaled_to_zero() -> None:
    zero = deployment(replicas=0, readyReplicas=0, availableReplicas=0, updatedReplicas=0)
    refused = contradiction(seen("wait"), [zero])
    assert refused == (
        "work 'running' contradicts what the step read: Deployment web has 0 available, 0 "
        "ready and 0 updated of 0 replicas, so nothing of it runs."
    )
    assert contradiction(seen("wait"), [deployment()]) is None
    # One goal workload that runs is enough for work to run.
    assert contradiction(seen("wait"), [zero, deployment("api")]) is None


def test_a_limit_of_checks_in_the_stop_rule_never_holds_back_a_true_completion() -> None:
    """Seen with the word rules: "or after 10 checks without progress" refused a true
    complete at check 3, and five refusals in a row ended the run."""
    stop = read_stop_rule(
        "Stop when Job etl has succeeded, or after 10 checks without progress.", ""
    )
    done = job("etl", NamedIn.stopWhen, succeeded=1, ended=JobEnd.Complete)
    assert contradiction(seen("stop", **DONE), [done], stop, check=3) is None
    running = job("etl", NamedIn.stopWhen, active=1)
    refused = contradiction(seen("stop", **DONE), [running], stop, check=3)
    assert refused is not None and "(Job etl: not ended, active 1)" in refused


def test_a_two_part_stop_rule_is_complete_only_when_both_parts_hold() -> None:
    """Seen from the embedded model: the Job had just succeeded, the Deployment still ran 2
    replicas, and it answered complete claiming 0."""
    stop = read_stop_rule(
        "Stop when Job migrate has succeeded and Deployment old-web has 0 replicas.", ""
    )
    migrated = job("migrate", NamedIn.stopWhen, succeeded=1, ended=JobEnd.Complete)
    still = deployment("old-web", replicas=2, availableReplicas=2, readyReplicas=2)
    refused = contradiction(seen("stop", **DONE), [migrated, still], stop, check=1)
    assert refused == (
        "goal 'complete' contradicts the stop rule: \"Deployment old-web has 0 replicas\" does "
        "not hold (Deployment old-web: replicas 2, not 0)."
    )
    gone = deployment("old-web", replicas=0, availableReplicas=0, readyReplicas=0)
    assert contradiction(seen("stop", **DONE), [migrated, gone], stop, check=2) is None


def test_either_of_two_jobs_completes_an_or_rule_while_the_other_still_runs() -> None:
    """The leaves judge the objects they name: the generic 'every named Job has ended' would
    refuse a true completion of "Job a or Job b has succeeded"."""
    stop = read_stop_rule("Stop when Job mirror-eu or Job mirror-us has succeeded.", "")
    running = job("mirror-eu", NamedIn.stopWhen, active=1)
    done = job("mirror-us", NamedIn.stopWhen, succeeded=1, ended=JobEnd.Complete)
    assert contradiction(seen("stop", **DONE), [running, done], stop, check=1) is None
    neither = job("mirror-us", NamedIn.stopWhen, active=1)
    refused = contradiction(seen("stop", **DONE), [running, neither], stop, check=1)
    assert refused is not None and "(Job mirror-us: not ended, active 1)" in refused
    # With no stop rule read, a named Job that has not ended still holds completion back.
    assert contradiction(seen("stop", **DONE), [running, done], None, check=1) is not None


RESTART_TASK = "ConfigMap pricing-config was corrected. You may restart Deployment pricing-worker."


def worker(started: str, **numbers: Any) -> ObjectFacts:
    pods = {"count": 1, "restarts": 0, "oldestStart": started}
    return deployment("pricing-worker", NamedIn.action, NamedIn.stopWhen, pods=pods, **numbers)


def test_a_restart_is_refused_by_the_stop_rules_leaf_on_pod_starts_not_by_config_alone() -> None:
    """The stop rule says the pods must start after the fix: a restart is refused once they
    did, or while their rollout is under way. With no such leaf, a restart stands whatever
    the pods' ConfigMaps: a restart for a memory leak is no business of a config fact."""
    restart = seen(
        "act",
        action=action(
            kind="recover",
            action="Restart Deployment pricing-worker (rollout restart).",
            mutationSet=["deployments/pricing-worker"],
            authorizedActionId="restart-pricing-worker",
        ),
    )
    grants = [
        AuthorizedAction(
            id="restart-pricing-worker",
            description="restart Deployment pricing-worker",
            verb=GrantVerb.restart,
        )
    ]
    rule = read_stop_rule(
        "Stop when every pod of pricing-worker started after the fix.", "", RESTART_TASK
    )
    written = ObjectFacts(
        kind=FactKind.ConfigMap,
        name="pricing-config",
        namedIn=[NamedIn.task],
        writtenAt="2026-12-03T10:00:00Z",
    )
    after, before = worker("2026-12-03T10:05:00Z"), worker("2026-12-03T09:30:00Z")
    refused = contradiction(restart, [after, written], rule, check=2, actions=grants)
    assert refused is not None and refused.startswith("a restart contradicts the stop rule")
    assert "its oldest running pod started 2026-12-03T10:05:00Z, at or after" in refused
    assert contradiction(restart, [before, written], rule, check=2, actions=grants) is None
    rolling = worker("2026-12-03T09:30:00Z", rollingOut=True)
    refused = contradiction(restart, [rolling, written], rule, check=2, actions=grants)
    assert (
        refused is not None and "the rollout of Deployment pricing-worker is under way" in refused
    )
    # No leaf on the pods' starts: nothing to refuse, fresh config or not.
    fresh = worker("2026-12-03T10:05:00Z", freshConfig=["pricing-config"])
    assert contradiction(restart, [fresh, written], None, check=2, actions=grants) is None
    # The grant it names decides what the act is, not the words of the answer.
    resume = [grants[0].model_copy(update={"verb": GrantVerb.resume})]
    assert contradiction(restart, [after, written], rule, check=2, actions=resume) is None


def test_a_stop_outside_authority_is_refused_while_a_named_job_runs() -> None:
    given_up = {"goal": "incomplete", "work": "blocked", "stopReason": "outsideAuthority"}
    refused = contradiction(seen("stop", **given_up), [job(active=1)])
    assert refused is not None and refused.startswith("route 'stop' contradicts")
    assert "Job build" in refused and "route wait" in refused
    # A Job that is held, ended, or still stopping its pods after a suspend runs no more.
    for still in (
        job(suspended=True),
        job(failed=1, ended="Failed"),
        job(suspended=True, active=1),
        job("other", NamedIn.task, active=1, ended="Complete", succeeded=1),
    ):
        assert contradiction(seen("stop", **given_up), [still]) is None, still
    # Waiting on it, or another reason to stop (a blocker, an approval), is another matter.
    assert contradiction(seen("wait"), [job(active=1)]) is None
    for reason in ("materialBlocker", "paidActionNotApproved"):
        stop = seen("stop", **given_up | {"stopReason": reason})
        assert contradiction(stop, [job(active=1)]) is None, reason
