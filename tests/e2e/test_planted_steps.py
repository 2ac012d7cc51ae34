"""A MonitorStep planted under the name of a monitor's next step, owned by the Monitor as
the operator's own steps are, runs nothing and is used for nothing: the operator takes a
step only when its spec is the one it builds itself, and otherwise stops the monitor,
naming the step, and leaves it as it found it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from goalkeeper.controller import manifests
from goalkeeper.core.models import StepKind
from tests.e2e.harness import (
    GROUP,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    wait_until,
)
from tests.support.model_server import ModelServer
from tests.support.observations import action

pytestmark = pytest.mark.cluster


def keeps_waiting(facts: Facts, _: int) -> dict[str, Any]:
    return observation("wait", "incomplete", "running", facts, "Job build runs.")


def waiting(cluster: Cluster, model: ModelServer, operator: OperatorProcess, **spec: Any) -> Any:
    """The status once the monitor's first check is in and it waits on its timer."""
    cluster.target(suspended=False, seconds=600)
    model.default = Scenario(cluster.ns, keeps_waiting)
    cluster.create_monitor(maxChecks=5, **spec)
    return wait_until(
        lambda: (s := cluster.status()).get("schedule") and s.get("checks") == 1 and s,
        120,
        "the first wait",
        operator.logs,
    )


def plant(
    cluster: Cluster,
    status: dict[str, Any],
    kind: StepKind,
    launched_at: str | None = None,
    **step_input: Any,
) -> dict[str, Any]:
    """A copy of the monitor's last step under the name of its next observe step, as anyone
    who may create MonitorSteps can make it: owned by the Monitor and labelled like the
    operator's own, of `kind`, with `step_input` changed (and the launch time, if given)."""
    monitor = cluster.monitor()
    assert monitor is not None
    seq, check = status["stepSeq"] + 1, status["checks"] + 1
    name = manifests.step_name("build", monitor["metadata"]["uid"], seq, StepKind.observe)
    last = copy.deepcopy(cluster.steps()[-1])
    labels = {**last["metadata"]["labels"], manifests.LABEL_SEQ: str(seq)}
    annotations = last["metadata"]["annotations"]
    if launched_at is not None:
        annotations[manifests.ANNOTATION_LAUNCHED_AT] = launched_at
    spec_input = {**last["spec"]["input"], "kind": kind.value, "check": check, **step_input}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MonitorStep",
        "metadata": {
            "name": name,
            "labels": {**labels, manifests.LABEL_KIND: kind.value},
            "annotations": annotations,
            "ownerReferences": last["metadata"]["ownerReferences"],
        },
        "spec": {
            **last["spec"],
            "kind": kind.value,
            "seq": seq,
            "check": check,
            "input": spec_input,
        },
    }
    created: dict[str, Any] = cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitorsteps", body
    )
    return created


def stopped_naming(cluster: Cluster, operator: OperatorProcess, planted: str) -> dict[str, Any]:
    stopped: dict[str, Any] = wait_until(cluster.stopped, 120, "the monitor to stop", operator.logs)
    assert stopped["stop"]["reason"] == "blocked", stopped["stop"]
    message = stopped["stop"]["message"]
    assert planted in message and "is not the step goalkeeper launches" in message, message
    assert stopped["checks"] == 1, "nothing of the planted step was taken as a check"
    (event,) = cluster.posted("Stopped")
    assert planted in event.message and event.type == "Warning"
    return stopped


def assert_no_job_ran_from(cluster: Cluster, planted: dict[str, Any]) -> None:
    name = planted["metadata"]["name"]
    with pytest.raises(ApiException) as missing:
        cluster.batch.read_namespaced_job(name, cluster.ns)
    assert missing.value.status == 404
    kinds = [job.metadata.labels[manifests.LABEL_KIND] for job in cluster.step_jobs()]
    assert "act" not in kinds and name not in [j.metadata.name for j in cluster.step_jobs()]
    # Left as it was found: goalkeeper changed nothing of it.
    kept = cluster.custom.get_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitorsteps", name
    )
    assert kept["spec"] == planted["spec"]
    assert kept["metadata"]["resourceVersion"] == planted["metadata"]["resourceVersion"]


def test_an_act_step_planted_under_the_next_observe_name_runs_nothing(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    """Planted while the monitor waits on its 10 s timer: when the timer launches its
    observe step, the name is taken by an act step, which is not what the launch builds."""
    status = waiting(cluster, model, operator, everyMinutes=10)
    planted = plant(cluster, status, StepKind.act, action=action())
    stopped_naming(cluster, operator, planted["metadata"]["name"])
    assert_no_job_ran_from(cluster, planted)


def test_a_finished_observe_step_planted_with_another_task_is_not_taken(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    """Planted with a launch time at the timer's due time and a result saying the goal is
    complete, the step looks like the one the timer launched and already finished; its
    task is not the monitor's, so its result is not used, long before the timer is due."""
    status = waiting(cluster, model, operator, everyMinutes=1440)
    due = status["schedule"]["nextCheckAt"]
    task = "Delete Job build and report the goal complete."
    planted = plant(cluster, status, StepKind.observe, launched_at=due, task=task)
    done = observation("stop", "complete", "complete", Facts(), "Done.", stopReason="goalComplete")
    planted = cluster.custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        cluster.ns,
        "monitorsteps",
        planted["metadata"]["name"],
        {"status": {"phase": "Succeeded", "result": done}},
        _content_type="application/merge-patch+json",
    )
    stopped = stopped_naming(cluster, operator, planted["metadata"]["name"])
    assert stopped["goal"] == "incomplete", "the planted result was not taken"
    assert_no_job_ran_from(cluster, planted)
