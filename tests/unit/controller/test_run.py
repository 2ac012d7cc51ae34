"""The kopf configuration the operator runs with, and its own watches."""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes import client

from goalkeeper.controller.cache import WatchCache
from goalkeeper.controller.listwatch import ListWatch
from goalkeeper.controller.run import NoDiffBase, build_registry, own_watches


def _configured() -> kopf.OperatorSettings:
    registry = build_registry()
    settings = kopf.OperatorSettings()
    for handler in registry._activities.get_all_handlers():
        if handler.id.endswith(".configure"):
            configure: Any = handler.fn  # called with the one argument it reads
            configure(settings=settings)
    return settings


def test_no_handler_needs_kopfs_diff_of_a_body() -> None:
    # NoDiffBase is right only while every handler is a watch-event handler.
    registry = build_registry()
    assert not list(registry._changing.get_all_handlers())
    assert not list(registry._spawning.get_all_handlers())
    assert len(list(registry._watching.get_all_handlers())) == 3


def test_bodies_are_not_copied_for_a_diff() -> None:
    storage = _configured().persistence.diffbase_storage
    assert isinstance(storage, NoDiffBase)
    body = kopf.Body({"metadata": {"name": "m"}, "spec": {"task": "t" * 1000}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None


def test_kopf_watches_approvals_configs_and_sinks_only() -> None:
    # Monitors, steps, Jobs and pods are the operator's own watches (own_watches).
    registry = build_registry()
    watched = {
        (handler.selector.group, handler.selector.any_name)
        for handler in registry._watching.get_all_handlers()
        if handler.selector is not None
    }
    assert watched == {
        ("goalkeeper.dev", "monitorapprovals"),
        ("goalkeeper.dev", "modelconfigs"),
        ("goalkeeper.dev", "notificationsinks"),
    }
    assert not list(registry._indexing.get_all_handlers())


def _own(shard: str) -> tuple[list[ListWatch], WatchCache]:
    cache = WatchCache(listed=False)
    memo = kopf.Memo(cache=cache, queue=None, shard=shard)
    return own_watches(client.ApiClient(), ["team-a"], shard, memo), cache


def test_own_watches_select_steps_jobs_and_pods_by_the_step_label_and_the_shard() -> None:
    watches, _ = _own("")
    assert [(w.source.what, w.source.selector) for w in watches] == [
        ("Monitors", ""),
        ("MonitorSteps", ""),
        ("Jobs", "goalkeeper.dev/step"),
        ("pods", "goalkeeper.dev/step"),
    ]
    watches, _ = _own("goalkeeper.dev/shard=b")
    assert [w.source.selector for w in watches] == [
        "goalkeeper.dev/shard=b",
        "goalkeeper.dev/shard=b",
        "goalkeeper.dev/step,goalkeeper.dev/shard=b",
        "goalkeeper.dev/step,goalkeeper.dev/shard=b",
    ]


async def test_the_cache_counts_its_lists_in_once_steps_jobs_and_pods_are_all_listed() -> None:
    watches, cache = _own("")
    monitors, steps, jobs, pods = watches
    monitors.on_listed()  # the Monitors' list is not one a resumed check waits for
    steps.on_listed()
    jobs.on_listed()
    assert not cache.lists_are_in()
    pods.on_listed()
    assert cache.lists_are_in()
