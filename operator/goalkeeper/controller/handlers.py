"""kopf handlers: cluster facts in, engine events out. Thin by design.

Only watch-event handlers are used: they need no finalizer (deleting a Monitor is never
blocked) and write no kopf bookkeeping into the resources.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from pydantic import ValidationError

from goalkeeper.controller.manifests import GROUP, LABEL_STEP, VERSION
from goalkeeper.controller.reconciler import TERMINAL_PHASES, Reconciler
from goalkeeper.core.engine import Started
from goalkeeper.core.models import MonitorStatus

log = logging.getLogger("goalkeeper.handlers")


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
        await reconciler.verify_step_in_flight(namespace, dict(body))
    if status is not None:
        reconciler.arm_timer(namespace, name, status)


async def on_step(
    *, event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    if event.get("type") == "DELETED" or namespace is None:
        return
    if (body.get("status") or {}).get("phase") not in TERMINAL_PHASES:
        return
    reconciler: Reconciler = memo.reconciler
    await reconciler.step_result(namespace, dict(body))


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
    failure = _failure(body)
    if event.get("type") == "DELETED":
        failure = f"Job {name} was deleted before the step wrote a result."
    if failure is None:
        return
    reconciler: Reconciler = memo.reconciler
    await reconciler.job_ended(namespace, dict(body), failure)


def _failure(job: Any) -> str | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            reason = condition.get("reason") or "Failed"
            detail = condition.get("message") or "the step's pod failed"
            return f"Job {job['metadata']['name']} failed ({reason}): {detail}"
    return None
