"""A finished step's untrusted status is validated again and becomes one engine event."""

from __future__ import annotations

import pytest
from tests.support.observations import observation_dict

from goalkeeper.core.engine import (
    ObservationAccepted,
    ObservationRejected,
    StepFailed,
    StepFinished,
)
from goalkeeper.core.models import StepKind
from goalkeeper.core.steps import step_event


def test_running_step_stands_for_nothing_yet() -> None:
    assert step_event(StepKind.observe, 1, {"phase": "Running"}) is None
    assert step_event(StepKind.observe, 1, None) is None


def test_valid_observation_is_accepted() -> None:
    event = step_event(StepKind.observe, 3, {"phase": "Succeeded", "result": observation_dict()})
    assert isinstance(event, ObservationAccepted) and event.seq == 3


def test_invalid_observation_is_rejected_naming_the_field_without_echoing_input() -> None:
    bad = {**observation_dict(), "route": "explode", "observation": "SECRET-TOKEN-123"}
    event = step_event(StepKind.observe, 3, {"phase": "Succeeded", "result": bad})
    assert isinstance(event, ObservationRejected)
    assert "route:" in event.error
    assert "SECRET-TOKEN-123" not in event.error and "explode" not in event.error


def test_unknown_fields_in_step_status_are_rejected() -> None:
    event = step_event(StepKind.observe, 1, {"phase": "Succeeded", "grant": "admin"})
    assert isinstance(event, ObservationRejected) and "grant" in event.error


def test_invalid_output_from_observe_step_is_a_rejection() -> None:
    status = {
        "phase": "Failed",
        "error": "output invalid after 3 tries",
        "errorKind": "invalidOutput",
    }
    assert isinstance(step_event(StepKind.observe, 1, status), ObservationRejected)


def test_configuration_error_is_permanent() -> None:
    status = {
        "phase": "Failed",
        "error": "GOALKEEPER_MODEL is not set",
        "errorKind": "configuration",
    }
    event = step_event(StepKind.act, 2, status)
    assert isinstance(event, StepFailed) and event.permanent
    assert "GOALKEEPER_MODEL" in event.message


def test_provider_error_is_retryable() -> None:
    event = step_event(
        StepKind.observe, 2, {"phase": "Failed", "error": "503", "errorKind": "provider"}
    )
    assert isinstance(event, StepFailed) and not event.permanent


def test_action_results_are_validated() -> None:
    ok = {"phase": "Succeeded", "result": {"outcome": "succeeded", "evidence": "replicas=3"}}
    assert isinstance(step_event(StepKind.act, 4, ok), StepFinished)
    bad = {"phase": "Succeeded", "result": {"outcome": "maybe", "evidence": "?"}}
    event = step_event(StepKind.repair, 4, bad)
    assert isinstance(event, StepFailed) and "outcome" in event.message


def test_a_result_not_written_by_the_steps_own_pod_is_never_accepted() -> None:
    ok = {"phase": "Succeeded", "result": observation_dict()}
    event = step_event(StepKind.observe, 3, ok, forged="pod x is not a pod of Job y")
    assert isinstance(event, ObservationRejected)
    assert "not written by its own pod" in event.error and "pod x" in event.error
    done = {"phase": "Succeeded", "result": {"outcome": "succeeded", "evidence": "ok"}}
    failed = step_event(StepKind.act, 4, done, forged="the result names no valid pod")
    assert isinstance(failed, StepFailed) and not failed.permanent
    assert step_event(StepKind.act, 4, {"phase": "Running"}, forged="no pod") is None


@pytest.mark.parametrize(
    ("route", "overrides", "rule"),
    [
        ("wait", {"work": "idle"}, "route 'wait' needs work 'running' or 'waiting'"),
        ("wait", {"goal": "complete"}, "route 'wait' needs goal"),
        ("stop", {"goal": "incomplete"}, "stopReason 'goalComplete' needs goal 'complete'"),
    ],
)
def test_observation_whose_route_contradicts_its_states_is_rejected(
    route: str, overrides: dict[str, str], rule: str
) -> None:
    body = observation_dict(route, **overrides)
    event = step_event(StepKind.observe, 5, {"phase": "Succeeded", "result": body})
    assert isinstance(event, ObservationRejected)
    assert rule in event.error
