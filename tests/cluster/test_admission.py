"""The API server, not the operator's good faith, holds the step identities to their part.

config/admission/ is installed by the local control plane; config/rbac/steps.yaml is
applied to the test namespace as a namespace admin would. Every write here is made with
a real ServiceAccount token, most of them bound to a pod, the way a step pod or a hostile
pod in the namespace would make it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.accounts import client_with_token, idle_pod, token
from tests.support.cluster_fixtures import OWN_RUNNER_LABEL, REPO, wait_for

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "goalkeeper.dev", "v1alpha1", "monitorsteps"
OBSERVER, ACTOR = "goalkeeper-observer", "goalkeeper-actor"


@pytest.fixture
def step_ns(control_plane: Any, namespace: str) -> str:
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", str(REPO / "config" / "rbac" / "steps.yaml"), check=True
    )
    return namespace


@pytest.fixture
def as_account(control_plane: Any) -> Iterator[Any]:
    made: list[client.ApiClient] = []

    def open_client(bearer: str) -> client.ApiClient:
        made.append(client_with_token(control_plane, bearer))
        return made[-1]

    yield open_client
    for api in made:
        api.close()


def monitor_step(api: Any, namespace: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MonitorStep",
        "metadata": {"name": name},
        "spec": {
            "monitor": name.split("-")[0],
            "kind": "observe",
            "check": 1,
            "seq": 1,
            "input": {
                "kind": "observe",
                "check": 1,
                "maxChecks": 10,
                "task": "Finish the build.",
                "stopWhen": "Stop when it is done.",
            },
        },
    }
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body
    )
    return created


def write_status(api: Any, namespace: str, step: str, status: dict[str, Any]) -> Any:
    return client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        step,
        {"status": status},
        _content_type="application/merge-patch+json",
    )


def refused(write: Any) -> str:
    """The API server's refusal of `write`, which must be refused."""
    with pytest.raises(ApiException) as caught:
        write()
    assert caught.value.status in (403, 422), caught.value
    return str(caught.value.body)


def pod_ref(pod: Any) -> dict[str, str]:
    return {"name": pod.metadata.name, "uid": pod.metadata.uid}


def wait_for_policy(api: Any, namespace: str, step: str, bearer_api: Any) -> None:
    """Policies take effect once the API server has loaded them: a dry run shows when."""

    def active() -> bool:
        try:
            client.CustomObjectsApi(bearer_api).patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                step,
                {"status": {"phase": "Running"}},
                dry_run="All",
                _content_type="application/merge-patch+json",
            )
        except ApiException as error:
            return error.status in (403, 422) and "bound to a pod" in str(error.body)
        return False

    wait_for(active, 60, "the step-results admission policy to take effect")


