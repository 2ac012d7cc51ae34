"""`goalkeeper authority MONITOR [-n NAMESPACE] [--confirm] [--grant WORDS] [--deny ID]`.

Shows what goalkeeper read from a Monitor's task: each grant (verb, object, limits, the
words it was read from), each prohibition, each unclear sentence and why. With `--confirm`
(and any `--grant` or `--deny`) it confirms or corrects that reading as the current
kubeconfig user, by creating a MonitorApproval the API server stamps with who they are:
RBAC on `monitorapprovals` decides who may, as for any approval.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from goalkeeper.approvals import create_approval
from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.core import authority
from goalkeeper.core.models import ApprovalDecision, ApprovalKind, MonitorStatus
from goalkeeper.kubeclient import connect


def reading_text(status: MonitorStatus) -> str:
    """The reading of the current spec generation as a person reads it, with its state."""
    record = status.authority
    if record is None:
        return "The task has not been read yet (the Step column shows extracting)."
    return authority.table(record)


def request_id(status: MonitorStatus) -> str:
    """The request a confirmation answers: the open one when an act waits for it, else the
    reading itself."""
    open_request = status.approval
    if open_request is not None and open_request.kind is ApprovalKind.authority:
        return open_request.id
    return authority.READING_REQUEST


def run(
    monitor_name: str,
    namespace: str | None,
    *,
    confirm: bool = False,
    grants: Sequence[str] = (),
    denied: Sequence[str] = (),
    reason: str = "",
    api_client: Any = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Show the reading; with `confirm` (or grants or denials) confirm or correct it as the
    caller. `api_client` (with `namespace`): the caller's connection, else the kubeconfig's."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from goalkeeper.controller.api import server_message

    if api_client is None:
        connected = connect(namespace, None, err)
        if connected is None:
            return 2
        api_client, namespace = connected
    custom: Any = client.CustomObjectsApi(api_client)
    changing = confirm or bool(grants) or bool(denied)
    # Each added grant must read whole, as the engine will read it.
    _, refused = authority.person_grants(grants)
    if refused:
        for line in refused:
            print(f"goalkeeper: --grant {line}; write it as 'resume Job etl once'", file=err)
        return 2
    try:
        monitor: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "monitors", monitor_name
        )
        status = MonitorStatus.model_validate(monitor.get("status") or {})
        print(f"Monitor {namespace}/{monitor_name}: what goalkeeper read from its words", file=out)
        print(reading_text(status), file=out)
        if not changing:
            return 0
        record = status.authority
        if record is None:
            print("goalkeeper: nothing to confirm until the task is read.", file=err)
            return 1
        unknown = [gid for gid in denied if all(g.id != gid for g in record.typedGrants)]
        if unknown:
            known = ", ".join(g.id for g in record.typedGrants) or "none"
            print(
                f"goalkeeper: --deny {', '.join(unknown)}: no such grant (grants: {known})",
                file=err,
            )
            return 2
        made = create_approval(
            api_client,
            monitor,
            request_id(status),
            ApprovalDecision.approve,
            reason=reason,
            extra={"grants": list(grants), "denied": list(denied)},
        )
    except ApiException as error:
        print(f"goalkeeper: {error.status} {error.reason}: {server_message(error)}", file=err)
        return 1
    spec = made.get("spec") or {}
    print(
        f"monitorapproval/{made['metadata']['name']} created: confirms the reading as "
        f"{spec.get('approver') or '(no approver stamped)'}"
        + (f", adding {', '.join(grants)}" if grants else "")
        + (f", denying {', '.join(denied)}" if denied else ""),
        file=out,
    )
    return 0
