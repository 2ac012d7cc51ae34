"""The operator's own watches of Monitors and of their steps, Jobs and pods: listed in
pages, then followed from the list's resourceVersion, each event handed straight to one
callback on the event loop.

Monitors number in the tens of thousands on one replica, and kopf's own watch spends more
per event than the handler it calls (a worker task, a logger and handler state for every
object): 50,000 waiting Monitors took over a minute to settle. Steps, Jobs and pods are
what a resumed monitor reads first: a watch that knows when its list is in lets those
reads wait for it (kopf lists each kind several times over at a start, and says nothing
when it is done). Approvals, ModelConfigs and sinks stay kopf's. A list or watch reads in
a thread, as the client is synchronous; a list page is handled before the next one is
read, so no more than one page of bodies is held at a time.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.controller.targets import (
    RETRY_CAP,
    RETRY_FIRST,
    Gone,
    hand_over,
    in_thread,
    shut,
    watch_events,
)

log = logging.getLogger("goalkeeper.listwatch")

LIST_PAGE = 500
# The API server ends a watch after about this long; it is resumed from where it was.
WATCH_SECONDS = 270
# Items of a page handled before the event loop gets a turn.
BATCH = 100

Key = tuple[str, str]
# (event type: ADDED, MODIFIED, DELETED, or LISTED for a list's item; the object)
OnEvent = Callable[[str, dict[str, Any]], None]
Page = tuple[list[dict[str, Any]], str, str]  # items, continue token, resourceVersion


class ListSource(Protocol):
    """Lists and watches one kind in one namespace ("": every namespace), raw JSON."""

    what: str  # the kind's name in logs, plural ("Monitors")

    def page(self, namespace: str, token: str) -> Page: ...
    def watch(self, namespace: str, resource_version: str) -> Iterator[dict[str, Any]]: ...
    def close(self, namespace: str) -> None: ...


# The client's list call of a kind, in a namespace and in every namespace.
Namespaced = Callable[..., Any]  # (namespace, **query)
Everywhere = Callable[..., Any]  # (**query)


class KubeListSource:
    """`ListSource` over the client's list calls of one kind, narrowed by `selector`."""

    def __init__(
        self, what: str, namespaced: Namespaced, everywhere: Everywhere, selector: str = ""
    ) -> None:
        self.what = what
        self._namespaced = namespaced
        self._everywhere = everywhere
        self.selector = selector
        self._open: dict[str, Any] = {}

    def _call(self, namespace: str, **kwargs: Any) -> Any:
        if self.selector:
            kwargs["label_selector"] = self.selector
        if namespace:
            return self._namespaced(namespace, _preload_content=False, **kwargs)
        return self._everywhere(_preload_content=False, **kwargs)

    def page(self, namespace: str, token: str) -> Page:
        kwargs: dict[str, Any] = {"limit": LIST_PAGE}
        if token:
            kwargs["_continue"] = token
        answer = json.loads(self._call(namespace, **kwargs).data)
        meta = answer.get("metadata") or {}
        return (
            answer.get("items") or [],
            str(meta.get("continue") or ""),
            str(meta.get("resourceVersion") or ""),
        )

    def watch(self, namespace: str, resource_version: str) -> Iterator[dict[str, Any]]:
        try:
            response = self._call(
                namespace,
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=(30, WATCH_SECONDS + 30),
            )
        except ApiException as error:
            if error.status == 410:
                raise Gone(str(error.reason or "resourceVersion too old")) from error
            raise
        self._open[namespace] = response
        try:
            yield from watch_events(response)
        finally:
            self._open.pop(namespace, None)

    def close(self, namespace: str) -> None:
        """Unblock the thread reading `namespace`'s watch."""
        shut(self._open.get(namespace), f"{self.what} in {namespace!r}")


def _custom(api_client: Any, what: str, plural: str, selector: str) -> KubeListSource:
    api = client.CustomObjectsApi(api_client)
    return KubeListSource(
        what,
        lambda namespace, **kw: api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, **kw
        ),
        lambda **kw: api.list_cluster_custom_object(GROUP, VERSION, plural, **kw),
        selector,
    )


def monitor_source(api_client: Any, shard: str = "") -> KubeListSource:
    """Monitors, of `shard` (a label selector) when one is given."""
    return _custom(api_client, "Monitors", "monitors", shard)


