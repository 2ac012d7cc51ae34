"""Whatever the model returns, a Monitor's status and a step's input stay bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.observations import maximal_dict

from goalkeeper.core.budget import STATUS_BUDGET, cut, fit_status, status_size
from goalkeeper.core.engine import (
    AuthorityExtracted,
    LaunchStep,
    ObservationAccepted,
    Started,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    GRANTS_MAX,
    TYPED_MAX,
    UNCLEAR_MAX,
    AuthorityExtraction,
    MonitorSpec,
    MonitorStatus,
    Observation,
    StepKind,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)

GRANT_LISTS = ("allowedResources", "allowedSystems", "allowedFiles", "allowedRecoveryActions")
RESTRICTIONS = ("forbiddenChanges", "protectedContracts", "requiredChecks", "stopConditions")


def maximal(route: str = "wait", n: int = 0) -> Observation:
    return Observation.model_validate(maximal_dict(route, n, NOW + timedelta(minutes=n)))


def maximal_authority() -> tuple[MonitorSpec, AuthorityExtraction]:
    """A spec at its bounds whose words grant the most a task reading can make us record:
    typed grants at the record's bound, each object's name at its longest and each quote
    at its longest, the prose lists and the actions at the extraction's bound, a ceiling,
    the restrictions at their bounds, prohibitions no grant runs into, and unclear
    sentences past the record's bound."""
    names = [f"r{i:02d}" + "n" * 250 for i in range(TYPED_MAX)]  # 253 characters
    granting = [f"You may resume Job {name}." for name in names]
    ceiling = "The cost ceiling is 100 USD for the build."
    unclear = [f"You may {i:02d} " + "u" * 180 + "." for i in range(UNCLEAR_MAX + 2)]
    task = " ".join([*granting, ceiling, *unclear])
    assert len(task) <= 8000
    forbidding = [f"Never restart Deployment f{i:02d}" + "q" * 250 + "." for i in range(13)]
    stop_when = " ".join(forbidding)
    restrictions = maximal_dict()["contract"]

    def entries(prefix: str, fill: str) -> list[dict[str, str]]:
        return [
            {"entry": (f"{prefix} {i:02d} " + fill * 500)[:500], "quote": granting[i]}
            for i in range(GRANTS_MAX)
        ]

    extraction = AuthorityExtraction.model_validate(
        {
            "goal": "g" * 8000,
            "allowedSystems": entries("build system", "s"),
            "allowedFiles": entries("build file", "f"),
            "allowedRecoveryActions": entries("resume the build", "r"),
            "authorizedActions": [
                {
                    "id": f"a{i:02d}-" + "i" * 196,
                    "description": (f"Resume the build {i:02d}. " + "d" * 1000)[:1000],
                    "quote": granting[i],
                }
                for i in range(GRANTS_MAX)
            ],
            "costCeiling": {"amount": 100, "currency": "USD", "quote": ceiling},
            **{field: restrictions[field] for field in RESTRICTIONS},
        }
    )
    spec = MonitorSpec(task=task, stopWhen=stop_when, everyMinutes=1)
    return spec, extraction


def authority_recorded(spec: MonitorSpec, extraction: AuthorityExtraction) -> MonitorStatus:
    """Started, and the task reading answered with `extraction`, every grant kept."""
    decision = decide(spec, MonitorStatus(), Started(1), NOW)
    (read,) = [e for e in decision.effects if isinstance(e, LaunchStep)]
    assert read.kind is StepKind.extract and len(read.input.model_dump_json()) <= STATUS_BUDGET
    status = decision.status
    assert status.step is not None
    status = decide(spec, status, AuthorityExtracted(status.step.seq, extraction), NOW).status
    record = status.authority
    assert record is not None and not record.dropped
    assert len(record.typedGrants) == TYPED_MAX and len(record.unclear) == UNCLEAR_MAX
    assert len(record.typedProhibitions) == 13
    assert len(record.grants) == 3 * GRANTS_MAX + 1
    assert status_size(status) <= STATUS_BUDGET
    return status


def restating(status: MonitorStatus, route: str = "wait", n: int = 0) -> Observation:
    """A maximal observation that restates the recorded authority: the most an
    observation may state of it, since it can only narrow it."""
    body: dict[str, Any] = maximal_dict(route, n, NOW + timedelta(minutes=n))
    pinned = status.contract
    assert pinned is not None
    recorded = pinned.model_dump(mode="json")
    body["contract"] = {
        **body["contract"],
        **{field: recorded[field] for field in GRANT_LISTS},
        "costCeiling": recorded["costCeiling"],
    }
    body["authorizedActions"] = [a.model_dump(mode="json") for a in status.authorizedActions]
    return Observation.model_validate(body)


