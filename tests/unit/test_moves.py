"""The engine's own act: the one typed grant whose condition and preconditions hold and whose
act makes a false leaf of the stop rule true (core/moves.py). Table-driven over the words
of a task and a stop rule and the facts code read."""

from __future__ import annotations

import pytest

from goalkeeper.core import reading
from goalkeeper.core.goals import read_stop_rule
from goalkeeper.core.models import FactKind, JobEnd, NamedIn, ObjectFacts, Words
from goalkeeper.core.moves import (
    applicable_moves,
    coming_leaves,
    coming_moves,
    offered_acts,
    settled_move,
)

NS = "shop"


def fact(kind: FactKind, name: str, **numbers: object) -> ObjectFacts:
    return ObjectFacts.model_validate(
        {"kind": kind, "name": name, "namedIn": [NamedIn.stopWhen], **numbers}
    )


def job(name: str, **numbers: object) -> ObjectFacts:
    return fact(FactKind.Job, name, **{"suspended": False, "active": 0, **numbers})


SUSPENDED = job("build", suspended=True)
RUNNING = job("build", active=1)
FAILED = job("build", failed=1, ended=JobEnd.Failed)
MIGRATED = job("migrate", succeeded=1, ended=JobEnd.Complete)
MIGRATING = job("migrate", active=1)
MIGRATE_SUSPENDED = job("migrate", suspended=True)
MIGRATE_FAILED = job("migrate", failed=1, ended=JobEnd.Failed)
MIGRATE_CRASHING = job(
    "migrate", active=1, pods={"count": 1, "restarts": 4, "waiting": "CrashLoopBackOff"}
)
WEB_EXITED = fact(
    FactKind.Deployment,
    "web",
    replicas=1,
    availableReplicas=0,
    pods={"count": 1, "restarts": 1, "lastExit": {"pod": "web-1", "exitCode": 1}},
)
OLD_WEB = fact(FactKind.Deployment, "old-web", replicas=2, availableReplicas=2)
OLD_WEB_DOWN = fact(FactKind.Deployment, "old-web", replicas=0, availableReplicas=0)
WEB_ONE = fact(FactKind.Deployment, "web", replicas=1, availableReplicas=1)
FLAGS = fact(FactKind.ConfigMap, "flags", data={"mode": "shadow"})

FIXED = "ConfigMap prices was corrected. You may restart Deployment shop once."
AFTER_FIX = "Stop when every pod of shop started after the fix."
PRICES = fact(FactKind.ConfigMap, "prices", writtenAt="2026-12-03T10:00:00Z")


def shop(started: str, **numbers: object) -> ObjectFacts:
    pods = {"count": 1, "restarts": 0, "oldestStart": started}
    numbers = {"replicas": 1, "availableReplicas": 1, **numbers}
    return fact(FactKind.Deployment, "shop", pods=pods, **numbers)


SHOP_BEFORE = shop("2026-12-03T09:30:00Z", rollingOut=False)
SHOP_ROLLING = shop("2026-12-03T09:30:00Z", rollingOut=True)
SHOP_AFTER = shop("2026-12-03T10:05:00Z", rollingOut=False)

CHAIN = "You may resume Job extract. You may resume Job load once Job extract has succeeded."
EXTRACT_HELD = job("extract", suspended=True)
EXTRACT_RUNS = job("extract", active=1)
EXTRACT_DONE = job("extract", succeeded=1, ended=JobEnd.Complete)
EXTRACT_FAILED = job("extract", failed=1, ended=JobEnd.Failed)
LOAD_HELD = job("load", suspended=True)

