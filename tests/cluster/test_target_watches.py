"""The event wakes' watches against the real API server: one watch connection per kind and
namespace however many monitors wait there, counted by the API server itself, and a change
of one target reaches only the monitors that watch it."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from kubernetes import client

from goalkeeper.controller.targets import KubeSource, TargetWatches
from goalkeeper.core.models import WatchTarget
from tests.support.cluster_fixtures import wait_for

pytestmark = pytest.mark.cluster

MONITORS = 1000


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "none", "command": ["true"]}],
                }
            },
        },
    }


def job_watches(control_plane: Any) -> int:
    """Namespaced watches of Jobs open at the API server now (the controllers' own watches
    are cluster-wide)."""
    metrics = control_plane.kubectl("get", "--raw", "/metrics", check=True).stdout
    total = 0
    for line in metrics.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and all(
            part in line
            for part in ('group="batch"', 'resource="jobs"', 'scope="namespace"', 'verb="WATCH"')
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def suspended(batch: Any, namespace: str) -> int:
    items = batch.list_namespaced_job(namespace).items
    return sum(
        any(c.type == "Suspended" and c.status == "True" for c in (j.status.conditions or []))
        for j in items
        if j.status
    )


async def until(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def test_a_thousand_monitors_share_one_watch_and_only_the_watcher_wakes(
    control_plane: Any, api_client: Any, namespace: str
) -> None:
    batch = client.BatchV1Api(api_client)
    core = client.CoreV1Api(api_client)
    for i in range(MONITORS):
        batch.create_namespaced_job(namespace, job(f"job-{i}"))
    # The Job controller marks each one suspended; that is before any monitor waits.
    wait_for(lambda: suspended(batch, namespace) == MONITORS, 300, "every Job suspended")
    other = f"{namespace}-b"
    core.create_namespace({"metadata": {"name": other}})
    before = job_watches(control_plane)

    async def scenario() -> None:
        woken: list[tuple[str, str]] = []
        watches = TargetWatches(KubeSource(api_client), lambda ns, name: woken.append((ns, name)))
        try:
            for i in range(MONITORS):
                target = WatchTarget(apiVersion="batch/v1", kind="Job", name=f"job-{i}")
                watches.want((namespace, f"monitor-{i}"), [target])
            await until(
                lambda: all(watches.watching((namespace, f"monitor-{i}")) for i in range(MONITORS)),
                120,
                "the watch to list the Jobs",
            )
            assert watches.connections == 1
            await until(lambda: job_watches(control_plane) == before + 1, 60, "one Job watch")

            # A second namespace is a second connection; an unrelated Job wakes nobody.
            extra = WatchTarget(apiVersion="batch/v1", kind="Job", name="job-0")
            watches.want((other, "monitor-x"), [extra])
            await until(lambda: watches.watching((other, "monitor-x")), 60, "the second watch")
            await until(lambda: job_watches(control_plane) == before + 2, 60, "two Job watches")
            await asyncio.to_thread(batch.create_namespaced_job, namespace, job("unrelated"))
            await asyncio.to_thread(
                batch.patch_namespaced_job, "job-500", namespace, {"spec": {"suspend": False}}
            )
            await until(lambda: woken, 60, "the change of job-500 to arrive")
            # Events of one watch arrive in order: the unrelated Job came first and woke none.
            assert woken[0] == (namespace, "monitor-500")
            target, change = watches.take((namespace, "monitor-500")) or (None, "")
            assert target == WatchTarget(apiVersion="batch/v1", kind="Job", name="job-500")
            assert re.fullmatch(r"[A-Za-z ,0-9]+", change) and "Suspended" not in change
            assert {key for key in woken} == {(namespace, "monitor-500")}
            assert watches.take((namespace, "monitor-501")) is None

            # When nobody waits on a kind any more, its watch closes.
            for i in range(MONITORS):
                watches.want((namespace, f"monitor-{i}"), [])
            watches.want((other, "monitor-x"), [])
            assert watches.connections == 0
            await until(lambda: job_watches(control_plane) == before, 60, "the watches to close")
        finally:
            await watches.close()

    try:
        asyncio.run(scenario())
    finally:
        core.delete_namespace(other)
