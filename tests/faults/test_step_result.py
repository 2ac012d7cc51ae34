"""A step's result survives an API-server restart: an act step that did its work and meets a
stopped kube-apiserver as it writes its result keeps trying, and writes it once the server
is back, so the monitor records the act as it happened, not as failed.

Everything is real: the suite's own control plane (its kube-apiserver stopped and started
by the test), the pod runner running the step Jobs, the operator, and the scripted model
served over HTTP on loopback.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from goalkeeper.devcluster import PodRunner
from tests.e2e.harness import (
    ROOT,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    _is_observe,
    is_reading,
    observation,
    report_text,
    wait_until,
    write_token_kubeconfig,
)
from tests.faults.cluster import RestartableControlPlane
from tests.support.model_server import Final, ModelServer, Reply
from tests.support.observations import action

pytestmark = [pytest.mark.faults, pytest.mark.cluster]

NAMESPACE = "restart"
RETRIED = "writing the MonitorStep status failed"


def observe(facts: Facts, n: int) -> dict[str, Any]:
    if facts.suspended:
        return observation(
            "act",
            "incomplete",
            "idle",
            facts,
            "Suspended; resuming it.",
            # Under a grant the act step carries out with the model, so the model's answer
            # is the moment the result is written (a typed resume asks no model).
            action=action(
                action="Resume Job build (set spec.suspend=false).", authorizedActionId="fix-config"
            ),
        )
    if facts.succeeded:
        done = "Job build succeeded."
        return observation("stop", "complete", "complete", facts, done, stopReason="goalComplete")
    return observation("wait", "incomplete", "running", facts, "Job build is running.")


def _prepare(plane: RestartableControlPlane, api: Any) -> None:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    plane.kubectl("apply", "-f", str(ROOT / "config" / "rbac" / "operator.yaml"), check=True)
    steps = str(ROOT / "config" / "rbac" / "steps.yaml")
    plane.kubectl("apply", "-n", NAMESPACE, "-f", steps, check=True)
    plane.kubectl(
        "create",
        "secret",
        "generic",
        "model-api",
        "-n",
        NAMESPACE,
        "--from-literal=api-key=test-key-not-secret",
        check=True,
    )


def _act_stderr(runner: PodRunner) -> str:
    with runner._lock:
        records = [r for r in runner.records.values() if "-act-" in r.name]
    return "".join(r.stderr.read_text() for r in records if r.stderr and r.stderr.exists())


def test_an_act_result_written_while_the_api_server_is_down_lands_once_it_is_back(
    plane: RestartableControlPlane, tmp_path: Path
) -> None:
    scenario = Scenario(NAMESPACE, observe)
    halted, resumed = threading.Event(), threading.Event()

    def model(body: dict[str, Any]) -> Reply:
        reply = scenario(body)
        acting = not is_reading(body) and not _is_observe(body)
        if acting and isinstance(reply, Final) and not halted.is_set():
            # The act has resumed the Job; the API server goes as the step writes its result.
            plane.halt("kube-apiserver")
            halted.set()
        return reply

    with plane.api_client() as api:
        _prepare(plane, api)
        cluster = Cluster(api, NAMESPACE)
        cluster.target(done=0)
        runner = PodRunner(
            plane.kubeconfig, label_selector=None, namespace=NAMESPACE, log_dir=tmp_path / "pods"
        )
        kubeconfig = tmp_path / "operator.kubeconfig"
        write_token_kubeconfig(
            api, plane.kubeconfig, "goalkeeper-system", "goalkeeper-operator", kubeconfig
        )
        (tmp_path / "operator").mkdir()
        with ModelServer(default=model) as server:
            operator = OperatorProcess(
                kubeconfig, NAMESPACE, server, tmp_path / "operator",
                GOALKEEPER_STEP_DEADLINE_SECONDS="90",
            )  # fmt: skip
            runner.start()
            operator.start()
            try:
                cluster.create_monitor(everyMinutes=1)
                wait_until(halted.is_set, 180, "the act step's answer", operator.logs)
                wait_until(
                    lambda: RETRIED in _act_stderr(runner),
                    30,
                    "the act step to meet the stopped API server",
                    lambda: _act_stderr(runner),
                )
                plane.resume("kube-apiserver")
                resumed.set()
                status = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)
                steps = cluster.steps()
                failed = cluster.events("StepFailed")
                reports = cluster.reports(status["checks"])
                act_job = cluster.batch.read_namespaced_job(
                    next(s for s in steps if s["spec"]["kind"] == "act")["metadata"]["name"],
                    NAMESPACE,
                )
            finally:
                if halted.is_set() and not resumed.is_set():
                    plane.resume("kube-apiserver")
                operator.stop()
                runner.stop()

    told = _act_stderr(runner)
    assert "trying again" in told and "Succeeded" in told
    # The Job runs a second once resumed: the check after the act may still see it run.
    assert status["stop"]["reason"] == "goalComplete" and status["checks"] >= 2
    kinds = [s["spec"]["kind"] for s in steps]
    assert kinds == ["extract", "observe", "act"] + ["observe"] * (status["checks"] - 1)
    act_step = steps[2]
    assert act_step["status"]["phase"] == "Succeeded"
    assert act_step["status"]["result"]["outcome"] == "succeeded"
    assert status["lastAction"]["outcome"] == "succeeded"
    assert scenario.acts == 1, "the act ran once"
    assert failed == [], "no step failed"
    # The pod runner wrote the step pod's end through the restart too: its Job completed.
    assert act_job.status.succeeded == 1
    assert all("Last action outcome" not in report_text(e) for e in reports)