def test_only_the_steps_own_pod_writes_its_result_and_only_once(
    api_client: Any, step_ns: str, as_account: Any
) -> None:
    ns = step_ns
    mine = monitor_step(api_client, ns, "mine-1-observe-aaaaa")["metadata"]["name"]
    theirs = monitor_step(api_client, ns, "theirs-1-observe-bbbbb")["metadata"]["name"]
    unbound = as_account(token(api_client, ns, OBSERVER))
    wait_for_policy(api_client, ns, mine, unbound)

    my_pod = idle_pod(api_client, ns, f"{mine}-x7k2p", OBSERVER)
    their_pod = idle_pod(api_client, ns, f"{theirs}-q9w3z", OBSERVER)
    their_actor_pod = idle_pod(api_client, ns, "theirs-2-act-bbbbb-m4n5b", ACTOR)
    me = as_account(token(api_client, ns, OBSERVER, my_pod))
    them = as_account(token(api_client, ns, OBSERVER, their_pod))
    their_actor = as_account(token(api_client, ns, ACTOR, their_actor_pod))
    forged = {"phase": "Succeeded", "result": {"route": "act"}}

    # Another monitor's observe step and act step, each naming its own pod, or lying.
    said = refused(lambda: write_status(them, ns, mine, {**forged, "pod": pod_ref(their_pod)}))
    assert "is not a pod of step" in said
    said = refused(lambda: write_status(them, ns, mine, {**forged, "pod": pod_ref(my_pod)}))
    assert "is not a pod of step" in said
    said = refused(
        lambda: write_status(their_actor, ns, mine, {**forged, "pod": pod_ref(their_actor_pod)})
    )
    assert "is not a pod of step" in said
    # A token of the right account that is bound to no pod.
    said = refused(lambda: write_status(unbound, ns, mine, forged))
    assert "not bound to a pod" in said
    # The step's own pod must name itself.
    said = refused(lambda: write_status(me, ns, mine, {**forged, "pod": pod_ref(their_pod)}))
    assert "status.pod must name the pod" in said

    # The genuine step writes Running, then its result; after that nothing changes it.
    write_status(me, ns, mine, {"phase": "Running", "pod": pod_ref(my_pod)})
    write_status(me, ns, mine, {"phase": "Succeeded", "result": {"ok": 1}, "pod": pod_ref(my_pod)})
    said = refused(lambda: write_status(me, ns, mine, {"phase": "Failed", "pod": pod_ref(my_pod)}))
    assert "final" in said
    stored = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, mine
    )
    assert stored["status"]["phase"] == "Succeeded" and stored["status"]["result"] == {"ok": 1}
    untouched = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, theirs
    )
    assert "status" not in untouched or "result" not in untouched["status"]


REPORT, CHECK = "goalkeeper.dev/report", "goalkeeper.dev/check"


def annotate(api: Any, namespace: str, step: str, annotations: dict[str, str]) -> Any:
    """A merge patch of a MonitorStep's annotations, as the operator keeps a report."""
    return client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        step,
        {"metadata": {"annotations": annotations}},
        _content_type="application/merge-patch+json",
    )


def kept_report(api: Any, namespace: str, step: str) -> str | None:
    stored = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, step
    )
    report: str | None = (stored["metadata"].get("annotations") or {}).get(REPORT)
    return report


def test_only_the_operator_keeps_a_report_on_a_step(
    control_plane: Any, api_client: Any, step_ns: str, as_account: Any
) -> None:
    ns = step_ns
    name = monitor_step(api_client, ns, "mine-1-observe-aaaaa")["metadata"]["name"]
    forged = {REPORT: "Monitor: stopped\nGoal: complete", CHECK: "1"}
    unbound = as_account(token(api_client, ns, OBSERVER))
    wait_for_policy(api_client, ns, name, unbound)
    my_pod = idle_pod(api_client, ns, f"{name}-x7k2p", OBSERVER)
    me = as_account(token(api_client, ns, OBSERVER, my_pod))
    actor_pod = idle_pod(api_client, ns, "mine-2-act-aaaaa-m4n5b", ACTOR)
    actor = as_account(token(api_client, ns, ACTOR, actor_pod))

    # The step's own pod, the observer and the actor: RBAC lets none write a step itself.
    for who in (me, unbound, actor):
        said = refused(lambda who=who: annotate(who, ns, name, forged))
        assert "cannot patch resource" in said, said
    # Through the status its pod may write, nothing of the metadata is kept.
    client.CustomObjectsApi(me).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        ns,
        PLURAL,
        name,
        {
            "metadata": {"annotations": forged},
            "status": {"phase": "Running", "pod": pod_ref(my_pod)},
        },
        _content_type="application/merge-patch+json",
    )
    assert kept_report(api_client, ns, name) is None

    # A namespace admin's Role that lets the actor patch MonitorSteps: the metadata
    # policy still refuses it any annotation.
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "actor-patches-steps"},
            "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["patch"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "actor-patches-steps"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "actor-patches-steps"},
            "subjects": [{"kind": "ServiceAccount", "name": ACTOR, "namespace": ns}],
        },
    )  # fmt: skip

    def past_rbac() -> str | None:
        try:
            annotate(actor, ns, name, forged)
        except ApiException as error:
            return None if "cannot patch resource" in str(error.body) else str(error.body)
        return "accepted"

    said = wait_for(past_rbac, 60, "the actor's Role to take effect")
    assert "may not change an object's annotations" in said, said
    assert kept_report(api_client, ns, name) is None

    # The operator's own identity (config/rbac/operator.yaml), with a token and nothing
    # more, keeps the report.
    control_plane.kubectl(
        "apply", "-f", str(REPO / "config" / "rbac" / "operator.yaml"), check=True
    )
    core = client.CoreV1Api(api_client)
    wait_for(
        lambda: [
            a
            for a in core.list_namespaced_service_account("goalkeeper-system").items
            if a.metadata.name == "goalkeeper-operator"
        ],
        30,
        "the operator's ServiceAccount",
    )
    operator = as_account(token(api_client, "goalkeeper-system", "goalkeeper-operator"))
    annotate(operator, ns, name, {REPORT: "Monitor: active", CHECK: "1"})
    assert kept_report(api_client, ns, name) == "Monitor: active"


