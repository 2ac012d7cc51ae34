"""Leader election: the pure lease decision, and the loop against an in-memory Lease store
that keeps resourceVersions the way the API server does."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from kubernetes.client.exceptions import ApiException

from goalkeeper.controller.leader import (
    Attempt,
    LeaderElector,
    LeaseSpec,
    claim,
    expires_at,
    release,
    retry_in,
    standby_health,
)

T0 = datetime(2026, 8, 16, 10, 0, 0, tzinfo=UTC)


def held(by: str, renewed: datetime = T0, seconds: int = 15, transitions: int = 0) -> LeaseSpec:
    return LeaseSpec(by, seconds, T0 - timedelta(minutes=5), renewed, transitions)


# --- the decision ----------------------------------------------------------------------------


def test_first_replica_creates_the_lease() -> None:
    assert claim(None, "a", T0, 15) == LeaseSpec("a", 15, T0, T0, 0)


def test_holder_renews_and_keeps_its_acquire_time() -> None:
    lease = held("a", renewed=T0, transitions=3)
    later = T0 + timedelta(seconds=5)
    renewed = claim(lease, "a", later, 15)
    assert renewed == LeaseSpec("a", 15, lease.acquireTime, later, 3)


def test_another_holder_keeps_the_lease_until_it_expires() -> None:
    lease = held("a", renewed=T0, seconds=15)
    assert claim(lease, "b", T0 + timedelta(seconds=14.9), 15) is None
    assert expires_at(lease) == T0 + timedelta(seconds=15)


def test_expired_lease_is_taken_with_one_more_transition() -> None:
    lease = held("a", renewed=T0, seconds=15, transitions=2)
    at = T0 + timedelta(seconds=15)
    assert claim(lease, "b", at, 10) == LeaseSpec("b", 10, at, at, 3)


def test_released_lease_is_free_at_once() -> None:
    lease = held("a", renewed=T0, transitions=1)
    freed = release(lease, "a", T0)
    assert freed is not None
    assert freed.holderIdentity == "" and freed.leaseTransitions == 1
    assert expires_at(freed) is None
    assert claim(freed, "b", T0, 15) == LeaseSpec("b", 15, T0, T0, 2)


def test_only_the_holder_releases() -> None:
    assert release(held("a"), "b", T0) is None


def test_a_lease_without_renew_time_is_free() -> None:
    assert claim(LeaseSpec("a", 15), "b", T0, 15) == LeaseSpec("b", 15, T0, T0, 1)


def test_standby_polls_a_period_or_until_the_expiry() -> None:
    assert retry_in(None, T0, 5.0) == 5.0
    assert retry_in(release(held("a"), "a", T0), T0, 5.0) == 5.0
    lease = held("a", renewed=T0, seconds=15)
    assert retry_in(lease, T0, 5.0) == 5.0
    soon = retry_in(lease, T0 + timedelta(seconds=13), 5.0)
    assert 2.0 < soon < 2.2
    assert retry_in(lease, T0 + timedelta(seconds=60), 5.0) == pytest.approx(0.05)


def test_lease_fields_round_trip_as_micro_time() -> None:
    lease = LeaseSpec("a", 15, T0, T0 + timedelta(microseconds=7), 4)
    api = lease.to_api()
    assert api["acquireTime"] == "2026-08-16T10:00:00.000000Z"
    assert api["renewTime"] == "2026-08-16T10:00:00.000007Z"
    assert LeaseSpec.from_api(json.loads(json.dumps(api))) == lease
    assert LeaseSpec.from_api(None) == LeaseSpec()


# --- the loop --------------------------------------------------------------------------------


class LeaseStore:
    """The Lease endpoints of the generic object API, in memory, with resourceVersions."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.versions = itertools.count(1)
        self.down = False
        self.writes = 0
        self.lock = threading.Lock()  # calls arrive from worker threads, as with the client

    def _check(self) -> None:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")

    def get_namespaced_custom_object(self, *args: Any, **_: Any) -> dict[str, Any]:
        with self.lock:
            self._check()
            if self.lease is None:
                raise ApiException(status=404, reason="Not Found")
            return copy.deepcopy(self.lease)

    def create_namespaced_custom_object(self, *args: Any, **_: Any) -> dict[str, Any]:
        with self.lock:
            self._check()
            if self.lease is not None:
                raise ApiException(status=409, reason="AlreadyExists")
            return self._store(args[-1])

    def replace_namespaced_custom_object(self, *args: Any, **_: Any) -> dict[str, Any]:
        with self.lock:
            self._check()
            body = args[-1]
            assert self.lease is not None
            version = self.lease["metadata"]["resourceVersion"]
            if body["metadata"].get("resourceVersion") != version:
                raise ApiException(status=409, reason="Conflict")
            return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(next(self.versions))
        self.lease = stored
        return copy.deepcopy(stored)

    @property
    def spec(self) -> LeaseSpec:
        assert self.lease is not None
        return LeaseSpec.from_api(self.lease["spec"])


