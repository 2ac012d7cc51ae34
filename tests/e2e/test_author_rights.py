"""A Monitor never does what its author could not do: the API server records who wrote
it, and the operator asks the API server (SubjectAccessReview) whether that person may
read what the observer reads and make each write an action names. Each Monitor here is
created with its author's own token, never an admin's certificate."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.e2e.harness import (
    GROUP,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    call,
    wait_until,
)
from tests.e2e.harness import observation as observed
from tests.support.accounts import client_with_token, token
from tests.support.model_server import ModelServer
from tests.support.observations import action, contract, extraction

pytestmark = pytest.mark.cluster

TASK = "You may set key mode of ConfigMap settings to fast. Do not change anything else."
GRANT = "You may set key mode of ConfigMap settings to fast."
# What the observer reads and a report may show (core/permissions.py observer_reads).
READS = [
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "services",
            "endpoints",
            "configmaps",
            "events",
            "persistentvolumeclaims",
        ],
        "verbs": ["get", "list"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
        "verbs": ["get", "list"],
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["get", "list"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list"]},
]
LOGS = {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}
WRITE_MONITORS = {"apiGroups": [GROUP], "resources": ["monitors"], "verbs": ["create", "get"]}
PATCH_SETTINGS = {
    "apiGroups": [""],
    "resources": ["configmaps"],
    "resourceNames": ["settings"],
    "verbs": ["patch"],
}


def person(
    control_plane: Any, api_client: Any, namespace: str, name: str, rules: list[dict[str, Any]]
) -> client.ApiClient:
    """A ServiceAccount holding exactly `rules` in `namespace`, as a token-only client."""
    core = client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return client_with_token(control_plane, token(api_client, namespace, name))


def settings_map(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        # The namespace admin lets the actor write this one (config/admission/actor-limits).
        "metadata": {
            "name": "settings",
            "namespace": namespace,
            "labels": {"goalkeeper.dev/actor-writable": "true"},
        },
        "data": {"mode": "slow"},
    }


def scenario(namespace: str) -> Scenario:
    reading = extraction(
        allowedSystems=[],
        allowedRecoveryActions=[],
        allowedResources=[{"entry": "configmaps/settings", "quote": GRANT}],
        authorizedActions=[
            {
                "id": "set-mode",
                "description": "Patch ConfigMap settings to mode=fast.",
                "quote": GRANT,
            }
        ],
    )
    pinned = contract(
        allowedSystems=[], allowedRecoveryActions=[], allowedResources=["configmaps/settings"]
    )
    actions = [{"id": "set-mode", "description": "Patch ConfigMap settings to mode=fast."}]

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:
            return observed(
                "act",
                "incomplete",
                "idle",
                facts,
                "ConfigMap settings says mode=slow.",
                contract=pinned,
                authorizedActions=actions,
                action=action(
                    kind="recover",
                    action="Patch ConfigMap settings to mode=fast.",
                    authorizedActionId="set-mode",
                    mutationSet=["configmaps/settings"],
                    failureId="mode-slow",
                    targetStateId="settings-slow",
                ),
            )
        return observed(
            "stop",
            "complete",
            "complete",
            facts,
            "mode=fast.",
            contract=pinned,
            authorizedActions=actions,
            stopReason="goalComplete",
        )

    def patch(_: int) -> list[Any]:
        return [
            call(
                "k8s_patch",
                kind="ConfigMap",
                name="settings",
                namespace=namespace,
                patch={"data": {"mode": "fast"}},
            )
        ]

    return Scenario(namespace, observe, act_calls=patch, reading=reading)


def create_as(author: client.ApiClient, namespace: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": {"name": "build", "namespace": namespace},
        "spec": {"task": TASK, "stopWhen": "Stop when mode is fast.", "everyMinutes": 1},
    }
    made: dict[str, Any] = client.CustomObjectsApi(author).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "monitors", body
    )
    return made


def mode(cluster: Cluster) -> str:
    return str(cluster.core.read_namespaced_config_map("settings", cluster.ns).data["mode"])


def test_an_author_who_may_not_patch_the_config_map_gets_no_act(
    control_plane: Any,
    api_client: Any,
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
) -> None:
    cluster.core.create_namespaced_config_map(cluster.ns, settings_map(cluster.ns))
    author = person(control_plane, api_client, cluster.ns, "alice", [*READS, LOGS, WRITE_MONITORS])
    # alice cannot patch the ConfigMap herself ...
    with pytest.raises(client.exceptions.ApiException) as denied:
        client.CoreV1Api(author).patch_namespaced_config_map(
            "settings", cluster.ns, {"data": {"mode": "fast"}}
        )
    assert denied.value.status == 403
    model.default = scenario(cluster.ns)
    made = create_as(author, cluster.ns)
    user = f"system:serviceaccount:{cluster.ns}:alice"
    assert made["metadata"]["annotations"]["goalkeeper.dev/author"] == user

    # ... so neither can her Monitor, whatever the actor's Role allows.
    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "outsideAuthority"
    assert f"{user} may not patch configmaps/settings in {cluster.ns}" in status["stop"]["message"]
    assert f"may not patch configmaps/settings in {cluster.ns}" in status["report"]
    assert cluster.step_kinds() == ["extract", "observe"], "no act step ran"
    assert status["authority"]["author"] == user
    assert mode(cluster) == "slow"


def test_an_author_who_may_patch_the_config_map_gets_the_act(
    control_plane: Any,
    api_client: Any,
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
) -> None:
    cluster.core.create_namespaced_config_map(cluster.ns, settings_map(cluster.ns))
    rules = [*READS, LOGS, WRITE_MONITORS, PATCH_SETTINGS]
    author = person(control_plane, api_client, cluster.ns, "bob", rules)
    model.default = scenario(cluster.ns)
    create_as(author, cluster.ns)

    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "goalComplete", status["stop"]
    assert cluster.step_kinds() == ["extract", "observe", "act", "observe"]
    assert mode(cluster) == "fast"


def test_an_author_who_may_not_read_pod_logs_is_stopped_before_anything_reads(
    control_plane: Any,
    api_client: Any,
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
) -> None:
    cluster.core.create_namespaced_config_map(cluster.ns, settings_map(cluster.ns))
    author = person(control_plane, api_client, cluster.ns, "carol", [*READS, WRITE_MONITORS])
    model.default = scenario(cluster.ns)
    create_as(author, cluster.ns)

    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "outsideAuthority"
    user = f"system:serviceaccount:{cluster.ns}:carol"
    assert f"{user} may not get pods/* (log) in {cluster.ns}" in status["stop"]["message"]
    assert cluster.steps() == [], "not even the task was read"
    assert model.bodies == []
