"""`goalkeeper history`: the kept steps as the API server has them, formatted oldest
first, one block per kept check and one line for any other step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from goalkeeper.controller import manifests
from goalkeeper.history import (
    Latest,
    Step,
    format_history,
    latest_of,
    read_history,
    step_of,
    when,
)

UID = "0b5e7c2a-1111-2222-3333-444455556666"
T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

CHECK_1 = "Monitor: active\nGoal: incomplete\nWork: running\n\nObserver notes:\n  Job build runs."
CHECK_2 = "Monitor: active\nGoal: incomplete\nWork: idle\nNext action: Resume Job build."
CHECK_3 = "Monitor: stopped\nGoal: complete\nWork: complete\nStopped: Job build has succeeded."


def body(
    seq: int,
    kind: str,
    *,
    phase: str = "Succeeded",
    started: str | None = "2026-12-01T09:00:00Z",
    finished: str | None = "2026-12-01T09:00:40Z",
    report: str | None = None,
    check: int = 1,
    owner: str = UID,
    **status: Any,
) -> dict[str, Any]:
    annotations = {manifests.ANNOTATION_LAUNCHED_AT: "2026-12-01T08:59:59+00:00"}
    if report is not None:
        annotations.update(manifests.report_annotations(check, report))
    step_status: dict[str, Any] = {"phase": phase, **status}
    if started:
        step_status["startedAt"] = started
    if finished:
        step_status["finishedAt"] = finished
    return {
        "metadata": {
            "name": f"build-{seq}-{kind}-0b5e7",
            "annotations": annotations,
            "ownerReferences": [{"kind": "Monitor", "uid": owner, "controller": True}],
            "creationTimestamp": "2026-12-01T08:59:59Z",
        },
        "spec": {"monitor": "build", "kind": kind, "check": check, "seq": seq, "input": {}},
        "status": step_status,
    }


def between(start: str, finish: str) -> dict[str, str]:
    return {"started": f"2026-12-01T{start}Z", "finished": f"2026-12-01T{finish}Z"}


def step(seq: int, kind: str, **kw: Any) -> Step:
    found = step_of(body(seq, kind, **kw))
    assert found is not None
    return found


def test_a_step_is_read_from_its_annotations_and_status() -> None:
    observed = step(2, "observe", report=CHECK_1, check=1)
    assert observed.seq == 2 and observed.kind == "observe" and observed.name.startswith("build-2")
    assert observed.report == CHECK_1 and observed.reported_check == 1
    assert observed.started == T and observed.finished == T.replace(second=40)
    # No account of its own yet: the launch time stands for its start.
    pending = step(3, "act", phase="Pending", started=None, finished=None)
    assert pending.started == datetime(2026, 12, 1, 8, 59, 59, tzinfo=UTC)
    assert pending.finished is None and pending.report is None
    assert step_of({"metadata": {"name": "x"}, "spec": {}}) is None


def test_times_are_utc_and_the_finish_drops_a_date_it_shares() -> None:
    later = datetime(2026, 12, 2, 0, 0, 5, tzinfo=UTC)
    assert when(T, T.replace(second=41)) == "2026-12-01 09:00:00 → 09:00:41 UTC"
    assert when(T.replace(hour=23), later) == "2026-12-01 23:00:00 → 2026-12-02 00:00:05 UTC"
    assert when(T, None) == "2026-12-01 09:00:00 → … UTC"
    assert when(None, None) == "time unknown"
    from datetime import timedelta, timezone

    berlin = T.astimezone(timezone(timedelta(hours=1)))
    assert when(berlin, None).startswith("2026-12-01 09:00:00")


def test_each_kept_check_is_a_block_and_every_other_step_a_line() -> None:
    steps = [
        # Listed out of order: the history is oldest first by sequence number.
        step(4, "act", check=2, **between("09:31:00", "09:31:30")),
        step(1, "extract", check=0),
        step(2, "observe", report=CHECK_1, check=1),
        step(3, "observe", report=CHECK_2, check=2, **between("09:30:00", "09:30:45")),
        step(5, "observe", phase="Failed", check=3, error="Job build-5-observe failed\n(Deadline)"),
        step(6, "observe", check=3),
        step(7, "observe", report=CHECK_3, check=3, **between("09:40:00", "09:40:50")),
    ]
    latest = Latest(CHECK_3, 3, stopped_at=datetime(2026, 12, 1, 9, 40, 51, tzinfo=UTC))
    text = format_history("team-a", "build", steps, latest)
    assert text == (
        "Monitor team-a/build: 3 check report(s) in 7 kept step(s) (steps 1-7), oldest first; "
        "times in UTC.\n"
        "\n"
        "step 1 extract build-1-extract-0b5e7 · 2026-12-01 09:00:00 → 09:00:40 UTC · Succeeded\n"
        "\n"
        "check 1 · step 2 observe build-2-observe-0b5e7 · 2026-12-01 09:00:00 → 09:00:40 UTC\n"
        "    Monitor: active\n"
        "    Goal: incomplete\n"
        "    Work: running\n"
        "\n"
        "    Observer notes:\n"
        "      Job build runs.\n"
        "\n"
        "check 2 · step 3 observe build-3-observe-0b5e7 · 2026-12-01 09:30:00 → 09:30:45 UTC\n"
        "    Monitor: active\n"
        "    Goal: incomplete\n"
        "    Work: idle\n"
        "    Next action: Resume Job build.\n"
        "\n"
        "step 4 act (check 2) build-4-act-0b5e7 · 2026-12-01 09:31:00 → 09:31:30 UTC · Succeeded\n"
        "\n"
        "step 5 observe (check 3) build-5-observe-0b5e7 · 2026-12-01 09:00:00 → 09:00:40 UTC · "
        "Failed: Job build-5-observe failed (Deadline)\n"
        "\n"
        "step 6 observe (check 3) build-6-observe-0b5e7 · 2026-12-01 09:00:00 → 09:00:40 UTC · "
        "Succeeded, no report kept\n"
        "\n"
        "check 3 · step 7 observe build-7-observe-0b5e7 · 2026-12-01 09:40:00 → 09:40:50 UTC\n"
        "    Monitor: stopped\n"
        "    Goal: complete\n"
        "    Work: complete\n"
        "    Stopped: Job build has succeeded.\n"
    ), "the stopping check's own report is the current one: not printed twice"


def test_a_final_report_newer_than_any_kept_one_ends_the_history() -> None:
    steps = [step(2, "observe", report=CHECK_1, check=1)]
    final = "Monitor: stopped\nStopped: Reached the 1-check safety limit."
    status = {
        "monitor": "stopped",
        "report": final,
        "reportedCheck": 1,
        "stop": {"reason": "safetyLimit", "at": "2026-12-01T10:00:00+00:00"},
    }
    latest = latest_of(status)
    assert latest == Latest(final, 1, datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    text = format_history("team-a", "build", steps, latest)
    assert text.endswith(
        "\n\nfinal report · check 1 · stopped 2026-12-01 10:00:00 UTC (status.report)\n"
        "    Monitor: stopped\n"
        "    Stopped: Reached the 1-check safety limit.\n"
    )
    # A running monitor's report the history lacks (its write failed) is shown as such.
    running = latest_of({"monitor": "active", "report": CHECK_2, "reportedCheck": 2})
    assert running == Latest(CHECK_2, 2)
    text = format_history("team-a", "build", steps, running)
    assert "\n\nlatest report · check 2 (status.report, not in the step history)\n" in text
    assert latest_of({"monitor": "active"}) is None


def test_a_step_in_flight_and_a_long_error_stay_one_line() -> None:
    running = step(3, "observe", phase="Running", finished=None, check=2)
    failed = step(4, "act", phase="Failed", check=2, error="x" * 500)
    text = format_history("ns", "build", [running, failed], None)
    lines = text.splitlines()
    assert lines[2].endswith("· 2026-12-01 09:00:00 → … UTC · running")
    assert lines[4].endswith("x…") and len(lines[4]) < 330
    assert lines[0].startswith("Monitor ns/build: 0 check report(s) in 2 kept step(s)")


class Pages:
    """A CustomObjectsApi listing in pages, as the API server does with `limit`."""

    def __init__(self, items: list[dict[str, Any]], size: int) -> None:
        self.items, self.size = items, size
        self.asked: list[dict[str, Any]] = []

    def list_namespaced_custom_object(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.asked.append(kw)
        start = int(kw.get("_continue") or 0)
        page = self.items[start : start + self.size]
        more = start + self.size < len(self.items)
        return {"items": page, "metadata": {"continue": str(start + self.size) if more else ""}}


def test_the_history_is_read_in_pages_and_only_this_monitors_steps() -> None:
    items = [body(seq, "observe", report=f"report {seq}", check=seq) for seq in range(9, 0, -1)]
    items.append(body(10, "observe", owner="an-earlier-monitor-of-that-name"))
    pages = Pages(items, size=4)
    monitor = {"metadata": {"name": "build", "uid": UID}}
    steps = read_history(pages, "team-a", monitor)
    assert [s.seq for s in steps] == list(range(1, 10))
    assert len(pages.asked) == 3
    assert all(kw["label_selector"] == "goalkeeper.dev/monitor=build" for kw in pages.asked)
    assert all(kw["limit"] > 0 for kw in pages.asked)


def test_control_characters_in_a_report_never_reach_the_terminal() -> None:
    from goalkeeper.core.report import printable

    hostile = "Goal: complete\x1b]0;owned\x07\x1b[2J\rStill here\ttab"
    shown = printable(hostile)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert "Still here\ttab" in shown and shown.count("\ufffd") == 4
