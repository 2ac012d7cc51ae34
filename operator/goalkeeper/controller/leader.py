"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

The decision ("may I take or keep the lease now?") is the pure `claim`; the loop around it
only reads the Lease, writes what `claim` returns with the read resourceVersion (so two
writers never both win), and sleeps. A standby polls about every third of the lease; the
leader renews as often and, when no renew succeeds within two thirds of the lease, exits
the process before the lease can expire, so it never reconciles beside a new leader.

Expiry compares the holder's renewTime with this replica's clock: replicas need clocks that
agree to well under the lease duration (NTP does).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from aiohttp import web
from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("goalkeeper.leader")

LEASE_GROUP, LEASE_VERSION, LEASES = "coordination.k8s.io", "v1", "leases"
# The leader gives up when no renew succeeded for this share of the lease (client-go: 10/15).
RENEW_DEADLINE = 2 / 3
EXIT_LEADERSHIP_LOST = 1


# --- the decision --------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseSpec:
    """The fields of a Lease's spec that leader election reads and writes."""

    holderIdentity: str = ""
    leaseDurationSeconds: int = 0
    acquireTime: datetime | None = None
    renewTime: datetime | None = None
    leaseTransitions: int = 0

    @classmethod
    def from_api(cls, spec: dict[str, Any] | None) -> LeaseSpec:
        spec = spec or {}
        return cls(
            holderIdentity=spec.get("holderIdentity") or "",
            leaseDurationSeconds=int(spec.get("leaseDurationSeconds") or 0),
            acquireTime=_parse_time(spec.get("acquireTime")),
            renewTime=_parse_time(spec.get("renewTime")),
            leaseTransitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_api(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holderIdentity,
            "leaseDurationSeconds": self.leaseDurationSeconds,
            "acquireTime": _format_time(self.acquireTime),
            "renewTime": _format_time(self.renewTime),
            "leaseTransitions": self.leaseTransitions,
        }


def expires_at(lease: LeaseSpec) -> datetime | None:
    """When the holder's claim ends; None when nobody holds the lease."""
    if not lease.holderIdentity or lease.renewTime is None:
        return None
    return lease.renewTime + timedelta(seconds=lease.leaseDurationSeconds)


def claim(
    lease: LeaseSpec | None, identity: str, now: datetime, duration_seconds: int
) -> LeaseSpec | None:
    """The spec to write to take or keep the lease at `now`; None while another holds it.

    `lease` is None when no Lease exists yet. The holder keeps its acquireTime on renewal;
    a new holder (after a release, an expiry or a first start) counts one transition.
    """
    if lease is None:
        return LeaseSpec(identity, duration_seconds, now, now, 0)
    if lease.holderIdentity == identity:
        return replace(lease, leaseDurationSeconds=duration_seconds, renewTime=now)
    ends = expires_at(lease)
    if ends is not None and now < ends:
        return None
    return LeaseSpec(identity, duration_seconds, now, now, lease.leaseTransitions + 1)


def release(lease: LeaseSpec, identity: str, now: datetime) -> LeaseSpec | None:
    """The spec that hands the lease back at once; None when this replica does not hold it."""
    if lease.holderIdentity != identity:
        return None
    # client-go writes a one-second lease with no holder: free now for any replica.
    return replace(lease, holderIdentity="", leaseDurationSeconds=1, renewTime=now)


def retry_in(lease: LeaseSpec | None, now: datetime, period: float) -> float:
    """How long a standby sleeps before it reads the lease again: a period, or less when
    the holder's claim ends sooner, so a dead leader is replaced soon after its expiry."""
    ends = expires_at(lease) if lease is not None else None
    if ends is None:
        return period
    # A little past the expiry, so the next read finds it expired.
    return min(period, max((ends - now).total_seconds() + 0.05, 0.05))


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _format_time(value: datetime | None) -> str | None:
    # MicroTime: RFC 3339 with exactly six fractional digits.
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value else None


# --- the loop ------------------------------------------------------------------------------


class Attempt(Enum):
    held = "held"  # this replica holds the lease now
    taken = "taken"  # another replica holds it
    failed = "failed"  # the read or write failed (conflict, API error); try again


def utcnow() -> datetime:
    return datetime.now(UTC)


def _exit_lost() -> None:
    logging.shutdown()
    # At once, not through kopf's graceful stop, which would go on reconciling meanwhile.
    os._exit(EXIT_LEADERSHIP_LOST)


class LeaderElector:
    def __init__(
        self,
        api_client: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_seconds: float,
        clock: Callable[[], datetime] = utcnow,
        on_lost: Callable[[], None] = _exit_lost,
    ) -> None:
        # Leases through the generic object API: plain JSON both ways, MicroTime kept exact.
        self.api: Any = client.CustomObjectsApi(api_client)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_seconds = lease_seconds
        self.duration = math.ceil(lease_seconds)
        self.period = lease_seconds / 3
        self.clock = clock
        self.on_lost = on_lost
        self.leading = False
        self.holder = ""
        self._renewed = 0.0  # time.monotonic() of the last successful write

    def state(self) -> dict[str, Any]:
        """What the liveness probe reports."""
        return {"identity": self.identity, "leader": self.leading, "holder": self.holder}

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this replica holds the lease (True) or `stop` is set (False)."""
        log.info("%s: waiting for lease %s/%s", self.identity, self.namespace, self.name)
        while not stop.is_set():
            attempt, lease = await self.try_hold()
            if attempt is Attempt.held:
                log.info(
                    "%s: became leader (lease %s/%s)", self.identity, self.namespace, self.name
                )
                return True
            delay = retry_in(lease, self.clock(), self.period)
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        return False

    async def keep(self) -> None:
        """Renew every period until cancelled; call `on_lost` once renewing cannot go on."""
        while True:
            await asyncio.sleep(max(self._renewed + self.period - time.monotonic(), 0))
            while True:
                attempt, _ = await self.try_hold()
                if attempt is Attempt.held:
                    break
                overdue = time.monotonic() >= self._renewed + self.lease_seconds * RENEW_DEADLINE
                if attempt is Attempt.taken or overdue:
                    self.leading = False
                    log.error(
                        "%s: lost lease %s/%s (%s); exiting so a standby takes over",
                        self.identity,
                        self.namespace,
                        self.name,
                        f"held by {self.holder}" if attempt is Attempt.taken else "renew failed",
                    )
                    self.on_lost()
                    return
                await asyncio.sleep(min(self.period / 4, 0.5))

    async def _read(self) -> Any:
        return await self._call(
            self.api.get_namespaced_custom_object,
            LEASE_GROUP,
            LEASE_VERSION,
            self.namespace,
            LEASES,
            self.name,
        )

    async def try_hold(self) -> tuple[Attempt, LeaseSpec | None]:
        """One read and, where `claim` allows, one write of the lease."""
        started = time.monotonic()
        try:
            found = await self._read()
        except ApiException as error:
            if error.status != 404:
                return self._failed(error, None)
            found = None
        except Exception as error:  # connection refused, timeouts: the API is unreachable
            return self._failed(error, None)
        lease = LeaseSpec.from_api(found.get("spec")) if found else None
        self.holder = lease.holderIdentity if lease else ""
        wanted = claim(lease, self.identity, self.clock(), self.duration)
        if wanted is None:
            self.leading = False
            return Attempt.taken, lease
        body: dict[str, Any] = {
            "apiVersion": f"{LEASE_GROUP}/{LEASE_VERSION}",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": wanted.to_api(),
        }
        try:
            if found is None:
                await self._call(
                    self.api.create_namespaced_custom_object,
                    LEASE_GROUP,
                    LEASE_VERSION,
                    self.namespace,
                    LEASES,
                    body,
                )
            else:
                body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
                await self._call(
                    self.api.replace_namespaced_custom_object,
                    LEASE_GROUP,
                    LEASE_VERSION,
                    self.namespace,
                    LEASES,
                    self.name,
                    body,
                )
        except Exception as error:  # 409: another replica wrote first
            return self._failed(error, lease)
        # The lease runs from the renewTime written, which is no earlier than `started`.
        self._renewed = started
        self.leading = True
        self.holder = self.identity
        return Attempt.held, wanted

    async def release(self) -> None:
        """Hand the lease back, so a standby takes over without waiting for the expiry."""
        if not self.leading:
            return
        self.leading = False
        try:
            found = await self._read()
            freed = release(LeaseSpec.from_api(found.get("spec")), self.identity, self.clock())
            if freed is None:
                return
            found["spec"] = freed.to_api()
            await self._call(
                self.api.replace_namespaced_custom_object,
                LEASE_GROUP,
                LEASE_VERSION,
                self.namespace,
                LEASES,
                self.name,
                found,
            )
        except Exception as error:
            log.warning("%s: could not release the lease; it expires: %s", self.identity, error)
            return
        log.info("%s: released lease %s/%s", self.identity, self.namespace, self.name)

    async def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        # A leader's request may not outlive its renew deadline, so it exits before expiry.
        if self.leading:
            deadline = self._renewed + self.lease_seconds * RENEW_DEADLINE
            timeout = max(deadline - time.monotonic(), 0.2)
        else:
            timeout = max(self.period, 1.0)
        call = asyncio.to_thread(method, *args, _request_timeout=timeout)
        return await asyncio.wait_for(call, timeout + 0.5)

    def _failed(
        self, error: Exception, lease: LeaseSpec | None
    ) -> tuple[Attempt, LeaseSpec | None]:
        if isinstance(error, ApiException) and error.status == 409:
            log.debug("%s: lease %s changed meanwhile", self.identity, self.name)
        else:
            log.warning("%s: lease %s: %s", self.identity, self.name, _brief(error))
        return Attempt.failed, lease


def _brief(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"


# --- liveness while waiting ----------------------------------------------------------------


@asynccontextmanager
async def standby_health(
    port: int,
    state: Callable[[], dict[str, Any]],
    host: str = "0.0.0.0",  # noqa: S104
) -> AsyncIterator[None]:
    """Answer /healthz while this replica waits for the lease; kopf's endpoint takes over
    the port once it leads. Off when `port` is 0."""
    if not port:
        yield
        return

    async def healthz(_: web.Request) -> web.Response:
        # The shape of kopf's endpoint: results keyed by probe id.
        return web.json_response({"leader": state()}, dumps=json.dumps)

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz)])
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    try:
        yield
    finally:
        await runner.cleanup()
