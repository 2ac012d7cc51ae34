"""Watches of target objects, for event wakes: one watch per kind and namespace, shared by
every waiting monitor there, open only while some monitor waits on that kind.

A monitor's wish comes from the status the work queue last saw (`want`); what counts as
a material change is the core's (`core.wakes`). A change is held for the monitor until
its reconcile takes it (`take`), so a wake is never lost to a busy worker; the engine
decides whether it starts a check. The baseline is the object as the watch showed it
when the monitor began to wait: a change before that is the next timed check's to see.
Each open watch reads in a thread of its own, as the client is synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from goalkeeper.core import wakes
from goalkeeper.core.models import WatchTarget

log = logging.getLogger("goalkeeper.targets")

Key = tuple[str, str]
# (apiVersion, kind, namespace): what one watch connection covers.
StreamKey = tuple[str, str, str]
Change = tuple[WatchTarget, str]
State = tuple[Any, ...]

# The API server ends a watch after this long; it is then resumed from where it was.
WATCH_SECONDS = 240
RETRY_FIRST, RETRY_CAP = 1.0, 30.0
LIST_PAGE = 500


class Source(Protocol):
    """Lists and watches one kind in one namespace (the raw API JSON)."""

    def list(self, key: StreamKey) -> tuple[str, list[dict[str, Any]]]: ...
    def watch(self, key: StreamKey, resource_version: str) -> Iterator[dict[str, Any]]: ...
    def close(self, key: StreamKey) -> None: ...


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


def _snake(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


class KubeSource:
    """`Source` over the official client's typed list calls, read as raw JSON."""

    def __init__(self, api_client: Any) -> None:
        self._apis = {
            "v1": client.CoreV1Api(api_client),
            "apps/v1": client.AppsV1Api(api_client),
            "batch/v1": client.BatchV1Api(api_client),
        }
        self._open: dict[StreamKey, Any] = {}

    def _call(self, key: StreamKey) -> Callable[..., Any]:
        api_version, kind, _ = key
        call: Callable[..., Any] = getattr(
            self._apis[api_version], f"list_namespaced_{_snake(kind)}"
        )
        return call

    def list(self, key: StreamKey) -> tuple[str, list[dict[str, Any]]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            answer = json.loads(self._call(key)(key[2], **kwargs).data)
            items.extend(answer.get("items") or [])
            meta = answer.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return str(meta.get("resourceVersion") or ""), items

    def watch(self, key: StreamKey, resource_version: str) -> Iterator[dict[str, Any]]:
        response = self._call(key)(
            key[2],
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(30, WATCH_SECONDS + 30),
        )
        self._open[key] = response
        try:
            yield from watch_events(response)
        finally:
            self._open.pop(key, None)

    def close(self, key: StreamKey) -> None:
        """Unblock the thread reading `key`'s watch."""
        shut(self._open.get(key), key)


def watch_events(response: Any) -> Iterator[dict[str, Any]]:
    """The events of a watch response; an ERROR event is raised, 410 as `Gone`."""
    try:
        for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
            if not line:
                continue
            event: dict[str, Any] = json.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise Gone(str(status.get("message") or "resourceVersion too old"))
                raise RuntimeError(f"watch error: {status.get('message') or status}")
            yield event
    finally:
        response.release_conn()


def shut(response: Any, what: object) -> None:
    """Unblock the thread reading a watch `response` (None: none open)."""
    if response is None:
        return
    try:
        response.shutdown()
    except Exception:  # closing an already broken stream
        log.debug("closing the watch of %s", what, exc_info=True)


async def in_thread(key: StreamKey, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)` in a thread of its own: a watch blocks its thread for minutes, and the
    loop's shared executor has only a few."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result = call(*args)
        except BaseException as error:  # handed to the awaiting task
            hand_over(loop, settle, None, error)
        else:
            hand_over(loop, settle, result, None)

    threading.Thread(target=run, name=f"watch-{key[1]}-{key[2]}", daemon=True).start()
    return await done


def hand_over(loop: asyncio.AbstractEventLoop, settle: Callable[..., None], *outcome: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
        loop.call_soon_threadsafe(settle, *outcome)


def _stream_key(target: WatchTarget, namespace: str) -> StreamKey:
    return (target.apiVersion, target.kind, namespace)


@dataclass
class _Stream:
    key: StreamKey
    # name -> the material state the watch last showed (absent: not there).
    objects: dict[str, State] = field(default_factory=dict)
    # name -> monitor -> the state its wait began at (None: not listed yet).
    interest: dict[str, dict[Key, State | None]] = field(default_factory=dict)
    synced: bool = False
    task: asyncio.Task[None] | None = None


class TargetWatches:
    def __init__(self, source: Source, on_change: Callable[[str, str], None]) -> None:
        self._source = source
        self._on_change = on_change
        self._streams: dict[StreamKey, _Stream] = {}
        self._wants: dict[Key, tuple[WatchTarget, ...]] = {}
        self._pending: dict[Key, Change] = {}

    @property
    def connections(self) -> int:
        """Watch connections open or being opened."""
        return len(self._streams)

    # --- what monitors wait on ---

    def want(self, key: Key, targets: Sequence[WatchTarget]) -> None:
        """Monitor `key` waits on `targets` now (none: it does not wait, or watches
        nothing); a change of wish drops what it no longer watches and any held change."""
        wanted = tuple(wakes.wakeable(targets)[0])
        if self._wants.get(key, ()) == wanted:
            return
        self._unwant(key)
        if not wanted:
            return
        self._wants[key] = wanted
        for target in wanted:
            stream = self._stream(_stream_key(target, key[0]))
            baseline = stream.objects.get(target.name, wakes.GONE) if stream.synced else None
            stream.interest.setdefault(target.name, {})[key] = baseline

    def _unwant(self, key: Key) -> None:
        self._pending.pop(key, None)
        for target in self._wants.pop(key, ()):
            stream = self._streams.get(_stream_key(target, key[0]))
            if stream is None:
                continue
            watchers = stream.interest.get(target.name, {})
            watchers.pop(key, None)
            if not watchers:
                stream.interest.pop(target.name, None)
            if not stream.interest:
                self._close(stream)

    def watching(self, key: Key) -> bool:
        """Whether every target `key` waits on is watched now (its baseline is taken)."""
        wanted = self._wants.get(key, ())
        return bool(wanted) and all(
            (stream := self._streams.get(_stream_key(t, key[0]))) is not None and stream.synced
            for t in wanted
        )

    def take(self, key: Key) -> Change | None:
        """The change held for `key`, handed over once."""
        return self._pending.pop(key, None)

    def restore(self, key: Key, change: Change) -> None:
        """Hold a taken change again (its reconcile failed), unless a newer one came."""
        if key in self._wants:
            self._pending.setdefault(key, change)

    # --- the streams ---

    def _stream(self, skey: StreamKey) -> _Stream:
        stream = self._streams.get(skey)
        if stream is None:
            stream = self._streams[skey] = _Stream(skey)
            # Not the caller's context: from a kopf handler it holds the event's body.
            stream.task = asyncio.get_running_loop().create_task(
                self._run(stream), context=contextvars.Context()
            )
        return stream

    def _close(self, stream: _Stream) -> None:
        self._streams.pop(stream.key, None)
        if stream.task is not None:
            stream.task.cancel()
        self._source.close(stream.key)

    async def _run(self, stream: _Stream) -> None:
        delay = RETRY_FIRST
        loop = asyncio.get_running_loop()
        while True:
            try:
                version, items = await in_thread(stream.key, self._source.list, stream.key)
                self._listed(stream, items)
                await in_thread(stream.key, self._follow, loop, stream, version)
                delay = RETRY_FIRST
            except asyncio.CancelledError:
                raise
            except Gone:
                continue
            except Exception as error:  # any failure: retry the watch later
                log.warning("watch of %s/%s in %s failed: %s", *stream.key, error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)

    def _follow(self, loop: asyncio.AbstractEventLoop, stream: _Stream, version: str) -> None:
        """Read the watch in a worker thread, handing each event to the event loop."""
        for event in self._source.watch(stream.key, version):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "BOOKMARK":
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                continue
            name = str((obj.get("metadata") or {}).get("name") or "")
            state = wakes.GONE if kind == "DELETED" else wakes.material_state(obj)
            hand_over(loop, self._seen, stream, name, state)
            if self._streams.get(stream.key) is not stream:
                return

    def _listed(self, stream: _Stream, items: list[dict[str, Any]]) -> None:
        seen = {
            str((item.get("metadata") or {}).get("name") or ""): wakes.material_state(item)
            for item in items
        }
        for name in set(stream.objects) | set(seen) | set(stream.interest):
            self._seen(stream, name, seen.get(name, wakes.GONE))
        if not stream.synced:
            log.info(
                "watching %s %s in %s for %d waiting monitors",
                stream.key[1],
                ", ".join(sorted(stream.interest)[:5])
                + ("..." if len(stream.interest) > 5 else ""),
                stream.key[2],
                len({key for keys in stream.interest.values() for key in keys}),
            )
        stream.synced = True

    def _seen(self, stream: _Stream, name: str, state: State) -> None:
        if state == wakes.GONE:
            stream.objects.pop(name, None)
        else:
            stream.objects[name] = state
        api_version, kind, namespace = stream.key
        for key, baseline in list(stream.interest.get(name, {}).items()):
            stream.interest[name][key] = state
            change = None if baseline is None else wakes.describe_change(baseline, state)
            if change is None:
                continue
            target = WatchTarget(apiVersion=api_version, kind=kind, name=name)
            log.info("%s/%s: %s changed: %s", namespace, key[1], target.ref, change)
            self._pending[key] = (target, change)
            self._on_change(*key)

    async def close(self) -> None:
        streams = list(self._streams.values())
        for stream in streams:
            self._close(stream)
        await asyncio.gather(*(s.task for s in streams if s.task), return_exceptions=True)
