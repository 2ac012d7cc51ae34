"""The report sent after every accepted observation: plain lines, at most 4,000 characters.

The fixed lines (Monitor, Goal, Work, Checked, Progress, Last action, Last action outcome,
Next action, Next check, Stopped) come from the monitor's status, each on one line, in the
spec's forms: `Last action: resumed six missing modules` carries the action alone, and a
failed, blocked or unknown outcome follows on a line of its own. Monitor state, goal state and
target work state are always separate lines, and the work state is only ever what the
caller passes (the monitor being active is no evidence that the target works).
Independent progress tracks are never combined into one number; a track without a valid
estimate says why its ETA is unavailable. Every time is shown in UTC, whatever offset the
caller's times carry.

The observe step's own text follows under `Observer notes:`, every line of it indented,
so nothing the model writes can pose as one of the fixed lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from goalkeeper.core.models import (
    ActionOutcome,
    GoalState,
    LastAction,
    MonitorState,
    StopInfo,
    StopReason,
    TrackState,
    WorkState,
)
from goalkeeper.core.progress import (
    as_utc,
    by_priority,
    clip,
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
AUTHORITY_HEADER = "Authority (read from the task):"
# The first report of a spec generation shows what was understood; this bounds it.
AUTHORITY_MAX = 1200
# A success is what the state lines after it show; a failure, a block or an unknown outcome
# (the step ended without a result) is news to the reader.
OUTCOMES_SHOWN = frozenset({ActionOutcome.failed, ActionOutcome.blocked, ActionOutcome.unknown})
OUTCOME_EVIDENCE_MAX = 300
_TRACK_INDENT = "  "


# Control characters (a terminal escape among them) and bidirectional overrides, which
# reorder what a reader sees, that a model or a target may have put in its words are shown
# as one visible mark, never sent to a person's terminal or page.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    return _CONTROL.sub("\ufffd", text)


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
    restarted_after: StopInfo | None = None,
    woken_by: str = "",
    wakes_on: Sequence[str] = (),
    authority: Sequence[str] = (),
) -> str:
    """Build the report lines in their fixed order, bounded to REPORT_MAX characters.

    `notes` is the observation's free text: untrusted, shown only as indented notes.
    `authority` lines (the first report of a spec generation) show what goalkeeper read
    from the task, indented under their own header.
    """
    head = [f"Monitor: {monitor.value}", f"Goal: {goal.value}", f"Work: {work.value}"]
    if restarted_after is not None:
        reason = restarted_after.reason.value
        head.insert(1, f"Restarted: a spec edit began a new run after a stop ({reason})")
    if woken_by:
        head.append(f"Checked: woken by {_one_line(woken_by)}")
    tail: list[str] = []
    if last_action is not None:
        tail.append(f"Last action: {_one_line(last_action.action)}")
        outcome = last_action.outcome
        if outcome is not None and outcome in OUTCOMES_SHOWN:
            tail.append(_outcome_line(outcome, last_action.evidence))
    if next_action is not None and next_action.strip():
        tail.append(f"Next action: {_one_line(next_action)}")
    if next_check_minutes is not None:
        unit = "minute" if next_check_minutes == 1 else "minutes"
        sooner = f", or sooner on a change of {', '.join(wakes_on)}" if wakes_on else ""
        tail.append(f"Next check: {next_check_minutes} {unit}{_one_line(sooner)[:400]}")
    if stop is not None:
        tail.append(f"Stopped: {_one_line(stop.message)}")
    if authority:
        listed = "\n".join(NOTES_INDENT + _one_line(line) for line in authority)
        tail.append(clip(f"{AUTHORITY_HEADER}\n{listed}", AUTHORITY_MAX))
    block = notes_block(notes)

    fixed = "\n".join(head + tail)
    notes_cost = min(len(block), NOTES_RESERVE) + 1 if block else 0
    progress = _progress_block(tracks, now, REPORT_MAX - len(fixed) - 1 - notes_cost)

    lines = head + ([progress] if progress else []) + tail
    body = "\n".join(lines)
    if block:
        room = REPORT_MAX - len(body) - 1
        if room > len(NOTES_HEADER) + len(NOTES_INDENT) + 1:
            body += "\n" + clip(block, room)
    return clip(body, REPORT_MAX)


def report_summary(
    *,
    check: int,
    goal: GoalState,
    work: WorkState,
    progress: str,
    next_check: datetime | None,
    stop: StopInfo | None,
) -> str:
    """The report in one line, for `kubectl get events`:
    `check 3: goal incomplete, work running, 21/27 modules, next 15:30Z` (UTC)."""
    parts = [f"check {check}: goal {goal.value}", f"work {work.value}"]
    if progress.strip():
        parts.append(_one_line(progress)[:80])
    if next_check is not None:
        parts.append(f"next {as_utc(next_check).strftime('%H:%MZ')}")
    if stop is not None:
        parts.append(f"stopped ({stop.reason.value})")
    return ", ".join(parts)


# What the user can do after each kind of stop; a spec edit starts a new run.
_RESTART = "then edit the Monitor's spec to start a new run (or delete it to cancel)."
STOP_HINTS = {
    StopReason.goalComplete: "Nothing is left to do; delete the Monitor when its history is no "
    "longer needed.",
    StopReason.materialBlocker: f"Remove the blocker the message names, {_RESTART}",
    StopReason.blocked: f"Fix what the message names (for a missing account: kubectl apply "
    f"-f config/rbac/steps.yaml in this namespace), {_RESTART}",
    StopReason.outsideAuthority: "If the action should be allowed, say so in spec.task, "
    + _RESTART,
    StopReason.protectedContractChange: "If that contract may change, say so in spec.task, "
    + _RESTART,
    StopReason.credentialWithoutAuthority: "Grant the credential in spec.task if intended, "
    + _RESTART,
    StopReason.paidActionNotApproved: "Record the approval and a cost ceiling in spec.task, "
    + _RESTART,
    StopReason.invalidCheckpoint: f"Repair the target's checkpoint, {_RESTART}",
    StopReason.userRequested: f"Stopped as asked; {_RESTART}",
    StopReason.repairRepeated: f"The repair did not fix the failure: investigate it, {_RESTART}",
    StopReason.safetyLimit: "Raise spec.maxChecks to continue (the edit starts a new run).",
    StopReason.cancelled: "The Monitor was deleted.",
    StopReason.failed: f"A Job the stop rule names failed: read why in its pods, {_RESTART}",
}


def stop_hint(reason: StopReason) -> str:
    return STOP_HINTS[reason]


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
        # One track is shown as its value, e.g. `21/27 modules`, then what the estimator knows.
        return "Progress: " + "; ".join(track_parts(tracks[0], now))
    lines = [_TRACK_INDENT + describe_track(t, now) for t in tracks]
    full = "\n".join(["Progress:", *lines])
    if len(full) <= budget:
        return full
    header = "Progress:"
    listed = fit_track_lines(
        by_priority(tracks), now, max(budget - len(header) - 1, 0), prefix=_TRACK_INDENT
    )
    return f"{header}\n{listed}"


def _outcome_line(outcome: ActionOutcome, evidence: str) -> str:
    """`Last action outcome: failed: <evidence>`, the evidence on the one line, shortened."""
    shown = clip(_one_line(evidence), OUTCOME_EVIDENCE_MAX)
    return f"Last action outcome: {outcome.value}" + (f": {shown}" if shown else "")


def _one_line(text: str) -> str:
    return " ".join(text.split())
