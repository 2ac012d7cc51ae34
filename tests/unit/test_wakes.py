"""Event wakes in the engine: what counts as a material change, and when a change of a
watched target starts a check before its timer."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.engine_loop import Loop
from tests.support.observations import observation

from goalkeeper.core import wakes
from goalkeeper.core.engine import EmitReport, LaunchStep, TargetChanged, TimerDue
from goalkeeper.core.models import Activity, MonitorState, StepKind, StopReason, WatchTarget
from goalkeeper.core.steps import next_event

JOB = WatchTarget(apiVersion="batch/v1", kind="Job", name="build")
OTHER = WatchTarget(apiVersion="batch/v1", kind="Job", name="other")
WATCH = [JOB.model_dump()]


def job(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "build", "resourceVersion": "7", "annotations": {"a": "1"}},
        "status": status,
    }


def waiting(interval: float = 60, **spec: Any) -> Loop:
    loop = Loop(options={"wake_interval": timedelta(seconds=interval)}, everyMinutes=30, **spec)
    loop.start()
    loop.observe(observation("wait", watch=WATCH))
    return loop


def reports(effects: tuple[object, ...]) -> list[EmitReport]:
    return [e for e in effects if isinstance(e, EmitReport)]


# --- material changes ----------------------------------------------------------------------


def test_only_status_facts_are_material() -> None:
    before = wakes.material_state(job(active=1, conditions=[]))
    noise = job(active=1, conditions=[])
    noise["metadata"].update(resourceVersion="8", managedFields=[{"x": 1}], annotations={})
    noise["metadata"]["labels"] = {"b": "2"}
    assert wakes.describe_change(before, wakes.material_state(noise)) is None

    done = job(
        active=0,
        succeeded=1,
        conditions=[{"type": "Complete", "status": "True", "lastProbeTime": "t1"}],
    )
    assert wakes.describe_change(before, wakes.material_state(done)) == (
        "Complete, succeeded 1, active 0"
    )
    # A condition's heartbeat alone is no change.
    beat = job(
        active=0,
        succeeded=1,
        conditions=[{"type": "Complete", "status": "True", "lastProbeTime": "t2"}],
    )
    assert wakes.describe_change(wakes.material_state(done), wakes.material_state(beat)) is None
    assert wakes.describe_change(before, wakes.GONE) == "deleted"
    assert wakes.describe_change(wakes.GONE, before) == "created"
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert wakes.describe_change(
        wakes.material_state({"status": {"phase": "Pending"}}), wakes.material_state(pod)
    ) == ("phase Running")


@given(st.dictionaries(st.sampled_from(["resourceVersion", "generation", "uid"]), st.text()))
def test_metadata_never_makes_a_change(meta: dict[str, str]) -> None:
    body = job(ready=1)
    changed = {**body, "metadata": {**body["metadata"], **meta}}
    assert wakes.describe_change(wakes.material_state(body), wakes.material_state(changed)) is None


# --- the schedule --------------------------------------------------------------------------


def test_a_wait_publishes_what_it_watches_and_says_both() -> None:
    loop = Loop(everyMinutes=30)
    loop.start()
    service = {"apiVersion": "v1", "kind": "Service", "name": "web"}
    effects = loop.observe(observation("wait", watch=[*WATCH, service, *WATCH]))
    schedule = loop.status.schedule
    assert schedule is not None and schedule.watch == [JOB]
    assert schedule.description == (
        f"Next check at {schedule.nextCheckAt.isoformat()}, or sooner on a change of "
        "Job/build. Not watched (only CronJob, DaemonSet, Deployment, Job, Pod, ReplicaSet, "
        "StatefulSet can wake a monitor): Service/web."
    )
    ready = next(c for c in loop.status.conditions if c.type == "Ready")
    assert ready.message == schedule.description
    (report,) = reports(effects)
    assert "Next check: 30 minutes, or sooner on a change of Job/build" in report.text


def test_a_change_of_a_watched_target_starts_a_recorded_check_at_once() -> None:
    loop = waiting()
    loop.later(2)
    effects = loop.send(TargetChanged(JOB, "Complete"))
    (launch,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert launch.kind is StepKind.observe and launch.input.wokenBy == "Job/build: Complete"
    assert loop.status.step is not None and loop.status.step.wokenBy == "Job/build: Complete"
    assert loop.status.lastWakeAt == loop.now and loop.status.activity is Activity.observing
    # The check it starts is counted and reported as woken, not timed.
    effects = loop.observe(observation("stop", goal="complete", stopReason="goalComplete"))
    (report,) = reports(effects)
    assert "Checked: woken by Job/build: Complete" in report.text
    assert loop.status.checks == 2 and loop.status.stop is not None
    assert loop.status.stop.reason is StopReason.goalComplete


def test_unwatched_targets_and_busy_monitors_never_wake() -> None:
    loop = waiting()
    before = loop.status
    assert loop.send(TargetChanged(OTHER, "Complete")) == ()
    assert loop.status == before
    loop.later(30)
    loop.send(TimerDue())
    assert loop.status.step is not None
    busy = loop.status
    assert loop.send(TargetChanged(JOB, "Complete")) == ()
    assert loop.status == busy


def test_a_second_wake_within_the_interval_is_held_until_it_ends() -> None:
    loop = waiting(interval=60)
    loop.later(1)
    loop.send(TargetChanged(JOB, "active 1"))
    first = loop.now
    loop.observe(observation("wait", watch=WATCH))
    loop.now = first + timedelta(seconds=20)
    assert loop.send(TargetChanged(JOB, "Complete")) == ()
    schedule = loop.status.schedule
    assert schedule is not None and loop.status.step is None
    assert schedule.wakeAt == first + timedelta(seconds=60)
    assert schedule.wokenBy == "Job/build: Complete" and schedule.due_at == schedule.wakeAt
    # More flapping in the interval changes nothing; the held wake comes at its time.
    loop.now = first + timedelta(seconds=40)
    held = loop.status
    loop.send(TargetChanged(JOB, "active 0"))
    assert loop.status == held
    assert next_event(loop.status, 1, None, loop.now) is None
    loop.now = first + timedelta(seconds=60)
    assert next_event(loop.status, 1, None, loop.now) == TimerDue()
    effects = loop.send(TimerDue())
    (launch,) = [e for e in effects if isinstance(e, LaunchStep)]
    assert launch.input.wokenBy == "Job/build: Complete" and loop.status.lastWakeAt == loop.now


@given(st.lists(st.floats(min_value=0.1, max_value=30), min_size=1, max_size=40))
def test_a_flapping_target_wakes_at_most_once_per_interval(gaps: list[float]) -> None:
    loop = waiting(interval=60, maxChecks=1000)
    wakes_at = []
    for gap in gaps:
        loop.now += timedelta(seconds=gap)
        if next_event(loop.status, 1, None, loop.now) == TimerDue():
            loop.send(TimerDue())
        else:
            loop.send(TargetChanged(JOB, f"ready {gap}"))
        step = loop.status.step
        if step is not None:
            if step.wokenBy:
                wakes_at.append(loop.now)
            loop.observe(observation("wait", watch=WATCH))
    for earlier, later in itertools.pairwise(wakes_at):
        assert later - earlier >= timedelta(seconds=60)


def test_a_wake_counts_against_the_safety_limit() -> None:
    loop = waiting(maxChecks=2)
    loop.send(TargetChanged(JOB, "ready 1"))
    loop.observe(observation("wait", watch=WATCH))
    assert loop.status.monitor is MonitorState.stopped
    assert loop.status.stop is not None and loop.status.stop.reason is StopReason.safetyLimit


@pytest.mark.parametrize("api_version,kind", sorted(wakes.WAKE_KINDS))
def test_every_wake_kind_is_kept(api_version: str, kind: str) -> None:
    target = WatchTarget(apiVersion=api_version, kind=kind, name="x")
    assert wakes.wakeable([target]) == ([target], [])
