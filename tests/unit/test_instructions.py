"""The operators' instructions (core/authority.py, core/turn/): the cluster admin's and the
namespace admin's doctrine, read with the task, pinned with its authority for the spec
generation, and handed to every step of it."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.engine_loop import Loop
from tests.support.observations import observation

from goalkeeper.core.authority import instructions_of, pin
from goalkeeper.core.engine import (
    AuthorityExtracted,
    LaunchStep,
    Notify,
    ObservationAccepted,
    Started,
    TimerDue,
)
from goalkeeper.core.models import (
    INSTRUCTIONS_MAX,
    AuthorityExtraction,
    GrantVerb,
    Instructions,
    MonitorSpec,
    StepKind,
    Words,
)

TASK = "Keep Deployment payments-api serving. You may scale Deployment payments-api to 3 replicas."
SCALE = "You may scale Deployment payments-api to 3 replicas."
NEVER = "Never scale Deployment payments-api."
RESTART = "You may restart Deployment payments-api."


def scale_action(quote: str = SCALE) -> dict[str, Any]:
    return {
        "id": "scale-payments-api",
        "description": "Scale Deployment payments-api to 3 replicas.",
        "quote": quote,
    }


def pinned(found: dict[str, Any], **instructions: str) -> Any:
    return pin(
        MonitorSpec(task=TASK),
        AuthorityExtraction.model_validate({"goal": "g", **found}),
        generation=1,
        instructions=Instructions(**instructions),
    )


# --- what the words of the operators do -------------------------------------------------------


@pytest.mark.parametrize("where", ["cluster", "namespace"])
def test_an_instruction_that_forbids_an_action_the_task_allows_drops_it(where: str) -> None:
    kept = pinned({"authorizedActions": [scale_action()]}, **{where: NEVER})
    assert kept.actions == []
    assert kept.record.dropped == [
        f"scale Deployment payments-api to 3: the {where} instructions forbid it: {NEVER!r}"
    ]
    assert NEVER in kept.record.prohibitions
    # Without the instruction the same reading grants it.
    assert [a.id for a in pinned({"authorizedActions": [scale_action()]}).actions] == [
        "scale-payments-api"
    ]


def test_an_instruction_that_grants_is_quoted_with_whose_words_it_is() -> None:
    found = {
        "allowedResources": [{"entry": "deployments/payments-api", "quote": RESTART}],
        "authorizedActions": [
            {
                "id": "restart-payments-api",
                "description": "Restart Deployment payments-api with a rollout restart.",
                "quote": RESTART,
            },
            scale_action(),
        ],
    }
    kept = pinned(found, namespace=f"Payments runs in this namespace. {RESTART}")
    assert [a.id for a in kept.actions] == ["scale-payments-api", "restart-payments-api"]
    sources = {g.id: g.source for g in kept.record.typedGrants}
    assert sources == {
        "restart-payments-api": Words.namespaceInstructions,
        "scale-payments-api": Words.task,
    }


def test_a_quote_may_not_run_across_the_task_and_the_instructions() -> None:
    # The stop rule's last words and the instructions' first, quoted as one: nobody wrote that.
    across = "the user explicitly asks to stop. You may restart Deployment payments-api"
    found = {"authorizedActions": [scale_action(across)]}
    kept = pinned(found, cluster=RESTART)
    # The task's own grant stands; the quote across the two names neither, and the
    # instructions' offer stands only when a proposal names it.
    assert [(a.id, a.verb) for a in kept.actions] == [("scale-payments-api", GrantVerb.scale)]
    assert [g.source for g in kept.record.typedGrants] == [Words.task]
    assert kept.record.dropped == [
        "authorized action 'scale-payments-api': its quote runs across two sources of words"
    ]


def test_an_instructions_grant_no_proposal_names_is_not_taken_a_task_grant_is() -> None:
    kept = pinned({"authorizedActions": []}, namespace=RESTART)
    assert [(g.id, g.source) for g in kept.record.typedGrants] == [
        ("scale-payments-api", Words.task)
    ]


def test_a_grant_quoted_from_instructions_that_are_not_there_is_refused() -> None:
    kept = pinned({"authorizedActions": [scale_action(RESTART)]})
    assert [a.verb for a in kept.actions] == [GrantVerb.scale]  # the task's own grant only
    assert (
        "its quote is not in the task, the stop rule or the instructions"
        in (kept.record.dropped[0])
    )


# --- the namespace's ConfigMap, read -----------------------------------------------------------


def test_instructions_from_the_cluster_and_the_namespace() -> None:
    read = instructions_of(" Cluster rule. ", {"instructions": " Namespace rule. "}, "42")
    assert read == Instructions(
        cluster="Cluster rule.", namespace="Namespace rule.", namespaceVersion="42"
    )
    assert instructions_of("", None) == Instructions()


def test_a_namespace_configmap_without_the_key_or_over_the_bound_is_named() -> None:
    missing = instructions_of("", {"rules": "Never delete anything."})
    assert missing == (
        "ConfigMap goalkeeper-instructions has no data.instructions: write the instructions "
        "under that key."
    )
    over = instructions_of("", {"instructions": "x" * (INSTRUCTIONS_MAX + 1)})
    assert isinstance(over, str)
    assert "data.instructions is 4,001 characters, over the bound of 4,000" in over


# --- pinned for the generation -----------------------------------------------------------------


def extract_launch(effects: tuple[object, ...]) -> LaunchStep:
    (launch,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert launch.kind is StepKind.extract
    return launch


def test_instructions_are_pinned_when_the_task_is_read_and_held_for_the_whole_generation() -> None:
    first = Instructions(namespace=NEVER, namespaceVersion="7")
    loop = Loop(options={"instructions": first}, task=TASK)
    launch = extract_launch(loop.send(Started(generation=1)))
    assert launch.input.instructions == first
    found = AuthorityExtraction.model_validate({"goal": "g", "authorizedActions": [scale_action()]})
    effects = loop.send(AuthorityExtracted(loop.seq, found))
    (notice,) = [e for e in effects if isinstance(e, Notify) and e.reason == "AuthorityRecorded"]
    assert "with the namespace instructions (ConfigMap goalkeeper-instructions, " in (
        notice.message
    )
    assert "resourceVersion 7" in notice.message
    assert loop.status.authorizedActions == []  # the namespace forbids it
    assert loop.status.instructions == first
    (observe,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert observe.input.instructions == first

    # The namespace admin lifts the rule mid-run: this generation keeps what it was read with.
    loop.options = {"instructions": Instructions(namespace="Anything goes.")}
    loop.observe(observation("wait", contract=None, authorizedActions=None))
    loop.later(loop.spec.everyMinutes)
    (timed,) = [e for e in loop.send(TimerDue()) if isinstance(e, LaunchStep)]
    assert timed.kind is StepKind.observe and timed.input.instructions == first

    # A spec edit reads the task again, with the instructions as they stand then.
    loop.spec = loop.spec.model_copy(update={"everyMinutes": 5})
    loop.send(Started(generation=2))
    obs = observation("wait", contract=None, authorizedActions=None)
    launch = extract_launch(loop.send(ObservationAccepted(loop.seq, obs)))
    assert launch.input.instructions == Instructions(namespace="Anything goes.")
    assert loop.status.instructions == Instructions(namespace="Anything goes.")


# --- what the operators' words cannot do --------------------------------------------------------


def test_a_rule_that_says_how_or_when_grants_nothing() -> None:
    # "happen only in ..." names a restart, but permits none: a rule, not a grant.
    rule = "Restarts of Deployment payments-api happen only in the maintenance window."
    found = {
        "allowedResources": [{"entry": "deployments/payments-api", "quote": rule}],
        "authorizedActions": [
            {
                "id": "restart-payments-api",
                "description": "Restart Deployment payments-api.",
                "quote": rule,
            }
        ],
    }
    kept = pinned(found, namespace=rule)
    assert kept.actions == [] and kept.contract.allowedResources == []
    assert "no grant the engine reads" in kept.record.dropped[0]
    # It may limit the task's own grant on the same object: only a person's grant gives it.
    assert "only a person's grant gives it" in kept.record.dropped[1]


def test_a_list_under_a_forbidding_line_forbids_each_item() -> None:
    rules = (
        "Monitors here must never do the following:\n"
        "- scale Deployment payments-api\n"
        "- delete a PersistentVolumeClaim\n"
    )
    kept = pinned({"authorizedActions": [scale_action()]}, namespace=rules)
    assert kept.actions == []
    # The heading is not read, and its "never" may take the grant back: a person decides.
    assert "only a person's grant gives it" in kept.record.dropped[0]
    assert kept.record.unclear


@pytest.mark.parametrize(
    "rule",
    [
        "No monitors may delete PersistentVolumeClaims.",
        "Nobody may delete a PersistentVolumeClaim.",
        "Monitors must never delete a PersistentVolumeClaim.",
    ],
)
def test_who_may_not_is_the_subject_and_the_kind_is_the_object(rule: str) -> None:
    task = "Free space for Job build. You may delete PersistentVolumeClaim data-0."
    found = {
        "goal": "g",
        "authorizedActions": [
            {
                "id": "delete-data-0",
                "description": "Delete PersistentVolumeClaim data-0.",
                "quote": "You may delete PersistentVolumeClaim data-0.",
            }
        ],
    }
    kept = pin(
        MonitorSpec(task=task),
        AuthorityExtraction.model_validate(found),
        generation=1,
        instructions=Instructions(cluster=rule),
    )
    assert kept.actions == [], kept.record


def test_the_instructions_never_raise_the_authors_cost_ceiling() -> None:
    task = "Render the catalog with Job render. Spending must not exceed 50 USD."
    generous = "No Monitor may spend more than 5000 USD."
    read = {"goal": "g", "costCeiling": {"amount": 5000, "quote": generous}}
    kept = pin(
        MonitorSpec(task=task),
        AuthorityExtraction.model_validate(read),
        generation=1,
        instructions=Instructions(namespace=generous),
    )
    assert kept.record.dropped == [
        "cost ceiling 5000 USD: its quote is not in the task or the stop rule"
    ]
    # The author's own limit holds, found in their words.
    assert kept.contract.costCeiling is not None
    assert float(kept.contract.costCeiling.amount) == 50


def test_a_resource_stands_on_no_quote_of_an_action_that_was_refused() -> None:
    task = "Keep Job build fast. You may delete Job build-cache when it is over 10 GB."
    never = "Never delete Job build-cache."
    found = {
        "goal": "g",
        "allowedResources": [{"entry": "jobs/build-cache", "quote": "Keep Job build fast."}],
        "authorizedActions": [
            {
                "id": "delete-build-cache",
                "description": "Delete Job build-cache.",
                "quote": "You may delete Job build-cache when it is over 10 GB.",
            }
        ],
    }
    kept = pin(
        MonitorSpec(task=task),
        AuthorityExtraction.model_validate(found),
        generation=1,
        instructions=Instructions(cluster=never),
    )
    assert kept.actions == [] and kept.contract.allowedResources == []
