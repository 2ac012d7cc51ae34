"""`goalkeeper approve|reject MONITOR [-n NAMESPACE]`: answer a monitor's approval request.

The command reads the pending request from the Monitor's status, shows what it asks,
and creates a MonitorApproval for it as the current kubeconfig user, naming that user as
the API server reports them (a SelfSubjectReview). The API server has the last word: an
admission policy stamps the creating user into `spec.approver` and refuses any other
name, and RBAC on `monitorapprovals` decides who may create one at all.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from goalkeeper.controller.manifests import GROUP, LABEL_MONITOR, VERSION, label_value
from goalkeeper.core.models import ApprovalDecision, MonitorStatus
from goalkeeper.kubeclient import connect


def describe_request(status: MonitorStatus) -> str:
    request = status.approval
    assert request is not None
    return (
        f"request {request.id} (check {request.check}, {request.kind.value}): "
        f"{request.message}\n  open until {request.expiresAt.isoformat()}"
    )


def approval_body(
    monitor: dict[str, Any],
    request_id: str,
    decision: ApprovalDecision,
    *,
    approver: str,
    amount: float | None = None,
    reason: str = "",
) -> dict[str, Any]:
    """The MonitorApproval answering `monitor`'s request `request_id`, owned by the Monitor
    so it goes with it."""
    meta = monitor["metadata"]
    spec: dict[str, Any] = {
        "monitor": meta["name"],
        "requestId": request_id,
        "decision": decision.value,
        "approver": approver,
    }
    if amount is not None:
        spec["amount"] = amount
    if reason:
        spec["reason"] = reason
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MonitorApproval",
        "metadata": {
            "generateName": f"{meta['name'][:50]}-{decision.value}-",
            "labels": {LABEL_MONITOR: label_value(meta["name"])},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Monitor",
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "spec": spec,
    }


def create_approval(
    api_client: Any,
    monitor: dict[str, Any],
    request_id: str,
    decision: ApprovalDecision,
    *,
    amount: float | None = None,
    reason: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create the MonitorApproval answering `request_id` as the client's user, named as the
    API server reports them (a SelfSubjectReview); `extra`: more of its spec."""
    from kubernetes import client

    authentication: Any = client.AuthenticationV1Api(api_client)
    review = authentication.create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    body = approval_body(
        monitor,
        request_id,
        decision,
        approver=str(review.status.user_info.username),
        amount=amount,
        reason=reason,
    )
    body["spec"].update(extra or {})
    custom: Any = client.CustomObjectsApi(api_client)
    made: dict[str, Any] = custom.create_namespaced_custom_object(
        GROUP, VERSION, monitor["metadata"]["namespace"], "monitorapprovals", body
    )
    return made


def answer(
    monitor_name: str,
    namespace: str | None,
    decision: ApprovalDecision,
    *,
    request_id: str | None = None,
    amount: float | None = None,
    reason: str = "",
    api_client: Any = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Answer the Monitor's open request (`request_id`: only when it is that one) as the
    kubeconfig's user: 0 answered, 1 refused or nothing open, 2 no kubeconfig."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from goalkeeper.controller.api import server_message

    out = out or sys.stdout
    err = err or sys.stderr
    connected = connect(namespace, api_client, err)
    if connected is None:
        return 2
    api_client, namespace = connected
    custom: Any = client.CustomObjectsApi(api_client)
    try:
        monitor: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "monitors", monitor_name
        )
        status = MonitorStatus.model_validate(monitor.get("status") or {})
        if status.approval is None:
            print(
                f"goalkeeper: Monitor {namespace}/{monitor_name} has no approval request open.",
                file=err,
            )
            return 1
        if request_id is not None and request_id != status.approval.id:
            print(
                f"goalkeeper: Monitor {namespace}/{monitor_name} has no request {request_id} "
                f"open: the open one is {status.approval.id}.",
                file=err,
            )
            return 1
        print(f"Monitor {namespace}/{monitor_name} asks for approval:", file=out)
        print(describe_request(status), file=out)
        made = create_approval(
            api_client, monitor, status.approval.id, decision, amount=amount, reason=reason
        )
    except ApiException as error:
        print(f"goalkeeper: {error.status} {error.reason}: {server_message(error)}", file=err)
        return 1
    spec = made.get("spec") or {}
    print(
        f"monitorapproval/{made['metadata']['name']} created: {spec.get('decision')} "
        f"request {spec.get('requestId')} as {spec.get('approver') or '(no approver stamped)'}",
        file=out,
    )
    return 0
