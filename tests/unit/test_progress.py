"""The progress estimator and the track lines built from it (goalkeeper.core.progress)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goalkeeper.core.models import Confidence, ProgressTrack, TrackState, TrackStatus
from goalkeeper.core.progress import (
    ETA_PASSED,
    MAX_SAMPLES,
    MAX_TRACKS,
    describe_track,
    prompt_summary,
    summary_line,
    update_tracks,
)

T0 = datetime(2026, 8, 16, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def obs(
    completed: float | None,
    at: datetime,
    *,
    key: str = "build",
    label: str = "Build",
    status: TrackStatus = TrackStatus.running,
    total: float | None = 27,
    unit: str = "modules",
    source_eta: datetime | None = None,
) -> ProgressTrack:
    return ProgressTrack(
        key=key,
        label=label,
        status=status,
        completed=completed,
        total=total,
        unit=unit,
        sourceEta=source_eta,
        observedAt=at,
    )


def feed(
    values: Sequence[float], *, step: timedelta = HOUR, total: float | None = 100, **kw: object
) -> list[TrackState]:
    """One track observed at T0, T0+step, ... with the given completed values."""
    tracks: list[TrackState] = []
    for i, value in enumerate(values):
        at = T0 + i * step
        tracks = update_tracks(tracks, [obs(value, at, total=total, **kw)], at)  # type: ignore[arg-type]
    return tracks


def only(tracks: list[TrackState]) -> TrackState:
    assert len(tracks) == 1
    return tracks[0]


# --- the estimator -----------------------------------------------------------------------


def test_window_keeps_last_eight_intervals() -> None:
    # Increments 1..9 per hour: ten samples, nine intervals. Only the last eight (2..9) count.
    values = [0, 1, 3, 6, 10, 15, 21, 28, 36, 45]
    track = only(feed(values, total=63))
    assert len(track.samples) == MAX_SAMPLES == 9
    assert [s.completed for s in track.samples] == values[1:]
    est = track.estimate
    assert est is not None
    assert est.intervals == 8
    assert est.ratePer == "hour"
    assert (est.rateLow, est.rateHigh) == (2, 9)  # 1/hour would mean the window is ignored
    # 18 remaining from the last sample (T0+9h): 18/9 = 2h, 18/2 = 9h.
    assert est.etaEarliest == T0 + 9 * HOUR + 2 * HOUR
    assert est.etaLatest == T0 + 9 * HOUR + 9 * HOUR
    assert est.confidence is Confidence.low  # 9 > 2 x 2: widely varying


def test_rate_range_and_eta_range_by_hand() -> None:
    # 0 -> 10 -> 30 per hour: rates 10/h and 20/h; 70 left after T0+2h.
    track = only(feed([0, 10, 30], total=100))
    est = track.estimate
    assert est is not None
    assert (est.rateLow, est.rateHigh, est.ratePer) == (10, 20, "hour")
    assert est.etaEarliest == T0 + 2 * HOUR + timedelta(hours=3.5)  # 70 / 20
    assert est.etaLatest == T0 + 2 * HOUR + timedelta(hours=7)  # 70 / 10
    assert est.intervals == 2
    assert est.confidence is Confidence.low
    assert track.etaUnavailable is None


def test_rate_per_minute_when_fast() -> None:
    # 120 per hour = 2 per minute.
    track = only(feed([0, 120, 240], total=1000))
    est = track.estimate
    assert est is not None
    assert (est.rateLow, est.rateHigh, est.ratePer) == (2, 2, "minute")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0, 10, 20], Confidence.low),  # two intervals
        ([0, 10, 22, 37], Confidence.medium),  # 10, 12, 15
        ([0, 10, 20, 32, 43, 53], Confidence.high),  # 10, 10, 12, 11, 10
        ([0, 10, 20, 36, 46, 56], Confidence.medium),  # 16 > 1.5 x 10
        ([0, 10, 10, 20, 30, 40, 50], Confidence.low),  # a zero interval in the window
    ],
)
def test_confidence_rule(values: list[float], expected: Confidence) -> None:
    est = only(feed(values, total=1000)).estimate
    assert est is not None
    assert est.confidence is expected


def test_zero_rate_in_window_leaves_latest_open() -> None:
    # 0 -> 10 -> 10 -> 20: rates 10, 0, 10; the last interval moved, so an ETA exists,
    # but a stalled interval means no upper bound.
    track = only(feed([0, 10, 10, 20], total=100))
    est = track.estimate
    assert est is not None
    assert est.rateLow == 0
    assert est.etaEarliest == T0 + 3 * HOUR + 8 * HOUR
    assert est.etaLatest is None
    assert "no upper bound" in describe_track(track, T0 + 3 * HOUR)


def test_reset_restarts_only_that_track() -> None:
    tracks: list[TrackState] = []
    for i in range(4):
        at = T0 + i * HOUR
        tracks = update_tracks(
            tracks,
            [obs(10 * i, at, key="a", label="A"), obs(5 * i, at, key="b", label="B")],
            at,
        )
    at = T0 + 4 * HOUR
    tracks = update_tracks(
        tracks, [obs(2, at, key="a", label="A"), obs(20, at, key="b", label="B")], at
    )
    a, b = tracks
    assert [s.completed for s in a.samples] == [2]  # counter went down: restarted
    assert a.estimate is None
    assert a.etaUnavailable == "no rate yet, needs two samples"
    assert [s.completed for s in b.samples] == [0, 5, 10, 15, 20]
    assert b.estimate is not None
    assert b.estimate.intervals == 4


@pytest.mark.parametrize("change", [{"total": 50}, {"unit": "files"}, {"total": None}])
def test_total_or_unit_change_is_a_reset(change: dict[str, object]) -> None:
    tracks = feed([0, 10, 20], total=27)
    at = T0 + 3 * HOUR
    fields: dict[str, object] = {"total": 27, "unit": "modules"} | change
    tracks = update_tracks(tracks, [obs(21, at, **fields)], at)  # type: ignore[arg-type]
    track = only(tracks)
    assert [s.completed for s in track.samples] == [21]
    assert track.estimate is None


def test_stale_sample_is_ignored() -> None:
    tracks = feed([0, 10, 20])
    before = only(tracks)
    last = T0 + 2 * HOUR
    earlier = last - timedelta(minutes=5)
    again = update_tracks(
        tracks, [obs(25, earlier, total=100, status=TrackStatus.blocked)], last + HOUR
    )
    assert only(again) == before


def test_a_status_at_the_same_observed_time_is_taken_and_the_value_kept() -> None:
    tracks = feed([0, 10, 20])
    before = only(tracks)
    last = T0 + 2 * HOUR
    restated = obs(
        25,
        last,
        total=100,
        status=TrackStatus.blocked,
        label="Build (quota)",
        source_eta=T0 + 9 * HOUR,
    )
    track = only(update_tracks(tracks, [restated], last + HOUR))
    assert (track.status, track.label, track.sourceEta) == (
        TrackStatus.blocked,
        "Build (quota)",
        T0 + 9 * HOUR,
    )
    # A rate needs time to pass: the value, samples and rate stay those of `last`.
    assert (track.completed, track.observedAt, track.samples) == (20, last, before.samples)
    assert track.estimate is not None and before.estimate is not None
    assert (track.estimate.rateLow, track.estimate.rateHigh) == (10, 10)
    assert track.estimate.etaEarliest is None
    assert track.etaUnavailable == "track is blocked"
    assert describe_track(track, last + HOUR).startswith("Build (quota): 20/100 modules; blocked")
    # Back to running at a later time, the samples go on from where they were.
    later = last + HOUR
    track = only(update_tracks([track], [obs(30, later, total=100)], later))
    assert [s.completed for s in track.samples] == [0, 10, 20, 30]
    assert track.status is TrackStatus.running


def test_a_stale_track_seen_again_at_its_old_time_is_no_longer_stale() -> None:
    tracks = update_tracks([], [obs(5, T0, key="a"), obs(7, T0, key="b")], T0)
    tracks = update_tracks(tracks, [obs(6, T0 + HOUR, key="a")], T0 + HOUR)
    assert tracks[1].stale
    failed = obs(7, T0, key="b", status=TrackStatus.failed)
    at = T0 + 2 * HOUR
    tracks = update_tracks(tracks, [obs(7, at, key="a"), failed], at)
    assert (tracks[1].status, tracks[1].stale) == (TrackStatus.failed, False)
    assert "stale" not in describe_track(tracks[1], at)


def test_sample_from_the_future_is_clamped_to_now() -> None:
    now = T0 + HOUR
    tracks = update_tracks([], [obs(1, now + 10 * HOUR)], now)
    assert only(tracks).observedAt == now
    # A real later sample still counts.
    later = now + HOUR
    tracks = update_tracks(tracks, [obs(2, later)], later)
    assert len(only(tracks).samples) == 2


@pytest.mark.parametrize(
    ("status", "reason"),
    [(TrackStatus.paused, "track is paused"), (TrackStatus.blocked, "track is blocked")],
)
def test_paused_or_blocked_has_no_eta(status: TrackStatus, reason: str) -> None:
    tracks = feed([0, 10, 20])
    at = T0 + 3 * HOUR
    track = only(update_tracks(tracks, [obs(30, at, total=100, status=status)], at))
    assert track.estimate is not None  # the rate range is still a fact
    assert track.estimate.etaEarliest is None
    assert track.estimate.etaLatest is None
    assert track.etaUnavailable == reason
    line = describe_track(track, at)
    assert f"ETA unavailable: {reason}" in line
    assert "ETA 20" not in line


def test_missing_track_stays_stale_until_explicit_terminal() -> None:
    at1, at2, at3, at4 = (T0 + i * HOUR for i in range(4))
    tracks = update_tracks([], [obs(1, at1, key="a"), obs(5, at1, key="b")], at1)
    tracks = update_tracks(tracks, [obs(2, at2, key="a")], at2)
    a, b = tracks
    assert b.key == "b"
    assert b.stale is True
    assert b.status is TrackStatus.running  # not complete
    assert b.completed == 5
    assert "stale" in describe_track(b, at2)
    assert a.stale is False

    tracks = update_tracks(tracks, None, at3)  # no progress at all: every track goes stale
    assert all(t.stale for t in tracks)

    done = obs(27, at4, key="b", status=TrackStatus.complete)
    tracks = update_tracks(tracks, [done], at4)
    b = tracks[1]
    assert (b.status, b.stale) == (TrackStatus.complete, False)
    tracks = update_tracks(tracks, [], at4 + HOUR)
    assert tracks[1].status is TrackStatus.complete
    assert tracks[1].stale is False  # an explicit terminal state is final, not stale
    assert tracks[0].stale is True


def test_explicit_unknown_ends_staleness() -> None:
    tracks = update_tracks([], [obs(1, T0, key="a")], T0)
    tracks = update_tracks(tracks, None, T0 + HOUR)
    assert tracks[0].stale
    gone = obs(None, T0 + 2 * HOUR, key="a", status=TrackStatus.unknown)
    tracks = update_tracks(tracks, [gone], T0 + 2 * HOUR)
    assert (tracks[0].status, tracks[0].stale) == (TrackStatus.unknown, False)
    assert update_tracks(tracks, None, T0 + 3 * HOUR)[0].stale is False


def test_first_seen_order_is_kept() -> None:
    tracks = update_tracks([], [obs(1, T0, key="b"), obs(1, T0, key="a")], T0)
    at = T0 + HOUR
    tracks = update_tracks(tracks, [obs(1, at, key="c"), obs(2, at, key="a")], at)
    assert [t.key for t in tracks] == ["b", "a", "c"]


def test_track_count_is_bounded() -> None:
    first = [obs(1, T0, key=f"old-{i}") for i in range(MAX_TRACKS)]
    tracks = update_tracks([], first, T0)
    at = T0 + HOUR
    tracks = update_tracks(tracks, [obs(1, at, key=f"new-{i}") for i in range(10)], at)
    assert len(tracks) == MAX_TRACKS
    assert [t.key for t in tracks[-10:]] == [f"new-{i}" for i in range(10)]


@pytest.mark.parametrize(
    ("values", "total", "reason"),
    [
        ([5, 9], None, "no total reported"),
        ([5, 9, 9], 27, "no progress since last check"),
        ([5], 27, "no rate yet, needs two samples"),
        ([5, None], 27, "no completed value reported"),
        ([5, 27], 27, "total reached"),
    ],
)
def test_eta_unavailable_reasons(values: list[float], total: float | None, reason: str) -> None:
    track = only(feed(values, total=total))
    assert track.etaUnavailable == reason
    assert track.estimate is None or track.estimate.etaEarliest is None
    assert describe_track(track, T0 + 5 * HOUR).endswith(f"ETA unavailable: {reason}")


# --- lines -------------------------------------------------------------------------------


def test_describe_running_track() -> None:
    track = only(feed([0, 10, 30], total=100, unit="rows"))
    line = describe_track(track, T0 + 2 * HOUR)
    assert line == (
        "Build: 30/100 rows; +20 since last check; rate 10\u201320 rows/hour; "
        "ETA 2026-08-16 15:30\u201319:00 UTC (in 3h 30m\u20137h, low confidence)"
    )


def test_absolute_value_before_delta() -> None:
    line = describe_track(only(feed([18, 21], total=27)), T0 + HOUR)
    assert line.index("21/27 modules") < line.index("+3 since last check")


@pytest.mark.parametrize("status", [TrackStatus.failed, TrackStatus.blocked, TrackStatus.idle])
def test_failed_blocked_idle_shown_before_rate_details(status: TrackStatus) -> None:
    tracks = feed([0, 10, 20])
    at = T0 + 3 * HOUR
    track = only(update_tracks(tracks, [obs(25, at, total=100, status=status)], at))
    line = describe_track(track, at)
    assert line.index(status.value) < line.index("rate ")
    assert line.index(status.value) < line.index("since last check")


def test_eta_passed_never_counts_down_negative() -> None:
    track = only(feed([0, 10, 30], total=100))
    assert track.estimate is not None and track.estimate.etaLatest is not None
    after = track.estimate.etaLatest + timedelta(minutes=1)
    line = describe_track(track, after)
    assert ETA_PASSED in line
    assert not re.search(r"(?<![\w-])-\d", line)
    # Between earliest and latest: a bounded countdown, never negative.
    middle = describe_track(track, T0 + 8 * HOUR)
    assert "within 1h" in middle
    # A new sample brings a fresh estimate.
    at = after + HOUR
    fresh = only(update_tracks([track], [obs(90, at, total=100)], at))
    assert ETA_PASSED not in describe_track(fresh, at)


def test_source_eta_is_labelled() -> None:
    source = T0 + 5 * HOUR
    track = only(update_tracks([], [obs(3, T0, source_eta=source)], T0))
    line = describe_track(track, T0 + HOUR)
    assert "source ETA 2026-08-16 15:00 UTC (in 4h)" in line
    assert "ETA unavailable" not in line
    passed = describe_track(track, source + HOUR)
    assert "source ETA 2026-08-16 15:00 UTC passed; awaiting next check" in passed
    assert not re.search(r"(?<![\w-])-\d", passed)


def test_summary_line() -> None:
    assert summary_line([]) == ""
    one = update_tracks([], [obs(21, T0)], T0)
    assert summary_line(one) == "21/27 modules"
    many = update_tracks(
        [], [obs(21, T0), obs(2, T0, key="b", total=4, unit="shards"), obs(1, T0, key="c")], T0
    )
    assert summary_line(many) == "21/27 modules (+2 tracks)"
    # The first track gone stale: the first fresh one leads.
    later = T0 + HOUR
    many = update_tracks(many, [obs(3, later, key="b", total=4, unit="shards")], later)
    assert summary_line(many) == "3/4 shards (+2 tracks)"
    huge = update_tracks([], [obs(1e15, T0, total=1e15, unit="x" * 40, label="L" * 200)], T0)
    assert len(summary_line(huge)) <= 200


def test_prompt_summary_one_line_per_track_and_bounded() -> None:
    assert prompt_summary([], T0) == ""
    two = update_tracks([], [obs(1, T0, key="a", label="A"), obs(2, T0, key="b", label="B")], T0)
    lines = prompt_summary(two, T0).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("- A: 1/27 modules")
    many = update_tracks(
        [], [obs(i, T0, key=f"t{i}", label="T" * 150 + str(i)) for i in range(MAX_TRACKS)], T0
    )
    text = prompt_summary(many, T0)
    assert len(text) <= 4000
    assert re.search(r"\u2026 \d+ more tracks omitted$", text)


# --- property ----------------------------------------------------------------------------

_NEGATIVE = re.compile(r"(?<![\w-])-\d")

step = st.tuples(
    st.integers(min_value=-60, max_value=7200),  # seconds after the previous sample
    st.one_of(st.none(), st.floats(min_value=0, max_value=1e6, allow_nan=False)),
    st.sampled_from([None, 1e6, 500.0]),
    st.sampled_from(list(TrackStatus)),
    st.integers(min_value=0, max_value=600),  # processing lag
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=30), st.integers(min_value=0, max_value=10**7))
def test_property_bounded_and_never_negative(
    steps: list[tuple[int, float | None, float | None, TrackStatus, int]], probe: int
) -> None:
    tracks: list[TrackState] = []
    at = T0
    for gap, completed, total, status, lag in steps:
        at = at + timedelta(seconds=gap)
        now = at + timedelta(seconds=lag)
        observed = [obs(completed, at, total=total, status=status)]
        tracks = update_tracks(tracks, observed, now)
        track = only(tracks)
        assert len(track.samples) <= MAX_SAMPLES
        times = [s.at for s in track.samples]
        assert times == sorted(times) and len(set(times)) == len(times)
        est = track.estimate
        if est is not None:
            assert 1 <= est.intervals <= 8
            assert 0 <= est.rateLow <= est.rateHigh
        if est is not None and est.etaEarliest is not None:
            # Projected from the latest sample: never before it, and so never before `now`
            # when the check runs at the sample's own time.
            assert est.etaEarliest >= track.samples[-1].at
            assert est.etaLatest is None or est.etaLatest >= est.etaEarliest
        assert (est is not None and est.etaEarliest is not None) != (
            track.etaUnavailable is not None
        )
        for when in (now, now + timedelta(seconds=probe)):
            line = describe_track(track, when)
            assert not _NEGATIVE.search(line), line
        assert not _NEGATIVE.search(summary_line(tracks))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 0, 60, 3600]),  # seconds after the last observed time
            st.integers(min_value=0, max_value=100),
            st.sampled_from(list(TrackStatus)),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_property_the_latest_status_is_shown_whether_or_not_the_time_moved(
    steps: list[tuple[int, int, TrackStatus]],
) -> None:
    tracks: list[TrackState] = []
    at = T0
    value_at_its_time = None
    for gap, completed, status in steps:
        at += timedelta(seconds=gap)
        if gap or value_at_its_time is None:
            value_at_its_time = completed
        tracks = update_tracks(tracks, [obs(completed, at, total=100, status=status)], at + HOUR)
        track = only(tracks)
        assert (track.status, track.stale, track.observedAt) == (status, False, at)
        assert track.completed == value_at_its_time
        line = describe_track(track, at + HOUR)
        assert status is TrackStatus.running or f"; {status.value}" in line
        assert (track.estimate is not None and track.estimate.etaEarliest is not None) != (
            track.etaUnavailable is not None
        )
