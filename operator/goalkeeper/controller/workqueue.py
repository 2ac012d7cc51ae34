"""Triggers in, reconciles out: one worker per monitor, retries, timers and a resync.

Every trigger (a watch event, a timer, the periodic resync) only names a monitor. The
monitor's worker coalesces triggers that arrive while it runs, runs one reconcile at a
time, and retries a transient API failure with capped exponential backoff and jitter;
a permanent one is logged and retried at the cap, never dropped. The wait timer and
the resync work from the last status seen on the watch, so a waiting monitor whose
timer is not due costs no API request.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from goalkeeper.controller.api import Permanent, Transient
from goalkeeper.core import migrate
from goalkeeper.core.controls import controls_of
from goalkeeper.core.models import MonitorState, MonitorStatus, WatchTarget
from goalkeeper.core.steps import describe_errors, next_event

log = logging.getLogger("goalkeeper.workqueue")

Key = tuple[str, str]
# (namespace, name, fresh): `fresh` asks for reads from the API server, not the watch cache.
Reconcile = Callable[[str, str, bool], Awaitable[MonitorStatus | None]]
# Shows a refusal that retrying cannot fix on the monitor itself (namespace, name, message).
RecordRefusal = Callable[[str, str, str], Awaitable[None]]
# Told what each monitor waits on now (nothing once it does not wait): the event wakes.
OnWait = Callable[[Key, Sequence[WatchTarget]], None]

BACKOFF_FIRST = 0.5
BACKOFF_CAP = 15.0
# At most this many monitors are triggered by one resync pass; the rest by the next.
RESYNC_BATCH = 200


def backoff(attempt: int, rng: random.Random, hint: float | None = None) -> float:
    """Seconds before retry `attempt` (0-based): doubling from BACKOFF_FIRST up to the
    cap, with ±20% jitter so many monitors do not retry in step; a server hint wins."""
    if hint is not None and hint > 0:
        return min(hint, BACKOFF_CAP)
    base = min(BACKOFF_FIRST * 2**attempt, BACKOFF_CAP)
    return float(base * rng.uniform(0.8, 1.2))


@dataclass
class Seen:
    """What the watch last showed of a monitor, enough to know whether it needs work."""

    active: bool
    next_check: datetime | None
    step_seq: int | None = None  # the step in flight
    launched: int = 0  # steps launched so far (status.stepSeq)

    @property
    def in_flight(self) -> bool:
        return self.step_seq is not None

    def concerns(self, seq: int) -> bool:
        """Whether a change of step `seq` can matter: it is the step in flight, or one
        launched after the status was last written. History never does."""
        if self.step_seq is not None:
            return seq == self.step_seq
        return seq > self.launched


def _utcnow() -> datetime:
    return datetime.now(UTC)


class WorkQueue:
    def __init__(
        self,
        reconcile: Reconcile,
        *,
        resync_seconds: float,
        settled: Mapping[Key, str] | None = None,
        clock: Callable[[], datetime] = _utcnow,
        rng: random.Random | None = None,
        on_error: Callable[[str], None] | None = None,
        on_retry: Callable[[], None] | None = None,
        record_refusal: RecordRefusal | None = None,
        on_wait: OnWait | None = None,
        on_notices: Callable[[str, str], None] | None = None,
    ) -> None:
        self._reconcile = reconcile
        self.resync_seconds = resync_seconds
        self._settled = settled if settled is not None else {}
        self._clock = clock
        self._rng = rng or random.Random()  # noqa: S311 - retry jitter, not a secret
        self._on_error = on_error or (lambda _: None)
        self._on_retry = on_retry or (lambda: None)
        self._record_refusal = record_refusal
        self._on_wait = on_wait or (lambda key, targets: None)
        self._on_notices = on_notices or (lambda namespace, name: None)
        self._dirty: set[Key] = set()
        self._fresh: set[Key] = set()
        self._workers: dict[Key, asyncio.Task[None]] = {}
        self._timers: dict[Key, tuple[datetime, asyncio.TimerHandle]] = {}
        self.seen: dict[Key, Seen] = {}
        # What each monitor waited on at the last resync pass (see due_for_resync).
        self._pending: dict[Key, object] = {}

    # --- triggers ---

    def trigger(self, namespace: str, name: str, fresh: bool = False) -> None:
        key = (namespace, name)
        self._dirty.add(key)
        if fresh:
            self._fresh.add(key)
        worker = self._workers.get(key)
        if worker is None or worker.done():
            # A fresh context: a trigger from a kopf handler would carry its context (the
            # event's whole body, in the handler's cause) into the task, and keep it.
            self._workers[key] = asyncio.get_running_loop().create_task(
                self._work(key), context=contextvars.Context()
            )

    def observe(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """A Monitor as the watch shows it: trigger only when it needs a reconcile."""
        key = (namespace, name)
        meta = body.get("metadata") or {}
        if meta.get("resourceVersion") == self._settled.get(key) and key in self.seen:
            return  # our own write, already settled and remembered
        status = migrate.read(body.get("status"), describe_errors).status
        if status is None:
            self.trigger(namespace, name)  # the reconcile stops it, saying why
            return
        self._remember(key, status)
        if status.notices is not None and status.notices.items:
            self._on_notices(namespace, name)  # kept for a sink: sent unless it has them
        if meta.get("resourceVersion") == self._settled.get(key):
            return
        controls = controls_of(meta.get("annotations"))
        due = next_event(status, meta.get("generation"), None, self._clock(), controls)
        if status.step is not None or due is not None:
            self.trigger(namespace, name)

    def step_changed(self, namespace: str, monitor: str, seq: int | None) -> None:
        """A step (or its Job) of `monitor` ended or vanished: trigger when it is the step
        in flight. A monitor not seen yet is triggered by its own watch event, so a restart
        that lists the whole step history reconciles each monitor once, not once a step."""
        seen = self.seen.get((namespace, monitor))
        if seen is None or (seq is not None and not seen.concerns(seq)):
            log.debug("%s/%s: step %s changed; not the step in flight", namespace, monitor, seq)
            return
        self.trigger(namespace, monitor)

    def forget(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.seen.pop(key, None)
        self._on_wait(key, ())
        self._disarm(key)
        self._dirty.discard(key)

    # --- the worker ---

    async def _work(self, key: Key) -> None:
        attempt = 0
        while key in self._dirty:
            self._dirty.discard(key)
            try:
                fresh = key in self._fresh
                self._fresh.discard(key)
                status = await self._reconcile(*key, fresh)
            except Transient as error:
                delay = backoff(attempt, self._rng, error.retry_after)
                log.warning("%s/%s: %s; retrying in %.1f s", *key, error, delay)
            except Permanent as error:
                delay = BACKOFF_CAP
                log.error("%s/%s: %s; retrying in %.0f s", *key, error, delay)
                self._on_error("permanent")
                if self._record_refusal is not None:
                    await self._record_refusal(
                        *key, f"The API server refused: {error}. Retrying every {delay:.0f} s."
                    )
            except Exception:
                delay = BACKOFF_CAP
                log.exception("%s/%s: reconcile failed; retrying in %.0f s", *key, delay)
                self._on_error("internal")
            else:
                attempt = 0
                if status is None:
                    self.forget(*key)
                else:
                    self._remember(key, status)
                continue
            attempt += 1
            self._on_retry()
            await asyncio.sleep(delay)
            self._dirty.add(key)
        self._workers.pop(key, None)

    # --- the wait timer ---

    def _remember(self, key: Key, status: MonitorStatus) -> None:
        active = status.monitor is MonitorState.active
        waiting = active and status.step is None and status.schedule is not None
        next_check = status.schedule.due_at if waiting and status.schedule else None
        if active and status.approval is not None:
            next_check = status.approval.expiresAt  # the approval window ends
        step_seq = status.step.seq if status.step is not None else None
        self.seen[key] = Seen(active, next_check, step_seq, status.stepSeq)
        # A wake held back by the rate limit is in status now: nothing more to hold.
        held = waiting and status.schedule is not None and status.schedule.wakeAt is not None
        watch = status.schedule.watch if waiting and status.schedule and not held else ()
        self._on_wait(key, watch)
        if next_check is None:
            self._disarm(key)
            return
        current = self._timers.get(key)
        if current is not None and current[0] == next_check:
            return
        self._disarm(key)
        delay = max((next_check - self._clock()).total_seconds(), 0.0)
        # Armed from a kopf handler, a timer would keep the handler's context, and with it
        # the watch event's whole body, until it fires (a day, for a daily monitor).
        handle = asyncio.get_running_loop().call_later(
            delay, self.trigger, *key, context=contextvars.Context()
        )
        self._timers[key] = (next_check, handle)

    def _disarm(self, key: Key) -> None:
        entry = self._timers.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    # --- the resync ---

    def due_for_resync(self) -> list[Key]:
        """Monitors a lost event may have left behind: the same step in flight, or the
        same timer due, as at the previous pass. A step that started or a timer that came
        due since then has an event still to come, and costs the resync no read."""
        now = self._clock()
        previous, self._pending = self._pending, {}
        due = []
        for key, seen in self.seen.items():
            if not seen.active or key in self._workers:
                continue
            if seen.in_flight:
                waits_on: object = ("step", seen.step_seq)
            elif seen.next_check is not None and seen.next_check <= now:
                waits_on = ("timer", seen.next_check)
            else:
                continue
            self._pending[key] = waits_on
            if previous.get(key) == waits_on:
                due.append(key)
        return due[:RESYNC_BATCH]

    async def resync_forever(self) -> None:
        while True:
            await asyncio.sleep(self.resync_seconds)
            # A resync reads from the API server: it is there for the event the watch lost,
            # which the watch cache lost with it.
            for key in self.due_for_resync():
                self.trigger(*key, fresh=True)

    async def close(self) -> None:
        for key in list(self._timers):
            self._disarm(key)
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
