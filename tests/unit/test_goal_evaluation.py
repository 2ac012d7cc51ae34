"""goalkeeper.core.goals.evaluate: the stop rule's leaves over the facts a step's code read.

A table of rules and facts with what they must give, and properties over random rules and
facts: completion holds only when some group's every leaf is true (never while one is
unknown), and a claim of completion is refused exactly when every group has a false leaf.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.observations import observation_dict

from goalkeeper.core.engine import ObservationAccepted, ObservationRejected
from goalkeeper.core.goals import (
    GoalLeaf,
    GoalRule,
    LeafKind,
    evaluate,
    leaf_line,
    read_stop_rule,
    settled_complete,
    settled_given_up,
    since_run_start,
)
from goalkeeper.core.models import (
    FactKind,
    GoalState,
    JobEnd,
    NamedIn,
    ObjectFacts,
    ObjectRef,
    ObservedStopReason,
    PodExit,
    PodsFacts,
    StepKind,
)
from goalkeeper.core.steps import step_event

NS = "shop"


def job(name: str, ended: JobEnd | None = None, active: int = 0, **more: Any) -> ObjectFacts:
    return ObjectFacts(
        kind=FactKind.Job, name=name, namedIn=[NamedIn.stopWhen], ended=ended, active=active, **more
    )


def workload(
    name: str,
    replicas: int | None,
    available: int | None = None,
    updated: int | None = None,
    kind: FactKind = FactKind.Deployment,
    pods: PodsFacts | None = None,
) -> ObjectFacts:
    return ObjectFacts(
        kind=kind,
        name=name,
        namedIn=[NamedIn.stopWhen],
        replicas=replicas,
        availableReplicas=available,
        readyReplicas=available,
        updatedReplicas=updated,
        pods=pods,
    )


def pods(restarts: int, waiting: str | None = None) -> PodsFacts:
    last = (
        PodExit(pod="web-1", exitCode=1, reason="Error", message="no DB_URL") if waiting else None
    )
    return PodsFacts(count=3, restarts=restarts, waiting=waiting, lastExit=last)


def cronjob(name: str, suspended: bool, lastRun: JobEnd | None = None) -> ObjectFacts:
    return ObjectFacts(
        kind=FactKind.CronJob,
        name=name,
        namedIn=[NamedIn.stopWhen],
        suspended=suspended,
        lastRun=lastRun,
    )


def configmap(name: str, data: dict[str, str | None]) -> ObjectFacts:
    return ObjectFacts(kind=FactKind.ConfigMap, name=name, namedIn=[NamedIn.stopWhen], data=data)


def started(at: str | None) -> PodsFacts:
    return PodsFacts(count=1 if at else 0, restarts=0, oldestStart=at)


def written(name: str, at: str) -> ObjectFacts:
    return ObjectFacts(kind=FactKind.ConfigMap, name=name, namedIn=[NamedIn.task], writtenAt=at)


AFTER_WRITE = (
    "Stop when every pod of Deployment web started after ConfigMap web-config was last written."
)
AFTER_RUN = "Stop when every pod of Deployment web started after this Monitor did."
# (id, stop rule, facts, checks, unchanged, judged answers by leaf id, minutes of the run,
#  (done, done refuted, the give-up leaf that holds as a line, or None))
Row = tuple[
    str,
    str,
    list[ObjectFacts],
    int,
    int,
    dict[str, bool],
    int | None,
    tuple[bool, bool, str | None],
]
BUILD_OR_FAIL = "Stop when Job build has succeeded, or stop if Job build fails."
WEB = "Stop when Deployment web has 3 ready replicas and Deployment old-web is scaled to zero."
ROWS: list[Row] = [
    (
        "succeeded",
        BUILD_OR_FAIL,
        [job("build", JobEnd.Complete)],
        1,
        0,
        {},
        None,
        (True, False, None),
    ),
    ("running", BUILD_OR_FAIL, [job("build", active=1)], 1, 0, {}, None, (False, True, None)),
    ("not-read", BUILD_OR_FAIL, [], 1, 0, {}, None, (False, False, None)),
    (
        "failed",
        BUILD_OR_FAIL,
        [job("build", JobEnd.Failed)],
        1,
        0,
        {},
        None,
        (False, True, "Job build failed"),
    ),
    (
        "both-counts",
        WEB,
        [workload("web", 3, 3), workload("old-web", 0)],
        2,
        0,
        {},
        None,
        (True, False, None),
    ),
    # old-web's own count is 0, never web's 3: two replicas of old-web refute completion.
    (
        "old-web-still-up",
        WEB,
        [workload("web", 3, 3), workload("old-web", 2, 2)],
        2,
        0,
        {},
        None,
        (False, True, None),
    ),
    ("one-unread", WEB, [workload("web", 3, 3)], 2, 0, {}, None, (False, False, None)),
    (
        "short-of-ready",
        WEB,
        [workload("web", 3, 2), workload("old-web", 0)],
        2,
        0,
        {},
        None,
        (False, True, None),
    ),
    # Checks without progress give up; they never hold completion back.
    (
        "stalled",
        "Stop when Deployment web has 3 ready replicas or after 10 checks without progress.",
        [workload("web", 3, 1)],
        14,
        10,
        {},
        None,
        (False, True, "unchanged checks >= 10"),
    ),
    (
        "done-before-limit",
        "Stop when Deployment web has 3 ready replicas or after 10 checks without progress.",
        [workload("web", 3, 3)],
        2,
        1,
        {},
        None,
        (True, False, None),
    ),
    (
        "checks",
        "Stop after 5 checks.",
        [],
        5,
        0,
        {},
        None,
        (False, True, "checks >= 5"),
    ),
    (
        "judged-pending",
        "Stop when Job etl has succeeded and the report looks right.",
        [job("etl", JobEnd.Complete)],
        1,
        0,
        {},
        None,
        (False, False, None),
    ),
    (
        "judged-yes",
        "Stop when Job etl has succeeded and the report looks right.",
        [job("etl", JobEnd.Complete)],
        1,
        0,
        {"g2": True},
        None,
        (True, False, None),
    ),
    (
        "judged-no",
        "Stop when Job etl has succeeded and the report looks right.",
        [job("etl", JobEnd.Complete)],
        1,
        0,
        {"g2": False},
        None,
        (False, True, None),
    ),
    (
        "not-running",
        "Stop when Job etl is no longer running.",
        [job("etl", JobEnd.Complete)],
        1,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "not-running-refuted",
        "Stop when Job etl is no longer running.",
        [job("etl", active=2)],
        1,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "suspended-unread",
        "Stop when Job etl is suspended.",
        [job("etl")],
        1,
        0,
        {},
        None,
        (False, False, None),
    ),
    (
        "rolled-out",
        "Stop when StatefulSet db is fully rolled out.",
        [workload("db", 3, 3, 3, FactKind.StatefulSet)],
        1,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "rolling",
        "Stop when StatefulSet db is fully rolled out.",
        [workload("db", 3, 3, 1, FactKind.StatefulSet)],
        1,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "available-all",
        "Stop when Deployment web is available.",
        [workload("web", 3, 2)],
        1,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "available-zero-wanted",
        "Stop when Deployment web is available.",
        [workload("web", 0, 0)],
        1,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "one-of-two",
        "Stop when Job extract or Job load has succeeded.",
        [job("extract", active=1), job("load", JobEnd.Complete)],
        1,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "one-of-two-unknown",
        "Stop when Job extract or Job load has succeeded.",
        [job("extract", active=1)],
        1,
        0,
        {},
        None,
        (False, False, None),
    ),
    (
        "crash-loop",
        "Stop when Deployment web is available, or give up if the pods of Deployment web "
        "are crash-looping.",
        [workload("web", 3, 0, pods=pods(4, "CrashLoopBackOff"))],
        3,
        0,
        {},
        None,
        (False, True, "Deployment web pods restarting"),
    ),
    (
        "no-crash-loop",
        "Stop when Deployment web is available, or give up if the pods of Deployment web "
        "are crash-looping.",
        [workload("web", 3, 3, pods=pods(1))],
        3,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "cronjob-suspended",
        "Stop when CronJob nightly is suspended.",
        [cronjob("nightly", True)],
        1,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "last-run",
        "Stop when CronJob nightly's last run succeeded.",
        [cronjob("nightly", False, lastRun=JobEnd.Failed)],
        1,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "last-run-unread",
        "Stop when CronJob nightly's last run succeeded.",
        [],
        1,
        0,
        {},
        None,
        (False, False, None),
    ),
    (
        "configmap",
        "Stop when ConfigMap app has key mode set to Fast.",
        [configmap("app", {"mode": "Fast"})],
        1,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "configmap-case",
        "Stop when ConfigMap app has key mode set to Fast.",
        [configmap("app", {"mode": "fast"})],
        1,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "configmap-no-key",
        "Stop when ConfigMap app has key mode set to Fast.",
        [configmap("app", {})],
        1,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "elapsed",
        "Stop when Job etl has succeeded, or stop after 2 hours.",
        [job("etl", active=1)],
        8,
        0,
        {},
        125,
        (False, True, "minutes >= 120"),
    ),
    (
        "elapsed-unread",
        "Stop when Job etl has succeeded, or stop after 2 hours.",
        [job("etl", active=1)],
        8,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "other-namespace",
        "Stop when Job build in namespace ci has succeeded.",
        [job("build", JobEnd.Complete)],
        1,
        0,
        {},
        None,
        (False, False, None),
    ),
    (
        "pods-after-the-write",
        AFTER_WRITE,
        [
            workload("web", 1, 1, 1, pods=started("2026-12-03T10:05:00Z")),
            written("web-config", "2026-12-03T10:00:00Z"),
        ],
        2,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "pods-in-the-second-of-the-write",
        AFTER_WRITE,
        [
            workload("web", 1, 1, 1, pods=started("2026-12-03T10:00:00Z")),
            written("web-config", "2026-12-03T10:00:00Z"),
        ],
        2,
        0,
        {},
        None,
        (True, False, None),
    ),
    (
        "pods-before-the-write",
        AFTER_WRITE,
        [
            workload("web", 1, 1, 1, pods=started("2026-12-03T09:30:00Z")),
            written("web-config", "2026-12-03T10:00:00Z"),
        ],
        2,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "no-pod-runs",
        AFTER_WRITE,
        [
            workload("web", 1, 0, 1, pods=started(None)),
            written("web-config", "2026-12-03T10:00:00Z"),
        ],
        2,
        0,
        {},
        None,
        (False, True, None),
    ),
    (
        "the-write-not-read",
        AFTER_WRITE,
        [workload("web", 1, 1, 1, pods=started("2026-12-03T10:05:00Z"))],
        2,
        0,
        {},
        None,
        (False, False, None),
    ),
    (
        "the-run-start-not-recorded",
        AFTER_RUN,
        [workload("web", 1, 1, 1, pods=started("2026-12-03T10:05:00Z"))],
        2,
        0,
        {},
        None,
        (False, False, None),
    ),
    # Only a give-up: nothing the words call done, so no claim of completion stands.
    ("no-goal", "Give up after 3 checks.", [], 1, 0, {}, None, (False, True, None)),
]


@pytest.mark.parametrize(
    ("stop_when", "facts", "checks", "unchanged", "judged", "minutes", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_evaluation(
    stop_when: str,
    facts: list[ObjectFacts],
    checks: int,
    unchanged: int,
    judged: dict[str, bool],
    minutes: int | None,
    expected: tuple[bool, bool, str | None],
) -> None:
    rule = read_stop_rule(stop_when, NS)
    found = evaluate(
        rule, facts, checks=checks, unchanged=unchanged, judged=judged, minutes=minutes
    )
    given_up = leaf_line(found.given_up, NS) if found.given_up else None
    assert (found.done, found.done_refuted, given_up) == expected


def test_reasons_name_the_fact() -> None:
    rule = read_stop_rule(WEB, NS)
    found = evaluate(
        rule, [workload("web", 3, 2), workload("old-web", 2, 2)], checks=1, unchanged=0, judged={}
    )
    assert [v.reason for v in found.leaves.values()] == [
        "Deployment web: available 2, wanted at least 3",
        "Deployment old-web: replicas 2, not 0",
    ]
    assert [v.value for v in found.leaves.values()] == [False, False]


def test_pods_count_from_the_run_start_recorded_with_the_rule() -> None:
    """ "After this Monitor did": the moment the engine recorded the rule is stamped into
    the leaf, so the step and the engine judge it alike, with no clock of their own."""
    rule = since_run_start(read_stop_rule(AFTER_RUN, NS), datetime(2026, 12, 3, 10, tzinfo=UTC))
    assert rule is not None
    [leaf] = rule.leaves()
    assert leaf.since == datetime(2026, 12, 3, 10, tzinfo=UTC)
    for at, done in (("2026-12-03T09:59:59Z", False), ("2026-12-03T10:00:01Z", True)):
        found = evaluate(
            rule, [workload("web", 1, 1, 1, pods=started(at))], checks=2, unchanged=0, judged={}
        )
        assert found.done is done, found.leaves[leaf.id].reason
    assert found.leaves[leaf.id].reason == (
        "Deployment web: its oldest running pod started 2026-12-03T10:00:01Z, at or after the "
        "run started (2026-12-03T10:00:00Z)"
    )
    # A rule with no such leaf is recorded as it was read.
    other = read_stop_rule(AFTER_WRITE, NS)
    assert since_run_start(other, datetime(2026, 12, 3, 10, tzinfo=UTC)) == other


def test_pending_judged_are_the_unanswered() -> None:
    rule = read_stop_rule(
        "Stop when the report looks right or Job etl has succeeded. "
        "Give up if the database is unreachable.",
        NS,
    )
    found = evaluate(rule, [job("etl", active=1)], checks=1, unchanged=0, judged={"g1": False})
    assert [leaf.question for leaf in found.pending_judged] == ["the database is unreachable"]
    assert found.done_refuted and not found.done
    assert found.leaves["g1"].reason == "the model: no"


# --- properties -----------------------------------------------------------------------------------

NAMES = ["a1", "b2", "c3"]
# Each kind of leaf, and the kind of object it is about (None: no object).
OBJECT_OF = {
    LeafKind.jobSucceeded: "Job",
    LeafKind.jobFailed: "Job",
    LeafKind.jobRunning: "Job",
    LeafKind.jobSuspended: "Job",
    LeafKind.workloadAvailable: "Deployment",
    LeafKind.workloadReplicas: "StatefulSet",
    LeafKind.workloadUpdated: "Deployment",
    LeafKind.podsRestarting: "Deployment",
    LeafKind.podsStartedAfter: "DaemonSet",
    LeafKind.cronjobSuspended: "CronJob",
    LeafKind.cronjobLastRunSucceeded: "CronJob",
    LeafKind.configMapKey: "ConfigMap",
    LeafKind.checksAtLeast: None,
    LeafKind.unchangedFor: None,
    LeafKind.elapsedAtLeast: None,
    LeafKind.judged: None,
}
COUNTED = {LeafKind.workloadReplicas, LeafKind.checksAtLeast, LeafKind.unchangedFor}
COUNTED |= {LeafKind.elapsedAtLeast}


@st.composite
def leaves(draw: st.DrawFn, n: int) -> GoalLeaf:
    kind = draw(st.sampled_from(list(OBJECT_OF)))
    of = OBJECT_OF[kind]
    count: int | None = None
    if kind in COUNTED or (kind is LeafKind.workloadAvailable and draw(st.booleans())):
        count = draw(st.integers(0, 4))
    keyed = kind is LeafKind.configMapKey
    return GoalLeaf(
        id=f"g{n}",
        kind=kind,
        object=ObjectRef(kind=of, name=draw(st.sampled_from(NAMES)), namespace=NS) if of else None,
        count=count,
        key="mode" if keyed else None,
        value=draw(st.sampled_from(["fast", "safe"])) if keyed else None,
        negated=draw(st.booleans()),
        quote="words",
        question="words" if kind is LeafKind.judged else None,
    )


@st.composite
def rules(draw: st.DrawFn) -> GoalRule:
    pool = [draw(leaves(n)) for n in range(1, draw(st.integers(1, 10)) + 1)]
    group = st.lists(st.sampled_from(pool), min_size=1, max_size=4)
    return GoalRule(
        namespace=NS,
        done=draw(st.lists(group, max_size=4)),
        giveUp=draw(st.lists(st.sampled_from(pool), max_size=3)),
    )


maybe_count = st.none() | st.integers(0, 4)
facts = st.lists(
    st.one_of(
        st.builds(
            job,
            st.sampled_from(NAMES),
            st.none() | st.sampled_from(list(JobEnd)),
            st.integers(0, 2),
            suspended=st.none() | st.booleans(),
        ),
        st.builds(
            workload,
            st.sampled_from(NAMES),
            maybe_count,
            maybe_count,
            maybe_count,
            st.sampled_from([FactKind.Deployment, FactKind.StatefulSet, FactKind.DaemonSet]),
            st.none() | st.builds(pods, st.integers(0, 5), st.none() | st.just("CrashLoopBackOff")),
        ),
        st.builds(
            cronjob,
            st.sampled_from(NAMES),
            st.booleans(),
            st.none() | st.sampled_from(list(JobEnd)),
        ),
        st.builds(
            configmap,
            st.sampled_from(NAMES),
            st.dictionaries(st.just("mode"), st.none() | st.sampled_from(["fast", "x"])),
        ),
    ),
    max_size=6,
    unique_by=lambda f: (f.kind, f.name),
)
run_minutes = st.none() | st.integers(0, 5)


@settings(max_examples=400, deadline=None)
@given(
    rules(),
    facts,
    st.integers(0, 5),
    st.integers(0, 5),
    st.dictionaries(st.sampled_from([f"g{n}" for n in range(1, 11)]), st.booleans()),
    run_minutes,
)
def test_completion_follows_the_leaves(
    rule: GoalRule,
    read: list[ObjectFacts],
    checks: int,
    unchanged: int,
    judged: dict[str, bool],
    minutes: int | None,
) -> None:
    found = evaluate(rule, read, checks=checks, unchanged=unchanged, judged=judged, minutes=minutes)
    value = {i: v.value for i, v in found.leaves.items()}
    assert set(value) == {leaf.id for leaf in rule.leaves()}
    if all(any(value[leaf.id] is False for leaf in g) for g in rule.done):
        assert not found.done and found.done_refuted
    if found.done:
        assert found.done_group in rule.done
        assert all(value[leaf.id] is True for leaf in found.done_group)
        assert not found.done_refuted
    for group in rule.done:
        if any(value[leaf.id] is None for leaf in group):
            assert found.done_group is not group
    if found.given_up is not None:
        assert found.given_up in rule.giveUp and value[found.given_up.id] is True
    else:
        assert all(value[leaf.id] is not True for leaf in rule.giveUp)
    assert {leaf.id for leaf in found.pending_judged} == {
        leaf.id for leaf in rule.leaves() if leaf.kind is LeafKind.judged and leaf.id not in judged
    }


@settings(max_examples=200, deadline=None)
@given(rules(), facts, st.integers(0, 5), run_minutes)
def test_not_flips_a_known_value(
    rule: GoalRule, read: list[ObjectFacts], checks: int, minutes: int | None
) -> None:
    flipped = GoalRule(
        namespace=NS,
        done=[
            [leaf.model_copy(update={"negated": not leaf.negated}) for leaf in g] for g in rule.done
        ],
        giveUp=[leaf.model_copy(update={"negated": not leaf.negated}) for leaf in rule.giveUp],
    )
    args: dict[str, Any] = {"checks": checks, "unchanged": 1, "judged": {}, "minutes": minutes}
    one, other = evaluate(rule, read, **args), evaluate(flipped, read, **args)
    for i, v in one.leaves.items():
        w = other.leaves[i].value
        assert (v.value, w) in ((None, None), (True, False), (False, True))
        assert v.reason == other.leaves[i].reason


@settings(max_examples=300, deadline=None)
@given(rules(), facts, st.integers(0, 5))
def test_a_complete_claim_while_every_done_group_has_a_false_leaf_is_never_accepted(
    rule: GoalRule, read: list[ObjectFacts], checks: int
) -> None:
    """The operator's boundary: a model's goalComplete, its judged leaves all affirmed, is
    accepted as a check only if some done group could hold on the facts the step read."""
    claim = observation_dict("stop", goal="complete", work="complete", stopReason="goalComplete")
    raw = {
        "phase": "Succeeded",
        "result": claim,
        "facts": [f.model_dump(mode="json", exclude_none=True) for f in read],
    }
    event = step_event(StepKind.observe, 1, raw, goal_rule=rule, check=checks)
    affirmed = {leaf.id: True for leaf in rule.leaves() if leaf.kind is LeafKind.judged}
    found = evaluate(rule, read, checks=checks, unchanged=0, judged=affirmed)
    refuted = [any(found.leaves[leaf.id].value is False for leaf in g) for g in rule.done]
    if rule.done and all(refuted):
        assert isinstance(event, ObservationRejected), found.leaves
    if isinstance(event, ObservationAccepted):
        assert not rule.done or not all(refuted)


def test_a_check_is_settled_by_the_facts_only_when_a_whole_group_holds_typed() -> None:
    rule = read_stop_rule(
        "Stop when Job migrate has succeeded and Deployment old-web has 0 replicas.", ""
    )
    migrated = ObjectFacts(
        kind=FactKind.Job, name="migrate", namedIn=[NamedIn.stopWhen], succeeded=1,
        ended=JobEnd.Complete,
    )  # fmt: skip
    running = ObjectFacts(
        kind=FactKind.Deployment, name="old-web", namedIn=[NamedIn.stopWhen], replicas=2
    )
    scaled = running.model_copy(update={"replicas": 0})
    assert settled_complete(rule, [migrated, running], checks=1) is None
    assert settled_complete(rule, [migrated], checks=1) is None  # old-web not read
    settled = settled_complete(rule, [migrated, scaled], checks=2)
    assert settled is not None and settled.stopReason is ObservedStopReason.goalComplete
    assert '"Deployment old-web has 0 replicas" holds' in settled.report
    assert settled.reason.startswith("Settled by the facts, with no model asked:")
    # A judged leaf needs a model: no settling without one.
    judged = read_stop_rule("Stop when Job migrate has succeeded and the logs look clean.", "")
    assert settled_complete(judged, [migrated], checks=1) is None


def test_pods_that_exited_with_an_error_settle_nothing_though_available_between_exits() -> None:
    """Seen: a container that exits at once is ready, so available, for a moment after each
    restart; a check that read that moment ended the run complete with no model asked."""
    rule = read_stop_rule(
        "Stop when search-indexer has one available replica, or when getting there would "
        "take a change this task forbids.",
        "",
        "Get Deployment search-indexer to one available replica.",
    )
    between_exits = workload("search-indexer", 1, 1, 1, pods=pods(3, None))
    exited = PodExit(pod="search-indexer-1", exitCode=1, reason="Error", message="schema v5")
    assert between_exits.pods is not None
    between_exits.pods.lastExit = exited
    assert evaluate(rule, [between_exits], checks=1, unchanged=0, judged={}).leaves["g1"].value
    assert settled_complete(rule, [between_exits], checks=1) is None
    healthy = workload("search-indexer", 1, 1, 1, pods=pods(0, None))
    assert settled_complete(rule, [healthy], checks=1) is not None


def test_a_give_up_is_settled_by_the_facts_only_when_no_done_group_could_hold() -> None:
    crashing = workload("api", 2, 0, pods=pods(4, "CrashLoopBackOff"))
    typed = read_stop_rule(
        "Stop when Deployment api is available, or give up if its pods keep crashing.", NS
    )
    settled = settled_given_up(typed, [crashing], checks=2)
    assert settled is not None and settled.goal is GoalState.incomplete
    assert '"its pods keep crashing" holds' in settled.report
    assert 'pod web-1 last exited 1 (Error): "no DB_URL"' in settled.report
    assert settled_given_up(typed, [workload("api", 2, 0, pods=pods(4))], checks=2) is None
    # Available while a pod backs off: done may hold, the engine weighs the answer.
    available = workload("api", 2, 2, pods=pods(4, "CrashLoopBackOff"))
    assert settled_given_up(typed, [available], checks=2) is None
    # A judged done group could hold: the model is asked.
    judged = read_stop_rule(
        "Stop when the logs say the import is done, or give up if the pods of Deployment api "
        "keep crashing.",
        NS,
    )
    assert settled_given_up(judged, [crashing], checks=2) is None