# (id, task, stop rule, facts, the grant ids of the moves, in order)
ROWS: list[tuple[str, str, str, list[ObjectFacts], list[str]]] = [
    (
        "resume",
        "You may resume Job build.",
        "Stop when Job build has succeeded.",
        [SUSPENDED],
        ["resume-build"],
    ),
    (
        "running-needs-nothing",
        "You may resume Job build.",
        "Stop when Job build has succeeded.",
        [RUNNING],
        [],
    ),
    (
        "unread-needs-nothing",
        "You may resume Job build.",
        "Stop when Job build has succeeded.",
        [],
        [],
    ),
    (
        "rerun-failed",
        "You may re-run Job build.",
        "Stop when Job build has succeeded.",
        [FAILED],
        ["rerun-build"],
    ),
    (
        "suspend-is-no-success",
        "You may suspend Job build.",
        "Stop when Job build has succeeded.",
        [RUNNING],
        [],
    ),
    (
        "scale-down-after-condition",
        "You may scale Deployment old-web to 0 once Job migrate has succeeded.",
        "Stop when Job migrate has succeeded and Deployment old-web has 0 replicas.",
        [MIGRATED, OLD_WEB],
        ["scale-old-web"],
    ),
    (
        "condition-not-yet",
        "You may scale Deployment old-web to 0 once Job migrate has succeeded.",
        "Stop when Job migrate has succeeded and Deployment old-web has 0 replicas.",
        [MIGRATING, OLD_WEB],
        [],
    ),
    (
        "already-down",
        "You may scale Deployment old-web to 0.",
        "Stop when Deployment old-web has 0 replicas.",
        [OLD_WEB_DOWN],
        [],
    ),
    (
        "scale-to-another-count",
        "You may scale Deployment old-web to 1.",
        "Stop when Deployment old-web has 0 replicas.",
        [OLD_WEB],
        [],
    ),
    (
        "scale-up-for-availability",
        "You may scale Deployment web to 3.",
        "Stop when Deployment web has 3 ready replicas.",
        [WEB_ONE],
        ["scale-web"],
    ),
    (
        "set-key",
        "You may set key mode of ConfigMap flags to live.",
        "Stop when ConfigMap flags has key mode set to live.",
        [FLAGS],
        ["set-key-flags"],
    ),
    (
        "set-key-other-value",
        "You may set key mode of ConfigMap flags to dark.",
        "Stop when ConfigMap flags has key mode set to live.",
        [FLAGS],
        [],
    ),
    (
        "judged-rule",
        "You may resume Job build.",
        "Stop when the build logs look clean.",
        [SUSPENDED],
        [],
    ),
    (
        "give-up-leaf-is-no-goal",
        "You may resume Job build.",
        "Stop when the logs look clean, or give up if Job build fails.",
        [SUSPENDED],
        [],
    ),
    # A grant whose act brings about the condition of a grant that moves a false leaf.
    (
        "chain-first-link",
        CHAIN,
        "Stop when Job load has succeeded.",
        [EXTRACT_HELD, LOAD_HELD],
        ["resume-extract"],
    ),
    (
        "chain-first-link-runs",
        CHAIN,
        "Stop when Job load has succeeded.",
        [EXTRACT_RUNS, LOAD_HELD],
        [],
    ),
    (
        "chain-second-link",
        CHAIN,
        "Stop when Job load has succeeded.",
        [EXTRACT_DONE, LOAD_HELD],
        ["resume-load"],
    ),
    (
        "chain-first-link-failed",
        CHAIN,
        "Stop when Job load has succeeded.",
        [EXTRACT_FAILED, LOAD_HELD],
        [],
    ),
    (
        "chain-without-its-first-link",
        "You may resume Job load once Job extract has succeeded.",
        "Stop when Job load has succeeded.",
        [EXTRACT_HELD, LOAD_HELD],
        [],
    ),
    ("restart-after-the-fix", FIXED, AFTER_FIX, [SHOP_BEFORE, PRICES], ["restart-shop"]),
    # Its pods are being replaced: the newest may start after the fix with no other act.
    ("restart-while-rolling-out", FIXED, AFTER_FIX, [SHOP_ROLLING, PRICES], []),
    ("restarted-already", FIXED, AFTER_FIX, [SHOP_AFTER, PRICES], []),
    ("when-the-fix-was-made-unread", FIXED, AFTER_FIX, [SHOP_BEFORE], []),
    (
        "a-restart-makes-no-other-leaf",
        FIXED,
        "Stop when Deployment shop is available.",
        [shop("2026-12-03T09:30:00Z", availableReplicas=0)],
        [],
    ),
    (
        "two-grants-two-moves",
        "You may resume Job build. You may scale Deployment old-web to 0.",
        "Stop when Job build has succeeded and Deployment old-web has 0 replicas.",
        [SUSPENDED, OLD_WEB],
        ["resume-build", "scale-old-web"],
    ),
]


