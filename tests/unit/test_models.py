"""The public input and the step results: bounds, defaults, closed fields, clear errors."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.support.observations import action, observation_dict

from goalkeeper.core.models import (
    DEFAULT_STOP_WHEN,
    WHITESPACE,
    ActionResult,
    MonitorSpec,
    Observation,
)


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


@pytest.mark.parametrize(
    "padded",
    [
        "x" * 8000 + " " * 10000,
        " " * 5000 + "x" * 8000 + " " * 5000,
        "\n" * 10000 + "x" * 8000 + "\t\r\n" * 3000,
        "\u3000\u2028\xa0\x85" * 2500 + "x" * 8000 + "\u205f" * 10000,
    ],
    ids=["spaces-after", "spaces-around", "newlines-and-tabs", "unicode-spaces"],
)
def test_task_of_8000_chars_with_any_amount_of_whitespace_around_is_valid(padded: str) -> None:
    assert MonitorSpec.model_validate({"task": padded}).task == "x" * 8000


@pytest.mark.parametrize("padding", ["", " " * 10000, "\n\t" * 5000])
def test_8001_chars_are_too_many_however_they_are_padded(padding: str) -> None:
    found = errors({"task": padding + "x" * 8001 + padding})
    assert any("at most 8000 characters after trimming" in str(e["msg"]) for e in found)
    found = errors({"task": "x", "stopWhen": padding + "y" * 4001 + padding})
    assert any(e["loc"] == ("stopWhen",) and "at most 4000" in str(e["msg"]) for e in found)


def test_stop_when_of_4000_chars_with_whitespace_around_is_valid() -> None:
    spec = MonitorSpec.model_validate({"task": "x", "stopWhen": "\n" * 9000 + "y" * 4000 + " "})
    assert spec.stopWhen == "y" * 4000


def test_trimmed_whitespace_is_what_cel_trim_removes() -> None:
    # CEL's trim() is Go's unicode.IsSpace: Python's whitespace less U+001C-U+001F, which
    # the API server counts, and so does the model.
    python = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert set(WHITESPACE) == python - {"\x1c", "\x1d", "\x1e", "\x1f"}
    assert MonitorSpec.model_validate({"task": "\x1c"}).task == "\x1c"
    assert errors({"task": "\x1c" + "x" * 8000})


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(min_value=1, max_value=8001),
    before=st.integers(min_value=0, max_value=20000),
    after=st.integers(min_value=0, max_value=20000),
    space=st.sampled_from(WHITESPACE),
    inner=st.text(alphabet=WHITESPACE, max_size=50),
)
def test_property_task_bound_counts_only_the_trimmed_text(
    length: int, before: int, after: int, space: str, inner: str
) -> None:
    # `length` characters, whitespace inside them but none at either end.
    core = "x" if length == 1 else "x" + (inner + "y" * length)[: length - 2] + "x"
    task = space * before + core + inner + space * after
    if length <= 8000:
        assert MonitorSpec.model_validate({"task": task}).task == core
    else:
        assert errors({"task": task})


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
