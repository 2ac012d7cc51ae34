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


def start_dev_with(model: ModelServer, tmp_path: Path) -> tuple[Any, Path]:
    """`goalkeeper dev` with the scripted model configured, which wins over the local one,
    and a model key to keep out of every pod."""
    return start_dev(
        tmp_path,
        GOALKEEPER_MODEL=f"openai:{model.model}",
        GOALKEEPER_MODEL_BASE_URL=model.base_url,
        GOALKEEPER_MODEL_API_KEY=DEV_KEY,
    )


def test_dev_runs_everything_and_ctrl_c_stops_it(tmp_path: Path, model: ModelServer) -> None:
    dev, log_path = start_dev_with(model, tmp_path)
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
        # The key reached the model from the Secret the steps reference, and nothing else:
        # a workload pod, run with the dev process's environment, does not see it.
        keys = {r.headers.get("authorization") for r in model.requests}
        assert keys == {f"Bearer {DEV_KEY}"}, keys

        def run(*args: str, stdin: str | None = None) -> str:
            done = subprocess.run(
                [*kubectl, *args], input=stdin, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        run("apply", "-f", "-", stdin=ENV_DUMP)
        phase = ["get", "pod", "env-dump", "-o", "jsonpath={.status.phase}"]
        wait_until(lambda: run(*phase) == "Succeeded", 60, "the env-dump pod to finish")
        # Read as from a kubelet: through the API server, from the node's log endpoint.
        assert run("logs", "env-dump") == "model key: absent\n"
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


DEV_KEY = "dev-key-not-secret"
ENV_DUMP = """
apiVersion: v1
kind: Pod
metadata: {name: env-dump}
spec:
  restartPolicy: Never
  containers:
    - name: dump
      image: example.invalid/dump:1
      command:
        - python3
        - -c
        - "import os; print('model key:', os.environ.get('GOALKEEPER_MODEL_API_KEY', 'absent'))"
"""

WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 0
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
        - name: web
          image: example.invalid/web:1
          command: [python3, -c, "import time; time.sleep(100000)"]
"""


def test_dev_runs_a_deployment_and_rolls_it_out(tmp_path: Path, model: ModelServer) -> None:
    dev, log_path = start_dev_with(model, tmp_path)
    try:
        kubectl = wait_until(
            lambda: dev_kubectl(log_path), 180, "the export lines", log_path.read_text
        )

        def run(*args: str, stdin: str | None = None) -> str:
            done = subprocess.run(
                [*kubectl, *args], input=stdin, capture_output=True, text=True, timeout=150
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        def pods() -> set[str]:
            """NAME=NODE of each pod of web that is not Terminating."""
            found = run(
                "get", "pods", "-l", "app=web", "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName}="
                "{.metadata.deletionTimestamp} {end}",
            )  # fmt: skip
            return {p.rstrip("=") for p in found.split() if p.endswith("=")}

        run("apply", "-f", "-", stdin=WEB)
        run("scale", "deployment/web", "--replicas=2")
        wait_until(
            lambda: (
                run("get", "deployment/web", "-o", "jsonpath={.status.availableReplicas}") == "2"
            ),
            120,
            "2 available replicas",
            log_path.read_text,
        )
        before = pods()
        assert len(before) == 2 and all(p.endswith("=goalkeeper-dev") for p in before), before
        run("rollout", "restart", "deployment/web")
        run("rollout", "status", "deployment/web", "--timeout=120s")

        def replaced() -> set[str] | None:
            found = pods()
            return found if len(found) == 2 and not found & before else None

        after = wait_until(replaced, 60, "the old pods to be replaced", log_path.read_text)
        assert all(p.endswith("=goalkeeper-dev") for p in after), after
    finally:
        dev.send_signal(signal.SIGINT)
        code = dev.wait(60)
    assert code == 0, log_path.read_text()[-5000:]


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
