"""The local model keeps each step kind's prompt cache between runs: `goalkeeper model serve`
saves every slot that holds a prompt when it stops and restores it when it starts, so the
first step of a kind after a restart does not read its system prompt and tools again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from goalkeeper.localmodel.server import model_file

pytestmark = pytest.mark.local_model

CONTEXT = 2048
# A system prompt of some 250 tokens, the shape of an extract step's request (no tools).
SYSTEM = "You read a person's task for a Kubernetes operator and answer briefly. " * 18


def _serve(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "goalkeeper.cli", "model", "serve"]
    command += ["--context", str(CONTEXT), "--threads", "1"]
    server = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    settings = dict(kv.split("=", 1) for kv in server.stdout.readline().split())
    return server, settings["GOALKEEPER_MODEL_BASE_URL"]


def _stop(server: subprocess.Popen[str]) -> str:
    server.send_signal(signal.SIGTERM)
    _, err = server.communicate(timeout=300)
    return err


def _ask(base_url: str) -> dict[str, Any]:
    body = {
        "model": "local",
        "max_tokens": 2,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Task: watch Job build. Say ok."},
        ],
    }
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        usage: dict[str, Any] = json.loads(answer.read())["usage"]
    return usage


@pytest.mark.skipif(
    os.environ.get("GOALKEEPER_SKIP_LOCAL_MODEL") == "1", reason="GOALKEEPER_SKIP_LOCAL_MODEL=1"
)
def test_a_restarted_server_finds_the_prompt_it_read_before(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GOALKEEPER_LOCAL_MODEL": str(model_file()),
        "GOALKEEPER_MODELS_DIR": str(tmp_path),
    }
    server, base_url = _serve(env)
    try:
        first = _ask(base_url)
    finally:
        said = _stop(server)
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert "prompt cache: slot 0: saved" in said, said[-2000:]
    [cache] = (tmp_path / "slots").iterdir()
    assert cache.stat().st_mode & 0o077 == 0, "the steps' prompts are this user's only"
    # Only the slot that held a prompt is kept; empty ones leave no file behind.
    assert sorted(p.name for p in cache.iterdir()) == ["slot-0.bin"]

    server, base_url = _serve(env)
    try:
        again = _ask(base_url)
    finally:
        said = _stop(server)
    assert "prompt cache: slot 0: restored" in said, said[-2000:]
    # All but the last token of the same request came from the restored cache.
    assert again["prompt_tokens_details"]["cached_tokens"] >= again["prompt_tokens"] - 2
    assert sorted(p.name for p in cache.iterdir()) == ["slot-0.bin"]
