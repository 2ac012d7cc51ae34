"""`goalkeeper dev`: the whole local setup in the foreground, stopped cleanly by Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ROOT, dev_kubectl, is_reading, start_dev, wait_until
from tests.support.model_server import Final, ModelServer
from tests.support.observations import observation_dict

pytestmark = pytest.mark.cluster

BIN = Path(sys.executable).parent


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


@pytest.fixture
def model() -> Iterator[ModelServer]:
    # The task grants nothing this model reads into it; the observation restates that.
    done = observation_dict("stop", contract={"goal": "The render is done."}, authorizedActions=[])

    def answer(body: dict[str, Any]) -> Final:
        return Final({"goal": "The render is done."} if is_reading(body) else done)

    with ModelServer(default=answer) as server:
        yield server


def test_dev_runs_everything_and_ctrl_c_stops_it(tmp_path: Path, model: ModelServer) -> None:
    # A configured model wins over the local one `make dev` serves without it.
    dev, log_path = start_dev(
        tmp_path, GOALKEEPER_MODEL=f"openai:{model.model}", GOALKEEPER_MODEL_BASE_URL=model.base_url
    )
    try:
        kubectl = wait_until(
            lambda: dev_kubectl(log_path), 180, "the export lines", log_path.read_text
        )
        kubeconfig = kubectl[-1]
        cluster_dir = str(Path(kubeconfig).parent)
        assert processes_mentioning(cluster_dir), "control plane processes run"

        applied = subprocess.run(
            [*kubectl, "apply", "-f", str(ROOT / "examples" / "monitor.yaml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert applied.returncode == 0, applied.stderr

        def stop_reason() -> str | None:
            out = subprocess.run(
                [
                    *kubectl,
                    "get",
                    "monitor",
                    "nightly-render",
                    "-o",
                    "jsonpath={.status.stop.reason}",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            return out or None

        reason = wait_until(stop_reason, 180, "the monitor to stop", log_path.read_text)
        assert reason == "goalComplete"
        text = log_path.read_text()
        assert f"model: openai:{model.model} at {model.base_url}" in text
        assert model.requests, "the observe step ran through dev's pod runner"
        # the operator's first requests found the API server ready: no ERROR line
        assert [line for line in text.splitlines() if " ERROR " in line] == [], text
        logs_line = re.search(r"^step logs: (\S+) ", text, re.M)
        assert logs_line is not None, text
        assert Path(logs_line.group(1)).parent == tmp_path / "dev-logs"
        assert Path(logs_line.group(1)).is_dir()
        shown = subprocess.run(
            [str(BIN / "goalkeeper"), "logs", "nightly-render"],
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("GOALKEEPER_")},
                "GOALKEEPER_DEV_LOGS": str(tmp_path / "dev-logs"),
                "KUBECONFIG": kubeconfig,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert "nightly-render-2-observe" in shown.stdout + shown.stderr
    finally:
        dev.send_signal(signal.SIGINT)
        code = dev.wait(60)
    assert code == 0, log_path.read_text()[-5000:]
    # Reaped children can linger in the process table for a moment: wait, with a deadline.
    wait_until(lambda: processes_mentioning(cluster_dir) == [], 30, "every child to be stopped")


def test_dev_without_a_model_serves_the_local_one_and_says_what_is_missing(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOALKEEPER_")}
    env["GOALKEEPER_DEV_LOGS"] = str(tmp_path / "dev-logs")
    env["GOALKEEPER_LOCAL_MODEL"] = str(tmp_path / "missing.gguf")
    done = subprocess.run(
        [str(BIN / "goalkeeper"), "dev"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"goalkeeper dev: GOALKEEPER_LOCAL_MODEL={tmp_path}/missing.gguf is not a file." in (
        done.stderr
    )
    kubeconfig = re.search(r"^export KUBECONFIG=(\S+)$", done.stdout, re.M)
    assert kubeconfig is not None, done.stdout
    wait_until(
        lambda: processes_mentioning(str(Path(kubeconfig.group(1)).parent)) == [],
        30,
        "the control plane to be stopped",
    )
