"""Authority from the person's words (core/authority.py `pin`) and what the engine launches
with it: a grant is what the grammar of core/reading.py reads from a sentence a proposal
quotes, an allowed resource is exactly a grant's object, and an act runs only inside them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.engine_loop import Loop
from tests.support.observations import FIX, RESUME, TASK, action, extraction, observation

from goalkeeper.core import authority
from goalkeeper.core.authority import pin, stated_price
from goalkeeper.core.engine import AuthorityExtracted, LaunchStep, Started, StopMonitor
from goalkeeper.core.models import (
    AuthorityExtraction,
    AuthorizedAction,
    GrantVerb,
    MonitorSpec,
    MonitorStatus,
    StepKind,
    StopReason,
    Words,
)
from goalkeeper.core.mutations import covers, parse_entry


def pinned(task: str, found: dict[str, Any], stop: str | None = None) -> Any:
    spec = MonitorSpec(task=task, **({"stopWhen": stop} if stop else {}))
    return pin(spec, AuthorityExtraction.model_validate({"goal": "g", **found}), generation=1)


def resume(quote: str, gid: str = "resume-build") -> dict[str, Any]:
    return {"id": gid, "description": "Resume Job build.", "quote": quote}


# --- the standard task -------------------------------------------------------------------------


def test_every_grant_of_the_standard_reading_is_typed_and_named_by_its_proposal() -> None:
    kept = pin(
        MonitorSpec(task=TASK), AuthorityExtraction.model_validate(extraction()), generation=1
    )
    assert [a.id for a in kept.actions] == ["resume-build", "fix-config"]
    assert [(g.verb, g.quote) for g in kept.record.typedGrants] == [
        (GrantVerb.resume, RESUME),
        (GrantVerb.repair, FIX),
    ]
    assert kept.contract.allowedResources == ["jobs/build"]
    assert kept.record.dropped == [] and kept.record.unclear == []
    # "anything else" is what nothing grants: no prohibition, no forbidden change.
    assert kept.record.typedProhibitions == []


# --- what a proposal can and cannot do ---------------------------------------------------------


def test_a_proposal_grants_only_what_its_sentence_says_and_not_its_own_words() -> None:
    task = "Job etl must complete. You may resume Job etl."
    lying = {
        "id": "wipe",
        "description": "Delete every Job and scale Deployment db to 0.",
        "quote": "You may resume Job etl.",
    }
    kept = pinned(task, {"authorizedActions": [lying]})
    assert [(g.id, g.verb, g.object.ref if g.object else "") for g in kept.record.typedGrants] == [
        ("wipe", GrantVerb.resume, "Job etl")
    ]
    assert kept.actions[0].description == "resume Job etl"
    assert kept.contract.allowedResources == ["jobs/etl"]


@pytest.mark.parametrize(
    ("quote", "why"),
    [
        ("You may delete the build Job.", authority.QUOTE_NOT_FOUND),
        ("Job etl must complete.", authority.NOT_READ),
    ],
)
def test_a_proposal_quoting_no_grant_is_refused_and_its_sentence_shown(
    quote: str, why: str
) -> None:
    kept = pinned(
        "Job etl must complete. You may resume Job etl.", {"authorizedActions": [resume(quote)]}
    )
    # The sentence that grants gives its grant under the grammar's id; the proposal names none.
    assert [a.id for a in kept.actions] == ["resume-etl"]
    assert kept.contract.allowedResources == ["jobs/etl"]
    assert kept.record.dropped == [f"authorized action 'resume-build': {why}"]


def test_a_grant_no_proposal_names_stands_and_one_named_takes_the_proposals_id() -> None:
    task = "You may resume Job extract. Scale Deployment old-web to 0 once Job extract is done."
    kept = pinned(task, {"authorizedActions": [resume("You may resume Job extract.")]})
    assert [(g.id, g.verb) for g in kept.record.typedGrants] == [
        ("resume-build", GrantVerb.resume),
        ("scale-old-web", GrantVerb.scale),
    ]
    assert kept.record.dropped == []
    none = pinned(task, {"authorizedActions": []})
    assert [g.id for g in none.record.typedGrants] == ["resume-extract", "scale-old-web"]


def test_proposals_of_a_sentence_of_two_grants_neither_swap_ids_nor_unmark_the_paid_one() -> None:
    task = "You may resume Job etl and scale Deployment gpu-web to 3."
    swapped = [
        {"id": "scale-gpu-web", "description": "d", "quote": task, "paid": True},
        {"id": "resume-etl", "description": "d", "quote": task},
    ]
    kept = pinned(task, {"authorizedActions": swapped})
    assert [(g.id, g.verb, g.paid) for g in kept.record.typedGrants] == [
        ("resume-etl", GrantVerb.resume, True),
        ("scale-gpu-web", GrantVerb.scale, True),
    ]


def test_a_proposal_id_another_grant_has_leaves_each_id_unique() -> None:
    task = "You may resume Job alpha. You may resume Job beta."
    clash = [resume("You may resume Job alpha.", "resume-beta")]
    kept = pinned(task, {"authorizedActions": clash})
    assert [(g.id, g.object.name if g.object else "") for g in kept.record.typedGrants] == [
        ("resume-alpha", "alpha"),
        ("resume-beta", "beta"),
    ]


def test_a_sentence_the_reader_saw_a_grant_in_but_the_engine_cannot_read_waits_for_a_person() -> (
    None
):
    task = "You may resume Job etl when the upstream team says so."
    kept = pinned(task, {"authorizedActions": [resume(task)]})
    assert kept.actions == []
    assert [u.sentence for u in kept.record.unclear] == [task]


def test_a_grant_makes_exactly_its_own_object_writable() -> None:
    task = "You may restart Deployment web; Deployment db and Job etl-backfill stay as they are."
    found = {
        "allowedResources": [
            {"entry": "deployments/db", "quote": task},
            {"entry": "jobs/etl-*", "quote": task},
        ],
        "authorizedActions": [{"id": "restart-web", "description": "Restart web.", "quote": task}],
    }
    kept = pinned(task, found)
    assert kept.contract.allowedResources == ["deployments/web"]
    assert any("'deployments/db'" in d for d in kept.record.dropped)
    assert any("'jobs/etl-*'" in d for d in kept.record.dropped)


def test_two_grants_of_one_sentence_both_stand_on_one_proposal() -> None:
    task = "You may restart Deployment web or Deployment api. Never restart Deployment api."
    found = {
        "authorizedActions": [
            {"id": "restart-either", "description": "Restart one.", "quote": sentences_of(task)[0]}
        ]
    }
    kept = pinned(task, found)
    assert [a.id for a in kept.actions] == ["restart-either"]
    assert kept.contract.allowedResources == ["deployments/web"]
    assert kept.record.dropped == [
        "restart Deployment api: the task forbids it: 'Never restart Deployment api.'"
    ]


def sentences_of(text: str) -> list[str]:
    return authority.sentences(text)


def test_the_stop_rule_may_grant_too() -> None:
    stop = "Stop when Job etl has succeeded. You may resume Job etl."
    kept = pinned(
        "Finish the import.", {"authorizedActions": [resume("You may resume Job etl.")]}, stop
    )
    assert [g.source for g in kept.record.typedGrants] == [Words.stopWhen]


ONLY_WATCH = [
    "Only observe Job build; report its progress.",
    "Watch Job build. This monitor is read-only.",
    "Just watch.",
]


@pytest.mark.parametrize("task", ONLY_WATCH)
def test_a_watch_only_task_grants_no_action_whatever_the_model_reads(task: str) -> None:
    words = task + " You may resume Job build."
    found = {"authorizedActions": [resume(s, f"a{i}") for i, s in enumerate(sentences_of(words))]}
    kept = pinned(words, found)
    assert kept.actions == [] and kept.contract.allowedResources == []


def test_a_prohibition_of_any_change_to_an_object_is_a_forbidden_change() -> None:
    kept = pinned("Do not touch Deployment payments. Never scale Deployment db.", {})
    assert kept.contract.forbiddenChanges == ["deployments/payments"]
    assert {authority.reading.prohibition_line(p) for p in kept.record.typedProhibitions} == {
        "no change of Deployment payments",
        "no scale of Deployment db",
    }


# --- a person's confirmation -------------------------------------------------------------------


def test_a_confirmation_denies_and_adds_grants_recorded_with_who() -> None:
    task = "You may resume Job etl. You may restart Deployment web if it hangs."
    kept = pinned(task, {"authorizedActions": [resume("You may resume Job etl.", "resume-etl")]})
    assert kept.record.unclear, "the second sentence is not read whole"
    status = MonitorStatus(
        contract=kept.contract, authorizedActions=kept.actions, authority=kept.record
    )
    added, refused = authority.person_grants(["restart Deployment web once", "restart it"])
    assert [authority.reading.grant_line(g) for g in added] == ["restart Deployment web, once"]
    assert refused == ["'restart it': not one grant the reading parses whole"]
    changed = authority.confirm(status, "alice", grants=added, denied=["resume-etl"])
    assert changed == ["denied resume-etl", "granted restart-web: restart Deployment web, once"]
    assert status.authority is not None and status.authority.confirmedBy == "alice"
    assert [g.confirmedBy for g in status.authority.typedGrants] == ["alice"]
    assert [a.id for a in status.authorizedActions] == ["restart-web"]
    assert status.contract is not None and status.contract.allowedResources == ["deployments/web"]


def test_a_ceiling_needs_its_amount_in_its_quote() -> None:
    task = "Finish Job build. Spending must not exceed 40 USD."
    ok = pinned(
        task,
        {"costCeiling": {"amount": 40, "quote": "Spending must not exceed 40 USD."}},
    )
    assert ok.contract.costCeiling is not None and float(ok.contract.costCeiling.amount) == 40
    raised = pinned(
        task,
        {"costCeiling": {"amount": 4000, "quote": "Spending must not exceed 40 USD."}},
    )
    assert "does not state that amount" in raised.record.dropped[0]
    # The engine reads the person's own limit instead: a ceiling only narrows.
    assert raised.contract.costCeiling is not None
    assert float(raised.contract.costCeiling.amount) == 40


# --- the engine ------------------------------------------------------------------------------


def test_the_first_step_reads_the_task_alone_and_records_what_it_kept() -> None:
    loop = Loop(granted_by_first_observation=True)
    effects = loop.send(Started(generation=1))
    (step,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert step.kind is StepKind.extract and step.input.check == 0
    assert step.input.previousObservation is None and step.input.contract is None
    assert loop.status.activity == "extracting" and loop.status.checks == 0
    effects = loop.extract(AuthorityExtraction.model_validate(extraction()))
    (observe,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert observe.kind is StepKind.observe and observe.input.check == 1
    assert observe.input.contract == loop.status.contract
    assert loop.status.authority is not None and loop.status.authority.generation == 1
    # The first report shows what was understood, with the words that say so.
    report = loop.observe(observation("wait"))[0].text  # type: ignore[attr-defined]
    assert "Authority (read from the task):" in report and RESUME in report
    loop.later(30)
    from goalkeeper.core.engine import TimerDue

    loop.send(TimerDue())
    later = loop.observe(observation("wait"))[0].text  # type: ignore[attr-defined]
    assert "Authority" not in later


def test_an_invalid_reading_is_read_again_after_a_delay_then_blocks() -> None:
    from goalkeeper.core.engine import ExtractionRejected

    loop = Loop(granted_by_first_observation=True, options={"invalid_answers": 3})
    loop.send(Started(generation=1))
    for _ in range(2):
        effects = loop.send(ExtractionRejected(loop.seq, "quote: field required"))
        assert not [e for e in effects if isinstance(e, LaunchStep)], "not back to back"
        assert [e.kind for e in loop.retry() if isinstance(e, LaunchStep)] == [StepKind.extract]
    effects = loop.send(ExtractionRejected(loop.seq, "quote: field required"))
    (stop,) = [e for e in effects if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.blocked and "task reading was invalid 3 times" in stop.message


@pytest.mark.parametrize(
    "entry",
    [
        "configmaps/web-entrypoint",
        "deployments/web",
        "jobs/build-*",
        "jobs/*",
        "other-team/jobs/build",
        "command:python3",
        "https://hooks.example.com/deploy",
        "every build Job",
    ],
)
def test_a_mutation_entry_outside_the_pinned_resources_stops_naming_it(entry: str) -> None:
    loop = Loop()
    loop.start()
    effects = loop.observe(observation("act", action=action(mutationSet=["jobs/build", entry])))
    (stop,) = [e for e in effects if isinstance(e, StopMonitor)]
    assert stop.reason is StopReason.outsideAuthority
    assert entry in stop.message and "(jobs/build) do not cover" in stop.message
    assert not any(isinstance(e, LaunchStep) for e in effects)


# --- whatever the observations say -----------------------------------------------------------

ENTRIES = st.sampled_from(
    [
        "jobs/build",
        "Job build",
        "jobs/build-*",
        "jobs/*",
        "configmaps/web",
        "deployments/web",
        "other/jobs/build",
        "command:python3",
        "https://example.com/x",
        "secrets/db",
        "build",
    ]
)


@settings(max_examples=150, deadline=None)
@given(sets=st.lists(st.lists(ENTRIES, min_size=1, max_size=4), min_size=1, max_size=6))
def test_every_launched_act_is_inside_the_pinned_resources(sets: list[list[str]]) -> None:
    loop = Loop()
    loop.spec = MonitorSpec(task=TASK)
    loop.status = MonitorStatus()
    loop.send(Started(generation=1))
    loop.send(AuthorityExtracted(loop.seq, AuthorityExtraction.model_validate(extraction())))
    assert loop.status.contract is not None
    pinned_targets = [
        t for e in loop.status.contract.allowedResources if (t := parse_entry(e, "default"))
    ]
    for n, mutations in enumerate(sets):
        if loop.status.step is None or loop.status.step.kind is not StepKind.observe:
            break
        effects = loop.observe(
            observation("act", action=action(mutationSet=mutations, failureId=f"f{n}"))
        )
        for launch in (e for e in effects if isinstance(e, LaunchStep)):
            if launch.kind is not StepKind.act:
                continue
            assert launch.input.action is not None
            for entry in launch.input.action.mutationSet:
                target = parse_entry(entry, "default")
                assert target is not None
                assert any(covers(p, target) for p in pinned_targets), entry
            loop.finish()


# --- what the engine reads of spending itself ---------------------------------------------------

GPU_TASK = (
    "Clear the render queue: it needs Deployment gpu-renderer running with 1 replica for "
    "about 2 hours. Each replica of gpu-renderer rents a GPU at 9 USD per hour. You may "
    "scale Deployment gpu-renderer to 1 replica. Spending for this task is capped at 10 USD "
    "in all."
)
SCALE_GPU = {
    "id": "scale-deployment",
    "description": "Scale Deployment gpu-renderer to 1 replica.",
    "quote": "You may scale Deployment gpu-renderer to 1 replica.",
}


def test_a_limit_and_a_price_in_the_words_hold_when_the_reading_left_them_out() -> None:
    # As a small model read it: no ceiling, and the scale not marked paid.
    kept = pinned(GPU_TASK, {"authorizedActions": [SCALE_GPU]})
    assert kept.contract.costCeiling is not None
    assert (float(kept.contract.costCeiling.amount), kept.contract.costCeiling.currency) == (
        10,
        "USD",
    )
    assert [(a.id, a.paid) for a in kept.actions] == [("scale-deployment", True)]
    [ceiling] = [g for g in kept.record.grants if g.field == "costCeiling"]
    assert ceiling.quote == "Spending for this task is capped at 10 USD in all."


def test_an_action_on_what_nothing_prices_stays_unpaid_and_two_limits_record_none() -> None:
    task = (
        "Finish Job build. You may resume Job build. Job report costs 3 USD a run. Spending "
        "is capped at 10 USD; the whole month is capped at 300 USD."
    )
    found = {"authorizedActions": [resume("You may resume Job build.")]}
    kept = pinned(task, found)
    assert [(a.id, a.paid) for a in kept.actions] == [("resume-build", False)]
    assert kept.contract.costCeiling is None


def test_a_stated_price_is_one_amount_for_what_the_action_names_and_never_a_rate() -> None:
    resume_encoder = AuthorizedAction(id="resume-transcode", description="Resume Job transcode.")

    def price(task: str) -> tuple[float, str] | None:
        spec = MonitorSpec(task=task, stopWhen="Stop when Job transcode has succeeded.")
        found = stated_price(spec, resume_encoder)
        return None if found is None else (float(found.amount), found.currency)

    assert price("Each run of Job transcode rents an encoder for about 12 USD.") == (12, "USD")
    assert price("A run of transcode costs $3.50.") == (3.5, "USD")
    assert price("Job transcode rents an encoder at 12 USD per hour.") is None
    assert price("Job transcode costs 12 USD, or 20 EUR abroad.") is None  # two amounts
    assert price("Job report costs 12 USD a run.") is None  # priced, but not what it names
    assert price("Spending on Job transcode is capped at 5 USD.") is None  # a limit, no price
