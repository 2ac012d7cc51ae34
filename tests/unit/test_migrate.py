"""Every status an earlier release wrote is read, migrated in the engine, and carries on;
one that cannot be read stops its monitor with the reason and a final report."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.engine_loop import T0, knobs
from tests.support.observations import TASK, observation, result

from goalkeeper.core import migrate
from goalkeeper.core.engine import (
    EmitReport,
    LaunchStep,
    ObservationAccepted,
    Started,
    StepFinished,
    StopMonitor,
    TimerDue,
    decide,
    unreadable,
)
from goalkeeper.core.models import (
    STATUS_SCHEMA_VERSION,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    StepKind,
    StopReason,
)
from goalkeeper.core.steps import describe_errors, next_event

EARLIER = Path(__file__).parent / "statuses"
WRITTEN = sorted(EARLIER.glob("*/*.json"))
SPEC = MonitorSpec(task=TASK, everyMinutes=30)


def read(raw: dict[str, Any] | None) -> migrate.Read:
    return migrate.read(raw, describe_errors)


def test_statuses_of_every_earlier_release_are_kept_for_this_test() -> None:
    releases = {path.parent.name for path in WRITTEN}
    assert "v0.1.0" in releases
    states = {path.stem for path in WRITTEN}
    assert {"waiting", "observing", "acting-runaway", "awaiting-approval", "stopped"} <= states


@pytest.mark.parametrize("path", WRITTEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_status_an_earlier_release_wrote_is_read_and_carries_on(path: Path) -> None:
    raw = json.loads(path.read_text())
    found = read(raw)
    assert found.status is not None, found.error
    assert found.salvaged == (), "nothing of a well-formed earlier status is given up"
    status = found.status
    assert status.schemaVersion == STATUS_SCHEMA_VERSION
    # The facts it held are the same facts.
    for field in ("checks", "stepSeq", "monitor", "goal", "work", "observedGeneration"):
        assert getattr(status, field) == raw[field] or getattr(status, field).value == raw[field]
    # The engine takes it from there: whatever is due is decided, nothing is launched twice.
    event = next_event(status, raw["observedGeneration"], None, T0 + timedelta(days=1))
    if status.monitor is MonitorState.stopped:
        assert event is None
        return
    if status.step is not None:
        kind = status.step.kind
        answer = (
            ObservationAccepted(status.step.seq, observation("wait"))
            if kind is StepKind.observe
            else StepFinished(status.step.seq, result())
        )
        decision = decide(SPEC, status, answer, T0 + timedelta(minutes=1))
        assert decision.status.checks >= status.checks
        assert decision.status.stepSeq >= status.stepSeq
        return
    assert event is not None
    decision = decide(SPEC, status, event, T0 + timedelta(days=1))
    launches = [e for e in decision.effects if isinstance(e, LaunchStep)]
    assert all(e.seq > status.stepSeq for e in launches)
    assert decision.status.monitor is MonitorState.active or any(
        isinstance(e, StopMonitor) for e in decision.effects
    )


def test_the_model_ids_of_the_earlier_loop_guard_are_dropped_and_the_brake_starts_afresh() -> None:
    raw = json.loads((EARLIER / "v0.1.0" / "acting-runaway.json").read_text())
    assert raw["health"]["loopActs"] == 3 and "schemaVersion" not in raw
    migrated = migrate.migrate(raw)
    assert "loopActs" not in migrated["health"] and "loopTargetStateId" not in migrated["health"]
    assert migrated["schemaVersion"] == STATUS_SCHEMA_VERSION
    assert raw["health"]["loopActs"] == 3, "the status read is not changed"
    status = read(raw).status
    assert status is not None and status.health.brakeActs == []


def test_the_repair_guard_of_before_v0_1_0_becomes_the_repairs_done() -> None:
    guard = {"failureId": "bad-flag", "targetStateId": "s1", "check": 2}
    status = read({"repairGuard": guard}).status
    assert status is not None and [r.failureId for r in status.repairsDone] == ["bad-flag"]
    assert read({"repairGuard": None}).status is not None


def test_migrating_twice_is_migrating_once() -> None:
    for path in WRITTEN:
        once = migrate.migrate(json.loads(path.read_text()))
        assert migrate.migrate(once) == once


def test_a_last_observation_a_newer_rule_refuses_is_given_up_not_the_monitor() -> None:
    raw = json.loads((EARLIER / "v0.1.0" / "waiting.json").read_text())
    raw["lastObservation"]["route"] = "wander"  # a value no version of the rules reads
    found = read(raw)
    assert found.status is not None and found.salvaged == ("lastObservation",)
    assert found.status.lastObservation is None and found.status.checks == raw["checks"]
    # The timer still comes due and the next check is made as usual.
    event = next_event(found.status, raw["observedGeneration"], None, T0 + timedelta(days=1))
    assert isinstance(event, TimerDue)
    decision = decide(SPEC, found.status, event, T0 + timedelta(days=1))
    (launch,) = [e for e in decision.effects if isinstance(e, LaunchStep)]
    assert launch.kind is StepKind.observe and launch.input.check == raw["checks"] + 1


def test_a_status_nothing_can_read_stops_its_monitor_with_the_reason_and_a_final_report() -> None:
    raw = json.loads((EARLIER / "v0.1.0" / "waiting.json").read_text())
    raw["schedule"] = {"nextCheckAt": "not a time"}
    found = read(raw)
    assert found.status is None and "schedule" in found.error
    decision = unreadable(raw, found, raw["observedGeneration"], T0)
    status = decision.status
    assert status.monitor is MonitorState.stopped and status.stop is not None
    assert status.stop.reason is StopReason.blocked and "cannot be read" in status.stop.message
    assert status.stepSeq == raw["stepSeq"] and status.checks == raw["checks"]
    (report,) = [e for e in decision.effects if isinstance(e, EmitReport)]
    assert report.final and "schedule" in report.text
    assert [e for e in decision.effects if isinstance(e, StopMonitor)]
    # Written, it reads, and nothing happens until a spec edit starts a new run.
    again = read(status.model_dump(mode="json"))
    assert again.status is not None
    assert next_event(again.status, raw["observedGeneration"], None, T0) is None
    restarted = decide(SPEC, again.status, Started(raw["observedGeneration"] + 1), T0)
    assert restarted.status.monitor is MonitorState.active
    assert restarted.status.stepSeq >= raw["stepSeq"]


def test_a_status_a_later_version_wrote_is_left_untouched_not_stopped() -> None:
    raw = json.loads((EARLIER / "v0.1.0" / "waiting.json").read_text())
    raw["schemaVersion"] = STATUS_SCHEMA_VERSION + 1
    raw["aFieldOfLayout3"] = {"x": 1}
    found = read(raw)
    assert found.status is None and found.newer == STATUS_SCHEMA_VERSION + 1
    assert "later goalkeeper version" in found.error


def test_the_stored_status_loses_every_key_a_migration_dropped() -> None:
    raw = json.loads((EARLIER / "v0.1.0" / "acting-runaway.json").read_text())
    status = read(raw).status
    assert status is not None
    patch = migrate.merge_patch(raw, status.model_dump(mode="json"))
    assert patch["health"]["loopActs"] is None and patch["health"]["loopTargetStateId"] is None
    stored = _apply_merge_patch(copy.deepcopy(raw), patch)
    assert MonitorStatus.model_validate(stored) == status


def _apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a status merge patch."""
    if not isinstance(patch, dict):
        return patch
    target = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _apply_merge_patch(target.get(key), value)
    return target


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from(WRITTEN),
    damage=st.dictionaries(st.sampled_from(sorted(MonitorStatus.model_fields)), json_values),
)
def test_any_status_either_reads_or_stops_with_a_reason_never_raises(
    base: Path, damage: dict[str, Any]
) -> None:
    raw = {**json.loads(base.read_text()), **damage}
    found = read(raw)
    if found.status is not None:
        decide(SPEC, found.status, Started(None), T0, **knobs())
        return
    assert found.error
    if found.newer:
        return  # a later version's status is left as it is (see the test above)
    decision = unreadable(raw, found, 1, T0)
    assert decision.status.monitor is MonitorState.stopped
    assert MonitorStatus.model_validate(decision.status.model_dump(mode="json"))