def can_i(control_plane: Any, namespace: str, account: str, verb: str, resource: str) -> bool:
    resource, _, subresource = resource.partition("/")
    done = control_plane.kubectl(
        "auth",
        "can-i",
        verb,
        resource,
        *([f"--subresource={subresource}"] if subresource else []),
        "-n",
        namespace,
        f"--as=system:serviceaccount:{namespace}:{account}",
    )
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), done.stderr
    return answer == "yes"


def test_default_step_roles_are_least_privilege(control_plane: Any, step_ns: str) -> None:
    ns = step_ns
    for verb, resource in [
        ("create", "jobs.batch"),
        ("create", "cronjobs.batch"),
        ("update", "cronjobs.batch"),
        ("create", "pods"),
        ("update", "pods"),
        ("patch", "pods"),
        ("get", "secrets"),
        ("list", "secrets"),
        ("create", "configmaps"),
        ("create", "deployments.apps"),
        ("patch", "monitorsteps.goalkeeper.dev"),
        ("create", "monitorsteps.goalkeeper.dev"),
    ]:
        assert not can_i(control_plane, ns, ACTOR, verb, resource), (verb, resource)
    for verb, resource in [
        ("patch", "jobs.batch"),
        ("patch", "deployments.apps"),
        ("patch", "deployments.apps/scale"),
        ("patch", "statefulsets.apps/scale"),
        ("delete", "pods"),
        ("patch", "configmaps"),
        ("patch", "monitorsteps.goalkeeper.dev/status"),
    ]:
        assert can_i(control_plane, ns, ACTOR, verb, resource), (verb, resource)
    for verb in ("create", "update", "patch", "delete"):
        for resource in (
            "pods",
            "configmaps",
            "jobs.batch",
            "deployments.apps",
            "secrets",
            "monitorsteps.goalkeeper.dev",
        ):
            assert not can_i(control_plane, ns, OBSERVER, verb, resource), (verb, resource)
    assert not can_i(control_plane, ns, OBSERVER, "get", "secrets")
    assert not can_i(control_plane, ns, OBSERVER, "patch", "jobs.batch/status")
    assert can_i(control_plane, ns, OBSERVER, "get", "jobs.batch")
    assert can_i(control_plane, ns, OBSERVER, "patch", "monitorsteps.goalkeeper.dev/status")


def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name, OWN_RUNNER_LABEL: "own"}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            },
        },
    }


