"""Human approvals end to end: a paid action over its ceiling waits for a person, who
answers with `goalkeeper approve` or `goalkeeper reject` as themselves; the API server
decides who may and stamps who did."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness import (
    BIN,
    GROUP,
    ROOT,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    report_text,
    wait_until,
    write_token_kubeconfig,
)
from tests.support.model_server import ModelServer
from tests.support.observations import RESUME, TASK, action, contract, extraction

pytestmark = pytest.mark.cluster

CEILING = {"amount": 10, "currency": "USD"}
PAID = [{"id": "resume-build", "description": "Resume the build on paid GPUs.", "paid": True}]
JOB = [{"apiVersion": "batch/v1", "kind": "Job", "name": "build"}]
# The task that grants the paid resume and its ceiling, and what its reading finds.
SPENDING = "Spending must not exceed 10 USD."
PAID_TASK = f"{TASK} {SPENDING}"
READING = extraction(
    authorizedActions=[{**PAID[0], "quote": RESUME}],
    costCeiling={**CEILING, "quote": SPENDING},
)


def paid_resume(facts: Facts, n: int) -> dict[str, Any]:
    """Check 1 asks for a paid resume estimated at 15 USD over a 10 USD ceiling; later
    checks wait for the build, or stop once it succeeded."""
    authority = {"contract": contract(costCeiling=CEILING), "authorizedActions": PAID}
    if n == 1:
        resume = action(estimatedCost={"amount": 15, "currency": "USD"})
        return observation(
            "act", "incomplete", "idle", facts, "Job build waits.", action=resume, **authority
        )
    if facts.succeeded:
        return observation(
            "stop", "complete", "complete", facts, "Done.", stopReason="goalComplete", **authority
        )
    return observation("wait", "incomplete", "running", facts, "Runs.", watch=JOB, **authority)


def account(control_plane: Any, cluster: Cluster, name: str, tmp_path: Path, role: bool) -> Path:
    """A kubeconfig of ServiceAccount `name`, bound to goalkeeper-approver when `role`."""
    control_plane.kubectl("create", "serviceaccount", name, "-n", cluster.ns, check=True)
    if role:
        control_plane.kubectl(
            "apply", "-f", str(ROOT / "config" / "rbac" / "approver.yaml"), check=True
        )
        control_plane.kubectl(
            "create", "rolebinding", f"{name}-approves", "--clusterrole=goalkeeper-approver",
            f"--serviceaccount={cluster.ns}:{name}", "-n", cluster.ns, check=True,
        )  # fmt: skip
    path = tmp_path / f"{name}.kubeconfig"
    write_token_kubeconfig(cluster.api, control_plane.kubeconfig, cluster.ns, name, path)
    return path


def goalkeeper(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "goalkeeper"), *args],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def awaiting(cluster: Cluster, model: ModelServer, operator: OperatorProcess) -> dict[str, Any]:
    """The status once the monitor, asked for a paid resume, awaits a person."""
    cluster.target()
    model.default = Scenario(cluster.ns, paid_resume, reading=READING)
    cluster.create_monitor(task=PAID_TASK, everyMinutes=60, maxChecks=6)
    return wait_until(
        lambda: (s := cluster.status()).get("approval") and s, 120, "the request", operator.logs
    )


def approval(name: str, request: str, owner: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    """An approval of Monitor build's `request`, owned by the Monitor `owner` as `goalkeeper
    approve` makes it, or with no owner (None), as one written by hand may be."""
    metadata: dict[str, Any] = {"name": name}
    if owner is not None:
        meta = owner["metadata"]
        ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Monitor", "uid": meta["uid"]}
        metadata["ownerReferences"] = [{**ref, "name": meta["name"]}]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MonitorApproval",
        "metadata": metadata,
        "spec": {"monitor": "build", "requestId": request, "decision": "approve", **spec},
    }


def as_user(kubeconfig: Path) -> Any:
    from kubernetes import config

    return client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT="10m")
def test_an_approver_approves_as_themselves_and_the_monitor_acts_then_verifies(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    tmp_path: Path,
) -> None:
    status = awaiting(cluster, model, operator)
    monitor = cluster.monitor()
    request = status["approval"]
    assert (request["amount"], request["estimatedCost"]) == (
        {"amount": 5.0, "currency": "USD"},
        {"amount": 15, "currency": "USD"},
    )
    assert status["health"]["state"] == "AwaitingHuman"
    assert status["activity"] == "awaitingApproval" and not cluster.step_kinds().count("act")
    (asked,) = cluster.posted("ApprovalRequested")
    assert asked.type == "Warning" and request["id"] in asked.message
    # What the user sees, printed for the README.
    print(control_plane.kubectl("get", "monitors", "-n", cluster.ns).stdout)
    print(
        control_plane.kubectl(
            "get", "events", "-n", cluster.ns, "--field-selector", "reason=ApprovalRequested"
        ).stdout
    )

    approver = account(control_plane, cluster, "approver", tmp_path, role=True)
    stranger = account(control_plane, cluster, "stranger", tmp_path, role=False)
    me = f"system:serviceaccount:{cluster.ns}:approver"

    # Without the role, the API server refuses the approval.
    with pytest.raises(ApiException) as refused:
        as_user(stranger).create_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.ns,
            "monitorapprovals",
            approval("by-stranger", request["id"], monitor),
        )
    assert refused.value.status == 403

    # An approval naming someone else is stamped with its real creator; one for another
    # request is ignored, says so, and cannot be edited into the right one.
    def made_stale() -> dict[str, Any]:
        body = approval("stale", "req-0", monitor, approver="the-boss")
        return as_user(approver).create_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, cluster.ns, "monitorapprovals", body
        )

    stale = made_stale()
    assert stale["spec"]["approver"] == me
    ignored = wait_until(lambda: cluster.events("ApprovalIgnored"), 60, "the stale approval")
    assert "answers request req-0" in ignored[0].message
    # Not even a cluster admin can edit an approval afterwards (the approver may not at all).
    with pytest.raises(ApiException) as edited:
        cluster.custom.patch_namespaced_custom_object(
            GROUP, VERSION, cluster.ns, "monitorapprovals", "stale",
            {"spec": {"requestId": request["id"]}},
        )  # fmt: skip
    assert edited.value.status == 403 and "cannot be changed" in str(edited.value.body)
    assert cluster.status()["approval"]["ignored"] == ["stale"]

    answered = goalkeeper(approver, "approve", "build", "-n", cluster.ns, "--reason", "Q4 GPUs")
    assert answered.returncode == 0, answered.stderr
    print(answered.stdout)
    assert f"approve request {request['id']} as {me}" in answered.stdout
    assert "adds 5.00 USD to the cost ceiling for this action only" in answered.stdout
    assert "estimated at 15.00 USD, 0.00 USD is spent and the ceiling is 10.00 USD" in (
        answered.stdout
    )

    stopped = wait_until(cluster.stopped, 120, "the monitor to finish", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete"
    (record,) = stopped["approvals"]
    assert (record["approver"], record["requestId"], record["amount"]["amount"]) == (
        me,
        request["id"],
        5.0,
    )
    assert record["reason"] == "Q4 GPUs"
    # The act step ran the requested action with the approval named, then was verified.
    steps = cluster.steps()
    kinds = [s["spec"]["kind"] for s in steps]
    assert kinds[:4] == ["extract", "observe", "act", "observe"]
    granted = steps[2]["spec"]["input"]["action"]["approval"]
    assert me in granted and "added 5.00 USD to the cost ceiling for this action" in granted
    assert stopped["spend"]["total"]["amount"] == 15
    assert stopped["health"]["state"] == "Healthy"
    assert cluster.posted("ApprovalAccepted")
    print(control_plane.kubectl("get", "monitorapprovals", "-n", cluster.ns).stdout)


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT="10m")
def test_a_rejection_after_an_operator_restart_stops_with_the_final_report(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    tmp_path: Path,
) -> None:
    request = awaiting(cluster, model, operator)["approval"]
    # The request lives in status: a new operator process takes the answer to it.
    operator.restart_with()
    approver = account(control_plane, cluster, "approver", tmp_path, role=True)
    answered = goalkeeper(approver, "reject", "build", "-n", cluster.ns, "--reason", "too dear")
    assert answered.returncode == 0, answered.stderr
    stopped = wait_until(cluster.stopped, 60, "the monitor to stop", operator.logs)
    assert stopped["stop"]["reason"] == "paidActionNotApproved"
    assert stopped["stop"]["message"].endswith(": too dear")
    assert stopped["approvals"][0]["requestId"] == request["id"]
    assert cluster.step_kinds() == ["extract", "observe"]
    # check 1's report and the final one.
    final = [e for e in cluster.reports(2) if e.metadata.name.endswith("check-1-final")]
    assert len(final) == 1 and "Stopped: system:serviceaccount:" in report_text(final[0])
    # Nothing is open any more to answer.
    again = goalkeeper(approver, "approve", "build", "-n", cluster.ns)
    assert again.returncode == 1 and "has no approval request open" in again.stderr


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT="3s")
def test_no_answer_within_the_window_stops(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess
) -> None:
    awaiting(cluster, model, operator)
    stopped = wait_until(cluster.stopped, 60, "the window to end", operator.logs)
    assert stopped["stop"]["reason"] == "paidActionNotApproved"
    # Step 1 read the task, step 2 asked: request ids are the asking step's.
    assert stopped["stop"]["message"].startswith("No answer came to approval request req-2")
    assert cluster.step_kinds() == ["extract", "observe"] and "approval" not in stopped


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT="10m")
def test_an_approval_for_an_earlier_monitor_of_the_same_name_answers_nothing(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    tmp_path: Path,
) -> None:
    """Request ids start again for a Monitor recreated under the same name: an approval
    written for the earlier one, without an owner as a hand-written one may be, names the
    very request id the new one opens, and is still ignored, with the Event saying why."""
    earlier = awaiting(cluster, model, operator)["approval"]
    approver = account(control_plane, cluster, "approver", tmp_path, role=True)
    as_user(approver).create_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitorapprovals", approval("earlier", earlier["id"], None)
    )
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, cluster.ns, "monitors", "build")
    wait_until(lambda: cluster.monitor() is None, 30, "the earlier Monitor to go")

    model.default = Scenario(cluster.ns, paid_resume, reading=READING)
    monitor = cluster.create_monitor(task=PAID_TASK, everyMinutes=60, maxChecks=6)
    uid = monitor["metadata"]["uid"]
    request = wait_until(
        lambda: cluster.status().get("approval"), 120, "the new request", operator.logs
    )
    assert request["id"] == earlier["id"], "the recreated Monitor opens the same request id"

    def ignored_by_the_new_monitor() -> list[Any]:
        return [e for e in cluster.events("ApprovalIgnored") if e.involved_object.uid == uid]

    (ignored,) = wait_until(ignored_by_the_new_monitor, 60, "the earlier approval to be ignored")
    assert ignored.type == "Warning" and "MonitorApproval earlier was ignored" in ignored.message
    assert "not owned by this Monitor" in ignored.message
    status = cluster.status()
    assert status["approval"]["ignored"] == ["earlier"] and not status.get("approvals")
    assert status["activity"] == "awaitingApproval" and "act" not in cluster.step_kinds()

    # The answer `goalkeeper approve` gives, owned by the new Monitor, is taken.
    answered = goalkeeper(approver, "approve", "build", "-n", cluster.ns)
    assert answered.returncode == 0, answered.stderr
    stopped = wait_until(cluster.stopped, 120, "the monitor to finish", operator.logs)
    assert stopped["stop"]["reason"] == "goalComplete"
    assert [r["requestId"] for r in stopped["approvals"]] == [request["id"]]
    assert ignored_by_the_new_monitor() == [ignored]
