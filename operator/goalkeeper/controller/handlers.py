"""Watch handlers: each cluster event updates the watch cache and names the Monitor it
concerns. Thin by design. Monitors, steps, Jobs and pods come from the operator's own
watches (`listwatch`), as (type, body): ADDED, MODIFIED, DELETED, or LISTED for an item of
a list. Approvals, ModelConfigs and sinks come through kopf.

Of kopf only watch-event handlers are used: they need no finalizer (deleting a Monitor is
never blocked) and write no kopf bookkeeping into the resources. What happened is worked
out by the reconcile from the current state (the cache), never from the event itself.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from goalkeeper.controller import metrics
from goalkeeper.controller.cache import JOB, MODEL_CONFIG, MONITOR, POD, STEP, WatchCache
from goalkeeper.controller.manifests import ANNOTATION_MONITOR, GROUP, LABEL_SEQ, VERSION
from goalkeeper.controller.workqueue import WorkQueue
from goalkeeper.core.steps import TERMINAL_PHASES

log = logging.getLogger("goalkeeper.handlers")


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.event(GROUP, VERSION, "monitorapprovals", registry=registry)(on_approval)
    kopf.on.event(GROUP, VERSION, "modelconfigs", registry=registry)(on_model_config)
    kopf.on.event(GROUP, VERSION, "notificationsinks", registry=registry)(on_sink)


def _kept(
    cache: WatchCache, kind: str, event: str, body: dict[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """Keep the cache in step with one event of an own watch: whether it is a deletion,
    and the body to read its monitor from. A deletion a list finds after a gap names only
    the object, so the cache's copy of it is read before it is dropped."""
    if event == "DELETED":
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        known = cache.get(kind, namespace, name) if "uid" not in meta else None
        cache.drop(kind, namespace, name, body)
        return True, known or body
    cache.put(kind, body)
    return False, body


def _forgot(cache: WatchCache, kind: str, event: kopf.RawEvent, body: kopf.Body) -> bool:
    """Drop the object of a kopf deletion event from the cache; True when `event` is one."""
    if event.get("type") != "DELETED":
        return False
    raw = dict(event.get("object") or body)
    meta = raw.get("metadata") or {}
    cache.drop(kind, str(meta.get("namespace")), str(meta.get("name")), raw)
    return True


def _track(cache: WatchCache, kind: str, event: kopf.RawEvent, body: kopf.Body) -> bool:
    """Keep the cache in step with the watch; True when the object was deleted."""
    if _forgot(cache, kind, event, body):
        return True
    cache.put(kind, dict(event.get("object") or body))
    return False


def on_monitor(memo: Any, event: str, body: dict[str, Any]) -> None:
    """One event of the operator's own watch of Monitors."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    log.debug("%s/%s: Monitor event %s", namespace, name, event)
    queue: WorkQueue = memo.queue
    deleted, known = _kept(memo.cache, MONITOR, event, body)
    if deleted:
        # Garbage collection removes the steps, Jobs and pods; nothing more is reported.
        # A shard's watch shows a Monitor relabelled away the same way: the shard it went
        # to carries on from its status (a step in flight included).
        if memo.shard:
            log.info("%s/%s deleted, or moved to another shard: let go", namespace, name)
        else:
            log.info("%s/%s deleted: cancelled", namespace, name)
        # A deletion found by a list after a gap names no uid: the cache's copy does.
        uid = (known.get("metadata") or {}).get("uid")
        memo.cache.forget_monitor(namespace, name, uid)
        memo.notifier.forget_monitor(str(uid))
        queue.forget(namespace, name)
        metrics.forget_monitor(namespace, name)
        return
    queue.observe(namespace, name, body)


def on_step(memo: Any, event: str, body: dict[str, Any]) -> None:
    deleted, body = _kept(memo.cache, STEP, event, body)
    namespace = (body.get("metadata") or {}).get("namespace")
    monitor = (body.get("spec") or {}).get("monitor")
    if not isinstance(namespace, str) or not isinstance(monitor, str):
        return
    if deleted or (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
        seq = (body.get("spec") or {}).get("seq")
        memo.queue.step_changed(namespace, monitor, seq if isinstance(seq, int) else None)


def on_job(memo: Any, event: str, body: dict[str, Any]) -> None:
    deleted, body = _kept(memo.cache, JOB, event, body)
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    monitor = (meta.get("annotations") or {}).get(ANNOTATION_MONITOR)
    if not isinstance(namespace, str) or not isinstance(monitor, str):
        return
    conditions = (body.get("status") or {}).get("conditions") or []
    failed = any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)
    if deleted or failed:
        memo.queue.step_changed(namespace, monitor, _seq(body))


def _seq(body: dict[str, Any]) -> int | None:
    value = (body.get("metadata", {}).get("labels") or {}).get(LABEL_SEQ)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def on_pod(memo: Any, event: str, body: dict[str, Any]) -> None:
    # Read when a result names its pod; nothing to reconcile on a pod's own change.
    _kept(memo.cache, POD, event, body)


async def on_approval(
    *, event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    # A person answered: the monitor it names reads its approvals again.
    monitor = (body.get("spec") or {}).get("monitor")
    if namespace is None or not isinstance(monitor, str) or event.get("type") == "DELETED":
        return
    # Only a monitor of this shard: approvals carry no shard label, every shard sees them.
    if not memo.shard or (namespace, monitor) in memo.queue.seen:
        memo.queue.trigger(namespace, monitor)


async def on_model_config(*, event: kopf.RawEvent, body: kopf.Body, memo: Any, **_: Any) -> None:
    # Read at each step's launch, from the cache; an edit counts from the next step.
    _track(memo.cache, MODEL_CONFIG, event, body)


async def on_sink(*, event: kopf.RawEvent, body: kopf.Body, memo: Any, **_: Any) -> None:
    # Read at each delivery; an edit counts from the next message.
    raw = dict(event.get("object") or body)
    meta = raw.get("metadata") or {}
    if event.get("type") == "DELETED":
        memo.notifier.sink_gone(str(meta.get("namespace")), str(meta.get("name")))
    else:
        memo.notifier.registry.put(raw)
