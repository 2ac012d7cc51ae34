"""What `goalkeeper model serve` is given, checked before any weights are loaded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from goalkeeper.localmodel.server import (
    CHAT_TEMPLATE,
    STEP_SETTINGS,
    ServeError,
    ServeOptions,
    model_file,
)
from goalkeeper.localmodel.weights import Weights
from goalkeeper.step.settings import load_settings


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [
        ("context", 1024, "context must be 2048 to 32768 tokens, not 1024"),
        ("threads", -1, "threads must be 0 (all CPUs) to 256, not -1"),
        ("temperature", 2.5, "temperature must be 0 to 2, not 2.5"),
        ("port", 70000, "port must be 0 (a free one) to 65535, not 70000"),
    ],
)
def test_each_bad_option_names_its_bound(field: str, value: float, bound: str) -> None:
    with pytest.raises(ServeError, match=re.escape(bound)):
        ServeOptions(**{field: value})


def test_a_gguf_file_the_user_has_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"GGUF")
    monkeypatch.setenv("GOALKEEPER_LOCAL_MODEL", str(own))
    assert model_file(download=False) == own
    monkeypatch.setenv("GOALKEEPER_LOCAL_MODEL", str(tmp_path / "missing.gguf"))
    with pytest.raises(ServeError, match=r"missing\.gguf is not a file"):
        model_file(download=False)


def test_weights_not_fetched_yet_say_how_to_fetch_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOALKEEPER_LOCAL_MODEL", raising=False)
    monkeypatch.setenv("GOALKEEPER_MODELS_DIR", str(tmp_path))
    weights = Weights("w", "w.gguf", "0" * 64, ())
    with pytest.raises(ServeError, match="run `goalkeeper model fetch`"):
        model_file(weights, download=False)


def test_the_tool_call_instruction_shows_a_call_as_the_model_must_write_it() -> None:
    # The original template printed its example inside doubled braces, and the model
    # copied them; the example must be one JSON object inside the tags llama.cpp parses.
    assert '{{\\"name\\"' not in CHAT_TEMPLATE
    assert '<tool_call>\\n{\\"name\\": \\"<function-name>\\", \\"arguments\\"' in CHAT_TEMPLATE


def test_the_settings_printed_for_the_steps_are_the_steps_own() -> None:
    # `serve` prints them and `goalkeeper dev` hands them to the steps: a typo would be
    # silently ignored, so they must parse as the step settings they name.
    settings = load_settings(
        {
            **STEP_SETTINGS,
            "GOALKEEPER_MODEL": "openai:local",
            "GOALKEEPER_MODEL_BASE_URL": "http://127.0.0.1:1/v1",
        }
    )
    assert settings.routed_output and settings.worked_examples
