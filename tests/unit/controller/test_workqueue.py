"""The work queue: retries with backoff, coalesced triggers, the wait timer, the resync."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import random
import weakref
from datetime import UTC, datetime, timedelta

from goalkeeper.controller.api import Permanent, Transient
from goalkeeper.controller.workqueue import BACKOFF_CAP, WorkQueue, backoff
from goalkeeper.core.models import MonitorStatus, Schedule, StepInFlight, StepKind

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def waiting(next_check: datetime) -> MonitorStatus:
    return MonitorStatus(
        checks=1,
        observedGeneration=1,
        schedule=Schedule(lastCheckAt=T0, nextCheckAt=next_check, everyMinutes=1),
    )


def test_backoff_doubles_to_a_cap_with_jitter_and_honours_the_server() -> None:
    rng = random.Random(7)  # noqa: S311 - jitter
    delays = [backoff(n, rng) for n in range(12)]
    assert 0.4 <= delays[0] <= 0.6 and 0.8 <= delays[1] <= 1.2
    assert all(d <= BACKOFF_CAP * 1.2 for d in delays) and delays[-1] >= BACKOFF_CAP * 0.8
    assert backoff(0, rng, hint=7) == 7 and backoff(3, rng, hint=999) == BACKOFF_CAP


async def test_a_transient_failure_is_retried_until_it_succeeds() -> None:
    calls: list[float] = []
    done = asyncio.Event()

    async def reconcile(namespace: str, name: str, fresh: bool = False) -> MonitorStatus:
        calls.append(asyncio.get_running_loop().time())
        if len(calls) < 3:
            raise Transient("503 Service Unavailable", 503, retry_after=0.05)
        done.set()
        return MonitorStatus()

    retries: list[int] = []
    queue = WorkQueue(reconcile, resync_seconds=60, on_retry=lambda: retries.append(1))
    queue.trigger("ns", "m")
    await asyncio.wait_for(done.wait(), 10)
    assert len(calls) == 3 and len(retries) == 2
    assert calls[1] - calls[0] >= 0.04, "waited for the server's Retry-After"
    await queue.close()


async def test_a_permanent_failure_is_logged_and_kept_for_a_later_retry() -> None:
    errors: list[str] = []
    reported = asyncio.Event()

    async def reconcile(namespace: str, name: str, fresh: bool = False) -> MonitorStatus:
        raise Permanent("403 Forbidden", 403)

    def on_error(kind: str) -> None:
        errors.append(kind)
        reported.set()

    queue = WorkQueue(reconcile, resync_seconds=60, on_error=on_error)
    queue.trigger("ns", "m")
    await asyncio.wait_for(reported.wait(), 10)
    assert errors == ["permanent"]
    assert ("ns", "m") in queue._workers, "still scheduled: nothing is dropped"
    await queue.close()


async def test_triggers_during_a_reconcile_coalesce_into_one_more() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    runs = 0

    async def reconcile(namespace: str, name: str, fresh: bool = False) -> MonitorStatus:
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()
        return MonitorStatus()

    queue = WorkQueue(reconcile, resync_seconds=60)
    queue.trigger("ns", "m")
    await started.wait()
    for _ in range(5):
        queue.trigger("ns", "m")
    worker = queue._workers[("ns", "m")]
    release.set()
    await asyncio.wait_for(worker, 10)
    assert runs == 2
    await queue.close()


async def test_the_wait_timer_fires_a_reconcile_at_the_next_check() -> None:
    fired = asyncio.Event()
    clock = {"now": T0}

    async def reconcile(namespace: str, name: str, fresh: bool = False) -> MonitorStatus:
        fired.set()
        return MonitorStatus()

    queue = WorkQueue(reconcile, resync_seconds=60, clock=lambda: clock["now"])
    body = {
        "metadata": {"resourceVersion": "5", "generation": 1},
        "status": waiting(T0 + timedelta(seconds=0.2)).model_dump(mode="json"),
    }
    queue.observe("ns", "m", body)
    assert not fired.is_set(), "not due yet: no reconcile, so no API request"
    await asyncio.wait_for(fired.wait(), 10)
    await queue.close()


async def test_resync_picks_only_monitors_that_need_work() -> None:
    clock = {"now": T0}

    async def reconcile(namespace: str, name: str, fresh: bool = False) -> MonitorStatus:
        return MonitorStatus()

    queue = WorkQueue(reconcile, resync_seconds=60, clock=lambda: clock["now"])
    in_flight = MonitorStatus(
        observedGeneration=1,
        stepSeq=1,
        step=StepInFlight(seq=1, kind=StepKind.observe, check=1, startedAt=T0),
    )
    for name, status in [
        ("later", waiting(T0 + timedelta(hours=1))),
        ("due", waiting(T0 - timedelta(seconds=1))),
        ("busy", in_flight),
    ]:
        queue._remember(("ns", name), status)
    # A step that started or a timer that came due since the last pass has its event
    # still to come: the first pass reads nothing.
    assert queue.due_for_resync() == []
    clock["now"] += timedelta(seconds=60)
    assert sorted(queue.due_for_resync()) == [("ns", "busy"), ("ns", "due")]
    # A step that moved on between two passes is not read either.
    queue._remember(("ns", "busy"), in_flight.model_copy(update={"step": None, "stepSeq": 2}))
    queue._remember(
        ("ns", "busy"),
        in_flight.model_copy(
            update={
                "stepSeq": 2,
                "step": StepInFlight(seq=2, kind=StepKind.observe, check=2, startedAt=T0),
            }
        ),
    )
    assert queue.due_for_resync() == [("ns", "due")]
    await queue.close()


async def test_a_call_is_retried_in_place_on_a_transient_failure() -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from goalkeeper.controller.api import KubeApi

    class Raw:
        data = b'{"ok": 1}'

    answers: list[object] = [ApiException(status=500), ApiException(status=503), Raw()]

    def call() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    api = KubeApi(client.ApiClient(client.Configuration()))
    assert await api._call("read something", call) == {"ok": 1}
    answers[:] = [ApiException(status=500)] * 3
    try:
        await api._call("read something", call)
    except Transient as error:
        assert error.status == 500 and "read something" in str(error)
    else:
        raise AssertionError("three failures in a row reach the work queue")
    answers[:] = [ApiException(status=403)]
    try:
        await api._call("read something", call)
    except Permanent:
        assert answers == []
    else:
        raise AssertionError("a refusal is not retried")


async def test_only_a_change_of_the_step_in_flight_triggers_a_reconcile() -> None:
    reconciled: list[tuple[str, str]] = []

    async def reconcile(namespace: str, name: str, fresh: bool = False) -> MonitorStatus | None:
        reconciled.append((namespace, name))
        return None

    queue = WorkQueue(reconcile, resync_seconds=60)
    # Unknown monitor: its own watch event comes and triggers it.
    queue.step_changed("ns", "m", 3)
    in_flight = StepInFlight(seq=4, kind=StepKind.observe, check=2, startedAt=T0)
    queue._remember(("ns", "m"), MonitorStatus(stepSeq=4, step=in_flight, observedGeneration=1))
    queue.step_changed("ns", "m", 3)  # history, as a restart lists it
    await asyncio.sleep(0)
    assert reconciled == []
    queue.step_changed("ns", "m", 4)
    await asyncio.sleep(0.05)
    assert reconciled == [("ns", "m")]
    # Launched but not yet recorded (the status write was lost): a newer step counts.
    queue._remember(("ns", "w"), waiting(T0 + timedelta(hours=1)).model_copy(update={"stepSeq": 4}))
    queue.step_changed("ns", "w", 4)
    queue.step_changed("ns", "w", 5)
    await asyncio.sleep(0.05)
    assert reconciled == [("ns", "m"), ("ns", "w")]
    await queue.close()


class Cause:
    """Stands for what a kopf handler's context holds: the event with its whole body."""


async def test_a_timer_armed_from_a_handler_keeps_nothing_of_the_handlers_context() -> None:
    async def reconcile(namespace: str, name: str, fresh: bool = False) -> MonitorStatus:
        return MonitorStatus()

    queue = WorkQueue(reconcile, resync_seconds=60, clock=lambda: T0)
    handler_cause: contextvars.ContextVar[Cause] = contextvars.ContextVar("cause")
    body = {
        "metadata": {"resourceVersion": "5", "generation": 1},
        "status": waiting(T0 + timedelta(days=1)).model_dump(mode="json"),
    }
    held = [Cause()]
    alive = weakref.ref(held[0])

    def handler() -> None:
        handler_cause.set(held.pop())
        queue.observe("ns", "m", body)  # arms the timer a day away
        queue.trigger("ns", "other")  # and starts a worker

    contextvars.copy_context().run(handler)
    await asyncio.sleep(0)
    gc.collect()
    assert alive() is None, "the waiting monitor's timer keeps the handler's cause alive"
    await queue.close()
