"""The public input and the step results: bounds, defaults, closed fields, clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from tests.support.observations import action, observation_dict

from goalkeeper.core.models import DEFAULT_STOP_WHEN, ActionResult, MonitorSpec, Observation


def errors(data: dict[str, object], model: type = MonitorSpec) -> list[dict[str, object]]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return caught.value.errors()


def test_spec_defaults() -> None:
    spec = MonitorSpec.model_validate({"task": "  Resume the build.  "})
    assert spec.task == "Resume the build."
    assert spec.stopWhen == DEFAULT_STOP_WHEN
    assert (spec.everyMinutes, spec.maxChecks) == (30, 1000)


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ({}, "task", "Field required"),
        ({"task": "   "}, "task", "must not be blank"),
        ({"task": "x" * 8001}, "task", "at most 8000 characters after trimming"),
        ({"task": "x", "stopWhen": "\n\t"}, "stopWhen", "must not be blank"),
        ({"task": "x", "stopWhen": "y" * 4001}, "stopWhen", "at most 4000"),
        ({"task": "x", "everyMinutes": 0}, "everyMinutes", "greater than or equal to 1"),
        ({"task": "x", "everyMinutes": 1441}, "everyMinutes", "less than or equal to 1440"),
        ({"task": "x", "maxChecks": 0}, "maxChecks", "greater than or equal to 1"),
        ({"task": "x", "maxChecks": 1001}, "maxChecks", "less than or equal to 1000"),
        ({"task": "x", "everyMinutes": True}, "everyMinutes", "valid integer"),
        ({"task": "x", "everyMinutes": 1.5}, "everyMinutes", "valid integer"),
        ({"task": "x", "maxChecks": "10"}, "maxChecks", "valid integer"),
        ({"task": "x", "audience": "team"}, "audience", "Extra inputs are not permitted"),
        ({"task": "x", "repair": True}, "repair", "Extra inputs are not permitted"),
        ({"task": "x", "checkTimeoutMinutes": 5}, "checkTimeoutMinutes", "not permitted"),
    ],
)
def test_spec_rejects_bad_input_naming_field_and_bound(
    data: dict[str, object], field: str, fragment: str
) -> None:
    found = errors(data)
    assert any(e["loc"] == (field,) and fragment in str(e["msg"]) for e in found), found


def test_trimmed_bound_allows_surrounding_whitespace() -> None:
    assert len(MonitorSpec.model_validate({"task": " " + "x" * 8000 + " "}).task) == 8000


def test_route_act_requires_an_action_and_only_act_has_one() -> None:
    no_action = observation_dict("act")
    del no_action["action"]
    assert "action is required" in str(errors(no_action, Observation))
    assert "only when route is 'act'" in str(
        errors({**observation_dict("wait"), "action": action()}, Observation)
    )


def test_route_stop_requires_a_closed_stop_reason() -> None:
    no_reason = observation_dict("stop")
    del no_reason["stopReason"]
    assert "stopReason is required" in str(errors(no_reason, Observation))
    assert errors({**observation_dict("stop"), "stopReason": "bored"}, Observation)


def test_progress_track_keys_are_unique() -> None:
    track = {
        "key": "m",
        "label": "modules",
        "status": "running",
        "observedAt": "2026-08-16T10:00:00Z",
    }
    body = {**observation_dict("wait"), "progress": [track, track]}
    assert "unique" in str(errors(body, Observation))


def test_observation_rejects_unknown_fields_and_bad_states() -> None:
    assert errors({**observation_dict("wait"), "command": "rm -rf /"}, Observation)
    assert errors({**observation_dict("wait"), "work": "busy"}, Observation)
    assert errors({**observation_dict("wait"), "goal": "done"}, Observation)


def test_action_result_outcomes_are_closed() -> None:
    assert ActionResult.model_validate({"outcome": "blocked", "evidence": "no workflow"}).outcome
    assert errors({"outcome": "partial", "evidence": "x"}, ActionResult)


@pytest.mark.parametrize(
    ("route", "overrides", "message"),
    [
        ("act", {"goal": "complete"}, "route 'act' needs goal 'incomplete' or 'unknown'"),
        ("wait", {"goal": "complete"}, "route 'wait' needs goal 'incomplete' or 'unknown'"),
        ("stop", {"goal": "incomplete"}, "stopReason 'goalComplete' needs goal 'complete'"),
        ("stop", {"goal": "unknown"}, "stopReason 'goalComplete' needs goal 'complete'"),
        ("wait", {"work": "idle"}, "route 'wait' needs work 'running' or 'waiting', got 'idle'"),
        ("wait", {"work": "failed"}, "route 'wait' needs work 'running' or 'waiting'"),
        ("wait", {"work": "complete"}, "route 'wait' needs work 'running' or 'waiting'"),
        # A small model's common mistake: starting work that already runs.
        ("act", {"work": "running"}, "an 'advance' action needs work 'idle', got 'running'"),
        ("act", {"work": "waiting"}, "an 'advance' action needs work 'idle', got 'waiting'"),
        ("act", {"work": "unknown"}, "an 'advance' action needs work 'idle', got 'unknown'"),
    ],
)
def test_route_must_agree_with_goal_and_work(
    route: str, overrides: dict[str, str], message: str
) -> None:
    assert message in str(errors(observation_dict(route, **overrides), Observation))


@pytest.mark.parametrize(
    ("route", "overrides"),
    [
        ("wait", {"work": "waiting"}),
        ("wait", {"goal": "unknown", "work": "running"}),
        ("act", {"goal": "unknown", "work": "failed", "action": action(kind="recover")}),
        # A stuck target that claims to run may be recovered or repaired.
        ("act", {"work": "running", "action": action(kind="recover")}),
        ("act", {"work": "running", "action": action(kind="repair")}),
        ("stop", {"goal": "incomplete", "work": "idle", "stopReason": "materialBlocker"}),
        ("stop", {"goal": "incomplete", "work": "running", "stopReason": "userRequested"}),
    ],
)
def test_routes_that_agree_with_their_states_are_accepted(
    route: str, overrides: dict[str, object]
) -> None:
    Observation.model_validate(observation_dict(route, **overrides))


def test_status_written_with_the_earlier_repair_guard_still_reads() -> None:
    from goalkeeper.core.models import MonitorStatus

    guard = {"failureId": "bad-flag", "targetStateId": "s1", "check": 2}
    status = MonitorStatus.model_validate({"repairGuard": guard})
    assert [r.failureId for r in status.repairsDone] == ["bad-flag"]
    assert "repairGuard" not in status.model_dump()
    assert MonitorStatus.model_validate({"repairGuard": None}).repairsDone == []
