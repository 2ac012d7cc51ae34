"""How much one engine decision costs next to the work around it.

Prints absolute figures and, more usefully, ratios measured in this one run: a decision
against validating the observation it consumes, and a decision's cost as progress tracks
grow. Run from the repository root: `.venv/bin/python -m bench.bench_engine`.
"""

from __future__ import annotations

import timeit
from datetime import UTC, datetime, timedelta

from tests.support.observations import TASK, extraction, observation_dict, track

from goalkeeper.core.engine import (
    AuthorityExtracted,
    ObservationAccepted,
    Started,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    TRACKS_MAX,
    AuthorityExtraction,
    MonitorSpec,
    MonitorStatus,
    Observation,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = MonitorSpec(task=TASK, everyMinutes=15)


def waiting_status(tracks: int) -> tuple[MonitorStatus, Observation]:
    """A monitor with 8 checks of history on `tracks` tracks, and its next observation."""
    status = decide(SPEC, MonitorStatus(), Started(1), T0).status
    # The task is read first; the checks follow once its authority is recorded.
    assert status.step is not None
    found = AuthorityExtraction.model_validate(extraction())
    status = decide(SPEC, status, AuthorityExtracted(status.step.seq, found), T0).status
    body = observation_dict("wait")
    for check in range(8):
        now = T0 + timedelta(minutes=15 * check)
        body["progress"] = [
            track(f"t{i}", completed=check * 3 + i, total=1000, at=now) for i in range(tracks)
        ] or None
        obs = Observation.model_validate(body)
        assert status.step is not None
        status = decide(SPEC, status, ObservationAccepted(status.step.seq, obs), now).status
        status = decide(SPEC, status, TimerDue(), now + timedelta(minutes=15)).status
    later = T0 + timedelta(hours=3)
    body["progress"] = [
        track(f"t{i}", completed=40 + i, total=1000, at=later) for i in range(tracks)
    ] or None
    return status, Observation.model_validate(body)


def per_call(fn: object, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number  # type: ignore[arg-type]


def main() -> None:
    rows = []
    for tracks in (0, 1, 16, TRACKS_MAX):
        status, obs = waiting_status(tracks)
        assert status.step is not None and status.checks == 8, "every check was accepted"
        event = ObservationAccepted(status.step.seq, obs)
        number = 200 if tracks < 100 else 20
        decision = per_call(
            lambda s=status, e=event: decide(SPEC, s, e, T0 + timedelta(hours=3)), number
        )
        raw = obs.model_dump(mode="json")
        validate = per_call(lambda r=raw: Observation.model_validate(r), number)
        rows.append((tracks, decision, validate))
    base = rows[0][1]
    print(
        f"{'tracks':>6} {'decide ms':>10} {'validate ms':>12} {'decide/validate':>16} "
        f"{'decide vs 0 tracks':>19}"
    )
    for tracks, decision, validate in rows:
        print(
            f"{tracks:>6} {decision * 1e3:>10.3f} {validate * 1e3:>12.3f} "
            f"{decision / validate:>16.1f} {decision / base:>19.1f}"
        )


if __name__ == "__main__":
    main()
