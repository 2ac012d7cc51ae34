"""Facts beat words, end to end: the step pod reads the named Job itself, and an answer
the Job refutes goes back to the model within the step, told why, before any of it counts;
the operator would refuse it the same way (tests/unit: the engine's own check)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.harness import Cluster, Facts, OperatorProcess, Scenario, observation, wait_until
from tests.support.model_server import ModelServer
from tests.support.observations import action, extraction

pytestmark = pytest.mark.cluster


def test_a_goal_called_complete_while_the_job_is_suspended_is_refuted_then_finished(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    cluster.target(done=21, suspended=True, seconds=0)

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:  # the lie: the Job has not run at all
            return observation(
                "stop", "complete", "complete", facts, "All done.", stopReason="goalComplete"
            )
        if facts.suspended:
            return observation("act", "incomplete", "idle", facts, "Resuming.", action=action())
        if facts.succeeded:
            return observation(
                "stop", "complete", "complete", facts, "Job build succeeded.",
                stopReason="goalComplete",
            )  # fmt: skip
        return observation("wait", "incomplete", "running", facts, "Job build runs.")

    model.default = Scenario(cluster.ns, observe)
    cluster.create_monitor(everyMinutes=1)
    status = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)

    assert status["stop"]["reason"] == "goalComplete"
    assert cluster.batch.read_namespaced_job("build", cluster.ns).status.succeeded == 1
    # The lie never became a check, nor an invalid answer: the step told the model why.
    assert cluster.events("ObservationRejected") == []
    assert status["checks"] == 2 and status["invalidStreak"] == 0
    sent = [json.dumps(b, ensure_ascii=False) for b in model.bodies]
    told = [b for b in sent if "Contradicted by the facts: goal 'complete'" in b]
    assert told and "does not hold (Job build: suspended, not ended)" in told[0]
    assert "resume-build (resume Job build)" in told[0]
    observes = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    assert observes[0]["status"]["result"]["route"] == "act"
    # What the step pod read after the corrected answer, in the step's own status.
    [fact] = observes[0]["status"]["facts"]
    assert (fact["kind"], fact["name"], fact["suspended"]) == ("Job", "build", True)
    assert "stopWhen" in fact["namedIn"]


def deployment(
    namespace: str, name: str, replicas: int, container: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container]},
            },
        },
    }


def old_web(namespace: str, replicas: int) -> dict[str, Any]:
    sleeps = ["python", "-c", "import time; time.sleep(3600)"]
    return deployment(
        namespace, "old-web", replicas, {"name": "web", "image": "python:3.11", "command": sleeps}
    )


def test_a_two_part_stop_rule_completes_only_when_both_hold_and_the_facts_settle_it(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    """The stop rule is read into two leaves: Job build succeeded, Deployment old-web has 0
    replicas. A model that calls the goal complete once the Job succeeded is refused by the
    second leaf; once a person scales old-web down, the check that reads both facts true is
    settled by them, and no model is asked."""
    from kubernetes import client

    cluster.target(done=21, suspended=False, seconds=0)
    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_deployment(cluster.ns, old_web(cluster.ns, 2))
    wait_until(
        lambda: cluster.batch.read_namespaced_job("build", cluster.ns).status.succeeded,
        120,
        "Job build to succeed",
    )

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:  # the claim the embedded model made: complete, old-web said to be at 0
            return observation(
                "stop", "complete", "complete", facts, "Job build succeeded; old-web is at 0.",
                stopReason="goalComplete",
            )  # fmt: skip
        return observation("wait", "incomplete", "waiting", facts, "old-web still runs.")

    model.default = Scenario(cluster.ns, observe)
    stop_when = "Stop when Job build has succeeded and Deployment old-web has 0 replicas."
    cluster.create_monitor(stopWhen=stop_when, everyMinutes=2)
    wait_until(lambda: cluster.status().get("checks") == 1, 120, "check 1", operator.logs)
    status = cluster.status()
    assert status["monitor"] == "active" and status["goal"] == "incomplete"
    leaves = status["authority"]["goal"]["done"]
    assert [[(leaf["kind"], leaf["object"]["name"]) for leaf in group] for group in leaves] == [
        [("jobSucceeded", "build"), ("workloadReplicas", "old-web")]
    ]
    sent = [json.dumps(b, ensure_ascii=False) for b in model.bodies]
    told = [b for b in sent if "contradicts the stop rule" in b]
    assert told and "Deployment old-web has 0 replicas" in told[0]
    assert "does not hold (Deployment old-web: replicas 2, not 0)" in told[0]

    apps.patch_namespaced_deployment("old-web", cluster.ns, {"spec": {"replicas": 0}})
    status = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "goalComplete" and status["goal"] == "complete"
    assert "The stop rule is met by the facts read" in status["report"]
    # The check that settled it sent no model request (a check already asking when the
    # Deployment was scaled may have sent one before it).
    last = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"][-1]
    assert last["status"]["usage"]["requests"] == 0
    assert last["status"]["result"]["reason"].startswith("Settled by the facts")


def crashing_api(namespace: str) -> dict[str, Any]:
    exits = "import sys; print('missing DB_URL: cannot start', file=sys.stderr); sys.exit(3)"
    container = {
        "name": "api",
        "image": "python:3.11",
        "command": ["python", "-c", exits],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return deployment(namespace, "api", 1, container)


def test_a_crash_loop_stops_the_run_blocked_naming_the_pods_own_message(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    """The stop rule gives up on crash-looping pods; the step reads the pods' restarts,
    waiting reason and last exit itself, so the run stops `blocked` with the pod's message,
    whatever the model answers (here: wait, forever)."""
    from kubernetes import client

    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_deployment(cluster.ns, crashing_api(cluster.ns))

    def backing_off() -> bool:
        pods = cluster.core.list_namespaced_pod(cluster.ns, label_selector="app=api").items
        return any(
            c.state.waiting is not None and c.state.waiting.reason == "CrashLoopBackOff"
            for p in pods
            for c in p.status.container_statuses or []
        )

    wait_until(backing_off, 120, "Deployment api's pod to crash-loop")
    # A check that reads the pod between two crashes (running, not backing off) asks the
    # model; its wait restates no authority (the harness's default restates a build Job's).
    model.default = Scenario(
        cluster.ns,
        lambda facts, n: observation(
            "wait",
            "incomplete",
            "running",
            facts,
            "api starts.",
            contract=None,
            authorizedActions=None,
        ),
    )
    cluster.create_monitor(
        task="Watch Deployment api come up and tell me why it fails if it does not.",
        stopWhen="Stop when Deployment api is available, or give up if its pods keep crashing.",
        everyMinutes=1,
    )
    status = wait_until(cluster.stopped, 240, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "blocked"
    said = status["stop"]["message"]
    assert '"its pods keep crashing" holds' in said
    assert "a container waits in CrashLoopBackOff" in said
    assert "last exited 3" in said and "missing DB_URL: cannot start" in said
    [leaf] = status["authority"]["goal"]["giveUp"]
    assert (leaf["kind"], leaf["object"]["name"]) == ("podsRestarting", "api")
    observes = [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]
    [fact] = [f for f in observes[-1]["status"]["facts"] if f["name"] == "api"]
    assert fact["pods"]["waiting"] == "CrashLoopBackOff" and fact["pods"]["restarts"] >= 1
    # A model that was asked saw the message inside the untrusted-data fence only.
    for body in (json.dumps(b, ensure_ascii=False) for b in model.bodies):
        if "missing DB_URL" in body:
            assert 'source=\\"termination message, pods of Deployment api\\"' in body


def shop(namespace: str) -> dict[str, Any]:
    sleeps = ["python", "-c", "import time; time.sleep(3600)"]
    container = {
        "name": "shop",
        "image": "python:3.11",
        "command": sleeps,
        "envFrom": [{"configMapRef": {"name": "prices"}}],
    }
    return deployment(namespace, "shop", 1, container)


def test_pods_that_must_start_after_a_config_fix_are_restarted_once_by_the_persons_grant(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    """ "Every running pod of shop started after ConfigMap prices was last written": the pod
    started before prices was corrected, so the check restarts Deployment shop by the task's
    grant whatever the model answers (here: wait, forever), waits while the rollout replaces
    the pod, and ends the run complete once the new pod runs: one restart, no more."""
    from kubernetes import client

    apps = client.AppsV1Api(cluster.api)
    cluster.core.create_namespaced_config_map(
        cluster.ns, {"metadata": {"name": "prices"}, "data": {"currency": "USD"}}
    )
    apps.create_namespaced_deployment(cluster.ns, shop(cluster.ns))

    def started() -> datetime | None:
        pods = cluster.core.list_namespaced_pod(cluster.ns, label_selector="app=shop").items
        running = [p for p in pods if p.status.phase == "Running" and p.status.start_time]
        return running[0].status.start_time if running else None

    first = wait_until(started, 120, "Deployment shop's pod to run")
    # The fix is written in a later second than the pod started, as a person's would be.
    wait_until(lambda: datetime.now(UTC) >= first + timedelta(seconds=1), 10, "a second to pass")
    cluster.core.patch_namespaced_config_map("prices", cluster.ns, {"data": {"currency": "EUR"}})

    model.default = Scenario(
        cluster.ns,
        lambda facts, n: observation(
            "wait", "incomplete", "running", facts, "shop serves.",
            contract=None, authorizedActions=None,
        ),
        reading=extraction(
            allowedSystems=[], allowedResources=[], allowedRecoveryActions=[],
            authorizedActions=[],
        ),
    )  # fmt: skip
    cluster.create_monitor(
        task="You may restart Deployment shop.",
        stopWhen="Stop when every running pod of shop started after ConfigMap prices was last "
        "written.",
        everyMinutes=1,
    )
    status = wait_until(cluster.stopped, 300, "the monitor to stop", operator.logs)
    assert status["stop"]["reason"] == "goalComplete", status["stop"]
    [[leaf]] = status["authority"]["goal"]["done"]
    assert leaf["kind"] == "podsStartedAfter" and leaf["after"]["name"] == "prices"
    assert "its oldest running pod started" in status["report"]
    acts = [s for s in cluster.steps() if s["spec"]["kind"] == "act"]
    assert [s["spec"]["input"]["action"]["authorizedActionId"] for s in acts] == ["restart-shop"]
    template = apps.read_namespaced_deployment("shop", cluster.ns).spec.template
    assert "kubectl.kubernetes.io/restartedAt" in (template.metadata.annotations or {})
    sets = apps.list_namespaced_replica_set(cluster.ns, label_selector="app=shop").items
    assert len(sets) == 2, "one restart: the first ReplicaSet and the restarted one"
