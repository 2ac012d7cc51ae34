"""ModelConfig: each Monitor's steps reach only the model its namespace configured, with
that config's key, and its spend is attributed to it. Real API server, the operator as its
own process under its own role, real step processes, scripted model servers on loopback
that each refuse any key but their own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness import (
    GROUP,
    ROOT,
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


@pytest.fixture
def team_c() -> Iterator[ModelServer]:
    with ModelServer(model="model-c", api_key="key-c") as server:
        yield server


@pytest.fixture
def other_ns(control_plane: Any, api_client: Any) -> Iterator[Cluster]:
    """A second namespace with the step accounts, as a second team's."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.kubectl("create", "namespace", name, check=True)
    control_plane.kubectl(
        "apply", "-n", name, "-f", str(ROOT / "config" / "rbac" / "steps.yaml"), check=True
    )
    try:
        yield Cluster(api_client, name)
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false")


def configure(cluster: Cluster, config: str, server: ModelServer, key: str) -> None:
    """A ModelConfig `config` in the cluster's namespace for `server`, its key in a Secret."""
    secret(cluster, f"{config}-key", key)
    model_config(
        cluster,
        config,
        provider="openai",
        model=server.model,
        baseUrl=server.base_url,
        apiKeySecret={"name": f"{config}-key"},
        prices=PRICES,
    )
    server.default = Scenario(cluster.ns, resume_when_suspended)


def test_each_namespaces_monitors_reach_only_their_own_model_with_its_key(
    control_plane: Any,
    cluster: Cluster,
    other_ns: Cluster,
    model: ModelServer,
    team_a: ModelServer,
    team_b: ModelServer,
    team_c: ModelServer,
    operator: OperatorProcess,
) -> None:
    operator.restart_with(GOALKEEPER_NAMESPACES=f"{cluster.ns},{other_ns.ns}")
    for where in (cluster, other_ns):
        where.target(suspended=False, seconds=1)
    # Team A's namespace: its default, and a second config one Monitor names.
    configure(cluster, "default", team_a, "key-a")
    configure(cluster, "special", team_c, "key-c")
    # Team B's namespace: its own default.
    configure(other_ns, "default", team_b, "key-b")
    cluster.create_monitor("uses-default", everyMinutes=1)
    named = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": {
            "name": "uses-special",
            "namespace": cluster.ns,
            "annotations": {"goalkeeper.dev/model-config": "special"},
        },
        "spec": {"task": TASK, "everyMinutes": 1},
    }
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "monitors", named)
    other_ns.create_monitor("team-b", everyMinutes=1)
    runs = ((cluster, "uses-default"), (cluster, "uses-special"), (other_ns, "team-b"))
    for where, name in runs:
        status = wait_until(
            lambda w=where, n=name: w.stopped(n), 180, f"{name} to stop", operator.logs
        )
        assert status["stop"]["reason"] == "goalComplete", status["stop"]

    # Each server saw only its own key and model, and the operator's own model nothing.
    for server, key in ((team_a, "key-a"), (team_b, "key-b"), (team_c, "key-c")):
        assert server.completed, f"{server.model} was never reached"
        assert {r.headers.get("authorization") for r in server.requests} == {f"Bearer {key}"}
        assert {r.body["model"] for r in server.requests} == {server.model}
    assert model.requests == []

    used = {
        "uses-default": cluster.status("uses-default"),
        "uses-special": cluster.status("uses-special"),
        "team-b": other_ns.status("team-b"),
    }
    configs = {"uses-default": "default", "uses-special": "special", "team-b": "default"}
    for name, config in configs.items():
        assert used[name]["modelConfig"] == config
        [entry] = used[name]["usageByConfig"]
        assert entry["config"] == config and entry["costUsd"] > 0
    assert used["uses-default"]["modelUsage"]["requests"] == len(team_a.completed)
    assert used["team-b"]["modelUsage"]["requests"] == len(team_b.completed)

    # Each config's status comes to name its own Monitor and what it spent through it.
    def attributed(where: Cluster, config: str, monitor: str) -> dict[str, Any] | None:
        found = config_status(where, config)
        names = [u["monitor"] for u in found.get("monitors") or []]
        spent = used[monitor]["usageByConfig"][0]["costUsd"]
        settled = found.get("spendUsd", -1) == pytest.approx(spent, abs=1e-6)
        return found if names == [monitor] and settled else None

    for where, config, monitor in (
        (cluster, "default", "uses-default"),
        (cluster, "special", "uses-special"),
        (other_ns, "default", "team-b"),
    ):
        found = wait_until(
            lambda w=where, c=config, m=monitor: attributed(w, c, m), 60, f"{config}'s status"
        )
        assert found["monitorCount"] == 1 and found["spendUsd"] > 0
    wide = control_plane.kubectl("get", "monitors", "-n", cluster.ns, "-o", "wide").stdout
    assert "MODEL CONFIG" in wide and "special" in wide


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


def test_a_config_writer_who_may_not_read_a_secret_cannot_send_it_anywhere(
    control_plane: Any,
    api_client: Any,
    cluster: Cluster,
    model: ModelServer,
    team_a: ModelServer,
    operator: OperatorProcess,
) -> None:
    """Mallory may write ModelConfigs and Monitors, and read what a report shows, but not
    Secrets: a config of hers that names the namespace's database Secret and points at her
    own server sends it nowhere."""
    from tests.e2e.test_author_rights import LOGS, READS, WRITE_MONITORS, person

    cluster.target(suspended=False, seconds=1)
    secret(cluster, "db-password", "hunter2")
    write_configs = {
        "apiGroups": [GROUP],
        "resources": ["modelconfigs"],
        "verbs": ["create", "get", "list"],
    }
    mallory = person(
        control_plane,
        api_client,
        cluster.ns,
        "mallory",
        [*READS, LOGS, WRITE_MONITORS, write_configs],
    )
    as_mallory = Cluster(mallory, cluster.ns)
    model_config(
        as_mallory,
        "default",
        provider="openai",
        model="model-a",
        baseUrl=team_a.base_url,
        apiKeySecret={"name": "db-password"},
    )
    team_a.default = Scenario(cluster.ns, resume_when_suspended)
    as_mallory.create_monitor(everyMinutes=1)
    why = (
        f"system:serviceaccount:{cluster.ns}:mallory may not get secrets/db-password in "
        f"{cluster.ns}; ModelConfig default sends no Secret its writer could not read."
    )

    def held() -> dict[str, Any] | None:
        status = cluster.status()
        return status if why in (status.get("schedule") or {}).get("description", "") else None

    status = wait_until(held, 120, "the refusal to show on the Monitor", operator.logs)
    assert status["monitor"] == "active"
    assert team_a.requests == [] and model.requests == []
    assert not cluster.step_jobs(), "no step ran, so no pod mounted the Secret"
    written = cluster.custom.get_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "modelconfigs", "default"
    )
    assert written["metadata"]["annotations"]["goalkeeper.dev/author"] == (
        f"system:serviceaccount:{cluster.ns}:mallory"
    )
