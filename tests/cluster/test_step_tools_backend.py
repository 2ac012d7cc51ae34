"""The tools with the real Kubernetes backend: discovery, paths, redaction, events, writes."""

from __future__ import annotations

from typing import Any

import pytest

from goalkeeper.step.kube import KubeBackend
from goalkeeper.step.tools import REDACTED, StepTools, ToolConfig

pytestmark = pytest.mark.cluster


@pytest.fixture
def tools(api_client: Any, namespace: str) -> StepTools:
    return StepTools(
        KubeBackend(api_client), ToolConfig(fence_id="f00df00df00df00d", namespace=namespace)
    )


def test_reads_redaction_and_writes_through_the_api(
    api_client: Any, namespace: str, tools: StepTools
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "db"}, "stringData": {"password": "hunter2-plain"}},
    )
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings", "labels": {"app": "x"}}, "data": {"k": "v"}}
    )
    core.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "settings.1"},
            "involvedObject": {"kind": "ConfigMap", "name": "settings", "namespace": namespace},
            "reason": "Checked",
            "message": "looked fine",
            "type": "Normal",
        },
    )

    secret = tools.k8s_get("Secret", "db")
    assert "password" in secret and REDACTED in secret
    assert "hunter2" not in secret and "aHVudGVyMi1wbGFpbg" not in secret
    raw = tools.k8s_raw(f"/api/v1/namespaces/{namespace}/secrets")
    assert "password" in raw and "aHVudGVyMi1wbGFpbg" not in raw

    listed = tools.k8s_list("ConfigMap", label_selector="app=x")
    assert "1 ConfigMap item(s)" in listed and f"{namespace}/settings" in listed
    assert "looked fine" in tools.k8s_events("settings", kind="ConfigMap")

    # a custom kind is found through discovery
    assert "0 MonitorStep item(s)" in tools.k8s_list(
        "MonitorStep", api_version="goalkeeper.dev/v1alpha1"
    )
    missing = tools.k8s_get("Deployment", "nope")
    assert "404" in missing

    assert "patched" in tools.k8s_patch("ConfigMap", "settings", {"data": {"k": "w"}})
    applied = tools.k8s_apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}, "data": {"a": "1"}}
    )
    assert "applied" in applied
    assert core.read_namespaced_config_map("new", namespace).data == {"a": "1"}
    assert core.read_namespaced_config_map("settings", namespace).data == {"k": "w"}
    assert "deleted" in tools.k8s_delete("ConfigMap", "new")
