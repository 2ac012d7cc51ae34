"""kopf handlers: each cluster event only names the Monitor it concerns. Thin by design.

Only watch-event handlers are used: they need no finalizer (deleting a Monitor is never
blocked) and write no kopf bookkeeping into the resources. What happened is worked out
by the reconcile from the current state, never from the event itself.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from goalkeeper.controller import metrics
from goalkeeper.controller.manifests import ANNOTATION_MONITOR, GROUP, LABEL_STEP, VERSION
from goalkeeper.controller.workqueue import WorkQueue
from goalkeeper.core.steps import TERMINAL_PHASES

log = logging.getLogger("goalkeeper.handlers")


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.event(GROUP, VERSION, "monitors", registry=registry)(on_monitor)
    kopf.on.event(GROUP, VERSION, "monitorsteps", registry=registry)(on_step)
    kopf.on.event("batch", "v1", "jobs", labels={LABEL_STEP: kopf.PRESENT}, registry=registry)(
        on_job
    )


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
    queue: WorkQueue = memo.queue
    if event.get("type") == "DELETED":
        # Garbage collection removes the steps, Jobs and pods; nothing more is reported.
        log.info("%s/%s deleted: cancelled", namespace, name)
        queue.forget(namespace, name)
        metrics.forget_monitor(namespace, name)
        return
    queue.observe(namespace, name, body)


async def on_step(
    *, event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    monitor = (body.get("spec") or {}).get("monitor")
    if namespace is None or not isinstance(monitor, str):
        return
    if event.get("type") == "DELETED" or (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
        memo.queue.trigger(namespace, monitor)


async def on_job(
    *, event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    monitor = (body.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_MONITOR)
    if namespace is None or not isinstance(monitor, str):
        return
    conditions = (body.get("status") or {}).get("conditions") or []
    failed = any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)
    if event.get("type") == "DELETED" or failed:
        memo.queue.trigger(namespace, monitor)
