"""Notification sinks: each Monitor's messages (core/notices.py) posted to the webhooks of
its namespace's NotificationSinks, or to the chart's cluster sink where it has none.

Delivery is at-least-once and off the check path: a status write that records a message
only names its Monitor here, and a few workers post what each sink has yet to receive, in
order, recording after each post how far that sink got (`status.notices.delivered`), so a
restarted operator neither loses a recorded message nor repeats one it had delivered and
recorded. A receiver that fails is retried with backoff, per sink, while every Monitor goes
on. A sink's URL is read from Secret `goalkeeper-notifications` of its namespace (the one
Secret there the operator may read) at delivery, only while the sink's writer may read that
Secret and list the namespace's Monitors; the URL, and anything the receiver answers, never
reach status, Events or logs: a failure is told by its HTTP status or the kind of error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from pydantic import ValidationError

from goalkeeper.controller.api import ApiError, Conflict, NotFound, Permanent
from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.core.models import (
    SINK_SECRET,
    Condition,
    ConditionStatus,
    Notice,
    NoticeKind,
    Notices,
    NotificationSinkSpec,
    NotificationSinkStatus,
    SinkFormat,
)
from goalkeeper.core.notices import SinkWants, pending
from goalkeeper.core.permissions import Author, Permission, author_of

log = logging.getLogger("goalkeeper.notify")

Body = dict[str, Any]
Key = tuple[str, str]

# The cluster sink's key in `delivered`: no object name holds a colon.
CLUSTER_SINK = ":cluster"
POST_TIMEOUT_SECONDS = 10.0
BACKOFF_FIRST, BACKOFF_MAX = 2.0, 300.0
# How long a URL read from its Secret, and an access review, are used before asked again.
URL_TTL = REVIEW_TTL = 60.0
WORKERS = 16
LIST_RETRY_SECONDS = 10.0
# How often a sink whose messages keep arriving has its lastDeliveredAt written again.
REPORT_EVERY_SECONDS = 60.0
# A message a receiver refuses (4xx) this often is given up, so later ones can go.
REFUSALS_BEFORE_SKIP = 5


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Sink:
    """One sink: a namespace's NotificationSink, or the cluster sink (namespace "")."""

    namespace: str
    name: str
    spec: NotificationSinkSpec
    # Made at: it receives no message recorded before (None: every kept message).
    since: datetime | None = None
    author: Author | None = None
    generation: int | None = None

    @property
    def key(self) -> str:
        return self.name if self.namespace else CLUSTER_SINK

    @property
    def wants(self) -> SinkWants:
        return SinkWants(self.key, frozenset(self.spec.send))

    def __str__(self) -> str:
        if not self.namespace:
            return "cluster sink"
        return f"NotificationSink {self.namespace}/{self.name}"


