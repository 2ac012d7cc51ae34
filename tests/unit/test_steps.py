"""A step's untrusted status is validated again and becomes one engine event; the
monitor's current state says which event is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.observations import observation_dict

from goalkeeper.core.engine import (
    ObservationAccepted,
    ObservationRejected,
    Started,
    StepFailed,
    StepFinished,
    TimerDue,
)
from goalkeeper.core.models import MonitorState, MonitorStatus, Schedule, StepInFlight, StepKind
from goalkeeper.core.steps import StepFacts, job_failure, next_event, pod_said, step_event


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


def test_a_configuration_error_is_waited_out_like_any_infrastructure_failure() -> None:
    status = {
        "phase": "Failed",
        "error": "GOALKEEPER_MODEL is not set",
        "errorKind": "configuration",
    }
    event = step_event(StepKind.act, 2, status)
    assert isinstance(event, StepFailed) and not event.permanent
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


@pytest.mark.parametrize(
    "reason", ["userRequested", "protectedContractChange", "credentialWithoutAuthority"]
)
def test_a_stop_reason_the_operator_gives_is_no_observations_to_give(reason: str) -> None:
    body = observation_dict("stop", goal="incomplete", work="blocked", stopReason=reason)
    event = step_event(StepKind.observe, 5, {"phase": "Succeeded", "result": body})
    assert isinstance(event, ObservationRejected)
    assert f"stopReason '{reason}' is not an observation's to give" in event.error
    blocker = observation_dict(
        "stop", goal="incomplete", work="blocked", stopReason="materialBlocker"
    )
    accepted = step_event(StepKind.observe, 5, {"phase": "Succeeded", "result": blocker})
    assert isinstance(accepted, ObservationAccepted)


# --- what the current state stands for ------------------------------------------------


def _in_flight(kind: StepKind = StepKind.observe) -> MonitorStatus:
    return MonitorStatus(
        observedGeneration=1,
        stepSeq=3,
        step=StepInFlight(seq=3, kind=kind, check=1, startedAt=_NOW),
    )


_NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_next_event_follows_the_spec_generation_first() -> None:
    assert next_event(MonitorStatus(), 1, None, _NOW) == Started(1)
    assert next_event(_in_flight(), 2, None, _NOW) == Started(2)


def test_next_event_for_the_step_in_flight() -> None:
    status = _in_flight()
    running = StepFacts("s", True, status={"phase": "Running"})
    assert next_event(status, 1, running, _NOW) is None
    gone = next_event(status, 1, StepFacts("s", False), _NOW)
    assert isinstance(gone, StepFailed) and "vanished" in gone.message and not gone.permanent
    foreign = next_event(status, 1, StepFacts("s", True, foreign="not ours"), _NOW)
    assert foreign == StepFailed(3, "not ours", permanent=True)
    ended = StepFacts("s", True, status={"phase": "Running"}, job_ended="Job s was deleted")
    assert next_event(status, 1, ended, _NOW) == StepFailed(
        3, "Job s was deleted", effect_unknown=True
    )
    assert gone.effect_unknown and not foreign.effect_unknown
    forged = StepFacts("s", True, status={"phase": "Succeeded", "result": {}}, forged="no pod")
    rejected = next_event(status, 1, forged, _NOW)
    assert isinstance(rejected, ObservationRejected) and "no pod" in rejected.error


def test_an_act_result_whose_pod_is_gone_leaves_the_outcome_unknown() -> None:
    done = {"phase": "Succeeded", "result": {"outcome": "succeeded", "evidence": "resumed"}}
    gone = StepFacts("s", True, status=done, forged="Job s is gone", unverifiable=True)
    event = step_event(StepKind.act, 3, done, forged=gone.forged, unverifiable=True)
    assert event == StepFailed(
        3, "The step's result cannot be verified: Job s is gone", effect_unknown=True
    )
    forged = step_event(StepKind.act, 3, done, forged="pod p is not a pod of Job s")
    assert isinstance(forged, StepFailed) and not forged.effect_unknown
    assert "not written by its own pod" in forged.message
    reading = step_event(StepKind.observe, 3, done, forged="Job s is gone", unverifiable=True)
    assert isinstance(reading, ObservationRejected), "an observation is read again"


def test_next_event_for_a_waiting_or_stopped_monitor() -> None:
    later = _NOW + timedelta(minutes=5)
    waiting = MonitorStatus(
        observedGeneration=1,
        checks=1,
        schedule=Schedule(lastCheckAt=_NOW, nextCheckAt=later, everyMinutes=5),
    )
    assert next_event(waiting, 1, None, _NOW) is None
    assert next_event(waiting, 1, None, later) == TimerDue()
    stopped = waiting.model_copy(update={"monitor": MonitorState.stopped})
    assert next_event(stopped, 1, None, later) is None
    # Active with nothing in flight and nothing pending: a launch was lost; start again.
    assert next_event(MonitorStatus(observedGeneration=1), 1, None, _NOW) == Started(None)


def test_a_steps_own_usage_rides_on_its_event_but_a_forged_one_does_not() -> None:
    usage = {"requests": 3, "inputTokens": 100, "outputTokens": 10, "costUsd": 0.01}
    raw = {"phase": "Succeeded", "result": observation_dict(), "usage": usage}
    event = step_event(StepKind.observe, 2, raw)
    assert isinstance(event, ObservationAccepted) and event.usage is not None
    assert event.usage.requests == 3
    forged = step_event(StepKind.observe, 2, raw, forged="no pod")
    assert isinstance(forged, ObservationRejected) and forged.usage is None


def test_a_failed_step_job_is_told_with_its_pods_last_words() -> None:
    failed = {
        "status": {
            "conditions": [
                {"type": "Complete", "status": "False"},
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline",
                },
            ]
        }
    }
    assert job_failure("s", {"status": {"conditions": []}}, []) is None
    assert job_failure("s", failed, []) == (
        "Job s failed (DeadlineExceeded): Job was active longer than specified deadline; "
        "no pod of the Job is left to say how it ended"
    )

    def pod(name: str, at: str, **status: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "creationTimestamp": at}, "status": status}

    ended = {"terminated": {"exitCode": 137, "reason": "Error", "message": "x\n" * 700}}
    pods = [
        pod("s-old", "2026-01-01T10:00:00Z", phase="Failed"),
        pod("s-new", "2026-01-01T10:05:00Z", containerStatuses=[{"state": ended}]),
    ]
    told = job_failure("s", failed, pods)
    assert told is not None and "pod s-new ended Error (exit code 137): x x x" in told
    assert "\n" not in told and len(told) < 800
    silent = {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert pod_said([pod("p", "t", containerStatuses=[{"lastState": silent}])]) == (
        "pod p ended Error (exit code 1) with no termination message"
    )
    assert pod_said([pod("p", "t", phase="Pending")]) == (
        "pod p is Pending with no container ended"
    )
