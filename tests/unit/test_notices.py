"""Which effects of a decision become messages for the sinks, kept in the status the
decision writes until each sink that wants them took them (core/notices.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from goalkeeper.core.events import Decision, EmitReport, LaunchStep, Notify, StopMonitor
from goalkeeper.core.models import (
    NOTICES_KEPT,
    MonitorStatus,
    NoticeKind,
    PreviousRun,
    StepKind,
    StopInfo,
    StopReason,
)
from goalkeeper.core.notices import SinkWants, pending, record

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ALL = SinkWants("all", frozenset(NoticeKind))
STOPS = SinkWants("stops", frozenset({NoticeKind.stop}))


def decision(*effects: object, status: MonitorStatus | None = None) -> Decision:
    return Decision(status or MonitorStatus(), tuple(effects))  # type: ignore[arg-type]


STOP = (
    EmitReport(4, "Monitor: stopped\nGoal: complete", summary="check 4: complete"),
    StopMonitor(StopReason.goalComplete, "All done.", hint="Delete the Monitor when done."),
)
APPROVAL = Notify(
    "approval-r1", "ApprovalRequested", "Answer request r1 with `goalkeeper approve`."
)
HEALTH = Notify("health-7-Stalled", "Health", "Health Healthy -> Stalled: no progress in 3 checks")


def test_each_kind_of_news_becomes_one_message_with_a_stable_id() -> None:
    made = record(decision(*STOP, APPROVAL, HEALTH), [ALL], "uid-1", NOW).status.notices
    assert made is not None
    assert [(n.seq, n.id, n.kind) for n in made.items] == [
        (1, "uid-1/check-4", NoticeKind.report),
        (2, "uid-1/stopped", NoticeKind.stop),
        (3, "uid-1/approval-r1", NoticeKind.approval),
        (4, "uid-1/health-7-Stalled", NoticeKind.health),
    ]
    stop = made.items[1]
    assert stop.summary == "Stopped: goalComplete"
    assert stop.text.startswith("All done. What to do: Delete the Monitor when done.")
    assert "Report:\nMonitor: stopped" in stop.text
    assert made.items[3].summary == "Health Healthy -> Stalled"


def test_only_what_some_sink_wants_is_kept_and_recording_again_adds_nothing() -> None:
    once = record(decision(*STOP, HEALTH), [STOPS], "uid-1", NOW)
    assert once.status.notices is not None
    assert [n.kind for n in once.status.notices.items] == [NoticeKind.stop]
    twice = record(once, [STOPS], "uid-1", NOW)
    assert twice.status.notices == once.status.notices


def test_no_sinks_record_nothing_and_unknown_sinks_touch_nothing() -> None:
    assert record(decision(*STOP), [], "uid-1", NOW).status.notices is None
    kept = record(decision(*STOP), [STOPS], "uid-1", NOW)
    # Sinks not listed yet: what is kept stays, whatever the decision.
    assert record(decision(status=kept.status), None, "uid-1", NOW) == decision(status=kept.status)


def test_a_message_goes_once_every_sink_that_wants_it_took_it() -> None:
    kept = record(decision(*STOP), [ALL, STOPS], "uid-1", NOW).status
    assert kept.notices is not None
    kept.notices.delivered = {"all": 2}  # "stops" has the stop (seq 2) still to take
    after = record(decision(status=kept), [ALL, STOPS], "uid-1", NOW).status.notices
    assert after is not None and [n.seq for n in after.items] == [2]
    after.delivered["stops"] = 2
    gone = record(
        decision(status=kept.model_copy(update={"notices": after})), [ALL, STOPS], "u", NOW
    )
    assert gone.status.notices is not None and gone.status.notices.items == []


def test_the_oldest_give_way_beyond_the_bound() -> None:
    status = MonitorStatus()
    for check in range(1, NOTICES_KEPT + 6):
        status = record(
            decision(EmitReport(check, f"report {check}"), status=status), [ALL], "u", NOW
        ).status
    assert status.notices is not None
    assert len(status.notices.items) == NOTICES_KEPT
    assert status.notices.items[0].id == "u/check-6" and status.notices.seq == NOTICES_KEPT + 5


def test_a_later_run_names_its_messages_apart() -> None:
    earlier = PreviousRun(
        checks=3, stop=StopInfo(reason=StopReason.goalComplete, message="m", at=NOW)
    )
    status = MonitorStatus(previousRuns=[earlier])
    made = record(decision(*STOP, status=status), [ALL], "uid-1", NOW).status.notices
    assert made is not None
    assert [n.id for n in made.items] == ["uid-1/run2-check-4", "uid-1/run2-stopped"]


def test_a_sink_gets_only_what_it_wants_from_after_it_was_made() -> None:
    launch = LaunchStep(seq=1, kind=StepKind.observe, input=None, at=NOW)  # type: ignore[arg-type]
    made = record(decision(launch, *STOP), [ALL], "uid-1", NOW).status.notices
    assert made is not None
    assert [n.kind for n in pending(made, STOPS, None)] == [NoticeKind.stop]
    assert pending(made, STOPS, datetime(2026, 12, 2, tzinfo=UTC)) == []


def test_sinks_that_are_gone_are_forgotten_and_many_never_make_a_status_unreadable() -> None:
    kept = record(decision(*STOP), [STOPS], "uid-1", NOW).status
    assert kept.notices is not None
    kept.notices.delivered = {f"old-{n}": 1 for n in range(40)} | {"stops": 0}
    read = MonitorStatus.model_validate(kept.model_dump(mode="json"))
    after = record(decision(status=read), [STOPS], "uid-1", NOW).status.notices
    assert after is not None and after.delivered == {"stops": 0}
