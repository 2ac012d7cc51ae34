"""The Helm chart against the real local control plane: lint, schema errors, rules in step
with config/, server-side dry-run, then install, run the operator's pod, finish one
acceptance case through it, upgrade (a rollout to a new pod), and uninstall without orphans.

The control plane's kube-controller-manager runs the default controllers, so the chart's
Deployment makes a ReplicaSet and that its pod, as on any cluster; the session pod runner
binds the pod and runs the container's `command` + `args` (`goalkeeper run --verbose`, the
image's entrypoint spelled out by the chart) as a local process with the venv's python
environment, the chart's ServiceAccount token and its environment. The test creates no pod
of its own: it waits for the release's pod to run and lead.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from goalkeeper import __version__
from tests.e2e.harness import (
    Cluster,
    Facts,
    Scenario,
    build_job,
    observation,
    progress_map,
    report_text,
)
from tests.support.cluster_fixtures import REPO, wait_for
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "goalkeeper"
INSTANCE = "app.kubernetes.io/instance"


class Helm:
    def __init__(self, binary: Path, home: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        # Helm's own state stays in the test's folder, never in ~/.
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        extra = ["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []
        done = subprocess.run(
            [str(self.binary), *args, *extra],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
        )
        if check and done.returncode != 0:
            pytest.fail(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def render(self, *args: str, release: str = "goalkeeper") -> list[dict[str, Any]]:
        out = self("template", release, str(CHART), *args).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """scripts/build-helm.sh builds the pinned helm once; a failed build fails loudly."""
    done = subprocess.run(
        [str(REPO / "scripts" / "build-helm.sh")], capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/build-helm.sh failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / "helm"


@pytest.fixture
def helm(helm_bin: Path, control_plane: Any, tmp_path: Path) -> Helm:
    return Helm(helm_bin, tmp_path / "helm", control_plane.kubeconfig)


@pytest.fixture
def offline_helm(helm_bin: Path, tmp_path: Path) -> Helm:
    return Helm(helm_bin, tmp_path / "helm")


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


MUTATING_POLICY = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


def find(docs: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None) -> Any:
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] == kind and meta["name"] == name and meta.get("namespace") == namespace:
            return doc
    raise AssertionError(f"no {kind} {namespace}/{name} among {[d['kind'] for d in docs]}")


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


# --- without a cluster -----------------------------------------------------------------


def test_chart_lints_clean(offline_helm: Helm) -> None:
    done = offline_helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("replicas=two", "replicas"),
        ("replicas=2", "replicas"),
        ("colour=blue", "colour"),
        ("steps.history=0", "history"),
        ("model.name=gpt-4o", "name"),
        ("leaderElection.leaseSeconds=1", "leaseSeconds"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("stallChecks=0", "stallChecks"),
        ("wakeIntervalSeconds=0", "wakeIntervalSeconds"),
        ("approvalTimeout=soon", "approvalTimeout"),
        ("admissionPolicies.actorMaxReplicas=-1", "actorMaxReplicas"),
        ("instructions=" + "x" * 4001, "instructions"),
        ("notifications.format=email", "format"),
        ("notifications.send={stop,sms}", "send"),
        ("tracing.endpoint=ftp://collector", "endpoint"),
        ("shards={a,Team-B}", "shards"),
        ("shards={a,default}", "shards"),
        ("shards={a,a}", "shards"),
        ("shards={" + "a" * 41 + "}", "shards"),
    ],
)
def test_bad_values_fail_naming_the_field(helm: Helm, setting: str, field: str) -> None:
    for command in (
        ["template", "x", str(CHART)],
        ["lint", str(CHART)],
        ["install", "x", str(CHART), "-n", "default"],
    ):
        done = helm(*command, "--set", setting, check=False)
        assert done.returncode != 0, f"helm {command[0]} accepted {setting}"
        assert field in done.stdout + done.stderr, done.stdout + done.stderr


def test_cluster_wide_rules_are_config_rbac_and_admission(offline_helm: Helm) -> None:
    docs = offline_helm.render(
        "-n", "goalkeeper-system", "--set", "stepNamespaces={team-a}",
        "--api-versions", MUTATING_POLICY,
    )  # fmt: skip
    operator = load(REPO / "config" / "rbac" / "operator.yaml")
    want = find(operator, "ClusterRole", "goalkeeper-operator")
    assert find(docs, "ClusterRole", "goalkeeper-operator")["rules"] == want["rules"]
    binding = find(docs, "ClusterRoleBinding", "goalkeeper-operator")
    assert (
        binding["subjects"]
        == find(operator, "ClusterRoleBinding", "goalkeeper-operator")["subjects"]
    )
    assert not [d for d in docs if d["kind"] == "Role" and "operator" in d["metadata"]["name"]]

    for want in load(REPO / "config" / "rbac" / "steps.yaml"):
        got = find(docs, want["kind"], want["metadata"]["name"], "team-a")
        for key in ("rules", "roleRef", "subjects"):
            assert got.get(key) == want.get(key), f"{want['kind']} {key}"

    (approver,) = load(REPO / "config" / "rbac" / "approver.yaml")
    assert find(docs, "ClusterRole", "goalkeeper-approver")["rules"] == approver["rules"]

    policies = [p for f in sorted((REPO / "config" / "admission").glob("*.yaml")) for p in load(f)]
    assert policies
    for want in policies:
        assert find(docs, want["kind"], want["metadata"]["name"])["spec"] == want["spec"]
    assert env_of(docs)["GOALKEEPER_NAMESPACES"] == ""


def test_without_mutating_policies_the_approver_is_still_checked(offline_helm: Helm) -> None:
    # Before Kubernetes 1.36 nothing stamps the approver; the validating policy still
    # refuses any approver but the creator, whom `goalkeeper approve` names itself.
    docs = offline_helm.render("-n", "goalkeeper-system")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("ValidatingAdmissionPolicy", "goalkeeper-approvals") in kinds
    assert not [d for d in docs if d["kind"].startswith("MutatingAdmissionPolicy")]


def test_namespaced_rules_add_up_to_config_rbac(offline_helm: Helm) -> None:
    docs = offline_helm.render("-n", "gk", "--set", "watchNamespaces={a,b}")
    want = find(
        load(REPO / "config" / "rbac" / "operator.yaml"), "ClusterRole", "goalkeeper-operator"
    )
    cluster_rules = find(docs, "ClusterRole", "goalkeeper-operator")["rules"]
    for namespace in ("a", "b"):
        role = find(docs, "Role", "goalkeeper-operator", namespace)
        assert role["rules"] + cluster_rules == want["rules"]
        binding = find(docs, "RoleBinding", "goalkeeper-operator", namespace)
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "goalkeeper-operator", "namespace": "gk"}
        ]
    assert env_of(docs)["GOALKEEPER_NAMESPACES"] == "a,b"


def test_values_reach_the_operator(offline_helm: Helm) -> None:
    docs = offline_helm.render(
        "--set", "steps.actorServiceAccount=robot",
        "--set", "steps.limits.totalTokensLimit=2000000",
        "--set", "steps.limits.costLimitUsd=0.5",
        "--set", "model.name=anthropic:claude",
        "--set", "model.apiKeySecret.name=llm",
        "--set", "probes.enabled=true",
        "--set", "stallChecks=5",
        "--set", "stepRetrySeconds=3",
        "--set", "failureWindowSeconds=3600",
        "--set", "invalidAnswersLimit=7",
        "--set", "brakeActs=4",
        "--set", "wakeIntervalSeconds=30",
        "--set", "approvalTimeout=24h",
        "--set", "instructions=Never scale the payments Deployments.",
    )  # fmt: skip
    env = env_of(docs)
    assert env["GOALKEEPER_ACTOR_SERVICE_ACCOUNT"] == "robot"
    assert env["GOALKEEPER_STALL_CHECKS"] == "5"
    assert env["GOALKEEPER_STEP_RETRY_SECONDS"] == "3"
    assert env["GOALKEEPER_FAILURE_WINDOW_SECONDS"] == "3600"
    assert env["GOALKEEPER_INVALID_ANSWERS_LIMIT"] == "7"
    assert env["GOALKEEPER_BRAKE_ACTS"] == "4"
    assert env["GOALKEEPER_WAKE_INTERVAL_SECONDS"] == "30"
    assert env["GOALKEEPER_APPROVAL_TIMEOUT"] == "24h"
    assert env["GOALKEEPER_INSTRUCTIONS"] == "Never scale the payments Deployments."
    assert env["GOALKEEPER_TOTAL_TOKENS_LIMIT"] == "2000000"
    assert env["GOALKEEPER_COST_LIMIT_USD"] == "0.5"
    assert env["GOALKEEPER_MODEL"] == "anthropic:claude"
    assert env["GOALKEEPER_MODEL_API_KEY_SECRET"] == "llm"
    assert env["GOALKEEPER_STEP_IMAGE"] == f"goalkeeper:{__version__}"
    actor_policies = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and "-actor-" in d["metadata"]["name"]
    ]
    assert len(actor_policies) >= 7
    for policy in actor_policies:
        condition = policy["spec"]["matchConditions"][0]
        assert "endsWith(':robot')" in condition["expression"], policy["metadata"]["name"]
        assert "endsWith(':goalkeeper-observer')" in condition["expression"]
    replicas = find(docs, "ValidatingAdmissionPolicy", "goalkeeper-actor-replicas")["spec"]
    assert "'20'" in str(replicas["variables"])
    raised = offline_helm.render("--set", "admissionPolicies.actorMaxReplicas=50")
    replicas = find(raised, "ValidatingAdmissionPolicy", "goalkeeper-actor-replicas")["spec"]
    assert "'50'" in str(replicas["variables"]) and "'20'" not in str(replicas["variables"])
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["run"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_the_cluster_sink_and_tracing_reach_the_operator_and_its_url_stays_in_a_secret(
    offline_helm: Helm,
) -> None:
    docs = offline_helm.render(
        "--set", "notifications.urlSecret.name=platform-hooks",
        "--set", "notifications.format=cloudevents",
        "--set", "notifications.send={stop,report}",
        "--set", "tracing.endpoint=http://collector.observability:4318",
        "--set", "tracing.captureContent=true",
    )  # fmt: skip
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    entries = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert entries["GOALKEEPER_NOTIFY_URL"] == {
        "name": "GOALKEEPER_NOTIFY_URL",
        "valueFrom": {"secretKeyRef": {"name": "platform-hooks", "key": "url"}},
    }
    env = env_of(docs)
    assert env["GOALKEEPER_NOTIFY_FORMAT"] == "cloudevents"
    assert env["GOALKEEPER_NOTIFY_SEND"] == "stop,report"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector.observability:4318"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] == "true"
    plain = env_of(offline_helm.render())
    assert not {k for k in plain if k.startswith(("GOALKEEPER_NOTIFY", "OTEL_"))}


def test_defaults_probe_and_serve_metrics_on_one_replica(offline_helm: Helm) -> None:
    docs = offline_helm.render("-n", "gk")
    env = env_of(docs)
    assert (env["GOALKEEPER_HEALTH_PORT"], env["GOALKEEPER_METRICS_PORT"]) == ("8080", "9090")
    assert env["GOALKEEPER_LEADER_ELECTION"] == "false"
    assert env["GOALKEEPER_RESYNC_SECONDS"] == "60"
    assert "GOALKEEPER_LEASE_NAME" not in env
    deployment = find(docs, "Deployment", "goalkeeper", "gk")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [
        {"name": "health", "containerPort": 8080},
        {"name": "metrics", "containerPort": 9090},
    ]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    service = find(docs, "Service", "goalkeeper-metrics", "gk")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    kinds = {d["kind"] for d in docs}
    assert "ServiceMonitor" not in kinds and "Role" not in kinds

    off = offline_helm.render("--set", "probes.enabled=false", "--set", "metrics.enabled=false")
    env = env_of(off)
    assert (env["GOALKEEPER_HEALTH_PORT"], env["GOALKEEPER_METRICS_PORT"]) == ("0", "0")
    container = next(d for d in off if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "ports" not in container and "livenessProbe" not in container
    assert not [d for d in off if d["kind"] == "Service"]


def test_the_console_holds_no_token_and_no_operator_selector_takes_its_pod(
    offline_helm: Helm,
) -> None:
    assert not [d for d in offline_helm.render("-n", "gk") if "console" in d["metadata"]["name"]]
    docs = offline_helm.render(
        "-n", "gk", "--set", "console.enabled=true", "--set", "console.namespaces={team,ops}",
    )  # fmt: skip
    console = find(docs, "Deployment", "goalkeeper-console", "gk")
    pod = console["spec"]["template"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod["spec"]
    container = pod["spec"]["containers"][0]
    assert container["args"] == [
        "console", "--in-cluster", "--address=0.0.0.0", "--port=8080",
        "--namespace=team", "--namespace=ops",
    ]  # fmt: skip
    # Only the cluster's CA, where the in-cluster client looks for it.
    assert pod["spec"]["volumes"] == [
        {
            "name": "cluster-ca",
            "configMap": {
                "name": "kube-root-ca.crt",
                "items": [{"key": "ca.crt", "path": "ca.crt"}],
            },
        }
    ]
    labels = pod["metadata"]["labels"]
    for doc in docs:
        selector = (doc.get("spec") or {}).get("selector") or {}
        selector = selector.get("matchLabels", selector) if doc["kind"] != "Service" else selector
        if doc["metadata"]["name"] == "goalkeeper-console" or not selector:
            continue
        assert not all(labels.get(k) == v for k, v in selector.items()), doc["metadata"]["name"]
    service = find(docs, "Service", "goalkeeper-console", "gk")
    assert service["spec"]["selector"] == console["spec"]["selector"]["matchLabels"]


def test_two_replicas_elect_a_leader_with_the_lease_rules_of_config_rbac(
    offline_helm: Helm,
) -> None:
    docs = offline_helm.render(
        "-n", "goalkeeper-system",
        "--set", "replicas=2",
        "--set", "leaderElection.enabled=true",
        "--set", "leaderElection.leaseName=goalkeeper-operator",
        "--set", "leaderElection.leaseSeconds=10",
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.serviceMonitor.labels.release=prom",
    )  # fmt: skip
    deployment = find(docs, "Deployment", "goalkeeper", "goalkeeper-system")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    env = env_of(docs)
    assert env["GOALKEEPER_LEADER_ELECTION"] == "true"
    assert env["GOALKEEPER_LEASE_NAME"] == "goalkeeper-operator"
    assert env["GOALKEEPER_LEASE_NAMESPACE"] == "goalkeeper-system"
    assert env["GOALKEEPER_LEASE_SECONDS"] == "10"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    identity = next(e for e in container["env"] if e["name"] == "GOALKEEPER_IDENTITY")
    assert identity["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}

    config = load(REPO / "config" / "rbac" / "operator.yaml")
    name = "goalkeeper-operator-leader-election"
    want = find(config, "Role", name, "goalkeeper-system")
    assert find(docs, "Role", name, "goalkeeper-system")["rules"] == want["rules"]
    binding = find(docs, "RoleBinding", name, "goalkeeper-system")
    assert binding["subjects"] == find(config, "RoleBinding", name, "goalkeeper-system")["subjects"]
    assert binding["roleRef"]["name"] == name

    monitor = find(docs, "ServiceMonitor", "goalkeeper", "goalkeeper-system")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]
    service = find(docs, "Service", "goalkeeper-metrics", "goalkeeper-system")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )


def test_each_shard_is_a_deployment_with_its_selector_and_lease(offline_helm: Helm) -> None:
    docs = offline_helm.render(
        "-n", "goalkeeper-system",
        "--set", "shards={a,b}",
        "--set", "replicas=2",
        "--set", "leaderElection.enabled=true",
        "--set", "leaderElection.leaseName=goalkeeper-operator",
    )  # fmt: skip
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert sorted(deployments) == ["goalkeeper", "goalkeeper-shard-a", "goalkeeper-shard-b"]
    want = {
        "goalkeeper": ("default", "goalkeeper.dev/shard notin (a,b)", "goalkeeper-operator"),
        "goalkeeper-shard-a": ("a", "goalkeeper.dev/shard=a", "goalkeeper-operator-a"),
        "goalkeeper-shard-b": ("b", "goalkeeper.dev/shard=b", "goalkeeper-operator-b"),
    }
    selectors = []
    for name, (pods, selector, lease) in want.items():
        deployment = deployments[name]
        assert deployment["spec"]["replicas"] == 2
        match = deployment["spec"]["selector"]["matchLabels"]
        assert match["goalkeeper.dev/operator-shard"] == pods
        assert match.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
        selectors.append(match)
        env = env_of([deployment])
        assert env["GOALKEEPER_SHARD_SELECTOR"] == selector
        assert env["GOALKEEPER_LEASE_NAME"] == lease
        # One shard keeps the ModelConfigs' statuses: the release's own.
        assert env.get("GOALKEEPER_MODEL_CONFIG_STATUSES", "true") == str(pods == "default").lower()
    # No Deployment's pods match another's selector.
    for i, match in enumerate(selectors):
        for j, deployment in enumerate(deployments.values()):
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert (match.items() <= labels.items()) == (i == j)
    role = find(docs, "Role", "goalkeeper-operator-leader-election", "goalkeeper-system")
    named = next(rule for rule in role["rules"] if "resourceNames" in rule)
    assert named["resourceNames"] == [lease for _, _, lease in want.values()]
    # The metrics Service scrapes every shard's pods.
    service = find(docs, "Service", "goalkeeper-metrics", "goalkeeper-system")
    for deployment in deployments.values():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
    # A name too long for its Deployment fails, naming it, rather than be cut short.
    long_release = "r" * 45
    done = offline_helm(
        "template", long_release, str(CHART), "--set", "shards={a2345}", check=False
    )
    assert done.returncode != 0 and '"a2345" makes a Deployment name longer' in done.stderr
    # Without shards the one Deployment keeps its selector and selects every Monitor.
    alone = offline_helm.render("-n", "goalkeeper-system")
    deployment = find(alone, "Deployment", "goalkeeper", "goalkeeper-system")
    assert "goalkeeper.dev/operator-shard" not in deployment["spec"]["selector"]["matchLabels"]
    assert "GOALKEEPER_SHARD_SELECTOR" not in env_of(alone)


# --- against the control plane ---------------------------------------------------------


@pytest.fixture
def release_ns(control_plane: Any, api_client: Any) -> Iterator[str]:
    """The release's namespace, enforcing Pod Security `restricted` on the operator's pod."""
    core = client.CoreV1Api(api_client)
    name = f"gk-{uuid.uuid4().hex[:8]}"
    labels = {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn")}
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


def test_template_passes_server_side_dry_run(
    helm: Helm, control_plane: Any, namespace: str, release_ns: str
) -> None:
    release = f"dry-{uuid.uuid4().hex[:6]}"
    out = helm(
        "template", release, str(CHART), "-n", release_ns, "--include-crds",
        "--set", f"stepNamespaces={{{namespace}}}", "--set", f"watchNamespaces={{{namespace}}}",
        "--set", "shards={a}", "--set", "leaderElection.enabled=true",
        "--set", "console.enabled=true",
    ).stdout  # fmt: skip
    done = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input=out)
    assert done.returncode == 0, done.stderr
    assert "deployment.apps/" in done.stdout and "validatingadmissionpolicy" in done.stdout
    assert f"deployment.apps/{release}-goalkeeper-shard-a" in done.stdout
    assert f"deployment.apps/{release}-goalkeeper-console" in done.stdout


def done_or_wait(facts: Facts, _: int) -> dict[str, Any]:
    if facts.succeeded:
        return observation(
            "stop", "complete", "complete", facts, "Job build succeeded.", stopReason="goalComplete"
        )
    return observation("wait", "incomplete", "running", facts, "Job build is running.")


def leftovers(control_plane: Any, release: str) -> list[str]:
    namespaced = "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings"
    kinds = f"{namespaced},{CLUSTER_KINDS}"
    done = control_plane.kubectl(
        "get", kinds, "-A", "-l", f"{INSTANCE}={release}", "-o", "name", check=True
    )
    return done.stdout.split()


# What a release puts outside its namespaces: left behind, it would act on other tests
# (the approver and monitor-author policies stamp every Monitor of the cluster).
CLUSTER_KINDS = (
    "clusterroles,clusterrolebindings,validatingadmissionpolicies,"
    "validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings"
)


@pytest.fixture
def release(helm: Helm, control_plane: Any, release_ns: str) -> Iterator[str]:
    """A release name; whatever the test did, the release is uninstalled afterwards and
    its cluster-wide objects deleted (before its namespaces go)."""
    name = f"gk-{uuid.uuid4().hex[:6]}"
    try:
        yield name
    finally:
        try:
            helm("uninstall", name, "-n", release_ns, "--ignore-not-found", "--wait",
                 "--timeout", "120s", check=False)  # fmt: skip
        finally:
            control_plane.kubectl(
                "delete", CLUSTER_KINDS, "-l", f"{INSTANCE}={name}", "--ignore-not-found",
                timeout=120,
            )  # fmt: skip


def test_install_run_upgrade_uninstall(
    helm: Helm,
    control_plane: Any,
    api_client: Any,
    pod_runner: Any,
    namespace: str,
    release_ns: str,
    release: str,
) -> None:
    fullname = f"{release}-goalkeeper"
    control_plane.kubectl(
        "create", "secret", "generic", "model-api", "-n", namespace,
        "--from-literal=api-key=test-key-not-secret", check=True,
    )  # fmt: skip
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    coordination = client.CoordinationV1Api(api_client)
    with ModelServer() as model:
        # The pod runs as a local process: its ports are this machine's.
        health_port, metrics_port = free_port(), free_port()
        extra_env = [
            {"name": "GOALKEEPER_TIME_SCALE", "value": "1"},
            {"name": "GOALKEEPER_LISTEN_ADDRESS", "value": "127.0.0.1"},
            {"name": "GOALKEEPER_RETRY_BACKOFF_SECONDS", "value": "0.1"},
        ]
        helm(
            "install", release, str(CHART), "-n", release_ns,
            "--set", f"watchNamespaces={{{namespace}}}",
            "--set", f"stepNamespaces={{{namespace}}}",
            "--set", "model.name=openai:scripted-model",
            "--set", f"model.baseUrl={model.base_url}",
            "--set", "model.apiKeySecret.name=model-api",
            "--set", "steps.deadlineSeconds=120",
            "--set", "logLevel=debug",
            "--set-json", f"extraEnv={json.dumps(extra_env)}",
            "--set", "leaderElection.enabled=true",
            "--set", "leaderElection.leaseSeconds=4",
            "--set", f"probes.port={health_port}",
            "--set", f"metrics.port={metrics_port}",
        )  # fmt: skip
        deployment = apps.read_namespaced_deployment(fullname, release_ns)
        core.read_namespaced_service_account(f"{fullname}-operator", release_ns)
        for account in ("goalkeeper-observer", "goalkeeper-actor"):
            core.read_namespaced_service_account(account, namespace)
            rbac.read_namespaced_role(account, namespace)
            rbac.read_namespaced_role_binding(account, namespace)
        rbac.read_namespaced_role(f"{fullname}-operator", namespace)
        rbac.read_cluster_role(f"{fullname}-operator")
        rbac.read_namespaced_role(f"{fullname}-operator-leader-election", release_ns)
        core.read_namespaced_service(f"{fullname}-metrics", release_ns)
        policies = control_plane.kubectl(
            "get", "validatingadmissionpolicies", "-l", f"{INSTANCE}={release}", "-o", "name"
        ).stdout.split()
        shipped = [
            p
            for f in sorted((REPO / "config" / "admission").glob("*.yaml"))
            for p in load(f)
            if p["kind"] == "ValidatingAdmissionPolicy"
        ]
        assert len(policies) == len(shipped), policies
        mutating = control_plane.kubectl(
            "get", "mutatingadmissionpolicies", "-l", f"{INSTANCE}={release}", "-o", "name"
        ).stdout.split()
        assert sorted(mutating) == [
            f"mutatingadmissionpolicy.admissionregistration.k8s.io/{fullname}-{name}"
            for name in ("approver", "monitor-author")
        ]
        rbac.read_cluster_role(f"{fullname}-approver")

        try:
            # The Deployment's ReplicaSet makes the pod (in a namespace enforcing Pod
            # Security `restricted`: admission checks the chart); the pod runner runs it.
            pod = wait_for(
                lambda: rolled_out(apps, core, deployment.metadata.name, release_ns),
                120,
                "the operator pod to run",
            )
            assert_runs_the_chart_pod(core, pod_runner, deployment, release_ns, pod)
            wait_for(
                lambda: holder(coordination, fullname, release_ns) == pod, 60, "the pod to lead"
            )
            health = wait_for(
                lambda: http_get(f"http://127.0.0.1:{health_port}/healthz"), 60, "/healthz"
            )
            assert json.loads(health)["leader"] == {"identity": pod, "leader": True, "holder": pod}
            scraped = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert scraped is not None and "goalkeeper_leader 1.0" in scraped
            finish_one_monitor(api_client, namespace, model)

            helm("upgrade", release, str(CHART), "-n", release_ns, "--reuse-values",
                 "--set", "steps.history=7")  # fmt: skip
            upgraded = apps.read_namespaced_deployment(fullname, release_ns)
            env = {e.name: e.value for e in upgraded.spec.template.spec.containers[0].env}
            assert env["GOALKEEPER_STEP_HISTORY"] == "7"
            assert env["GOALKEEPER_MODEL_BASE_URL"] == model.base_url
            # The new template rolls out: a new pod replaces the old one and takes the lease
            # the old one hands over on exit.
            new_pod = wait_for(
                lambda: rolled_out(apps, core, fullname, release_ns, not_named=pod),
                120,
                "the upgraded operator pod to replace the old one",
            )
            assert_runs_the_chart_pod(core, pod_runner, upgraded, release_ns, new_pod)
            wait_for(
                lambda: holder(coordination, fullname, release_ns) == new_pod,
                60,
                "the upgraded pod to lead",
            )
        except BaseException:
            print_operator_logs(pod_runner, release_ns)
            raise

        helm("uninstall", release, "-n", release_ns, "--wait", "--timeout", "120s")
        wait_for(lambda: not leftovers(control_plane, release), 120, "no objects of the release")
        # Helm keeps CRDs on uninstall by design.
        control_plane.kubectl("get", "crd", "monitors.goalkeeper.dev", check=True)


def rolled_out(
    apps: Any, core: Any, name: str, namespace: str, not_named: str | None = None
) -> str | None:
    """The name of the Deployment's only pod once the rollout is complete and the pod's
    container runs (not the pod `not_named`); None until then."""
    deployment = apps.read_namespaced_deployment(name, namespace)
    status = deployment.status
    if (status.observed_generation or 0) < deployment.metadata.generation:
        return None
    if not (status.replicas == status.updated_replicas == status.available_replicas == 1):
        return None
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    if len(pods) != 1:  # the old pod is still Terminating
        return None
    (pod,) = pods
    if pod.metadata.name == not_named or pod.status.phase != "Running":
        return None
    if not any(c.state and c.state.running for c in pod.status.container_statuses or []):
        return None
    return str(pod.metadata.name)


def assert_runs_the_chart_pod(
    core: Any, pod_runner: Any, deployment: Any, namespace: str, name: str
) -> None:
    """The pod is the Deployment's (through its ReplicaSet), and the session pod runner
    runs its container's command: the chart's `goalkeeper run --verbose`, from the venv."""
    pod = core.read_namespaced_pod(name, namespace)
    assert pod.metadata.labels[INSTANCE] == deployment.metadata.labels[INSTANCE]
    (owner,) = pod.metadata.owner_references
    assert owner.kind == "ReplicaSet" and owner.controller
    replica_set = client.AppsV1Api(core.api_client).read_namespaced_replica_set(
        owner.name, namespace
    )
    (top,) = replica_set.metadata.owner_references
    assert (top.kind, top.uid) == ("Deployment", deployment.metadata.uid)
    container = deployment.spec.template.spec.containers[0]
    assert (container.command, container.args) == (["goalkeeper"], ["run", "--verbose"])
    record = pod_runner.record(namespace, name)
    assert record is not None, f"the pod runner did not run {namespace}/{name}"
    assert record.argv == ["goalkeeper", "run", "--verbose"]
    assert record.uid == pod.metadata.uid


def print_operator_logs(pod_runner: Any, namespace: str) -> None:
    """Every operator process's stderr in the release's namespace, for a failed test."""
    for record in list(pod_runner.records.values()):
        if record.namespace == namespace and record.stderr and record.stderr.exists():
            text = record.stderr.read_text()[-20000:]
            print(f"---- operator log {record.name} ----\n{text}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_get(url: str) -> str | None:
    """The body of a 200 answer; None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