def _created(meta: Body) -> datetime | None:
    try:
        return datetime.fromisoformat(str(meta["creationTimestamp"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None


class SinkRegistry:
    """The sinks the watch shows, by namespace; `listed` once a first full list is in, so
    no message is let go for a sink not seen yet."""

    def __init__(self, cluster: Sink | None = None) -> None:
        self.cluster = cluster
        self._sinks: dict[str, dict[str, Sink]] = {}
        self.listed = False

    def put(self, body: Body) -> Sink | None:
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        try:
            spec = NotificationSinkSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            log.warning("%s/%s: NotificationSink ignored: %s", namespace, name, error)
            self.drop(namespace, name)
            return None
        sink = Sink(
            namespace,
            name,
            spec,
            since=_created(meta),
            author=author_of(meta.get("annotations")),
            generation=meta.get("generation"),
        )
        self._sinks.setdefault(namespace, {})[name] = sink
        return sink

    def drop(self, namespace: str, name: str) -> None:
        found = self._sinks.get(namespace, {})
        found.pop(name, None)
        if not found:
            self._sinks.pop(namespace, None)

    def replace_all(self, bodies: Iterable[Body]) -> None:
        """The sinks of a full list; those the watch showed meanwhile are kept as well."""
        for body in bodies:
            self.put(body)
        self.listed = True

    def sinks(self, namespace: str) -> list[Sink]:
        """The namespace's own sinks, else the cluster sink, else none."""
        own = list(self._sinks.get(namespace, {}).values())
        if own:
            return own
        return [self.cluster] if self.cluster is not None else []

    def wants(self, namespace: str) -> tuple[SinkWants, ...]:
        return tuple(sink.wants for sink in self.sinks(namespace))

    def any(self) -> bool:
        return self.cluster is not None or bool(self._sinks)


# --- what a receiver gets ---


@dataclass(frozen=True)
class MonitorRef:
    namespace: str
    name: str
    uid: str


def event_type(notice: Notice) -> str:
    return f"dev.goalkeeper.monitor.{notice.kind.value}"


def slack_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(fmt: SinkFormat, notice: Notice, monitor: MonitorRef) -> tuple[dict[str, str], bytes]:
    """The headers and body of one message in the sink's format."""
    where = f"{monitor.namespace}/{monitor.name}"
    text = notice.text
    if notice.kind is NoticeKind.approval:
        answer = f"{monitor.name} -n {monitor.namespace}"
        text += f"\nTo answer: goalkeeper approve {answer} (or: goalkeeper reject {answer})"
    data = {
        "id": notice.id,
        "kind": notice.kind.value,
        "time": notice.at.isoformat(),
        "monitor": {"namespace": monitor.namespace, "name": monitor.name, "uid": monitor.uid},
        "summary": notice.summary,
        "text": text,
    }
    headers = {"Content-Type": "application/json"}
    if fmt is SinkFormat.slack:
        # Slack's own escapes: `<!channel>` or `<url|words>` in a report stays text.
        body: Body = {
            "text": slack_text(f"*{notice.summary}* (Monitor {where})\n{text}\n_id {notice.id}_"),
            "unfurl_links": False,
            "unfurl_media": False,
        }
    elif fmt is SinkFormat.cloudevents:
        # Binary mode: the attributes are headers, the body is the event's data.
        headers.update(
            {
                "ce-specversion": "1.0",
                "ce-id": notice.id,
                "ce-source": f"/apis/{GROUP}/{VERSION}/namespaces/{monitor.namespace}"
                f"/monitors/{monitor.name}",
                "ce-type": event_type(notice),
                "ce-subject": monitor.name,
                "ce-time": notice.at.isoformat(),
            }
        )
        body = data
    else:
        headers["Idempotency-Key"] = notice.id
        body = data
    return headers, json.dumps(body, separators=(",", ":")).encode()


# --- the edges: the cluster and the receivers ---


class DeliveryFailed(Exception):
    """A receiver did not take a message; the text never holds the URL or its answer.
    `refused`: the receiver answered that it will never take this message (a 4xx other than
    408 and 429), as opposed to being unavailable."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class Delivery(Protocol):
    async def post(self, url: str, headers: dict[str, str], body: bytes) -> None: ...
    async def close(self) -> None: ...


class HttpDelivery:
    """Posts over HTTP(S); a redirect is a failure (a URL that moves is not followed)."""

    def __init__(self, timeout: float = POST_TIMEOUT_SECONDS) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as answer:
                if not 200 <= answer.status < 300:
                    refused = 400 <= answer.status < 500 and answer.status not in (408, 429)
                    raise DeliveryFailed(f"the receiver answered HTTP {answer.status}", refused)
        except DeliveryFailed:
            raise
        except Exception as error:  # any client error: its text may hold the URL
            failed = f"the receiver could not be reached ({type(error).__name__})"
            raise DeliveryFailed(failed) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class NotifyApi(Protocol):
    async def get_monitor(self, namespace: str, name: str, fresh: bool = False) -> Body: ...
    async def get_secret(self, namespace: str, name: str) -> Body: ...
    async def record_delivered(
        self, namespace: str, name: str, uid: str, sink: str, seq: int
    ) -> None: ...
    async def patch_sink_status(self, namespace: str, name: str, status: Body) -> None: ...
    async def review_access(self, author: Author, permission: Permission) -> bool: ...


class ClusterNotifyApi:
    """`NotifyApi` with Monitors read from the watch cache, everything else from the API."""

    def __init__(self, monitors: Any, kube: Any) -> None:
        self._monitors = monitors
        self._kube = kube

    async def get_monitor(self, namespace: str, name: str, fresh: bool = False) -> Body:
        found: Body = await self._monitors.get_monitor(namespace, name, fresh)
        return found

    async def get_secret(self, namespace: str, name: str) -> Body:
        found: Body = await self._kube.get_secret(namespace, name)
        return found

    async def record_delivered(
        self, namespace: str, name: str, uid: str, sink: str, seq: int
    ) -> None:
        # The watch brings the written Monitor; a status write decided before it conflicts.
        await self._kube.record_delivered(namespace, name, uid, sink, seq)

    async def patch_sink_status(self, namespace: str, name: str, status: Body) -> None:
        await self._kube.patch_sink_status(namespace, name, status)

    async def review_access(self, author: Author, permission: Permission) -> bool:
        allowed: bool = await self._kube.review_access(author, permission)
        return allowed


class SinkUnusable(Exception):
    """The sink cannot be used until someone fixes it; the text says what to fix."""


def url_from_secret(secret: Body, key: str) -> str:
    """The webhook URL under `key` of the Secret's data; never in an error."""
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        raise SinkUnusable(f"Secret {SINK_SECRET} has no key {key}")
    try:
        url = base64.b64decode(raw, validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        raise SinkUnusable(f"key {key} of Secret {SINK_SECRET} is not text") from None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
    if host is None or parts.scheme not in ("http", "https"):
        raise SinkUnusable(f"key {key} of Secret {SINK_SECRET} is not an http or https URL")
    return url


def sink_needs(sink: Sink) -> list[Permission]:
    """What a sink's writer must hold: reading the URL's Secret (else anyone who may write a
    sink could post to a URL they cannot read), and the Monitors whose news it forwards."""
    return [
        Permission("get", "", "secrets", sink.namespace, SINK_SECRET),
        Permission("list", GROUP, "monitors", sink.namespace),
    ]


@dataclass
class _SinkState:
    failures: int = 0
    retry_at: float = 0.0
    problem: str = ""
    reported: tuple[str, str] | None = None  # the condition last written: (status, message)
    reported_at: float = 0.0
    since: datetime | None = None  # when Ready last changed


class Notifier:
    """Delivers each poked Monitor's pending messages to its sinks."""

    def __init__(
        self,
        api: NotifyApi,
        registry: SinkRegistry,
        delivery: Delivery,
        *,
        cluster_url: str = "",
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.api = api
        self.registry = registry
        self.delivery = delivery
        self._cluster_url = cluster_url
        self._clock = clock
        self._now = now
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._ready = asyncio.Event()
        self._queued: set[Key] = set()
        self._busy: set[Key] = set()
        self._again: set[Key] = set()
        self._states: dict[Key, _SinkState] = {}
        self._due: dict[Key, float] = {}  # Monitor -> when its retry poke fires
        self._refusals: dict[tuple[str, str, str], int] = {}  # (sink, message) -> refusals
        # (monitor uid, sink key) -> last seq delivered, ahead of what status shows yet.
        self._sent: dict[tuple[str, str], int] = {}
        self._urls: dict[Key, tuple[str, float]] = {}
        self._reviews: dict[tuple[Author, Permission], tuple[bool, float]] = {}
        self.delivered = 0  # messages posted, for tests and logs

    # --- fed by the reconciler ---

    def poke(self, namespace: str, name: str) -> None:
        """Deliver what this Monitor has pending, soon; never waits."""
        key = (namespace, name)
        if key in self._busy:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def wants(self, namespace: str) -> tuple[SinkWants, ...] | None:
        """The sinks a Monitor of `namespace` records messages for; None until the sinks
        were listed once (then nothing recorded is let go for a sink not seen yet)."""
        return self.registry.wants(namespace) if self.registry.listed else None

    async def list_sinks(self, list_all: Callable[[], Awaitable[list[Body]]]) -> None:
        """The first full list of sinks, retried until the API answers."""
        while not self.registry.listed:
            try:
                self.registry.replace_all(await list_all())
            except ApiError as error:
                log.warning("NotificationSinks not listed yet (%s); retried", error)
                await asyncio.sleep(LIST_RETRY_SECONDS)
        self._ready.set()

    async def run(self) -> None:
        """Deliver until cancelled, once the sinks were listed (a Monitor poked before
        waits: its sink may not be known yet)."""
        if self.registry.listed:
            self._ready.set()
        workers = [asyncio.create_task(self._work()) for _ in range(WORKERS)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            for worker in workers:
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

    async def _work(self) -> None:
        await self._ready.wait()
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._busy.add(key)
            try:
                await self.deliver(*key)
            except ApiError as error:
                log.warning("%s/%s: notifications wait: %s", key[0], key[1], error)
                self._later(key, BACKOFF_FIRST)
            except Exception:
                log.exception("%s/%s: notifications failed; retried later", *key)
                self._later(key, BACKOFF_MAX)
            finally:
                self._busy.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.poke(*key)

    def _later(self, key: Key, seconds: float) -> None:
        """Poke `key` again in `seconds`, unless a poke is already due by then."""
        due = self._clock() + seconds
        if self._due.get(key, float("inf")) <= due:
            return
        self._due[key] = due
        # Not the caller's context: from a kopf handler it holds the event's body.
        asyncio.get_running_loop().call_later(
            seconds, self._fire, key, due, context=contextvars.Context()
        )

    def _fire(self, key: Key, due: float) -> None:
        if self._due.get(key) == due:
            del self._due[key]
        self.poke(*key)

    # --- one Monitor ---

    async def deliver(self, namespace: str, name: str) -> None:
        """Post this Monitor's pending messages to each of its sinks, in order."""
        try:
            monitor = await self.api.get_monitor(namespace, name)
        except NotFound:
            return
        raw = (monitor.get("status") or {}).get("notices")
        if not raw:
            return
        try:
            notices = Notices.model_validate(raw)
        except ValidationError as error:
            log.warning("%s/%s: status.notices unreadable: %s", namespace, name, error)
            return
        ref = MonitorRef(namespace, name, str(monitor["metadata"].get("uid", "")))
        for sink in self.registry.sinks(namespace):
            try:
                await self._to_sink(sink, ref, notices)
            except ApiError:
                raise
            except Exception as error:  # one sink's surprise must not cost the others theirs
                log.warning("%s/%s: %s failed (%s)", namespace, name, sink, type(error).__name__)
                state = self._states.setdefault((sink.namespace, sink.name), _SinkState())
                await self._failed(sink, state, ref, f"delivery failed ({type(error).__name__})")

    async def _to_sink(self, sink: Sink, ref: MonitorRef, notices: Notices) -> None:
        recorded = notices.delivered.get(sink.key, 0)
        sent = self._sent.get((ref.uid, sink.key), 0)
        if sent > recorded:
            await self._record(ref, sink, sent)  # a post whose record failed
        elif sent:
            del self._sent[(ref.uid, sink.key)]  # status has caught up
        taken = {**notices.delivered, sink.key: max(recorded, sent)}
        seen = notices.model_copy(update={"delivered": taken})
        todo = pending(seen, sink.wants, sink.since)
        if not todo:
            return
        state = self._states.setdefault((sink.namespace, sink.name), _SinkState())
        wait = state.retry_at - self._clock()
        if wait > 0:
            self._later((ref.namespace, ref.name), wait)
            return
        try:
            url = await self._url(sink)
        except SinkUnusable as unusable:
            await self._failed(sink, state, ref, str(unusable))
            return
        for notice in todo:
            headers, body = payload(sink.spec.format, notice, ref)
            try:
                await self.delivery.post(url, headers, body)
            except DeliveryFailed as failed:
                if not self._give_up(sink, notice, failed):
                    await self._failed(sink, state, ref, str(failed))
                    return
                log.warning(
                    "%s/%s: %s refused by %s %d times (%s); given up, the next one goes",
                    ref.namespace,
                    ref.name,
                    notice.id,
                    sink,
                    REFUSALS_BEFORE_SKIP,
                    failed,
                )
            else:
                self.delivered += 1
                log.info("%s/%s: %s sent to %s", ref.namespace, ref.name, notice.id, sink)
            self._sent[(ref.uid, sink.key)] = notice.seq
            # Recorded even when the operator is stopping: else the message goes again.
            await asyncio.shield(self._record(ref, sink, notice.seq))
        state.failures, state.retry_at, state.problem = 0, 0.0, ""
        await self._report(sink, state, ConditionStatus.true, "Delivering", "Messages arrive.")

    def _give_up(self, sink: Sink, notice: Notice, failed: DeliveryFailed) -> bool:
        """True once a receiver has refused this very message `REFUSALS_BEFORE_SKIP` times:
        it would hold back every later message of the Monitor for good."""
        if not failed.refused:
            return False
        key = (sink.namespace, sink.name, notice.id)
        self._refusals[key] = self._refusals.get(key, 0) + 1
        if self._refusals[key] < REFUSALS_BEFORE_SKIP:
            return False
        del self._refusals[key]
        return True

    async def _record(self, ref: MonitorRef, sink: Sink, seq: int) -> None:
        try:
            await self.api.record_delivered(ref.namespace, ref.name, ref.uid, sink.key, seq)
        except (NotFound, Conflict):
            return  # the Monitor is gone, or another with its name stands there
        except Permanent as refused:
            if refused.status == 422:
                return  # the uid test failed: another Monitor with its name stands there
            raise
        except ApiError as error:
            log.warning(
                "%s/%s: delivery to %s not recorded yet (%s)", ref.namespace, ref.name, sink, error
            )
            self._later((ref.namespace, ref.name), BACKOFF_FIRST)

    async def _failed(self, sink: Sink, state: _SinkState, ref: MonitorRef, problem: str) -> None:
        state.failures += 1
        pause = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (state.failures - 1))
        state.retry_at = self._clock() + pause
        state.problem = problem
        self._later((ref.namespace, ref.name), pause)
        if state.failures == 1 or state.failures % 10 == 0:
            log.warning("%s: %s; retried in %.0f s", sink, problem, pause)
        await self._report(sink, state, ConditionStatus.false, "NotDelivering", problem + ".")

    async def _url(self, sink: Sink) -> str:
        if not sink.namespace:
            if not self._cluster_url:
                raise SinkUnusable("GOALKEEPER_NOTIFY_URL is not set")
            return self._cluster_url
        for permission in sink_needs(sink):
            if sink.author is None:
                raise SinkUnusable(
                    "no writer is recorded on it (annotation goalkeeper.dev/author, set by the "
                    "API server)"
                )
            if not await self._may(sink.author, permission):
                raise SinkUnusable(
                    f"its writer {sink.author.user} may not {permission.text}; a sink sends "
                    "only what its writer could read"
                )
        key = (sink.namespace, sink.spec.urlKey)
        kept = self._urls.get(key)
        if kept is not None and self._clock() - kept[1] < URL_TTL:
            return kept[0]
        try:
            secret = await self.api.get_secret(sink.namespace, SINK_SECRET)
        except NotFound:
            raise SinkUnusable(f"Secret {SINK_SECRET} is missing") from None
        except ApiError as error:
            unread = f"Secret {SINK_SECRET} could not be read (HTTP {error.status})"
            raise SinkUnusable(unread) from None
        url = url_from_secret(secret, sink.spec.urlKey)
        self._urls[key] = (url, self._clock())
        return url

    async def _may(self, author: Author, permission: Permission) -> bool:
        key = (author, permission)
        kept = self._reviews.get(key)
        if kept is not None and self._clock() - kept[1] < REVIEW_TTL:
            return kept[0]
        allowed = await self.api.review_access(author, permission)
        self._reviews[key] = (allowed, self._clock())
        return allowed

    async def _report(
        self, sink: Sink, state: _SinkState, status: ConditionStatus, reason: str, message: str
    ) -> None:
        """The sink's Ready condition, written when it changes, and while messages arrive,
        their time at most once a minute (a namespace sink only)."""
        if not sink.namespace:
            return
        same = state.reported == (status.value, message)
        fresh = self._clock() - state.reported_at < REPORT_EVERY_SECONDS
        if same and (fresh or status is ConditionStatus.false):
            return
        now = self._now()
        if state.reported is None or state.reported[0] != status.value:
            state.since = now
        state.reported, state.reported_at = (status.value, message), self._clock()
        written = NotificationSinkStatus(
            conditions=[
                Condition(
                    type="Ready",
                    status=status,
                    reason=reason,
                    message=message,
                    lastTransitionTime=state.since or now,
                )
            ],
            lastDeliveredAt=now if status is ConditionStatus.true else None,
            observedGeneration=sink.generation,
        )
        patch = written.model_dump(mode="json", exclude_none=True)
        try:
            await self.api.patch_sink_status(sink.namespace, sink.name, patch)
        except ApiError as error:
            state.reported = None
            log.warning("%s: could not write its status: %s", sink, error)

    async def delivery_closed(self) -> None:
        await self.delivery.close()

    # --- forgetting ---

    def sink_gone(self, namespace: str, name: str) -> None:
        """A deleted sink: its state and its URL go with it."""
        self.registry.drop(namespace, name)
        self._states.pop((namespace, name), None)
        self._urls = {k: v for k, v in self._urls.items() if k[0] != namespace}

    def forget_monitor(self, uid: str) -> None:
        for key in [k for k in self._sent if k[0] == uid]:
            del self._sent[key]
