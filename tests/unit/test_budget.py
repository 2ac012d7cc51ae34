"""Whatever the model returns, a Monitor's status and a step's input stay bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.observations import maximal_dict

from goalkeeper.core.budget import STATUS_BUDGET, cut, fit_status, status_size
from goalkeeper.core.engine import (
    LaunchStep,
    ObservationAccepted,
    Started,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    MonitorSpec,
    MonitorStatus,
    Observation,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def maximal(route: str = "wait", n: int = 0) -> Observation:
    return Observation.model_validate(maximal_dict(route, n, NOW + timedelta(minutes=n)))


def test_cut_marks_what_it_cut() -> None:
    assert cut("short", 10) == "short"
    cut_text = cut("x" * 5000, 200)
    assert len(cut_text) <= 200 and cut_text.endswith("more characters]")
    assert "cut by goalkeeper" in cut_text


def test_maximal_observations_keep_status_and_step_input_under_budget() -> None:
    spec = MonitorSpec(task="t" * 8000, stopWhen="s" * 4000, everyMinutes=1)
    status = decide(spec, MonitorStatus(), Started(1), NOW).status
    now = NOW
    largest_input = 0
    for n in range(12):
        assert status.step is not None
        status = decide(
            spec, status, ObservationAccepted(status.step.seq, maximal(n=n)), now
        ).status
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

    spec = MonitorSpec(task="Finish the build.", everyMinutes=1)
    status = decide(spec, MonitorStatus(), Started(1), NOW).status
    assert status.step is not None
    status = decide(spec, status, ObservationAccepted(status.step.seq, maximal()), NOW).status
    status = decide(spec, status, TimerDue(), NOW + timedelta(minutes=2)).status
    assert status.step is not None
    # One track under a key not seen before, and the authority restated as recorded.
    first = maximal()
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

    spec = MonitorSpec(task="Finish the build.", everyMinutes=1)
    status = decide(spec, MonitorStatus(), Started(1), NOW).status
    assert status.step is not None
    first = maximal()
    status = decide(spec, status, ObservationAccepted(status.step.seq, first), NOW).status
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
