"""Authority from the person's words (core/authority.py) and what the engine launches with
it: a grant stands only on a quote of the task that gives it, and an act only inside the
pinned allowed resources."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.engine_loop import Loop
from tests.support.observations import FIX, RESUME, TASK, action, extraction, observation

from goalkeeper.core.authority import forbids, pin, sentences, stated_price
from goalkeeper.core.engine import AuthorityExtracted, LaunchStep, Started, StopMonitor
from goalkeeper.core.models import (
    AuthorityExtraction,
    AuthorizedAction,
    MonitorSpec,
    MonitorStatus,
    StepKind,
    StopReason,
)
from goalkeeper.core.mutations import KubeTarget, covers, parse_entry


def pinned(task: str, found: dict[str, Any], stop: str | None = None) -> Any:
    spec = MonitorSpec(task=task, **({"stopWhen": stop} if stop else {}))
    return pin(spec, AuthorityExtraction.model_validate(found), generation=1)


def resume(quote: str, **extra: Any) -> dict[str, Any]:
    return {"id": "resume-build", "description": "Resume Job build.", "quote": quote, **extra}


# --- the standard task -------------------------------------------------------------------------


def test_every_grant_of_the_standard_reading_stands_on_its_quote() -> None:
    kept = pinned(TASK, extraction())
    assert [a.id for a in kept.actions] == ["resume-build", "fix-config"]
    assert kept.contract.allowedResources == ["jobs/build"]
    assert kept.record.dropped == []
    assert {g.quote for g in kept.record.grants} <= {RESUME, FIX, sentences(TASK)[0]}
    # "anything else" is what nothing grants: recorded, but no forbidden change of its own.
    assert kept.record.prohibitions == ["Do not change anything else."]
    assert "Do not change anything else." not in kept.contract.forbiddenChanges


# --- what a quote must be ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quote", "why"),
    [
        (
            "You may delete the build Job",
            "its quote is not in the task, the stop rule or the instructions",
        ),
        ("You may", "its quote does not name it"),
        ("Do not change anything else.", "it is quoted from a sentence that forbids"),
        ("You may fix the build configuration", "its quote does not name it"),
    ],
)
def test_a_resource_grant_needs_a_quote_of_the_task_that_names_it(quote: str, why: str) -> None:
    found = extraction(
        allowedResources=[{"entry": "jobs/build", "quote": quote}], authorizedActions=[]
    )
    kept = pinned(TASK, found)
    assert kept.contract.allowedResources == []
    assert kept.record.dropped == [f"allowed resource 'jobs/build': {why}"]


GEO_TASK = (
    "Run the postcode import in this namespace to completion. Job geo-import is suspended; "
    "you may resume Job geo-import by setting spec.suspend to false. Do not change "
    "Deployment geo-api; do not create or delete anything."
)
GEO_GRANT = (
    "Job geo-import is suspended; you may resume Job geo-import by setting spec.suspend to false."
)


@pytest.mark.parametrize(
    ("entry", "kept"),
    [("jobs/geo-import", ["jobs/geo-import"]), ("deployments/geo-api", [])],
)
def test_a_resource_quoted_from_the_goal_stands_on_its_actions_quote_when_that_names_it(
    entry: str, kept: list[str]
) -> None:
    """(The action's own words grant Job geo-import whatever the reading listed: below.)"""
    # Seen from a small model: the object quoted with the goal, its action with the grant.
    found = {
        "goal": "g",
        "allowedResources": [{"entry": entry, "quote": sentences(GEO_TASK)[0]}],
        "authorizedActions": [
            {"id": "resume-geo-import", "description": "Resume Job geo-import.", "quote": GEO_GRANT}
        ],
    }
    pinned_authority = pinned(GEO_TASK, found)
    assert pinned_authority.contract.allowedResources == ["jobs/geo-import"]
    resources = [g for g in pinned_authority.record.grants if g.field == "allowedResources"]
    assert [(g.entry, g.quote) for g in resources] == [("jobs/geo-import", GEO_GRANT)]
    if not kept:
        assert pinned_authority.record.dropped == [
            f"allowed resource {entry!r}: its quote does not name it"
        ]


@pytest.mark.parametrize(
    "entry",
    ["configmaps/web-entrypoint", "deployments/build", "jobs/other", "secrets/build"],
)
def test_a_quote_about_one_object_grants_no_other(entry: str) -> None:
    kept = pinned(TASK, extraction(allowedResources=[{"entry": entry, "quote": RESUME}]))
    assert kept.contract.allowedResources == []
    assert "its quote does not name it" in kept.record.dropped[0]


def test_typography_and_spacing_of_a_quote_do_not_matter() -> None:
    task = "You may resume the build Job \u2014 set spec.suspend=false \u2014 when it\u2019s idle."
    quote = "you may  RESUME the build job - set spec.suspend=false - when it's idle"
    kept = pinned(task, {"goal": "g", "authorizedActions": [resume(quote)]})
    assert [a.id for a in kept.actions] == ["resume-build"]


def test_the_stop_rule_may_grant_too() -> None:
    stop = "Stop when Job build succeeded; you may resume Job build once if it is suspended."
    kept = pinned("Finish Job build.", {"goal": "g", "authorizedActions": [resume(stop)]}, stop)
    assert [a.id for a in kept.actions] == ["resume-build"]


# --- prohibitions ---------------------------------------------------------------------------

# The ways people write "only watch": every action a model reads into them is dropped.
ONLY_WATCH = [
    "This monitor may only observe: it must not resume, change, create or delete anything.",
    "Only watch Job build; do not change anything.",
    "Watch Job build until it completes. You must not change, create or delete anything.",
    "Report on Job build. Never touch anything.",
    "Observe only. Job build is someone else's.",
    "Monitor Job build in read-only mode.",
    "Just report the progress of Job build.",
    "Keep an eye on Job build without changing anything.",
    "Job build runs on its own. Do not resume, restart or delete it.",
    "Tell me when Job build finishes; it is not allowed to modify any resource.",
]


@pytest.mark.parametrize("task", ONLY_WATCH)
def test_a_watch_only_task_grants_no_action_whatever_the_model_reads(task: str) -> None:
    quotes = sentences(task)
    found = {
        "goal": "g",
        "authorizedActions": [
            {"id": f"a{i}", "description": "Resume Job build when it is suspended.", "quote": q}
            for i, q in enumerate(quotes)
        ],
    }
    kept = pinned(task, found)
    assert kept.actions == [], kept.record.dropped
    assert len(kept.record.dropped) == len(quotes)
    assert kept.record.prohibitions, "the forbidding sentence is recorded"


@pytest.mark.parametrize(
    ("task", "kept_ids"),
    [
        (
            "You may resume Job build. Never restart Job build.",
            ["resume"],
        ),
        (
            "You may resume or restart Job build. Do not restart it during the day.",
            ["resume"],
        ),
        (
            "You may resume Job build and scale Deployment web. Do not scale Deployment api.",
            ["resume", "scale-web"],
        ),
        (
            "You may resume Job build and scale Deployment web. Never touch Deployment web.",
            ["resume"],
        ),
    ],
)
def test_a_forbidding_sentence_drops_the_actions_whose_verb_and_object_it_names(
    task: str, kept_ids: list[str]
) -> None:
    first = sentences(task)[0]
    found = {
        "goal": "g",
        "authorizedActions": [
            {"id": "resume", "description": "Resume Job build.", "quote": first},
            {"id": "restart", "description": "Restart Job build.", "quote": first},
            {"id": "scale-web", "description": "Scale Deployment web.", "quote": first},
        ],
    }
    kept = pinned(task, found)
    wanted = [a for a in ("resume", "restart", "scale-web") if a in kept_ids]
    assert [a.id for a in kept.actions] == wanted


def test_a_prohibition_of_any_change_is_a_forbidden_change_even_if_the_model_left_it_out() -> None:
    task = "You may scale Deployment web. Never touch the payments Deployment."
    kept = pinned(task, {"goal": "g"})
    assert "Never touch the payments Deployment." in kept.contract.forbiddenChanges


@pytest.mark.parametrize(
    ("sentence", "forbidding"),
    [
        ("You may resume the build Job.", False),
        ("Resume Job build when it is suspended.", False),
        ("Do not delete anything.", True),
        ("It must never be restarted.", True),
        ("This monitor is read-only.", True),
        ("Changes are not permitted.", True),
        ("No Monitor may resume Job build.", True),
        ("Nobody may scale Deployment web.", True),
    ],
)
def test_which_sentences_forbid(sentence: str, forbidding: bool) -> None:
    assert forbids(sentence) is forbidding


def test_a_ceiling_needs_its_amount_in_its_quote() -> None:
    task = "Finish Job build. Spending must not exceed 40 USD."
    ok = pinned(
        task,
        {"goal": "g", "costCeiling": {"amount": 40, "quote": "Spending must not exceed 40 USD."}},
    )
    assert ok.contract.costCeiling is not None and float(ok.contract.costCeiling.amount) == 40
    raised = pinned(
        task,
        {"goal": "g", "costCeiling": {"amount": 4000, "quote": "Spending must not exceed 40 USD."}},
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
    "allowed",
    [
        "jobs/build",
        "Job build",
        "job/build",
        "Job/build",
        "jobs.batch/build",
        "default/jobs/build",
        "Job build in namespace default",
    ],
)
def test_the_natural_forms_of_the_allowed_object_let_the_act_run(allowed: str) -> None:
    loop = Loop(extraction=extraction(allowedResources=[{"entry": allowed, "quote": RESUME}]))
    loop.start()
    assert loop.status.contract is not None and loop.status.contract.allowedResources == [allowed]
    restated = observation("act").contract.model_copy(update={"allowedResources": [allowed]})
    effects = loop.observe(observation("act", contract=restated.model_dump()))
    assert [e.kind for e in effects if isinstance(e, LaunchStep)] == [StepKind.act]


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
@given(
    sets=st.lists(st.lists(ENTRIES, min_size=1, max_size=4), min_size=1, max_size=6),
    allowed=st.lists(ENTRIES, max_size=3),
)
def test_every_launched_act_is_inside_the_pinned_resources(
    sets: list[list[str]], allowed: list[str]
) -> None:
    found = extraction(
        allowedResources=[
            {"entry": e, "quote": f"Grant {i} allows {e}."} for i, e in enumerate(allowed)
        ]
    )
    task = TASK + " " + " ".join(f"Grant {i} allows {e}." for i, e in enumerate(allowed))
    loop = Loop(extraction=found)
    loop.spec = MonitorSpec(task=task)
    loop.status = MonitorStatus()
    loop.send(Started(generation=1))
    loop.send(AuthorityExtracted(loop.seq, AuthorityExtraction.model_validate(found)))
    assert loop.status.contract is not None
    pinned_targets = [
        t for e in loop.status.contract.allowedResources if (t := parse_entry(e, "default"))
    ]
    for n, mutations in enumerate(sets):
        if loop.status.step is None or loop.status.step.kind is not StepKind.observe:
            break
        restated = observation("act").contract.model_copy(
            update={"allowedResources": loop.status.contract.allowedResources}
        )
        effects = loop.observe(
            observation(
                "act",
                contract=restated.model_dump(),
                action=action(mutationSet=mutations, failureId=f"f{n}"),
            )
        )
        for launch in (e for e in effects if isinstance(e, LaunchStep)):
            if launch.kind is not StepKind.act:
                continue
            assert launch.input.action is not None
            for entry in launch.input.action.mutationSet:
                target = parse_entry(entry, "default")
                assert isinstance(target, KubeTarget) or target is not None
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
    kept = pinned(GPU_TASK, {"goal": "g", "authorizedActions": [SCALE_GPU]})
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
    found = {"goal": "g", "authorizedActions": [resume("You may resume Job build.")]}
    kept = pinned(task, found)
    assert [(a.id, a.paid) for a in kept.actions] == [("resume-build", False)]
    assert kept.contract.costCeiling is None


def test_an_object_a_standing_actions_words_name_with_its_kind_is_an_allowed_resource() -> None:
    """Seen from a small model: the restart was recorded, its Deployment was not listed (a
    ConfigMap the task only mentions was), so the act was refused as outside authority."""
    task = (
        "ConfigMap pricing-config in this namespace was corrected a few minutes ago. You may "
        "restart Deployment pricing-worker so its pods read the fix. Do not change Deployment "
        "billing-api."
    )
    grant = "You may restart Deployment pricing-worker so its pods read the fix."
    found = {
        "goal": "g",
        "allowedResources": [{"entry": "configmaps/pricing-config", "quote": sentences(task)[0]}],
        "authorizedActions": [
            {
                "id": "restart-pricing-worker",
                "description": "Restart Deployment pricing-worker.",
                "quote": grant,
            }
        ],
    }
    kept = pinned(task, found)
    assert kept.contract.allowedResources == ["deployments/pricing-worker"]
    assert "deployments/billing-api" not in kept.contract.allowedResources
    # Named in a sentence that forbids, an object is never granted this way.
    forbidding = (
        "You may restart Deployment pricing-worker but do not change Deployment billing-api."
    )
    found["authorizedActions"][0]["quote"] = forbidding
    assert pinned(forbidding, found).contract.allowedResources == []


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