def test_cut_marks_what_it_cut() -> None:
    assert cut("short", 10) == "short"
    cut_text = cut("x" * 5000, 200)
    assert len(cut_text) <= 200 and cut_text.endswith("more characters]")
    assert "cut by goalkeeper" in cut_text


def test_maximal_observations_keep_status_and_step_input_under_budget() -> None:
    spec, extraction = maximal_authority()
    status = authority_recorded(spec, extraction)
    now = NOW
    largest_input = 0
    for n in range(12):
        assert status.step is not None
        observed = restating(status, n=n)
        status = decide(spec, status, ObservationAccepted(status.step.seq, observed), now).status
        assert status_size(status) <= STATUS_BUDGET
        now += timedelta(minutes=2)
        decision = decide(spec, status, TimerDue(), now)
        status = decision.status
        launch = next(e for e in decision.effects if isinstance(e, LaunchStep))
        largest_input = max(largest_input, len(launch.input.model_dump_json()))
    assert status.checks == 12 and largest_input <= STATUS_BUDGET


def test_an_oversized_status_is_cut_visibly_and_keeps_its_authority() -> None:
    obs = maximal()
    big = MonitorStatus(
        lastObservation=obs,
        contract=obs.contract,
        authorizedActions=obs.authorizedActions,
        lastRejection="j" * 4000,
    )
    fitted = fit_status(big, budget=90_000)
    assert status_size(fitted) <= 90_000
    assert fitted.contract == obs.contract and fitted.authorizedActions == obs.authorizedActions
    assert fitted.lastObservation is not None and fitted.lastObservation.progress is None
    assert "cut by goalkeeper" in fitted.lastObservation.observation
    assert "cut by goalkeeper" in (fitted.lastRejection or "")


def test_a_status_within_budget_is_only_deduplicated() -> None:
    obs = maximal()
    status = MonitorStatus(lastObservation=obs)
    fitted = fit_status(status)
    assert fitted.lastObservation is not None
    assert fitted.lastObservation.observation == obs.observation
    assert fitted.lastObservation.progress is None


def test_a_new_track_after_a_full_set_keeps_the_status_valid() -> None:
    from tests.support.observations import observation, track

    from goalkeeper.core.models import TRACKS_MAX

    spec, extraction = maximal_authority()
    status = authority_recorded(spec, extraction)
    assert status.step is not None
    first = restating(status)
    status = decide(spec, status, ObservationAccepted(status.step.seq, first), NOW).status
    assert status.checks == 1 and len(status.progress) == TRACKS_MAX
    status = decide(spec, status, TimerDue(), NOW + timedelta(minutes=2)).status
    assert status.step is not None
    # One track under a key not seen before, and the authority restated as recorded.
    fresh = observation(
        "wait",
        contract=first.contract.model_dump(),
        authorizedActions=[a.model_dump() for a in first.authorizedActions],
        progress=[track("modules", 3, 27, NOW)],
    )
    status = decide(spec, status, ObservationAccepted(status.step.seq, fresh), NOW).status
    assert status.checks == 2 and len(status.progress) <= TRACKS_MAX
    assert "modules" in {t.key for t in status.progress}


def test_restrictions_added_to_a_full_record_never_overflow_it() -> None:
    from goalkeeper.core.models import LIST_ENTRIES

    spec, extraction = maximal_authority()
    status = authority_recorded(spec, extraction)
    assert status.step is not None
    first = restating(status)
    status = decide(spec, status, ObservationAccepted(status.step.seq, first), NOW).status
    assert status.checks == 1 and status.contract is not None
    assert len(status.contract.forbiddenChanges) == LIST_ENTRIES, "a full record"
    status = decide(spec, status, TimerDue(), NOW + timedelta(minutes=2)).status
    assert status.step is not None
    more = [*first.contract.forbiddenChanges[2:], "the database", "the cluster's DNS"]
    stricter = first.model_copy(
        update={"contract": first.contract.model_copy(update={"forbiddenChanges": more})}
    )
    stricter = Observation.model_validate(stricter.model_dump())
    status = decide(spec, status, ObservationAccepted(status.step.seq, stricter), NOW).status
    assert status.checks == 2 and status.contract is not None
    assert len(status.contract.forbiddenChanges) <= LIST_ENTRIES
