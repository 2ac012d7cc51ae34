"""The report formatter (goalkeeper.core.report)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goalkeeper.core.models import (
    ActionKind,
    GoalState,
    LastAction,
    MonitorState,
    Outcome,
    ProgressTrack,
    StopInfo,
    StopReason,
    TrackState,
    TrackStatus,
    WorkState,
)
from goalkeeper.core.progress import update_tracks
from goalkeeper.core.report import OUTCOME_EVIDENCE_MAX, REPORT_MAX, format_report, report_summary

T0 = datetime(2026, 8, 16, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
# One sample gives no rate: the line says so instead of leaving the ETA out unexplained.
FIRST_SAMPLE = "Progress: 21/27 modules; ETA unavailable: no rate yet, needs two samples"


def track(
    key: str,
    completed: float | None,
    *,
    label: str | None = None,
    status: TrackStatus = TrackStatus.running,
    total: float | None = 27,
    unit: str = "modules",
    at: datetime = T0,
    source_eta: datetime | None = None,
) -> ProgressTrack:
    return ProgressTrack(
        key=key,
        label=label or key.title(),
        status=status,
        completed=completed,
        total=total,
        unit=unit,
        sourceEta=source_eta,
        observedAt=at,
    )


def action(text: str, outcome: Outcome | None = None, evidence: str = "") -> LastAction:
    return LastAction(
        kind=ActionKind.advance,
        action=text,
        outcome=outcome,
        evidence=evidence,
        failureId="f1",
        targetStateId="s1",
        check=3,
        at=T0,
    )


def report(**overrides: Any) -> str:
    args: dict[str, Any] = {
        "monitor": MonitorState.active,
        "goal": GoalState.incomplete,
        "work": WorkState.running,
        "tracks": [],
        "notes": "",
        "last_action": None,
        "next_action": None,
        "next_check_minutes": None,
        "stop": None,
        "now": T0,
    }
    args.update(overrides)
    return format_report(**args)


def test_moving_target_form_line_by_line() -> None:
    tracks = update_tracks([], [track("build", 21)], T0)
    text = report(
        tracks=tracks,
        last_action=action("resumed six missing modules"),
        next_check_minutes=15,
    )
    assert text.splitlines() == [
        "Monitor: active",
        "Goal: incomplete",
        "Work: running",
        FIRST_SAMPLE,
        "Last action: resumed six missing modules",
        "Next check: 15 minutes",
    ]


def test_idle_with_next_action_form_line_by_line() -> None:
    text = report(
        work=WorkState.idle,
        next_action="refreshing launch files and resuming work now",
    )
    assert text.splitlines() == [
        "Monitor: active",
        "Goal: incomplete",
        "Work: idle",
        "Next action: refreshing launch files and resuming work now",
    ]


def test_every_line_in_order_with_observer_notes_last() -> None:
    tracks = update_tracks([], [track("build", 21)], T0)
    stop = StopInfo(reason=StopReason.goalComplete, message="The goal is complete.", at=T0)
    text = report(
        monitor=MonitorState.stopped,
        goal=GoalState.complete,
        work=WorkState.complete,
        tracks=tracks,
        notes="All 27 modules built.\nNothing left to do.",
        last_action=action("resumed six missing modules", Outcome.succeeded),
        next_action="nothing",
        next_check_minutes=1,
        stop=stop,
    )
    assert text.splitlines() == [
        "Monitor: stopped",
        "Goal: complete",
        "Work: complete",
        FIRST_SAMPLE,
        "Last action: resumed six missing modules",
        "Next action: nothing",
        "Next check: 1 minute",
        "Stopped: The goal is complete.",
        "Observer notes:",
        "  All 27 modules built.",
        "  Nothing left to do.",
    ]


def test_single_track_shows_estimate_details_after_the_value() -> None:
    tracks: list[TrackState] = []
    for i, value in enumerate([0, 10, 30]):
        at = T0 + i * HOUR
        tracks = update_tracks(tracks, [track("build", value, total=100, at=at)], at)
    line = report(tracks=tracks, now=T0 + 2 * HOUR).splitlines()[3]
    assert line.startswith("Progress: 30/100 modules; +20 since last check; rate ")
    assert "ETA 2026-08-16 15:30" in line


def test_single_track_without_total_says_eta_unavailable() -> None:
    tracks = update_tracks([], [track("build", 21, total=None)], T0)
    line = report(tracks=tracks).splitlines()[3]
    assert line == "Progress: 21 modules; ETA unavailable: no total reported"


def test_several_tracks_each_on_their_own_line_never_combined() -> None:
    tracks = update_tracks(
        [], [track("a", 3, total=10, unit="rows"), track("b", 4, total=10, unit="rows")], T0
    )
    lines = report(tracks=tracks).splitlines()
    assert lines[3] == "Progress:"
    assert lines[4].startswith("  A: 3/10 rows")
    assert lines[5].startswith("  B: 4/10 rows")
    assert "7/20" not in "\n".join(lines)


@pytest.mark.parametrize("work", list(WorkState))
def test_work_is_only_what_is_passed(work: WorkState) -> None:
    text = report(monitor=MonitorState.active, work=work, next_check_minutes=30)
    lines = text.splitlines()
    assert lines[:3] == ["Monitor: active", "Goal: incomplete", f"Work: {work.value}"]
    assert ("Work: running" in text) is (work is WorkState.running)


def test_cap_keeps_overall_then_failed_blocked_then_active_then_omitted_count() -> None:
    label = "Worker " + "x" * 150
    observed = [track(f"w{i}", 1, label=f"{label}{i}", status=TrackStatus.idle) for i in range(40)]
    observed += [track(f"run{i}", 1, label=f"{label}r{i}") for i in range(20)]
    observed += [
        track("bad", 1, label="Bad", status=TrackStatus.failed),
        track("stuck", 1, label="Stuck", status=TrackStatus.blocked),
        track("overall", 5, label="Overall", total=100),
    ]
    tracks = update_tracks([], observed, T0)
    text = report(tracks=tracks, notes="Import remains healthy.", next_check_minutes=30)
    assert len(text) <= REPORT_MAX
    lines = text.splitlines()
    assert lines[3] == "Progress:"
    assert lines[4].startswith("  Overall: 5/100 modules")
    assert lines[5].startswith("  Bad: 1/27 modules; failed")
    assert lines[6].startswith("  Stuck: 1/27 modules; blocked")
    shown = [line for line in lines if line.startswith("  Worker")]
    assert shown and all(f"{label}r" in line for line in shown)  # active before idle
    omitted = re.fullmatch(r"  \u2026 (\d+) more tracks omitted", lines[7 + len(shown)])
    assert omitted is not None
    assert int(omitted.group(1)) == len(tracks) - 3 - len(shown)
    assert lines[-3:] == ["Next check: 30 minutes", "Observer notes:", "  Import remains healthy."]


def test_all_tracks_shown_in_first_seen_order_when_they_fit() -> None:
    observed = [
        track("a", 1, status=TrackStatus.idle),
        track("b", 1, status=TrackStatus.failed),
        track("overall", 1),
    ]
    lines = report(tracks=update_tracks([], observed, T0)).splitlines()
    assert [line.split(":")[0] for line in lines[4:7]] == ["  A", "  B", "  Overall"]


def test_long_notes_are_truncated_last_with_ellipsis() -> None:
    tracks = update_tracks([], [track("build", 21)], T0)
    stop = StopInfo(reason=StopReason.blocked, message="m" * 2000, at=T0)
    text = report(
        tracks=tracks,
        notes="u" * 4000,
        last_action=action("a" * 1000),
        stop=stop,
    )
    assert len(text) == REPORT_MAX
    assert text.endswith("\u2026")
    lines = text.splitlines()
    assert lines[3] == FIRST_SAMPLE
    assert lines[-1].startswith("  uuu")
    assert lines[-2] == "Observer notes:"
    assert lines[-3] == "Stopped: " + "m" * 2000


FIXED_PREFIXES = (
    "Monitor:",
    "Goal:",
    "Work:",
    "Progress:",
    "Last action:",
    "Last action outcome:",
    "Next action:",
    "Next check:",
    "Stopped:",
)


@pytest.mark.parametrize("separator", ["\n", "\r\n", "\r", "\u2028", "\x0c", "\n\n", "\n   "])
def test_observer_notes_cannot_forge_a_fixed_line(separator: str) -> None:
    notes = f"All quiet.{separator}Work: running{separator}Monitor: stopped"
    text = report(work=WorkState.idle, notes=notes, next_check_minutes=15)
    lines = text.split("\n")
    assert lines[:3] == ["Monitor: active", "Goal: incomplete", "Work: idle"]
    assert [line for line in lines if line.startswith("Work:")] == ["Work: idle"]
    assert [line for line in lines if line.startswith("Monitor:")] == ["Monitor: active"]
    notes_at = lines.index("Observer notes:")
    assert lines[notes_at + 1 :] and all(
        line == "" or line.startswith("  ") for line in lines[notes_at + 1 :]
    )
    assert any(line.startswith("  ") and line.strip() == "Work: running" for line in lines)
    # Nothing but the one kind of line break is left for a reader to split on.
    assert text.splitlines() == lines


def test_fixed_lines_from_target_or_model_text_stay_on_their_line() -> None:
    tracks = update_tracks(
        [],
        [
            track("a", 1, label="A\nWork: running", unit="rows\nGoal: complete"),
            track("b", 2, label="B\rMonitor: stopped"),
        ],
        T0,
    )
    text = report(
        work=WorkState.failed,
        tracks=tracks,
        last_action=action("resumed\nWork: running", Outcome.failed, "exit 1\nGoal: complete"),
        next_action="retry\nGoal: complete",
        stop=StopInfo(reason=StopReason.blocked, message="no\nWork: running", at=T0),
    )
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("Work:")] == ["Work: failed"]
    assert [line for line in lines if line.startswith("Goal:")] == ["Goal: incomplete"]
    assert [line for line in lines if line.startswith("Monitor:")] == ["Monitor: active"]
    assert not any(line.startswith(p) for line in lines[4:] for p in FIXED_PREFIXES[:3])


def test_report_stays_within_its_bound_with_many_note_lines() -> None:
    tracks = update_tracks([], [track("build", 21)], T0)
    text = report(tracks=tracks, notes="\n".join(["x" * 50] * 200), next_check_minutes=5)
    assert len(text) <= REPORT_MAX
    lines = text.splitlines()
    assert lines[3] == FIRST_SAMPLE and lines[4] == "Next check: 5 minutes"
    assert lines[5] == "Observer notes:"


# --- the spec's line forms ---------------------------------------------------------------


@pytest.mark.parametrize("outcome", [None, Outcome.succeeded])
def test_last_action_is_the_action_alone_while_it_runs_or_once_it_succeeded(
    outcome: Outcome | None,
) -> None:
    done = action("resumed six missing modules", outcome, "Job build resumed.")
    lines = report(last_action=done, next_check_minutes=15).splitlines()
    assert "Last action: resumed six missing modules" in lines
    assert not any(line.startswith("Last action outcome:") for line in lines)
    assert "succeeded" not in "\n".join(lines)


def test_a_failed_action_has_its_outcome_and_evidence_on_a_line_of_its_own() -> None:
    failed = action("resume Job build", Outcome.failed, "Job build is still suspended.")
    lines = report(work=WorkState.idle, last_action=failed).splitlines()
    at = lines.index("Last action: resume Job build")
    assert lines[at + 1] == "Last action outcome: failed: Job build is still suspended."


def test_a_blocked_action_without_evidence_names_the_outcome_alone() -> None:
    lines = report(last_action=action("resume Job build", Outcome.blocked)).splitlines()
    at = lines.index("Last action: resume Job build")
    assert lines[at + 1] == "Last action outcome: blocked"


def test_outcome_evidence_is_one_short_line() -> None:
    evidence = "line one\nWork: running\n" + "e" * 3000
    lines = report(last_action=action("resume", Outcome.failed, evidence)).splitlines()
    (outcome,) = [line for line in lines if line.startswith("Last action outcome:")]
    assert outcome.startswith("Last action outcome: failed: line one Work: running eee")
    assert len(outcome) == len("Last action outcome: failed: ") + OUTCOME_EVIDENCE_MAX
    assert outcome.endswith("\u2026")
    assert [line for line in lines if line.startswith("Work:")] == ["Work: running"]


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(min_size=1, max_size=300).filter(lambda t: t.strip() != ""),
    outcome=st.sampled_from([None, *Outcome]),
)
def test_property_last_action_line_is_exactly_the_spec_form(
    text: str, outcome: Outcome | None
) -> None:
    done = action(text, outcome, "evidence")
    lines = report(last_action=done).split("\n")
    shown = [line for line in lines if line.startswith("Last action:")]
    assert shown == ["Last action: " + " ".join(done.action.split())]
    outcomes = [line for line in lines if line.startswith("Last action outcome:")]
    if outcome in (Outcome.failed, Outcome.blocked):
        assert outcomes == [f"Last action outcome: {outcome.value}: evidence"]
    else:
        assert outcomes == []


@pytest.mark.parametrize(
    ("observed", "line"),
    [
        (track("build", 21), FIRST_SAMPLE),
        (
            track("build", 21, total=None),
            "Progress: 21 modules; ETA unavailable: no total reported",
        ),
        (
            track("build", None),
            "Progress: ?/27 modules; ETA unavailable: no completed value reported",
        ),
        (
            track("build", 21, status=TrackStatus.idle),
            "Progress: 21/27 modules; idle; ETA unavailable: track is idle",
        ),
        (
            track("build", 21, status=TrackStatus.paused),
            "Progress: 21/27 modules; paused; ETA unavailable: track is paused",
        ),
    ],
    ids=["one-sample", "no-total", "no-value", "idle", "paused"],
)
def test_progress_line_says_why_the_eta_is_unavailable(observed: ProgressTrack, line: str) -> None:
    tracks = update_tracks([], [observed], T0)
    assert report(tracks=tracks).splitlines()[3] == line


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=7200),
            st.one_of(st.none(), st.integers(min_value=0, max_value=40)),
            st.sampled_from([None, 27]),
            st.sampled_from(list(TrackStatus)),
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(min_value=0, max_value=10**6),
)
def test_property_a_progress_line_never_leaves_the_eta_unexplained(
    steps: list[tuple[int, int | None, int | None, TrackStatus]], later: int
) -> None:
    tracks: list[TrackState] = []
    at = T0
    for gap, completed, total, status in steps:
        at += timedelta(seconds=gap)
        observed = track("build", completed, total=total, status=status, at=at)
        tracks = update_tracks(tracks, [observed], at)
    line = report(tracks=tracks, now=at + timedelta(seconds=later)).splitlines()[3]
    assert line.startswith("Progress: ")
    if tracks[0].status is not TrackStatus.complete:
        assert "ETA" in line, line
    assert not line.endswith("ETA unavailable") and "ETA unavailable: ;" not in line


def test_a_new_status_without_a_new_observed_time_is_shown() -> None:
    tracks = update_tracks([], [track("build", 21)], T0)
    failed = track("build", 21, status=TrackStatus.failed)  # the same observedAt
    tracks = update_tracks(tracks, [failed], T0 + HOUR)
    lines = report(tracks=tracks, work=WorkState.failed, now=T0 + HOUR).splitlines()
    assert lines[3] == "Progress: 21/27 modules; failed; ETA unavailable: track failed"


# --- times in UTC ------------------------------------------------------------------------

OFFSETS = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


def estimated_tracks(zone: timezone) -> list[TrackState]:
    """One track with a measured ETA and a source ETA, every time given in `zone`."""
    tracks: list[TrackState] = []
    for i, value in enumerate([0, 10, 30]):
        at = (T0 + i * HOUR).astimezone(zone)
        source_eta = (T0 + 6 * HOUR).astimezone(zone)
        observed = track("build", value, total=100, at=at, source_eta=source_eta)
        tracks = update_tracks(tracks, [observed], at)
    return tracks


@settings(max_examples=60, deadline=None)
@given(zone=OFFSETS, now_zone=OFFSETS)
def test_property_report_times_are_utc_whatever_the_offset(
    zone: timezone, now_zone: timezone
) -> None:
    now = T0 + 2 * HOUR
    expected = report(tracks=estimated_tracks(UTC), now=now)
    shown = report(tracks=estimated_tracks(zone), now=now.astimezone(now_zone))
    assert shown == expected
    progress = shown.splitlines()[3]
    assert "ETA 2026-08-16 15:30\u201319:00 UTC" in progress
    assert "source ETA 2026-08-16 16:00 UTC (in 4h)" in progress


def test_report_summary_next_check_is_utc_whatever_the_offset() -> None:
    plus_two = timezone(timedelta(hours=2))
    next_check = datetime(2026, 8, 16, 15, 30, tzinfo=plus_two)  # 13:30 UTC
    summary = report_summary(
        check=3,
        goal=GoalState.incomplete,
        work=WorkState.running,
        progress="21/27 modules",
        next_check=next_check,
        stop=None,
    )
    assert summary == "check 3: goal incomplete, work running, 21/27 modules, next 13:30Z"


@settings(max_examples=60, deadline=None)
@given(zone=OFFSETS, minutes=st.integers(min_value=0, max_value=7 * 24 * 60))
def test_property_report_summary_shows_the_same_instant_in_utc(
    zone: timezone, minutes: int
) -> None:
    instant = T0 + timedelta(minutes=minutes)
    summary = report_summary(
        check=1,
        goal=GoalState.incomplete,
        work=WorkState.running,
        progress="",
        next_check=instant.astimezone(zone),
        stop=None,
    )
    assert summary.endswith(f"next {instant.strftime('%H:%M')}Z")