def failed_job_pod(api: Any, namespace: str) -> Any:
    """A pod of a real Job, which the test marks Failed as a kubelet would."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "batch"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {OWN_RUNNER_LABEL: "own"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "batch:1"}],
                    },
                },
            },
        },
    )
    pod = wait_for(
        lambda: next(
            iter(core.list_namespaced_pod(namespace, label_selector="job-name=batch").items),
            None,
        ),
        60,
        "the Job's pod",
    )
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {"phase": "Failed"}})
    return pod


def test_actor_patches_stay_off_pod_templates(
    api_client: Any, step_ns: str, as_account: Any
) -> None:
    ns = step_ns
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(ns, deployment("web"))
    actor = as_account(token(api_client, ns, ACTOR))
    actor_apps, actor_core = client.AppsV1Api(actor), client.CoreV1Api(actor)

    def patch_image() -> Any:
        image = {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "x"}]}}}}
        return actor_apps.patch_namespaced_deployment("web", ns, image)

    def wait_active() -> bool:
        try:
            actor_apps.patch_namespaced_deployment(
                "web",
                ns,
                {"spec": {"template": {"spec": {"serviceAccountName": "default"}}}},
                dry_run="All",
            )
        except ApiException as error:
            return "pod template" in str(error.body)
        return False

    wait_for(wait_active, 60, "the actor-limits admission policy to take effect")
    assert "pod template's spec" in refused(patch_image)
    relabel = {"spec": {"template": {"metadata": {"labels": {"extra": "1"}}}}}
    assert "labels" in refused(lambda: actor_apps.patch_namespaced_deployment("web", ns, relabel))

    # What the default actions need still works: rollout restart and scale.
    restart = {
        "spec": {
            "template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}}
        }
    }
    actor_apps.patch_namespaced_deployment("web", ns, restart)
    actor_apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 3}})
    assert apps.read_namespaced_deployment("web", ns).spec.replicas == 3
    assert apps.read_namespaced_deployment("web", ns).spec.template.spec.containers[0].image == (
        "web:1"
    )

    # Pods: a Job's failed pod may go, any other pod stays.
    other = idle_pod(api_client, ns, "bystander", "default")
    said = refused(lambda: actor_core.delete_namespaced_pod(other.metadata.name, ns))
    assert "failed pods" in said
    failed = failed_job_pod(api_client, ns)
    actor_core.delete_namespaced_pod(failed.metadata.name, ns)

    # Suspend and resume a Job.
    client.BatchV1Api(actor).patch_namespaced_job("batch", ns, {"spec": {"suspend": True}})
    assert client.BatchV1Api(api_client).read_namespaced_job("batch", ns).spec.suspend is True
    assert core.read_namespaced_pod("bystander", ns).metadata.name == "bystander"


def test_actor_opt_in_example_grants_job_recreation(control_plane: Any, step_ns: str) -> None:
    ns = step_ns
    assert not can_i(control_plane, ns, ACTOR, "create", "jobs.batch")
    example = REPO / "config" / "rbac" / "examples" / "actor-recreate-jobs.yaml"
    control_plane.kubectl("apply", "-n", ns, "-f", str(example), check=True)
    assert can_i(control_plane, ns, ACTOR, "create", "jobs.batch")
    assert can_i(control_plane, ns, ACTOR, "delete", "jobs.batch")
    assert not can_i(control_plane, ns, ACTOR, "get", "secrets")


def test_policies_are_loaded_without_type_errors(control_plane: Any) -> None:
    done = control_plane.kubectl(
        "get", "validatingadmissionpolicies", "-o", "jsonpath={.items[*].metadata.name}"
    )
    names = {"goalkeeper-step-results", "goalkeeper-actor-templates", "goalkeeper-actor-pods"}
    assert set(done.stdout.split()) >= names
    for name in sorted(names):
        status = wait_for(
            lambda name=name: _typechecked(control_plane, name), 60, f"{name} type checking"
        )
        assert status == "ok", status


def _typechecked(control_plane: Any, name: str) -> str | None:
    done = control_plane.kubectl(
        "get",
        "validatingadmissionpolicy",
        name,
        "-o",
        "jsonpath={.status.observedGeneration} {.status.typeChecking.expressionWarnings}",
    )
    generation, _, warnings = done.stdout.partition(" ")
    if not generation:
        return None
    return "ok" if not warnings.strip() else warnings
