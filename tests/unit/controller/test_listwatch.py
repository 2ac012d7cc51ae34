"""The operator's own watches without a cluster: a source whose pages and events the test
sets, and the events the watch hands on."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from goalkeeper.controller import listwatch
from goalkeeper.controller.listwatch import ListWatch, Page
from goalkeeper.controller.targets import Gone

NS = "team-a"
_END = object()


def monitor(name: str, version: str = "1", namespace: str = NS) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": version}}


class Source:
    """Lists `items` (`page_size` a page) at `version`; a watch yields what `send` queues,
    raising what `fail` queues."""

    what = "Monitors"

    def __init__(self, *items: dict[str, Any], page_size: int = 2) -> None:
        self.items = list(items)
        self.page_size = page_size
        self.version = "10"
        self.pages: list[tuple[str, str]] = []  # (namespace, token) of each page read
        self.watches: list[tuple[str, str]] = []  # (namespace, resourceVersion) of each
        self.events: queue.Queue[Any] = queue.Queue()
        self.closed: list[str] = []

    def page(self, namespace: str, token: str) -> Page:
        self.pages.append((namespace, token))
        start = int(token or 0)
        end = start + self.page_size
        more = str(end) if end < len(self.items) else ""
        return self.items[start:end], more, self.version

    def watch(self, namespace: str, resource_version: str) -> Iterator[dict[str, Any]]:
        self.watches.append((namespace, resource_version))
        while (event := self.events.get(timeout=30)) is not _END:
            if isinstance(event, BaseException):
                raise event
            yield event

    def close(self, namespace: str) -> None:
        self.closed.append(namespace)
        self.events.put(_END)

    def send(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.put({"type": kind, "object": obj})

    def end(self) -> None:
        """The server ends the watch (its timeout): the watch resumes."""
        self.events.put(_END)


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []  # (type, name, resourceVersion)
        self.known: dict[tuple[str, str], str] = {}

    def __call__(self, kind: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        self.events.append((kind, meta["name"], meta.get("resourceVersion", "")))
        if kind == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = meta.get("resourceVersion", "")


async def until(predicate: Callable[[], Any]) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def running(watch: ListWatch) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(watch.run())


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_every_page_is_handed_on_then_the_watch_starts_at_the_lists_version() -> None:
    source = Source(*(monitor(f"m-{i}") for i in range(5)))
    seen = Seen()
    task = await running(ListWatch(source, [NS], seen, known=lambda: seen.known))
    try:
        await until(lambda: source.watches)
        assert [e[:2] for e in seen.events] == [("LISTED", f"m-{i}") for i in range(5)]
        assert source.pages == [(NS, ""), (NS, "2"), (NS, "4")]
        assert source.watches == [(NS, "10")]
        source.send("MODIFIED", monitor("m-1", "11"))
        source.send("ADDED", monitor("m-9", "12"))
        source.send("DELETED", monitor("m-2", "13"))
        await until(lambda: len(seen.events) == 8)
        assert seen.events[5:] == [
            ("MODIFIED", "m-1", "11"),
            ("ADDED", "m-9", "12"),
            ("DELETED", "m-2", "13"),
        ]
    finally:
        await stopped(task)
    assert source.closed == [NS]


async def test_a_bookmark_moves_the_resume_point_and_is_not_an_event() -> None:
    source = Source(monitor("m-1"))
    seen = Seen()
    task = await running(ListWatch(source, [NS], seen, known=lambda: seen.known))
    try:
        await until(lambda: source.watches)
        source.send("BOOKMARK", {"metadata": {"resourceVersion": "40"}})
        source.end()
        await until(lambda: len(source.watches) == 2)
        assert source.watches[1] == (NS, "40")
        assert len(source.pages) == 1  # resumed, not listed again
        assert [e[0] for e in seen.events] == ["LISTED"]
    finally:
        await stopped(task)


async def test_a_failed_watch_is_retried_from_where_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listwatch, "RETRY_FIRST", 0.01)
    source = Source(monitor("m-1"))
    seen = Seen()
    task = await running(ListWatch(source, [NS], seen, known=lambda: seen.known))
    try:
        await until(lambda: source.watches)
        source.send("MODIFIED", monitor("m-1", "15"))
        source.events.put(ConnectionResetError("the connection broke"))
        await until(lambda: len(source.watches) == 2)
        assert source.watches[1] == (NS, "15")
        assert len(source.pages) == 1
    finally:
        await stopped(task)


async def test_a_watch_too_old_lists_again_and_reports_what_went_meanwhile() -> None:
    source = Source(monitor("m-1"), monitor("m-2"), monitor("m-3"))
    seen = Seen()
    task = await running(ListWatch(source, [NS], seen, known=lambda: seen.known))
    try:
        await until(lambda: source.watches)
        # While the watch was down m-2 was deleted and m-4 made; the server says "too old".
        source.items = [monitor("m-1", "20"), monitor("m-3", "20"), monitor("m-4", "21")]
        source.version = "21"
        source.events.put(Gone("too old resource version"))
        await until(lambda: len(source.watches) == 2)
        assert source.watches[1] == (NS, "21")
        assert seen.events[3:] == [
            ("LISTED", "m-1", "20"),
            ("LISTED", "m-3", "20"),
            ("LISTED", "m-4", "21"),
            ("DELETED", "m-2", ""),
        ]
    finally:
        await stopped(task)


async def test_the_lists_are_said_to_be_in_once_when_every_namespace_has_listed() -> None:
    source = Source(monitor("m-1", namespace="a"), monitor("m-2", namespace="b"))
    seen, listed = Seen(), []
    watch = ListWatch(
        source, ["a", "b"], seen, known=lambda: seen.known, on_listed=lambda: listed.append(1)
    )
    task = await running(watch)
    try:
        await until(lambda: len(source.watches) == 2)
        assert {p[0] for p in source.pages} == {"a", "b"} and listed == [1]
        source.events.put(Gone("too old resource version"))
        await until(lambda: len(source.watches) == 3)
        assert listed == [1]  # a list again after a gap is no new start
    finally:
        await stopped(task)


async def test_with_no_namespace_named_one_stream_covers_the_cluster() -> None:
    source = Source(monitor("m-1", namespace="a"), monitor("m-2", namespace="b"))
    seen = Seen()
    known = {("a", "gone"): "1"}
    task = await running(ListWatch(source, [], seen, known=lambda: {**known, **seen.known}))
    try:
        await until(lambda: source.watches)
        assert source.pages[0] == ("", "")
        assert ("DELETED", "gone", "") in seen.events
    finally:
        await stopped(task)


async def test_a_stream_per_namespace_leaves_the_others_monitors_alone() -> None:
    source = Source(monitor("m-1", namespace="a"))
    seen = Seen()
    known = {("b", "elsewhere"): "1"}
    task = await running(ListWatch(source, ["a"], seen, known=lambda: known))
    try:
        await until(lambda: source.watches)
        assert [e[0] for e in seen.events] == ["LISTED"]
    finally:
        await stopped(task)


async def test_one_monitors_failing_event_leaves_the_stream_and_the_others_alone() -> None:
    source = Source(monitor("m-1"), monitor("bad"), monitor("m-3"))
    seen = Seen()

    def handle(kind: str, body: dict[str, Any]) -> None:
        if body["metadata"]["name"] == "bad":
            raise ValueError("a body the handler cannot read")
        seen(kind, body)

    task = await running(ListWatch(source, [NS], handle, known=lambda: seen.known))
    try:
        await until(lambda: source.watches)
        source.send("MODIFIED", monitor("bad", "11"))
        source.send("MODIFIED", monitor("m-1", "12"))
        await until(lambda: len(seen.events) == 3)
        assert [e[1] for e in seen.events] == ["m-1", "m-3", "m-1"]
        assert len(source.pages) == 2  # one list, never repeated
    finally:
        await stopped(task)
