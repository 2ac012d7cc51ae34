"""`goalkeeper pause|resume|check MONITOR [-n NAMESPACE]`: a person's controls of a Monitor.

Each command sets one annotation of `core/controls.py` with a JSON merge patch on
`metadata.annotations`, as `kubectl annotate` would: `pause` sets `goalkeeper.dev/paused`
to "true", `resume` removes it, `check` sets `goalkeeper.dev/check-now` to a new value (the
time, RFC 3339 in UTC with microseconds, as Flux's `requestedAt`). None of them touches the
spec, so none makes a new generation. The Monitor is read first, to say in one line what
the person will see; RBAC decides who may: `get` and `patch` on `monitors`.

The namespace is `-n`, else the current kubeconfig context's, else `default`.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TextIO

from goalkeeper.controller.manifests import GROUP, LABEL_MONITOR, VERSION, label_value
from goalkeeper.core.controls import CHECK_NOW, PAUSED, controls_of
from goalkeeper.kubeclient import connect

MERGE_PATCH = "application/merge-patch+json"


class Control(StrEnum):
    pause = "pause"
    resume = "resume"
    check = "check"


def check_now_value(now: datetime, taken: Collection[str] = ()) -> str:
    """A check-now value none of `taken` has: `now` in RFC 3339 UTC with microseconds,
    moved on by a microsecond while it is taken."""
    at = now.astimezone(UTC)
    while (value := at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")) in taken:
        at += timedelta(microseconds=1)
    return value


def annotations_patch(control: Control, value: str = "") -> dict[str, Any]:
    """The JSON merge patch a control sends; `value` is the check-now value of `check`."""
    annotations: dict[str, str | None]
    if control is Control.pause:
        annotations = {PAUSED: "true"}
    elif control is Control.resume:
        annotations = {PAUSED: None}  # null removes the key
    else:
        assert value, "a check needs a value"
        annotations = {CHECK_NOW: value}
    return {"metadata": {"annotations": annotations}}


def needs_patch(control: Control, monitor: Mapping[str, Any]) -> bool:
    """Whether the control changes anything: `resume` of a Monitor without the annotation
    does not."""
    annotations = (monitor.get("metadata") or {}).get("annotations") or {}
    return control is not Control.resume or PAUSED in annotations


def refused_check(monitor: Mapping[str, Any]) -> str | None:
    """Why `check` is refused before any write: a stopped monitor starts nothing."""
    status = monitor.get("status") or {}
    if status.get("monitor") != "stopped":
        return None
    meta = monitor.get("metadata") or {}
    reason = (status.get("stop") or {}).get("reason") or "stopped"
    return (
        f"goalkeeper: monitor {meta.get('namespace')}/{meta.get('name')} is stopped "
        f"({reason}): a check starts nothing; edit its spec to begin a new run"
    )


def outcome(control: Control, monitor: Mapping[str, Any], value: str = "") -> str:
    """The one line a control prints: what it did and what the person will see, from the
    Monitor as read before the patch."""
    meta = monitor.get("metadata") or {}
    status = monitor.get("status") or {}
    name = str(meta.get("name"))
    ref = f"{meta.get('namespace')}/{name}"
    paused = controls_of(meta.get("annotations")).paused
    stopped = status.get("monitor") == "stopped"
    step = status.get("step") or {}
    kind = f"{step['kind']} step" if step.get("kind") else "step"
    approval = (status.get("approval") or {}).get("id")
    resume = f"`goalkeeper resume {name}`"
    steps = f"`kubectl get monitorsteps -l {LABEL_MONITOR}={label_value(name)}`"
    if control is Control.pause:
        if paused:
            return f"monitor {ref} is already paused: nothing launches until {resume}"
        if stopped:
            return (
                f"paused monitor {ref}: it is stopped, and nothing launches for it until {resume}"
            )
        if step:
            return (
                f"paused monitor {ref}: the running {kind} finishes and its result is "
                f"taken, then nothing launches until {resume} (Step column: paused)"
            )
        return f"paused monitor {ref}: nothing launches until {resume} (Step column: paused)"
    if control is Control.resume:
        if not needs_patch(control, monitor):
            return f"monitor {ref} is not paused: nothing changed"
        if stopped:
            return (
                f"resumed monitor {ref}: it is stopped, so nothing starts until a spec edit "
                "begins a new run"
            )
        if approval:
            return (
                f"resumed monitor {ref}: it awaits an answer to approval request {approval} "
                f"(`goalkeeper approve {name}` or `goalkeeper reject {name}`)"
            )
        if step:
            return f"resumed monitor {ref}: its {kind} runs on, and the loop carries on after it"
        return (
            f"resumed monitor {ref}: an observe step starts now ({steps} shows it), then "
            "checks follow the schedule"
        )
    requested = f"requested a check of monitor {ref} ({CHECK_NOW}={value})"
    if paused:
        return (
            f"{requested}, but it is paused: nothing launches until {resume}, which checks at once"
        )
    if approval:
        return f"{requested}: it awaits an answer to approval request {approval} first"
    if step.get("kind") == "observe":
        return f"{requested}: an observe step runs now, and its result is that check"
    if step:
        return f"{requested}: its {kind} runs now, and an observe step follows it at once"
    return f"{requested}: an observe step starts now ({steps} shows it)"


def refusal(
    control: Control,
    name: str,
    namespace: str,
    status: int | None,
    reason: str,
    message: str,
    *,
    writing: bool,
) -> str:
    """What a refused read (`writing` False) or patch of the Monitor means, naming the
    RBAC verb a 403 lacks."""
    if status == 404:
        return (
            f"goalkeeper: no Monitor {name} in namespace {namespace} "
            f"(`kubectl get monitors -n {namespace}` lists them)"
        )
    said = f" The API server said: {message}" if message else ""
    if status == 403:
        verb, needs = ("patch", "verb patch") if writing else ("get", "verbs get and patch")
        return (
            f"goalkeeper: refused to {verb} Monitor {namespace}/{name}: `goalkeeper "
            f"{control.value}` needs the RBAC {needs} on monitors ({GROUP}) in "
            f"namespace {namespace}.{said}"
        )
    return f"goalkeeper: {status} {reason}: {message or 'no message'}"


def run_control(
    control: Control,
    name: str,
    namespace: str | None = None,
    *,
    api_client: Any = None,
    now: datetime | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Read the Monitor, patch its annotation, print what that did: 0 done, 1 refused or
    missing, 2 no kubeconfig."""
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
    writing = False
    try:
        monitor: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "monitors", name
        )
        value = ""
        if control is Control.check:
            refused = refused_check(monitor)
            if refused:
                print(refused, file=err)
                return 1
            handled = str((monitor.get("status") or {}).get("checkNowHandled") or "")
            current = controls_of((monitor.get("metadata") or {}).get("annotations")).check_now
            value = check_now_value(now or datetime.now(UTC), {handled, current})
        if needs_patch(control, monitor):
            writing = True
            custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "monitors",
                name,
                annotations_patch(control, value),
                _content_type=MERGE_PATCH,
            )
    except ApiException as error:
        print(
            refusal(
                control,
                name,
                namespace,
                error.status,
                str(error.reason or ""),
                server_message(error),
                writing=writing,
            ),
            file=err,
        )
        return 1
    print(outcome(control, monitor, value), file=out)
    return 0


__all__ = [
    "CHECK_NOW",
    "PAUSED",
    "Control",
    "annotations_patch",
    "check_now_value",
    "needs_patch",
    "outcome",
    "refusal",
    "refused_check",
    "run_control",
]
