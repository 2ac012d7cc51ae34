"""The target watches without a cluster: a source whose events the test sends."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from typing import Any

from goalkeeper.controller.targets import StreamKey, TargetWatches
from goalkeeper.core.models import WatchTarget

NS = "team-a"
BUILD = WatchTarget(apiVersion="batch/v1", kind="Job", name="build")
OTHER = WatchTarget(apiVersion="batch/v1", kind="Job", name="other")
_END = object()


def job(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "status": status}


class Source:
    def __init__(self, *items: dict[str, Any]) -> None:
        self.items = list(items)
        self.events: dict[StreamKey, queue.Queue[Any]] = {}
        self.lists = 0

    def list(self, key: StreamKey) -> tuple[str, list[dict[str, Any]]]:
        self.lists += 1
        self.events.setdefault(key, queue.Queue())
        return "1", list(self.items)

    def watch(self, key: StreamKey, resource_version: str) -> Iterator[dict[str, Any]]:
        events = self.events[key]
        while (event := events.get(timeout=30)) is not _END:
            yield event

    def close(self, key: StreamKey) -> None:
        if key in self.events:
            self.events[key].put(_END)

    def send(self, kind: str, obj: dict[str, Any], namespace: str = NS) -> None:
        self.events[("batch/v1", "Job", namespace)].put({"type": kind, "object": obj})


async def until(predicate: Any) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_a_change_is_held_for_its_watcher_only_and_handed_over_once() -> None:
    source = Source(job("build", active=1), job("other", active=1))
    woken: list[tuple[str, str]] = []
    watches = TargetWatches(source, lambda ns, name: woken.append((ns, name)))
    try:
        watches.want((NS, "a"), [BUILD])
        watches.want((NS, "b"), [BUILD, OTHER])
        watches.want((NS, "c"), [WatchTarget(apiVersion="v1", kind="Service", name="web")])
        await until(lambda: watches.watching((NS, "a")))
        assert watches.connections == 1 and not watches.watching((NS, "c"))
        # A new resourceVersion alone, then a change of `other`: only b watches it.
        source.send("MODIFIED", {**job("build", active=1), "metadata": {"name": "build"}})
        source.send("MODIFIED", job("other", active=0, succeeded=1))
        await until(lambda: woken)
        assert woken == [(NS, "b")]
        assert watches.take((NS, "b")) == (OTHER, "succeeded 1, active 0")
        assert watches.take((NS, "b")) is None

        source.send("DELETED", job("build", active=1))
        await until(lambda: len(woken) == 3)
        assert sorted(woken[1:]) == [(NS, "a"), (NS, "b")]
        change = watches.take((NS, "a"))
        assert change == (BUILD, "deleted")
        # A reconcile that fails gives the change back; a monitor that stops waiting drops it.
        watches.restore((NS, "a"), change)
        assert watches.take((NS, "a")) == change
        watches.want((NS, "b"), [])
        assert watches.take((NS, "b")) is None
        watches.restore((NS, "b"), (BUILD, "deleted"))
        assert watches.take((NS, "b")) is None
        watches.want((NS, "a"), [])
        assert watches.connections == 0 and source.lists == 1
    finally:
        await watches.close()


async def test_the_baseline_is_the_object_when_the_wait_began() -> None:
    source = Source(job("build", active=1))
    woken: list[tuple[str, str]] = []
    watches = TargetWatches(source, lambda ns, name: woken.append((ns, name)))
    try:
        watches.want((NS, "a"), [BUILD])
        await until(lambda: watches.watching((NS, "a")))
        source.send("MODIFIED", job("build", active=0, failed=1))
        await until(lambda: woken)
        # A monitor that begins to wait now takes the state as it is: no wake for it.
        watches.want((NS, "late"), [BUILD])
        assert watches.watching((NS, "late"))
        source.send("MODIFIED", job("build", active=0, failed=1))
        source.send("MODIFIED", job("build", active=1, failed=1))
        await until(lambda: len(woken) == 3)
        assert woken == [(NS, "a"), (NS, "a"), (NS, "late")]
    finally:
        await watches.close()


async def test_many_open_watches_each_read_in_a_thread_of_their_own() -> None:
    # More watches than the event loop's default executor has threads: none waits.
    source = Source(job("build", active=1))
    woken: list[tuple[str, str]] = []
    watches = TargetWatches(source, lambda ns, name: woken.append((ns, name)))
    namespaces = [f"team-{i}" for i in range(40)]
    try:
        for namespace in namespaces:
            watches.want((namespace, "m"), [BUILD])
        await until(lambda: all(watches.watching((ns, "m")) for ns in namespaces))
        assert watches.connections == len(namespaces)
        source.send("MODIFIED", job("build", active=0), namespace="team-39")
        await until(lambda: woken)
        assert woken == [("team-39", "m")]
    finally:
        await watches.close()
