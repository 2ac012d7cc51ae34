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


def test_without_a_model_or_fetched_weights_nothing_is_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GOALKEEPER_LOCAL_MODEL", raising=False)
    monkeypatch.setenv("GOALKEEPER_MODELS_DIR", str(tmp_path / "models"))
    env: dict[str, str] = {}
    with model_for_steps(OperatorSettings(), env, tmp_path) as step_env:
        assert step_env == {} and env == {}
    assert "run `goalkeeper model fetch` once" in capsys.readouterr().out
    assert not (tmp_path / "models").exists()
