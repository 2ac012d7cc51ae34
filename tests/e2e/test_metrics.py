"""The operator's Prometheus metrics, scraped after a real run, match what happened."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from goalkeeper.devcluster.controlplane import free_port
from tests.e2e.harness import (
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    wait_until,
)
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_checks_steps_and_stops(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, tmp_path: Path
) -> None:
    port = free_port()
    operator.restart_with(GOALKEEPER_METRICS_PORT=str(port))
    # The Job ends once check 1 is in: one that ended first would settle check 1 by itself.
    gate = tmp_path / "finish"
    cluster.target(suspended=False, gate=gate)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:
            return observation("wait", "incomplete", "running", facts, "Running.")
        return observation(
            "stop", "complete", "complete", facts, "Done.", stopReason="goalComplete"
        )

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=1)
    wait_until(lambda: cluster.status().get("checks") == 1, 120, "check 1", operator.logs)
    gate.touch()
    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    assert status["checks"] == 2

    ns = cluster.ns
    samples = wait_until(
        lambda: (
            (s := scrape(port))
            and value(s, "goalkeeper_stops_total", namespace=ns, reason="goalComplete") == 1
            and s
        ),
        30,
        "the stop to be counted",
        operator.logs,
    )
    checks = "goalkeeper_checks_total"
    assert value(samples, checks, namespace=ns, route="wait", result="accepted") == 1
    assert value(samples, checks, namespace=ns, route="stop", result="accepted") == 1
    assert value(samples, checks, namespace=ns, route="unknown", result="rejected") == 0
    steps = "goalkeeper_steps_total"
    assert value(samples, steps, namespace=ns, kind="observe", outcome="succeeded") == 2
    assert value(samples, "goalkeeper_model_tokens_total", namespace=ns, direction="input") > 0
    stopped = value(
        samples, "goalkeeper_monitors", monitor_state="stopped", goal="complete", work="complete"
    )
    assert stopped >= 1
