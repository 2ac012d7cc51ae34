"""The report formatter (goalkeeper.core.report)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

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
from goalkeeper.core.report import REPORT_MAX, format_report

T0 = datetime(2026, 8, 16, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def track(
    key: str,
    completed: float | None,
    *,
    label: str | None = None,
    status: TrackStatus = TrackStatus.running,
    total: float | None = 27,
    unit: str = "modules",
    at: datetime = T0,
) -> ProgressTrack:
    return ProgressTrack(
        key=key,
        label=label or key.title(),
        status=status,
        completed=completed,
        total=total,
        unit=unit,
        observedAt=at,
    )


def action(text: str, outcome: Outcome | None = None) -> LastAction:
    return LastAction(
        kind=ActionKind.advance,
        action=text,
        outcome=outcome,
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
        "Progress: 21/27 modules",
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
        "Progress: 21/27 modules",
        "Last action: resumed six missing modules (succeeded)",
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
    assert lines[3] == "Progress: 21/27 modules"
    assert lines[-1].startswith("  uuu")
    assert lines[-2] == "Observer notes:"
    assert lines[-3] == "Stopped: " + "m" * 2000


FIXED_PREFIXES = (
    "Monitor:",
    "Goal:",
    "Work:",
    "Progress:",
    "Last action:",
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
        last_action=action("resumed\nWork: running"),
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
    assert lines[3] == "Progress: 21/27 modules" and lines[4] == "Next check: 5 minutes"
    assert lines[5] == "Observer notes:"