def step_source(api_client: Any, shard: str = "") -> KubeListSource:
    """MonitorSteps: they carry their monitor's labels, so `shard` selects them alike."""
    return _custom(api_client, "MonitorSteps", "monitorsteps", shard)


def job_source(api_client: Any, selector: str) -> KubeListSource:
    """Jobs matching `selector`: the step label, with the shard's when there is one."""
    api = client.BatchV1Api(api_client)
    return KubeListSource(
        "Jobs", api.list_namespaced_job, api.list_job_for_all_namespaces, selector
    )


def pod_source(api_client: Any, selector: str) -> KubeListSource:
    """Pods matching `selector`, as for Jobs."""
    api = client.CoreV1Api(api_client)
    return KubeListSource(
        "pods", api.list_namespaced_pod, api.list_pod_for_all_namespaces, selector
    )


@dataclass
class _Stream:
    namespace: str
    version: str = ""  # where the watch resumes; "" lists first


def _key(body: dict[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class ListWatch:
    """One kind's stream per namespace watched (one for the cluster when none is named)."""

    def __init__(
        self,
        source: ListSource,
        namespaces: list[str],
        on_event: OnEvent,
        known: Callable[[], Iterable[Key]],
        on_listed: Callable[[], None] = lambda: None,
    ) -> None:
        """`known`: the objects the events so far have left (the watch cache's), of which
        a list after a gap finds the ones deleted meanwhile. `on_listed` is called once,
        when every stream's first list has been handed on."""
        self.source = source
        self._streams = [_Stream(namespace) for namespace in namespaces or [""]]
        self._on_event = on_event
        self._known = known
        self.on_listed = on_listed
        self._unlisted = {s.namespace for s in self._streams}

    async def run(self) -> None:
        """Follow every stream until cancelled."""
        # Not the caller's context: nothing of it should live as long as the watch.
        tasks = [
            asyncio.get_running_loop().create_task(self._run(s), context=contextvars.Context())
            for s in self._streams
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for stream, task in zip(self._streams, tasks, strict=True):
                task.cancel()
                self.source.close(stream.namespace)
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, stream: _Stream) -> None:
        delay = RETRY_FIRST
        loop = asyncio.get_running_loop()
        where = stream.namespace or "every namespace"
        what = self.source.what
        thread = ("listwatch", what, stream.namespace)
        while True:
            try:
                if not stream.version:
                    await self._list(stream)
                await in_thread(thread, self._follow, loop, stream)
                delay = RETRY_FIRST
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("the watch of %s in %s is too old: listing again", what, where)
                stream.version = ""
            except Exception as error:  # any failure: retry later, from where it was
                log.warning(
                    "watch of %s in %s failed: %s; retrying in %.0f s", what, where, error, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)

    async def _list(self, stream: _Stream) -> None:
        listed: set[Key] = set()
        token, version = "", ""
        while True:
            items, token, version = await asyncio.to_thread(
                self.source.page, stream.namespace, token
            )
            for start in range(0, len(items), BATCH):
                for item in items[start : start + BATCH]:
                    listed.add(_key(item))
                    self._hand_on("LISTED", item)
                await asyncio.sleep(0)
            del items
            if not token:
                break
        # Gone while the watch was down: their DELETED events were never seen.
        for namespace, name in set(self._known()) - listed:
            if namespace == stream.namespace or not stream.namespace:
                self._hand_on("DELETED", {"metadata": {"namespace": namespace, "name": name}})
        stream.version = version
        where = stream.namespace or "every namespace"
        log.info("listed %d %s in %s", len(listed), self.source.what, where)
        if stream.namespace in self._unlisted:
            self._unlisted.discard(stream.namespace)
            if not self._unlisted:
                self.on_listed()

    def _follow(self, loop: asyncio.AbstractEventLoop, stream: _Stream) -> None:
        """Read the watch in a worker thread, handing each event to the event loop."""
        for event in self.source.watch(stream.namespace, stream.version):
            kind = str(event.get("type"))
            obj = event.get("object") or {}
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if kind != "BOOKMARK":
                hand_over(loop, self._hand_on, kind, obj)
            if version:
                stream.version = str(version)

    def _hand_on(self, kind: str, obj: dict[str, Any]) -> None:
        # One object's failure is logged and leaves the stream and the others alone; the
        # resync reconciles its monitor again.
        try:
            self._on_event(kind, obj)
        except Exception:
            log.exception("%s/%s: its %s event failed", *_key(obj), kind)
