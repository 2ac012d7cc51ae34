"""Messages for the notification sinks: which effects of a decision become one, kept in
the status the decision writes. Pure.

A message is recorded in the same status write as the decision that made it, so it is
lost only with that decision; it stays there until every sink that wants it has received
it (the operator records each sink's progress in `status.notices.delivered`), or until
`NOTICES_KEPT` newer ones push it out. Its id is the Monitor's uid and the name of the
event, the same across retries, restarts and re-decisions, so a receiver drops repeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from goalkeeper.core.events import Decision, Effect, EmitReport, Notify, StopMonitor
from goalkeeper.core.models import (
    NOTICE_TEXT_MAX,
    NOTICES_KEPT,
    MonitorStatus,
    Notice,
    NoticeKind,
    Notices,
)

APPROVAL_REQUESTED, HEALTH = "ApprovalRequested", "Health"


@dataclass(frozen=True)
class SinkWants:
    """One sink that takes this Monitor's messages: its key in `delivered`, and what it
    takes."""

    key: str
    kinds: frozenset[NoticeKind]


def run_prefix(status: MonitorStatus) -> str:
    """What names the events of the current run apart from an earlier run's (a spec edit
    after a stop counts checks anew)."""
    runs = len(status.previousRuns)
    return f"run{runs + 1}-" if runs else ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _notices_of(effects: Sequence[Effect], run: str) -> list[tuple[str, NoticeKind, str, str]]:
    """(event name, kind, summary, text) of each effect a person is told of."""
    reports = [e for e in effects if isinstance(e, EmitReport)]
    found: list[tuple[str, NoticeKind, str, str]] = []
    for effect in effects:
        match effect:
            case StopMonitor(reason, message, hint):
                text = message + (f" What to do: {hint}" if hint else "")
                if reports:
                    text += f"\n\nReport:\n{reports[-1].text}"
                found.append((f"{run}stopped", NoticeKind.stop, f"Stopped: {reason}", text))
            case EmitReport(check, text, summary, final):
                what = f"{run}check-{check}" + ("-final" if final else "")
                title = f"Report of check {check}" + (f": {summary}" if summary else "")
                found.append((what, NoticeKind.report, title, text))
            case Notify(what, reason, message) if reason == APPROVAL_REQUESTED:
                found.append((what, NoticeKind.approval, "Approval requested", message))
            case Notify(what, reason, message) if reason == HEALTH:
                found.append((what, NoticeKind.health, message.split(":")[0], message))
    return found


def record(
    decision: Decision, sinks: Sequence[SinkWants] | None, monitor_uid: str, now: datetime
) -> Decision:
    """`decision` with its messages for `sinks` added to status, and the messages every
    sink has taken let go. Recording the same decision again adds nothing; with `sinks`
    None (not known yet) nothing is recorded or let go."""
    if sinks is None:
        return decision
    status = decision.status
    notices = status.notices
    wanted = frozenset().union(*(sink.kinds for sink in sinks))
    if not wanted and notices is None:
        return decision
    kept = Notices() if notices is None else notices.model_copy(deep=True)
    items, seq = list(kept.items), kept.seq
    known = {item.id for item in items}
    for what, kind, summary, text in _notices_of(decision.effects, run_prefix(status)):
        notice_id = f"{monitor_uid}/{what}"
        if kind not in wanted or notice_id in known:
            continue
        seq += 1
        items.append(
            Notice(
                seq=seq,
                id=notice_id,
                kind=kind,
                at=now,
                summary=_cut(summary, 200),
                text=_cut(text, NOTICE_TEXT_MAX),
            )
        )
    items = [item for item in items if not taken_by_all(item, sinks, kept.delivered)]
    kept.seq, kept.items = seq, items[-NOTICES_KEPT:]
    # Only the namespace's sinks now: a sink deleted or renamed is forgotten.
    current = {sink.key for sink in sinks}
    kept.delivered = {k: v for k, v in kept.delivered.items() if k in current}
    if kept == notices:
        return decision
    written = status.model_copy(update={"notices": kept})
    return Decision(written, decision.effects, decision.unrecorded)


def taken_by_all(item: Notice, sinks: Sequence[SinkWants], delivered: dict[str, int]) -> bool:
    """True when every sink that wants `item` has received it (or none wants it)."""
    return all(delivered.get(sink.key, 0) >= item.seq for sink in sinks if item.kind in sink.kinds)


def pending(notices: Notices | None, sink: SinkWants, since: datetime | None) -> list[Notice]:
    """The messages `sink` has yet to receive, oldest first; a sink made at `since` gets
    none from before it."""
    if notices is None:
        return []
    last = notices.delivered.get(sink.key, 0)
    return [
        item
        for item in notices.items
        if item.seq > last and item.kind in sink.kinds and (since is None or item.at >= since)
    ]