@pytest.mark.parametrize(
    ("task", "stop_when", "facts", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_moves(task: str, stop_when: str, facts: list[ObjectFacts], expected: list[str]) -> None:
    grants = reading.read([(Words.task, task)]).grants
    rule = read_stop_rule(stop_when, NS, task)
    found = applicable_moves(rule, grants, facts, checks=1)
    assert [m.grant.id for m in found] == expected
    for move in found:
        action = move.action()
        assert action.authorizedActionId == move.grant.id
        assert move.leaf.quote in action.incomplete and "does not hold" in action.incomplete


def test_a_paid_grant_is_never_the_engines_own_act() -> None:
    grants = [
        g.model_copy(update={"paid": True})
        for g in reading.read([(Words.task, "You may resume Job build.")]).grants
    ]
    rule = read_stop_rule("Stop when Job build has succeeded.", NS)
    assert applicable_moves(rule, grants, [SUSPENDED], checks=1) == []


SCALE_AFTER = "You may scale Deployment old-web to 0 once Job migrate has succeeded."
BOTH = "Stop when Job migrate has succeeded and Deployment old-web has 0 replicas."
WEB_ROLLING = fact(FactKind.Deployment, "web", replicas=3, availableReplicas=1)
WEB_STILL = fact(FactKind.Deployment, "web", replicas=0, availableReplicas=0)

# (id, task, stop rule, facts, the grant ids whose move waits only for its condition)
COMING: list[tuple[str, str, str, list[ObjectFacts], list[str]]] = [
    ("job-runs", SCALE_AFTER, BOTH, [MIGRATING, OLD_WEB], ["scale-old-web"]),
    (
        "chain-first-link-runs",
        CHAIN,
        "Stop when Job load has succeeded.",
        [EXTRACT_RUNS, LOAD_HELD],
        ["resume-load"],
    ),
    ("job-suspended-moves-only-by-an-act", SCALE_AFTER, BOTH, [MIGRATE_SUSPENDED, OLD_WEB], []),
    ("job-failed-never-succeeds", SCALE_AFTER, BOTH, [MIGRATE_FAILED, OLD_WEB], []),
    ("job-crash-loops", SCALE_AFTER, BOTH, [MIGRATE_CRASHING, OLD_WEB], []),
    ("condition-holds-is-a-move-now", SCALE_AFTER, BOTH, [MIGRATED, OLD_WEB], []),
    ("condition-unread", SCALE_AFTER, BOTH, [OLD_WEB], []),
    ("leaf-already-true", SCALE_AFTER, BOTH, [MIGRATING, OLD_WEB_DOWN], []),
    (
        "unconditional-grant-is-no-wait",
        "You may scale Deployment old-web to 0.",
        BOTH,
        [MIGRATING, OLD_WEB],
        [],
    ),
    (
        "workload-rolls-out",
        "You may resume Job build once Deployment web is available.",
        "Stop when Job build has succeeded.",
        [WEB_ROLLING, SUSPENDED],
        ["resume-build"],
    ),
    (
        "workload-wants-no-replicas",
        "You may resume Job build once Deployment web is available.",
        "Stop when Job build has succeeded.",
        [WEB_STILL, SUSPENDED],
        [],
    ),
    (
        "precondition-unmet",
        "You may resume Job build once Job migrate has succeeded.",
        "Stop when Job build has succeeded.",
        [MIGRATING, RUNNING],
        [],
    ),
]


@pytest.mark.parametrize(
    ("task", "stop_when", "facts", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in COMING],
)
def test_coming_moves(
    task: str, stop_when: str, facts: list[ObjectFacts], expected: list[str]
) -> None:
    grants = reading.read([(Words.task, task)]).grants
    rule = read_stop_rule(stop_when, NS, task)
    assert [m.grant.id for m in coming_moves(rule, grants, facts, checks=1)] == expected
    assert applicable_moves(rule, grants, facts, checks=1) == [] or expected == []


# (id, stop rule, facts, the leaves whose own object is on its way to them, as quoted)
COMING_LEAVES: list[tuple[str, str, list[ObjectFacts], list[str]]] = [
    ("job-runs", "Stop when Job build has succeeded.", [RUNNING], ["Job build has succeeded"]),
    ("job-suspended", "Stop when Job build has succeeded.", [SUSPENDED], []),
    ("job-failed", "Stop when Job build has succeeded.", [FAILED], []),
    ("job-crash-loops", "Stop when Job migrate has succeeded.", [MIGRATE_CRASHING], []),
    ("pod-exited-before-back-off", "Stop when Deployment web is available.", [WEB_EXITED], []),
    ("job-unread", "Stop when Job build has succeeded.", [], []),
    (
        "rollout",
        "Stop when Deployment web is available.",
        [WEB_ROLLING],
        ["Deployment web is available"],
    ),
    ("no-state-comes-alone", "Stop when Deployment old-web has 0 replicas.", [OLD_WEB], []),
    (
        "pods-being-replaced",
        "Stop when every pod of Deployment shop started after this Monitor did.",
        [SHOP_ROLLING],
        [],  # the run's start is not stamped here: the leaf's value is unknown
    ),
    (
        "pods-being-replaced-after-a-write",
        "Stop when every pod of Deployment shop started after ConfigMap prices was last written.",
        [SHOP_ROLLING, PRICES],
        ["every pod of Deployment shop started after ConfigMap prices was last written"],
    ),
    ("negated", "Stop when Job build is not running.", [RUNNING], []),
    (
        "one-of-two",
        "Stop when Job build has succeeded and Deployment old-web has 0 replicas.",
        [RUNNING, OLD_WEB],
        ["Job build has succeeded"],
    ),
]


@pytest.mark.parametrize(
    ("stop_when", "facts", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in COMING_LEAVES],
)
def test_coming_leaves(stop_when: str, facts: list[ObjectFacts], expected: list[str]) -> None:
    rule = read_stop_rule(stop_when, NS)
    found = coming_leaves(rule, facts, checks=1)
    assert [leaf.quote for leaf, _, _ in found] == expected
    assert all(value.value is False and ref.namespace == "" for _, value, ref in found)


@pytest.mark.parametrize(
    ("facts", "acts"),
    [
        pytest.param([MIGRATED, OLD_WEB], "scale-old-web", id="the-grant-moves"),
        pytest.param([MIGRATING, OLD_WEB], None, id="its-condition-is-unmet"),
        pytest.param([MIGRATED, OLD_WEB_DOWN], None, id="the-goal-holds"),
    ],
)
def test_a_check_the_model_left_unanswered_is_settled_by_a_grant_that_moves(
    facts: list[ObjectFacts], acts: str | None
) -> None:
    grants = reading.read([(Words.task, SCALE_AFTER)]).grants
    rule = read_stop_rule(BOTH, NS, SCALE_AFTER)
    found = settled_move(rule, grants, facts, checks=2, unanswered="a wait while idle")
    if acts is None:
        assert found is None
        return
    assert found is not None and found.route.value == "act" and found.action is not None
    assert found.action.authorizedActionId == acts
    assert found.action.mutationSet == ["deployments/old-web"]
    assert found.reason.startswith("The model gave no valid answer (a wait while idle)")
    assert '"Deployment old-web has 0 replicas" does not hold' in found.report


WEB_NAMED = fact(FactKind.Deployment, "web", replicas=1, availableReplicas=1).model_copy(
    update={"namedIn": [NamedIn.stopWhen, NamedIn.task]}
)
JUDGED_RULE = "Stop when every running pod of web reads the new settings."


@pytest.mark.parametrize(
    ("task", "stop_when", "facts", "offered"),
    [
        pytest.param("You may restart Deployment web.", JUDGED_RULE, [WEB_NAMED], ["restart-web"]),
        pytest.param(
            "You may restart Deployment web.",
            "Stop when Deployment web has 3 available replicas.",
            [WEB_NAMED],
            [],
            id="typed-leaves-decide",
        ),
        pytest.param(
            "You may restart Deployment web once Job migrate has succeeded.",
            JUDGED_RULE,
            [WEB_NAMED, MIGRATING],
            [],
            id="condition-unmet",
        ),
        pytest.param(
            "You may scale Deployment web to 1.", JUDGED_RULE, [WEB_NAMED], [], id="changes-nothing"
        ),
        pytest.param(
            "You may restart Deployment web.",
            JUDGED_RULE,
            [WEB_NAMED.model_copy(update={"namedIn": [NamedIn.task]})],
            [],
            id="not-named-by-the-rule",
        ),
    ],
)
def test_the_acts_offered_to_the_person_under_a_judged_stop_rule(
    task: str, stop_when: str, facts: list[ObjectFacts], offered: list[str]
) -> None:
    grants = reading.read([(Words.task, task)]).grants
    rule = read_stop_rule(stop_when, NS, task)
    found = offered_acts(rule, grants, facts)
    assert [a.authorizedActionId for a in found] == offered
    assert all(a.failureId == f"{a.authorizedActionId}-offered" for a in found)
