"""A Monitor as a person reads it (`goalkeeper show`, the MCP server's get_monitor and
list_monitors), and when a waiting call is done: pure functions of the Monitor's body."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from goalkeeper.core.controls import PAUSED
from goalkeeper.core.permissions import AUTHOR
from goalkeeper.monitors import (
    authority_read_or_stopped,
    authority_reading,
    line,
    monitor_manifest,
    reported_after,
    summary,
)

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
QUOTE = "You may resume Job build."


def monitor(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "build",
            "namespace": "team-a",
            "generation": generation,
            "annotations": {AUTHOR: "alice"},
        },
        "spec": {"task": "Finish the build.", "maxChecks": 6, "everyMinutes": 30},
        "status": status,
    }


AUTHORITY = {
    "generation": 1,
    "check": 0,
    "typedGrants": [
        {
            "id": "resume-build",
            "verb": "resume",
            "object": {"kind": "Job", "name": "build"},
            "quote": QUOTE,
        }
    ],
    "typedProhibitions": [
        {
            "verb": "restart",
            "forbids": ["restart"],
            "object": {"kind": "Deployment", "name": "db"},
            "quote": "Never restart Deployment db.",
        }
    ],
    "dropped": ["allowed system 'Service api': no sentence of yours gives it"],
}


def test_the_manifest_leaves_out_what_takes_the_crd_default() -> None:
    body = monitor_manifest("build", "team-a", "Finish the build.", every_minutes=5)
    assert body["spec"] == {"task": "Finish the build.", "everyMinutes": 5}
    assert body["metadata"] == {"name": "build", "namespace": "team-a"}
    assert body["kind"] == "Monitor" and body["apiVersion"] == "goalkeeper.dev/v1alpha1"


def test_the_authority_reading_is_that_of_the_current_generation_only() -> None:
    assert authority_reading(monitor()) is None
    read = monitor(authority=AUTHORITY)
    lines = authority_reading(read)
    assert lines is not None
    assert lines[1].split() == [
        "grant",
        "resume-build",
        "resume",
        "Job",
        "build",
        "-",
        '"You',
        "may",
        "resume",
        "Job",
        'build."',
    ]
    assert lines[2].split()[:5] == ["forbidden", "-", "restart", "Deployment", "db"]
    assert lines[3] == "refused    allowed system 'Service api': no sentence of yours gives it"
    assert lines[4] == "reading    read whole from the words; no confirmation needed"
    assert authority_read_or_stopped(read)
    # An edited spec is read again: the earlier reading is not this generation's.
    assert authority_reading(monitor(generation=2, authority=AUTHORITY)) is None
    assert not authority_read_or_stopped(monitor(generation=2, authority=AUTHORITY))
    assert authority_read_or_stopped(monitor(generation=2, monitor="stopped"))


def test_a_wait_is_done_at_a_newer_report_or_a_stop() -> None:
    first = monitor(report="check 1", reportedCheck=1, checks=1)
    assert reported_after(0)(first) and not reported_after(1)(first)
    assert not reported_after(0)(monitor(checks=0))
    assert reported_after(5)(monitor(monitor="stopped", report="final", reportedCheck=2))


def test_the_summary_says_state_progress_health_schedule_approval_and_the_report() -> None:
    body = monitor(
        authority=AUTHORITY,
        monitor="active",
        activity="awaitingApproval",
        goal="incomplete",
        work="idle",
        checks=1,
        health={"state": "AwaitingHuman", "message": "A paid action awaits approval."},
        progress=[
            {
                "key": "modules",
                "label": "modules",
                "status": "running",
                "completed": 21,
                "total": 27,
                "unit": "modules",
                "observedAt": "2026-12-01T09:00:00Z",
            }
        ],
        schedule={
            "lastCheckAt": "2026-12-01T09:00:00Z",
            "nextCheckAt": "2026-12-01T09:30:00Z",
            "everyMinutes": 30,
        },
        approval={
            "id": "req-2",
            "check": 1,
            "message": "Resume the build on paid GPUs?",
            "requestedAt": "2026-12-01T09:00:00Z",
            "expiresAt": "2026-12-02T09:00:00Z",
        },
        report="Monitor: active\nGoal: incomplete\x1b[2J",
        reportedCheck=1,
    )
    body["metadata"]["annotations"][PAUSED] = "true"
    text = summary(body, NOW)
    assert text.startswith("Monitor team-a/build: active, paused (awaitingApproval)\n")
    assert "Author: alice\n" in text
    assert "Goal: incomplete · Work: idle · Checks: 1 of at most 6\n" in text
    assert "Health: AwaitingHuman: A paid action awaits approval.\n" in text
    assert "Progress:\n  modules: 21/27 modules" in text
    assert "Next check: 2026-12-01 09:30:00 UTC (every 30 min)\n" in text
    assert "Awaiting approval: request req-2 (check 1): Resume the build on paid GPUs?" in text
    assert "Authority read from the task:\n             ID" in text
    assert "grant      resume-build  resume   Job build" in text
    # The report is indented, and a terminal escape in it is shown, never sent.
    assert text.endswith(
        "Latest report (check 1):\n    Monitor: active\n    Goal: incomplete\ufffd[2J\n"
    )
    assert "Authority read" not in summary(body, NOW, authority=False)
    assert line(body) == (
        "team-a/build · active (paused) · goal incomplete · work idle · checks 1 · "
        "next check 2026-12-01 09:30:00 UTC · step awaitingApproval · health AwaitingHuman"
    )


def test_a_stopped_monitor_says_why_and_no_next_check() -> None:
    body = monitor(
        monitor="stopped",
        activity="stopped",
        checks=2,
        schedule={
            "lastCheckAt": "2026-12-01T09:00:00Z",
            "nextCheckAt": "2026-12-01T09:30:00Z",
            "everyMinutes": 30,
        },
        stop={
            "reason": "goalComplete",
            "message": "Job build succeeded.",
            "at": "2026-12-01T09:05:00Z",
        },
    )
    text = summary(body, NOW)
    assert text.startswith("Monitor team-a/build: stopped\n")
    assert "Stopped 2026-12-01 09:05:00 UTC: goalComplete: Job build succeeded.\n" in text
    assert "Next check" not in text and text.endswith("No report yet.\n")
    assert "next check" not in line(body)
    assert summary({"metadata": {"name": "new", "namespace": "a"}}).startswith(
        "Monitor a/new: active (starting)\nAuthor: not recorded\n"
    )