def holder(coordination: Any, name: str, namespace: str) -> str | None:
    try:
        return str(coordination.read_namespaced_lease(name, namespace).spec.holder_identity)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def finish_one_monitor(api_client: Any, namespace: str, model: ModelServer) -> None:
    """Acceptance case 1 through the chart's operator: the target is already complete."""
    cluster = Cluster(api_client, namespace)
    cluster.batch.create_namespaced_job(namespace, build_job(namespace, suspended=False, seconds=0))
    cluster.core.create_namespaced_config_map(namespace, progress_map(namespace, 27))
    wait_for(
        lambda: cluster.batch.read_namespaced_job("build", namespace).status.succeeded,
        120,
        "the target Job to succeed",
    )
    model.default = Scenario(namespace, done_or_wait)
    cluster.create_monitor()
    status = wait_for(cluster.stopped, 180, "the monitor to stop")
    assert status["stop"]["reason"] == "goalComplete"
    assert status["checks"] == 1
    reports = cluster.reports(1)
    assert len(reports) == 1 and "Goal: complete" in report_text(reports[0])
    # Deleted while the operator runs, so nothing waits on it once the release is gone.
    cluster.custom.delete_namespaced_custom_object(
        "goalkeeper.dev", "v1alpha1", namespace, "monitors", "build"
    )
    wait_for(lambda: cluster.monitor() is None, 120, "the monitor to be deleted")
