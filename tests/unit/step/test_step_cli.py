"""The thin entry: status documents, summaries, termination message, model construction."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel
from tests.support.observations import observation_dict

from goalkeeper.core.models import MonitorStepStatus, StepErrorKind, StepKind, StepUsage
from goalkeeper.step import cli
from goalkeeper.step.agent import StepOutcome
from goalkeeper.step.model import StepModel, build_model
from goalkeeper.step.settings import load_settings

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 10, 1, tzinfo=UTC)


def test_failed_status_clears_result_and_validates() -> None:
    outcome = StepOutcome(None, StepUsage(requests=2), "usage limit reached", StepErrorKind.limits)
    doc = cli.final_status(outcome, T0, T1)
    assert doc["phase"] == "Failed" and doc["errorKind"] == "limits"
    assert doc["result"] is None  # a null clears an earlier attempt's result in a merge patch
    MonitorStepStatus.model_validate(doc)


def test_succeeded_status_and_summary() -> None:
    outcome = StepOutcome(observation_dict("wait"), StepUsage(requests=1))
    doc = cli.final_status(outcome, T0, T1)
    assert doc["phase"] == "Succeeded" and doc["error"] is None and doc["errorKind"] is None
    assert doc["result"]["route"] == "wait"
    assert cli.summary(StepKind.observe, outcome).startswith("observe Succeeded: route=wait")


def test_termination_message_goes_to_the_configured_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "term"
    monkeypatch.setenv("GOALKEEPER_TERMINATION_MESSAGE_PATH", str(path))
    cli.write_termination_message("x" * 10_000)
    assert len(path.read_text()) == cli.TERMINATION_MAX


def test_missing_identity_exits_2_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GOALKEEPER_STEP_NAME", raising=False)
    monkeypatch.delenv("GOALKEEPER_STEP_NAMESPACE", raising=False)
    assert cli.main(["observe"]) == 2
    err = capsys.readouterr().err
    assert "GOALKEEPER_STEP_NAME is not set" in err and "Traceback" not in err


def test_models_are_built_explicitly() -> None:
    openai = build_model(
        load_settings(
            {
                "GOALKEEPER_MODEL": "openai:qwen3",
                "GOALKEEPER_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
            }
        )
    )
    assert isinstance(openai, StepModel) and isinstance(openai.wrapped, OpenAIChatModel)
    assert openai.wrapped.model_name == "qwen3"
    anthropic = build_model(
        load_settings(
            {"GOALKEEPER_MODEL": "anthropic:claude-sonnet-4-5", "GOALKEEPER_MODEL_API_KEY": "k"}
        )
    )
    assert isinstance(anthropic.wrapped, AnthropicModel)
    assert anthropic.wrapped.model_name == "claude-sonnet-4-5"


def test_invalid_or_mismatched_input_is_rejected() -> None:
    from pydantic import ValidationError

    good = {"kind": "observe", "check": 1, "maxChecks": 5, "task": "t", "stopWhen": "s"}
    assert cli.parse_input({"spec": {"input": good}}, StepKind.observe).check == 1
    with pytest.raises(ValidationError):
        cli.parse_input({"spec": {"input": {**good, "maxChecks": 0}}}, StepKind.observe)
    with pytest.raises(ValueError, match=r"spec\.input\.kind"):
        cli.parse_input({"spec": {"input": good}}, StepKind.act)
    with pytest.raises(ValueError, match=r"no spec\.input"):
        cli.parse_input({"spec": {}}, StepKind.observe)
    with pytest.raises(ValueError, match=r"needs spec\.input\.action"):
        cli.parse_input({"spec": {"input": {**good, "kind": "act"}}}, StepKind.act)


def test_every_status_write_names_the_pod_when_the_environment_does() -> None:
    from goalkeeper.step.settings import load_identity

    env = {
        "GOALKEEPER_STEP_NAME": "m-1",
        "GOALKEEPER_STEP_NAMESPACE": "shop",
        "GOALKEEPER_POD_NAME": "m-1-abcde",
        "GOALKEEPER_POD_UID": "0f0e-11",
    }
    pod = cli.step_pod(load_identity(env))
    assert pod is not None
    running = cli.running_status(T0, pod)
    assert running["phase"] == "Running" and running["pod"] == {
        "name": "m-1-abcde",
        "uid": "0f0e-11",
    }
    done = cli.final_status(StepOutcome(observation_dict("wait"), StepUsage()), T0, T1, pod)
    assert done["pod"] == {"name": "m-1-abcde", "uid": "0f0e-11"}
    MonitorStepStatus.model_validate(done)
    # without the pod's identity the step still runs, and writes no pod at all
    anonymous = cli.step_pod(load_identity({**env, "GOALKEEPER_POD_UID": ""}))
    assert anonymous is None
    assert "pod" not in cli.running_status(T0, None)
    assert "pod" not in cli.final_status(
        StepOutcome(None, StepUsage(), "x", StepErrorKind.internal), T0, T1
    )


def test_the_api_key_never_reaches_the_status_or_termination_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "sk-live-never-written"
    monkeypatch.setenv("GOALKEEPER_MODEL_API_KEY", key)
    outcome = StepOutcome(
        None, StepUsage(), f"HTTP 401: key {key} rejected", StepErrorKind.provider
    )
    doc = cli.final_status(outcome, T0, T1)
    assert key not in str(doc) and "<redacted by goalkeeper>" in doc["error"]
    path = tmp_path / "term"
    monkeypatch.setenv("GOALKEEPER_TERMINATION_MESSAGE_PATH", str(path))
    cli.write_termination_message(cli.summary(StepKind.observe, outcome))
    assert key not in path.read_text()
    cli._say(f"failed with {key}")
    assert key not in capsys.readouterr().err
