"""The report sent after every accepted observation: plain lines, at most 4,000 characters.

The fixed lines (Monitor, Goal, Work, Progress, Last action, Next action, Next check,
Stopped) come from the monitor's status, each on one line. Monitor state, goal state and
target work state are always separate lines, and the work state is only ever what the
caller passes (the monitor being active is no evidence that the target works).
Independent progress tracks are never combined into one number.

The observe step's own text follows under `Observer notes:`, every line of it indented,
so nothing the model writes can pose as one of the fixed lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from goalkeeper.core.models import (
    GoalState,
    LastAction,
    MonitorState,
    StopInfo,
    TrackState,
    WorkState,
)
from goalkeeper.core.progress import (
    REASON_NEED_SAMPLES,
    by_priority,
    describe_track,
    fit_track_lines,
    track_parts,
)

REPORT_MAX = 4000
# Room kept for the observer's notes before tracks are omitted; beyond this the notes are
# truncated instead, so long notes cannot push every track out.
NOTES_RESERVE = 1000
NOTES_HEADER = "Observer notes:"
NOTES_INDENT = "  "
_TRACK_INDENT = "  "
_ELLIPSIS = "\u2026"


def format_report(
    *,
    monitor: MonitorState,
    goal: GoalState,
    work: WorkState,
    tracks: Sequence[TrackState],
    notes: str,
    last_action: LastAction | None,
    next_action: str | None,
    next_check_minutes: int | None,
    stop: StopInfo | None,
    now: datetime,
) -> str:
    """Build the report lines in their fixed order, bounded to REPORT_MAX characters.

    `notes` is the observation's free text: untrusted, shown only as indented notes.
    """
    head = [f"Monitor: {monitor.value}", f"Goal: {goal.value}", f"Work: {work.value}"]
    tail: list[str] = []
    if last_action is not None:
        outcome = f" ({last_action.outcome.value})" if last_action.outcome is not None else ""
        tail.append(f"Last action: {_one_line(last_action.action)}{outcome}")
    if next_action is not None and next_action.strip():
        tail.append(f"Next action: {_one_line(next_action)}")
    if next_check_minutes is not None:
        unit = "minute" if next_check_minutes == 1 else "minutes"
        tail.append(f"Next check: {next_check_minutes} {unit}")
    if stop is not None:
        tail.append(f"Stopped: {_one_line(stop.message)}")
    block = notes_block(notes)

    fixed = "\n".join(head + tail)
    notes_cost = min(len(block), NOTES_RESERVE) + 1 if block else 0
    progress = _progress_block(tracks, now, REPORT_MAX - len(fixed) - 1 - notes_cost)

    lines = head + ([progress] if progress else []) + tail
    body = "\n".join(lines)
    if block:
        room = REPORT_MAX - len(body) - 1
        if room > len(NOTES_HEADER) + len(NOTES_INDENT) + 1:
            body += "\n" + _clip(block, room)
    return _clip(body, REPORT_MAX)


def notes_block(notes: str) -> str:
    """The observer's text as a marked, indented block; empty when there is none.

    `splitlines` breaks on every line boundary a reader might honour (CR, form feed,
    U+2028 ...), and the block is joined with plain newlines, so each piece of the text
    lands on a line of its own behind the indent.
    """
    lines = [line.rstrip() for line in notes.strip().splitlines()]
    if not any(lines):
        return ""
    body = [NOTES_INDENT + line if line else "" for line in lines]
    return "\n".join([NOTES_HEADER, *body])


def _progress_block(tracks: Sequence[TrackState], now: datetime, budget: int) -> str:
    if not tracks:
        return ""
    if len(tracks) == 1:
        return "Progress: " + _single_track(tracks[0], now)
    lines = [_TRACK_INDENT + describe_track(t, now) for t in tracks]
    full = "\n".join(["Progress:", *lines])
    if len(full) <= budget:
        return full
    header = "Progress:"
    listed = fit_track_lines(
        by_priority(tracks), now, max(budget - len(header) - 1, 0), prefix=_TRACK_INDENT
    )
    return f"{header}\n{listed}"


def _single_track(track: TrackState, now: datetime) -> str:
    # One track is shown as its value, e.g. `21/27 modules`, followed by whatever the
    # estimator knows. On a track's first sample, "need two samples" says nothing the
    # reader cannot see, so the line stays the bare value.
    parts = [
        part
        for part in track_parts(track, now)
        if part != f"ETA unavailable: {REASON_NEED_SAMPLES}"
    ]
    return "; ".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + _ELLIPSIS
