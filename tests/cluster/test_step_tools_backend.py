"""The tools with the real Kubernetes backend: discovery, paths, redaction, events, writes,
and the mutation set resolved through discovery."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from goalkeeper.step.kube import KubeBackend
from goalkeeper.step.redact import REDACTED
from goalkeeper.step.tools import StepTools, ToolConfig

pytestmark = pytest.mark.cluster


def make(api_client: Any, namespace: str, *mutation_set: str) -> StepTools:
    # Every write verb (GOALKEEPER_ACT_EXTRA_VERBS): these tests send each through the API.
    config = ToolConfig(
        fence_id="f00df00df00df00d",
        namespace=namespace,
        mutation_set=mutation_set,
        extra_verbs=("create", "update", "delete"),
    )
    return StepTools(KubeBackend(api_client), config)


@pytest.fixture
def tools(api_client: Any, namespace: str) -> StepTools:
    return make(api_client, namespace, "configmaps/settings", "ConfigMap/new")


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

    assert tools.refusals == []


def test_the_mutation_set_is_matched_through_discovery(api_client: Any, namespace: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    job = client.BatchV1Api(api_client).create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "build"},
            "spec": {
                "suspend": True,  # the Job controller starts no pod of its own
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "b", "image": "example.invalid/b:1"}],
                    }
                },
            },
        },
    )
    spec = {"containers": [{"name": "b", "image": "example.invalid/b:1"}]}
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "build",
        "uid": job.metadata.uid,
        "controller": True,
    }
    core.create_namespaced_pod(
        namespace, {"metadata": {"name": "build-x1", "ownerReferences": [owner]}, "spec": spec}
    )
    core.create_namespaced_pod(namespace, {"metadata": {"name": "stray"}, "spec": spec})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "other"}, "data": {}})
    tools = make(api_client, namespace, "Job.batch/build")

    # the pod of the named Job may go; a pod of no named controller may not
    assert "deleted Pod build-x1" in tools.k8s_delete("Pod", "build-x1")
    assert tools.k8s_delete("Pod", "stray").startswith("REFUSED: pods/stray")
    # a Job subresource through a raw path, resolved to jobs by discovery
    status_path = f"/apis/batch/v1/namespaces/{namespace}/jobs/build/status"
    assert "UNTRUSTED_TARGET_DATA" in tools.k8s_raw_write(status_path, "PATCH", {"status": {}})
    raw = tools.k8s_raw_write(
        f"/api/v1/namespaces/{namespace}/configmaps/other", "PATCH", {"data": {"a": "1"}}
    )
    assert raw.startswith("REFUSED: configmaps/other is not in the action's mutation set")
    assert core.read_namespaced_config_map("other", namespace).data is None
    remaining = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
    assert remaining["stray"].metadata.deletion_timestamp is None
    assert "build-x1" not in remaining or remaining["build-x1"].metadata.deletion_timestamp
    assert tools.refusals == ["k8s_delete pods/stray", "k8s_raw PATCH configmaps/other"]


def test_a_failed_job_is_re_run_as_stored_and_an_unknown_field_is_refused(
    api_client: Any, namespace: str
) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "export", "labels": {"team": "billing"}},
            "spec": {
                "suspend": True,  # the Job controller starts no pod of its own
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "e", "image": "example.invalid/export:5"}],
                    }
                },
            },
        },
    )
    tools = make(api_client, namespace, "jobs/export")
    # Not ended: nothing is deleted.
    assert tools.k8s_rerun_job("export").startswith("ERROR: Job export has not finished")
    old = batch.read_namespaced_job("export", namespace)
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ended = {"status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": at}
    batch.patch_namespaced_job_status(
        "export",
        namespace,
        {
            "status": {
                "startTime": at,
                "failed": 1,
                "conditions": [{"type": "FailureTarget", **ended}, {"type": "Failed", **ended}],
            }
        },
    )
    out = tools.k8s_rerun_job("export")
    assert "re-ran Job export: the failed Job was deleted and created again" in out, out
    again = batch.read_namespaced_job("export", namespace)
    assert again.metadata.uid != old.metadata.uid
    assert again.metadata.labels["team"] == "billing"
    assert again.spec.template.spec.containers[0].image == "example.invalid/export:5"
    assert not any(c.type == "Failed" for c in again.status.conditions or [])

    # A field the object does not have is refused, not dropped with a warning.
    refused = tools.k8s_patch("Job", "export", {"spec": {"maxReplicas": 3}})
    assert "ERROR: Kubernetes API" in refused and "maxReplicas" in refused, refused
