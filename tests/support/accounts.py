"""Acting as a ServiceAccount against the local control plane, with or without a token
bound to a pod, the way a step pod (or a hostile pod in the namespace) would."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.support.cluster_fixtures import OWN_RUNNER_LABEL


def idle_pod(api: Any, namespace: str, name: str, account: str) -> Any:
    """A pod that no runner starts: it exists only to have tokens bound to it."""
    return client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": {OWN_RUNNER_LABEL: "own"}},
            "spec": {
                "serviceAccountName": account,
                "containers": [{"name": "c", "image": "idle", "command": ["true"]}],
            },
        },
    )


def token(api: Any, namespace: str, account: str, pod: Any | None = None) -> str:
    """A TokenRequest token for `account`, bound to `pod` when one is given."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        }
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(
        account, namespace, {"spec": spec}
    )
    return str(answer.status.token)


def client_with_token(control_plane: Any, bearer: str) -> client.ApiClient:
    config = client.Configuration()
    config.host = control_plane.server
    config.ssl_ca_cert = str(control_plane.ca_file)
    config.api_key = {"authorization": f"Bearer {bearer}"}
    return client.ApiClient(config)
