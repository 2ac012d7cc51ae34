"""kopf handlers: cluster facts in, engine events out. Thin by design.

Only watch-event handlers are used: they need no finalizer (deleting a Monitor is never
blocked) and write no kopf bookkeeping into the resources.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from pydantic import ValidationError

from goalkeeper.controller.manifests import GROUP, LABEL_SEQ, LABEL_STEP, VERSION
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.core.engine import Started, StepFailed
from goalkeeper.core.models import MonitorStatus, StepKind, StepPhase
from goalkeeper.core.steps import step_event

log = logging.getLogger("goalkeeper.handlers")

TERMINAL = {StepPhase.Succeeded.value, StepPhase.Failed.value}


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.event(GROUP, VERSION, "monitors", registry=registry)(on_monitor)
    kopf.on.event(GROUP, VERSION, "monitorsteps", registry=registry)(on_step)
    kopf.on.event("batch", "v1", "jobs", labels={LABEL_STEP: kopf.PRESENT}, registry=registry)(
        on_job
    )


def _status(body: Any) -> MonitorStatus | None:
    try:
        return MonitorStatus.model_validate(dict(body.get("status") or {}))
    except ValidationError:
        return None


async def on_monitor(
    *,
    event: kopf.RawEvent,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: Any,
    **_: Any,
) -> None:
    assert namespace is not None  # Monitors are namespaced
    reconciler: Reconciler = memo.reconciler
    if event.get("type") == "DELETED":
        # Garbage collection removes the steps, Jobs and pods; nothing more is reported.
        log.info("%s/%s deleted: cancelled", namespace, name)
        reconciler.forget(namespace, name)
        return
    generation = body.get("metadata", {}).get("generation")
    status = _status(body)
    if status is None or status.observedGeneration != generation:
        await reconciler.apply(namespace, name, Started(generation))
    elif event.get("type") is None:
        # The operator (re)started: a result it missed while down is settled now.
        await reconciler.verify_step_in_flight(namespace, name, status)
    if status is not None:
        reconciler.arm_timer(namespace, name, status)


async def on_step(
    *, event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    if event.get("type") == "DELETED" or namespace is None:
        return
    spec = body.get("spec") or {}
    raw_status = body.get("status") or {}
    if raw_status.get("phase") not in TERMINAL or not spec.get("monitor"):
        return
    try:
        kind, seq = StepKind(spec["kind"]), int(spec["seq"])
    except (KeyError, ValueError, TypeError):
        return
    finished = step_event(kind, seq, dict(raw_status))
    if finished is not None:
        # A step no longer in flight (handled before, or stale) is ignored by the engine.
        reconciler: Reconciler = memo.reconciler
        await reconciler.apply(namespace, spec["monitor"], finished)


async def on_job(
    *,
    event: kopf.RawEvent,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: Any,
    **_: Any,
) -> None:
    assert namespace is not None  # Jobs are namespaced
    labels = body.get("metadata", {}).get("labels", {})
    deleted = event.get("type") == "DELETED"
    failure = _failure(body)
    if not deleted and failure is None:
        return
    reconciler: Reconciler = memo.reconciler
    step = await reconciler.get_step(namespace, labels.get(LABEL_STEP, name))
    if step is None:
        return  # pruned or garbage-collected together with its monitor
    if (step.get("status") or {}).get("phase") in TERMINAL:
        return  # the step wrote its result; that result decides
    seq = int(labels.get(LABEL_SEQ) or step["spec"]["seq"])
    message = failure or f"Job {name} was deleted before the step wrote a result."
    await reconciler.apply(namespace, step["spec"]["monitor"], StepFailed(seq, message))


def _failure(job: Any) -> str | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            reason = condition.get("reason") or "Failed"
            detail = condition.get("message") or "the step's pod failed"
            return f"Job {job['metadata']['name']} failed ({reason}): {detail}"
    return None
