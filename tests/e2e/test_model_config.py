"""ModelConfig: each Monitor's steps reach only the model its namespace configured, with
that config's key, and its spend is attributed to it. Real API server, the operator as its
own process under its own role, real step processes, scripted model servers on loopback
that each refuse any key but their own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness import (
    GROUP,
    VERSION,
    Cluster,
    OperatorProcess,
    Scenario,
    wait_until,
)
from tests.e2e.test_instructions import resume_when_suspended
from tests.support.model_server import ModelServer
from tests.support.observations import TASK

pytestmark = pytest.mark.cluster


@pytest.fixture
def team_a() -> Iterator[ModelServer]:
    with ModelServer(model="model-a", api_key="key-a") as server:
        yield server


@pytest.fixture
def team_b() -> Iterator[ModelServer]:
    with ModelServer(model="model-b", api_key="key-b") as server:
        yield server


def secret(cluster: Cluster, name: str, key: str) -> None:
    cluster.core.create_namespaced_secret(
        cluster.ns, {"metadata": {"name": name}, "stringData": {"api-key": key}}
    )


def model_config(cluster: Cluster, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelConfig",
        "metadata": {"name": name, "namespace": cluster.ns},
        "spec": spec,
    }
    created: dict[str, Any] = cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "modelconfigs", body
    )
    return created


def config_status(cluster: Cluster, name: str) -> dict[str, Any]:
    found = cluster.custom.get_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "modelconfigs", name
    )
    return dict(found.get("status") or {})


PRICES = {"inputPerMTokUsd": 1.0, "outputPerMTokUsd": 4.0}


def test_each_monitor_reaches_only_its_configs_model_with_its_key(
    control_plane: Any,
    cluster: Cluster,
    model: ModelServer,
    team_a: ModelServer,
    team_b: ModelServer,
    operator: OperatorProcess,
) -> None:
    cluster.target(suspended=False, seconds=1)
    secret(cluster, "team-a-key", "key-a")
    secret(cluster, "team-b-key", "key-b")
    common = {"provider": "openai", "prices": PRICES}
    model_config(
        cluster,
        "default",
        model="model-a",
        baseUrl=team_a.base_url,
        apiKeySecret={"name": "team-a-key"},
        **common,
    )
    model_config(
        cluster,
        "team-b",
        model="model-b",
        baseUrl=team_b.base_url,
        apiKeySecret={"name": "team-b-key"},
        **common,
    )
    team_a.default = Scenario(cluster.ns, resume_when_suspended)
    team_b.default = Scenario(cluster.ns, resume_when_suspended)
    cluster.create_monitor("uses-default", everyMinutes=1)
    # Annotated from its creation: its first step already runs with team-b.
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": {
            "name": "uses-team-b",
            "namespace": cluster.ns,
            "annotations": {"goalkeeper.dev/model-config": "team-b"},
        },
        "spec": {"task": TASK, "everyMinutes": 1},
    }
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "monitors", body)
    for name in ("uses-default", "uses-team-b"):
        status = wait_until(
            lambda n=name: cluster.stopped(n), 180, f"{name} to stop", operator.logs
        )
        assert status["stop"]["reason"] == "goalComplete", status["stop"]

    # Each server saw only its own key, and the operator's own model nothing.
    assert team_a.completed and team_b.completed
    assert {r.headers.get("authorization") for r in team_a.requests} == {"Bearer key-a"}
    assert {r.headers.get("authorization") for r in team_b.requests} == {"Bearer key-b"}
    assert {r.body["model"] for r in team_a.requests} == {"model-a"}
    assert {r.body["model"] for r in team_b.requests} == {"model-b"}
    assert model.requests == []

    used = {n: cluster.status(n) for n in ("uses-default", "uses-team-b")}
    assert used["uses-default"]["modelConfig"] == "default"
    assert used["uses-team-b"]["modelConfig"] == "team-b"
    for name, config in (("uses-default", "default"), ("uses-team-b", "team-b")):
        [entry] = used[name]["usageByConfig"]
        assert entry["config"] == config and entry["costUsd"] > 0
    a_requests = len(team_a.completed)
    assert used["uses-default"]["modelUsage"]["requests"] == a_requests

    # Each config's status names its Monitor and what it spent through it.
    def attributed(config: str, monitor: str) -> dict[str, Any] | None:
        found = config_status(cluster, config)
        names = [u["monitor"] for u in found.get("monitors") or []]
        return found if names == [monitor] and found.get("spendUsd", 0) > 0 else None

    spent_a = wait_until(lambda: attributed("default", "uses-default"), 60, "default's status")
    assert spent_a["spendUsd"] == pytest.approx(used["uses-default"]["usageByConfig"][0]["costUsd"])
    wait_until(lambda: attributed("team-b", "uses-team-b"), 60, "team-b's status")
    wide = control_plane.kubectl("get", "monitors", "-n", cluster.ns, "-o", "wide").stdout
    assert "MODEL CONFIG" in wide and "team-b" in wide


def test_an_invalid_config_is_refused_naming_the_field(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as refused:
        model_config(cluster, "broken", provider="openai", model="m", stepLimits={"requests": 0})
    assert refused.value.status == 422
    assert "spec.stepLimits.requests" in str(refused.value.body)
    with pytest.raises(ApiException) as unknown:
        model_config(cluster, "broken", provider="azure", model="m")
    assert "spec.provider" in str(unknown.value.body)


def test_a_missing_secret_holds_its_monitors_with_the_reason(
    cluster: Cluster, model: ModelServer, team_a: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(suspended=False, seconds=1)
    model_config(
        cluster,
        "default",
        provider="openai",
        model="model-a",
        baseUrl=team_a.base_url,
        apiKeySecret={"name": "not-made-yet"},
    )
    team_a.default = Scenario(cluster.ns, resume_when_suspended)
    cluster.create_monitor(everyMinutes=1)
    why = "The model API key, key api-key of Secret not-made-yet, named by ModelConfig default"

    def held() -> dict[str, Any] | None:
        status = cluster.status()
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        return status if why in ready.get("message", "") else None

    status = wait_until(held, 120, "the missing Secret to show on the Monitor", operator.logs)
    assert status["monitor"] == "active" and "is missing" in status["schedule"]["description"]
    assert team_a.requests == [] and model.requests == []
    # Made now: the run goes on with it.
    secret(cluster, "not-made-yet", "key-a")
    done = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)
    assert done["stop"]["reason"] == "goalComplete"
    assert {r.headers.get("authorization") for r in team_a.requests} == {"Bearer key-a"}