def elector(store: LeaseStore, identity: str, lost: list[str] | None = None) -> LeaderElector:
    made = LeaderElector(
        None,
        name="goalkeeper-operator",
        namespace="goalkeeper-system",
        identity=identity,
        lease_seconds=1.2,
        on_lost=lambda: (lost if lost is not None else []).append(identity),
    )
    made.api = store
    return made


async def test_one_replica_leads_and_the_other_waits() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.acquire(asyncio.Event())
    attempt, _ = await b.try_hold()
    assert attempt is Attempt.taken
    assert store.spec.holderIdentity == "a" and store.spec.leaseDurationSeconds == 2
    assert a.state() == {"identity": "a", "leader": True, "holder": "a"}
    assert b.state() == {"identity": "b", "leader": False, "holder": "a"}


async def test_concurrent_writers_never_both_win() -> None:
    store = LeaseStore()
    replicas = [elector(store, name) for name in "abcd"]
    for _ in range(3):  # first a create race, then replace races on a free lease
        attempts = await asyncio.gather(*(r.try_hold() for r in replicas))
        winners = [
            r for r, (attempt, _) in zip(replicas, attempts, strict=True) if attempt is Attempt.held
        ]
        assert len(winners) <= 1
        assert [r.identity for r in replicas if r.leading] == [store.spec.holderIdentity]
        for r in winners:
            await r.release()


async def test_leader_renews_and_the_standby_takes_over_after_a_release() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.acquire(asyncio.Event())
    keeper = asyncio.create_task(a.keep())
    first = store.spec.renewTime
    assert first is not None
    await asyncio.sleep(1.0)  # about two renew periods of 0.4 s
    assert store.spec.renewTime is not None and store.spec.renewTime > first
    keeper.cancel()
    await a.release()
    assert store.spec.holderIdentity == ""
    started = asyncio.get_running_loop().time()
    assert await asyncio.wait_for(b.acquire(asyncio.Event()), 5)
    assert asyncio.get_running_loop().time() - started < 0.5
    assert store.spec.holderIdentity == "b" and store.spec.leaseTransitions == 1


async def test_standby_takes_over_once_a_dead_leader_s_lease_expires() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.acquire(asyncio.Event())  # and then a dies: nobody renews
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.wait_for(b.acquire(asyncio.Event()), 10)
    took = loop.time() - started
    assert 1.5 < took < 2.0 + 0.4 + 0.3, took  # the 2 s lease, at most a period late
    assert store.spec.holderIdentity == "b"


async def test_leader_gives_up_when_renewing_fails_until_the_deadline() -> None:
    store, lost = LeaseStore(), []
    a = elector(store, "a", lost)
    assert await a.acquire(asyncio.Event())
    store.down = True
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(a.keep(), 5)
    assert lost == ["a"] and not a.leading
    # Two thirds of the 1.2 s lease after the last renew: well before the lease expires.
    assert loop.time() - started < 1.2


async def test_leader_gives_up_at_once_when_another_took_the_lease() -> None:
    store, lost = LeaseStore(), []
    a = elector(store, "a", lost)
    assert await a.acquire(asyncio.Event())
    assert store.lease is not None
    store.lease["spec"] = LeaseSpec("b", 60, T0, datetime.now(UTC), 1).to_api()
    await asyncio.wait_for(a.keep(), 2)
    assert lost == ["a"]


async def test_stop_ends_the_wait() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.acquire(asyncio.Event())
    stop = asyncio.Event()
    waiting = asyncio.create_task(b.acquire(stop))
    await asyncio.sleep(0.1)
    stop.set()
    assert await asyncio.wait_for(waiting, 2) is False


async def test_release_is_a_no_op_for_a_standby() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.acquire(asyncio.Event())
    writes = store.writes
    await b.try_hold()
    await b.release()
    assert store.writes == writes and store.spec.holderIdentity == "a"


async def test_standby_answers_the_liveness_probe(unused_tcp_port: int) -> None:
    state = {"identity": "b", "leader": False, "holder": "a"}
    url = f"http://127.0.0.1:{unused_tcp_port}/healthz"
    async with (
        standby_health(unused_tcp_port, lambda: state, host="127.0.0.1"),
        aiohttp.ClientSession() as session,
        session.get(url) as response,
    ):
        assert response.status == 200
        assert await response.json() == {"leader": state}
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session:
            await session.get(f"http://127.0.0.1:{unused_tcp_port}/healthz")
