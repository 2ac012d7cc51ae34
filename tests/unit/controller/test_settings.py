"""Operator settings: read from the environment, bad values named with their variable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from goalkeeper.controller.settings import SettingsError, load


def test_defaults() -> None:
    settings = load({})
    assert settings.model == ""
    assert (settings.observerServiceAccount, settings.actorServiceAccount) == (
        "goalkeeper-observer",
        "goalkeeper-actor",
    )
    assert settings.minute == timedelta(minutes=1)
    assert settings.namespaces == []
    assert settings.stallChecks == 3
    assert settings.wakeIntervalSeconds == 60
    assert settings.approval_window == timedelta(0)


def test_the_engine_policy_is_built_from_the_settings_in_one_place() -> None:
    from goalkeeper.core.policy import Policy

    assert load({}).policy() == Policy(), "the defaults agree"
    policy = load(
        {
            "GOALKEEPER_TIME_SCALE": "1",
            "GOALKEEPER_STALL_CHECKS": "4",
            "GOALKEEPER_STEP_RETRY_SECONDS": "2",
            "GOALKEEPER_FAILURE_WINDOW_SECONDS": "7200",
            "GOALKEEPER_INVALID_ANSWERS_LIMIT": "9",
            "GOALKEEPER_BRAKE_ACTS": "6",
            "GOALKEEPER_APPROVAL_TIMEOUT": "1h",
            "GOALKEEPER_CONFIRM_AUTHORITY": "true",
            "GOALKEEPER_MODEL_SPEND_CAP_USD": "3",
            "GOALKEEPER_WAKE_INTERVAL_SECONDS": "5",
        }
    ).policy()
    assert policy == Policy(
        minute=timedelta(seconds=1),
        model_spend_cap_usd=3.0,
        stall_checks=4,
        wake_interval=timedelta(seconds=5),
        approval_window=timedelta(hours=1),
        confirm_authority=True,
        retry_first=timedelta(seconds=2),
        failure_window=timedelta(hours=2),
        invalid_answers=9,
        brake_acts=6,
    )


def test_values_and_passthrough() -> None:
    settings = load(
        {
            "GOALKEEPER_MODEL": "anthropic:claude",
            "GOALKEEPER_NAMESPACES": "a, b,,",
            "GOALKEEPER_STEP_HISTORY": "5",
            "GOALKEEPER_REQUEST_LIMIT": "12",
            "GOALKEEPER_ROUTED_OUTPUT": "true",
            "GOALKEEPER_STALL_CHECKS": "5",
            "GOALKEEPER_WAKE_INTERVAL_SECONDS": "5",
            "GOALKEEPER_APPROVAL_TIMEOUT": "1h30m",
            "UNRELATED": "x",
        }
    )
    assert settings.wakeIntervalSeconds == 5
    assert settings.approval_window == timedelta(hours=1, minutes=30)
    assert settings.namespaces == ["a", "b"]
    assert settings.stallChecks == 5
    assert settings.stepHistory == 5
    assert settings.stepEnv == {
        "GOALKEEPER_REQUEST_LIMIT": "12",
        "GOALKEEPER_ROUTED_OUTPUT": "true",
    }


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"GOALKEEPER_MODEL": "gpt-4"}, "GOALKEEPER_MODEL: Value error, must be `openai:NAME`"),
        ({"GOALKEEPER_STEP_HISTORY": "0"}, "GOALKEEPER_STEP_HISTORY: Input should be greater"),
        ({"GOALKEEPER_STEP_DEADLINE_SECONDS": "5"}, "GOALKEEPER_STEP_DEADLINE_SECONDS"),
        ({"GOALKEEPER_TIME_SCALE": "0"}, "GOALKEEPER_TIME_SCALE"),
        ({"GOALKEEPER_STEP_HISTORY": "many"}, "GOALKEEPER_STEP_HISTORY: Input should be a valid"),
        ({"GOALKEEPER_STALL_CHECKS": "0"}, "GOALKEEPER_STALL_CHECKS: Input should be greater"),
        ({"GOALKEEPER_STALL_CHECKS": "101"}, "GOALKEEPER_STALL_CHECKS: Input should be less"),
        ({"GOALKEEPER_WAKE_INTERVAL_SECONDS": "0"}, "GOALKEEPER_WAKE_INTERVAL_SECONDS: Input"),
        ({"GOALKEEPER_APPROVAL_TIMEOUT": "a day"}, "GOALKEEPER_APPROVAL_TIMEOUT: String should"),
        ({"GOALKEEPER_STEP_RETRY_SECONDS": "0"}, "GOALKEEPER_STEP_RETRY_SECONDS: Input should"),
        ({"GOALKEEPER_FAILURE_WINDOW_SECONDS": "0"}, "GOALKEEPER_FAILURE_WINDOW_SECONDS: Input"),
        ({"GOALKEEPER_INVALID_ANSWERS_LIMIT": "0"}, "GOALKEEPER_INVALID_ANSWERS_LIMIT: Input"),
        ({"GOALKEEPER_BRAKE_ACTS": "21"}, "GOALKEEPER_BRAKE_ACTS: Input should be less"),
        (
            {"GOALKEEPER_INSTRUCTIONS": "x" * 4001},
            "GOALKEEPER_INSTRUCTIONS: String should have at most 4000 characters",
        ),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(SettingsError, match="GOALKEEPER_") as caught:
        load(env)
    assert fragment in str(caught.value)


def test_goalkeeper_run_reports_bad_settings_and_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from goalkeeper.cli import main

    monkeypatch.setenv("GOALKEEPER_MODEL", "nonsense")
    assert main(["run"]) == 2
    assert "GOALKEEPER_MODEL" in capsys.readouterr().err
