"""Running the operator: kopf with goalkeeper's handlers, settings and client."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client, config

from goalkeeper.controller import metrics
from goalkeeper.controller.api import API_THREADS, KubeApi
from goalkeeper.controller.cache import (
    JOB,
    LISTED_KINDS,
    MONITOR,
    POD,
    STEP,
    CachedApi,
    WatchCache,
)
from goalkeeper.controller.configs import keep_config_statuses
from goalkeeper.controller.handlers import on_job, on_monitor, on_pod, on_step, register
from goalkeeper.controller.leader import LeaderElector, standby_health
from goalkeeper.controller.listwatch import (
    ListWatch,
    job_source,
    monitor_source,
    pod_source,
    step_source,
)
from goalkeeper.controller.manifests import GROUP, LABEL_STEP
from goalkeeper.controller.notify import (
    ClusterNotifyApi,
    HttpDelivery,
    Notifier,
    Sink,
    SinkRegistry,
)
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.controller.targets import KubeSource, TargetWatches
from goalkeeper.controller.telemetry import CheckSpans
from goalkeeper.controller.workqueue import WorkQueue

log = logging.getLogger("goalkeeper.operator")

LIST_PAGE = 500
WATCH_WORKERS = 1000
WATCH_WORKER_IDLE = 0.5
SINK_LIST_WAIT_SECONDS = 30.0


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf deep-copies every body it receives to diff it with the last handled one
    (a fifth of the event loop's time on the check path). Only change handlers
    (on.create, on.update, ...) use that diff, and goalkeeper registers none."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def api_client(pool: int = API_THREADS) -> Any:
    """KUBECONFIG (or ~/.kube/config) when present, in-cluster configuration otherwise,
    with `pool` connections: by default one for every call the reconciler may have in
    flight."""
    configuration = client.Configuration()
    try:
        # Read KUBECONFIG now: the client library's default was fixed when it was imported.
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    except config.ConfigException:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


def build_registry() -> kopf.OperatorRegistry:
    """kopf's handlers (approvals, ModelConfigs, sinks) and settings."""
    registry = kopf.OperatorRegistry()
    register(registry)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        # Without timeouts a watch can stall silently.
        settings.watching.server_timeout = 270
        settings.watching.client_timeout = 300
        settings.watching.connect_timeout = 30
        # Initial lists come in pages, and a burst of events runs on a bounded set of workers.
        settings.watching.chunk_size = LIST_PAGE
        settings.queueing.worker_limit = WATCH_WORKERS
        # A worker holds its slot while it idles: short, or a new object's first event
        # waits for a slot (kopf's 5 s made results wait up to 6 s with 50 busy monitors).
        settings.queueing.idle_timeout = WATCH_WORKER_IDLE
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.persistence.finalizer = f"{GROUP}/kopf-finalizer"

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.probe(id="leader", registry=registry)
    def leader(memo: Any, **_: Any) -> dict[str, Any]:
        state: Callable[[], dict[str, Any]] = memo.leadership
        return state()

    return registry


async def run_operator(
    settings: OperatorSettings,
    *,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
) -> None:
    api = api_client()
    # Built before any lease is taken: the client's API classes take seconds to set up on
    # a busy machine, and a leader that blocks its event loop that long cannot renew.
    kube = KubeApi(api)
    if settings.metricsPort:
        metrics.serve(settings.metricsPort, settings.listenAddress)
        log.info("metrics at http://%s:%d/metrics", settings.listenAddress, settings.metricsPort)
    if not settings.leaderElection:
        await _run_kopf(api, kube, settings, stop_flag, ready_flag, lambda: {"leader": True})
        return

    identity = settings.identity or socket.gethostname()
    elector = LeaderElector(
        api,
        name=settings.leaseName,
        namespace=settings.leaseNamespace,
        identity=identity,
        lease_seconds=settings.leaseSeconds,
    )
    # One stop for both phases: a signal while waiting, or one before kopf takes the
    # signals over, still stops the operator.
    stop = asyncio.Event()
    bridge = asyncio.create_task(_follow(stop_flag, stop)) if stop_flag is not None else None
    _stop_on_signals(stop)
    try:
        async with standby_health(settings.healthPort, elector.state, settings.listenAddress):
            if not await elector.acquire(stop):
                return
        metrics.set_leader(True)
        keeper = asyncio.create_task(elector.keep())
        try:
            await _run_kopf(api, kube, settings, stop, ready_flag, elector.state)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            metrics.set_leader(False)
            await elector.release()
    finally:
        if bridge is not None:
            bridge.cancel()


async def _run_kopf(
    api: Any,
    kube: KubeApi,
    settings: OperatorSettings,
    stop_flag: asyncio.Event | None,
    ready_flag: asyncio.Event | None,
    leadership: Callable[[], dict[str, Any]],
) -> None:
    cache = WatchCache(listed=False)
    # A target change names its monitor, like any other trigger.
    watches = TargetWatches(KubeSource(api), lambda namespace, name: queue.trigger(namespace, name))
    cluster_spec = settings.cluster_sink()
    sinks = SinkRegistry(Sink("", "", cluster_spec) if cluster_spec is not None else None)
    cached = CachedApi(kube, cache)
    notifier = Notifier(
        ClusterNotifyApi(cached, kube),
        sinks,
        HttpDelivery(),
        cluster_url=settings.notifyUrl.get_secret_value(),
    )
    spans = CheckSpans()
    if spans.enabled:
        log.info("traces: exported over OTLP; steps run with their check's TRACEPARENT")
    reconciler = Reconciler(cached, settings, wakes=watches, sinks=notifier, spans=spans)
    queue = WorkQueue(
        reconciler.reconcile,
        resync_seconds=settings.resyncSeconds,
        settled=reconciler.settled,
        on_error=metrics.record_error,
        on_retry=metrics.record_retry,
        record_refusal=reconciler.record_refusal,
        on_wait=watches.want,
        on_notices=notifier.poke,
    )
    if not settings.model:
        log.warning("GOALKEEPER_MODEL is not set: monitors will stop with that reason")
    log.info(
        "goalkeeper operator starting (%s%s; step image %s)",
        ", ".join(settings.namespaces) or "all namespaces",
        f"; the shard of Monitors labelled {settings.shardSelector}"
        if settings.shardSelector
        else "",
        settings.stepImage,
    )
    liveness = (
        f"http://{settings.listenAddress}:{settings.healthPort}/healthz"
        if settings.healthPort
        else None
    )
    resync = asyncio.get_running_loop().create_task(queue.resync_forever())
    # Of several shards one keeps the ModelConfigs' statuses, from every shard's Monitors.
    statuses = (
        asyncio.get_running_loop().create_task(
            keep_config_statuses(
                cache, kube, list_monitors=kube.list_monitors if settings.shardSelector else None
            )
        )
        if settings.modelConfigStatuses
        else None
    )
    # The sinks are known before the first decision, so none is made without its messages;
    # an API that does not answer soon is waited for in the background instead.
    listing = asyncio.get_running_loop().create_task(
        notifier.list_sinks(functools.partial(kube.list_notification_sinks, settings.namespaces))
    )
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(listing), SINK_LIST_WAIT_SECONDS)
    delivering = asyncio.get_running_loop().create_task(notifier.run())
    memo = kopf.Memo(
        queue=queue,
        cache=cache,
        leadership=leadership,
        notifier=notifier,
        shard=settings.shardSelector,
    )
    # Each own watch holds a connection per namespace for minutes: a pool of their own
    # leaves the reconciler's to its calls.
    streams = len(OWN_KINDS) * max(1, len(settings.namespaces))
    own = own_watches(api_client(streams), settings.namespaces, settings.shardSelector, memo)
    watching = asyncio.get_running_loop().create_task(_watch_all(own))
    try:
        await kopf.operator(
            registry=build_registry(),
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            standalone=True,
            memo=memo,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
            liveness_endpoint=liveness,
        )
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        resync.cancel()
        if statuses is not None:
            statuses.cancel()
        listing.cancel()
        delivering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await delivering
        await notifier.delivery_closed()
        spans.close()
        await queue.close()
        await watches.close()


# The kinds of the operator's own watches.
OWN_KINDS = (MONITOR, *LISTED_KINDS)


def own_watches(api: Any, namespaces: list[str], shard: str, memo: Any) -> list[ListWatch]:
    """The operator's own watches: Monitors (of `shard`, a label selector, when one is
    given), and their steps, Jobs and pods, whose lists ring the cache's `lists_in`."""
    cache: WatchCache = memo.cache
    # Only step Jobs and pods, not every Job and pod of the cluster; a shard's steps, Jobs
    # and pods carry their monitor's labels, so its selector narrows them alike.
    ours = f"{LABEL_STEP},{shard}" if shard else LABEL_STEP
    listed = _AllListed(len(LISTED_KINDS), cache.lists_in)
    return [
        ListWatch(
            monitor_source(api, shard),
            namespaces,
            functools.partial(on_monitor, memo),
            known=lambda: cache.keys(MONITOR),
        ),
        *(
            ListWatch(
                source,
                namespaces,
                functools.partial(handler, memo),
                known=functools.partial(cache.keys, kind),
                on_listed=listed.one,
            )
            for source, handler, kind in (
                (step_source(api, shard), on_step, STEP),
                (job_source(api, ours), on_job, JOB),
                (pod_source(api, ours), on_pod, POD),
            )
        ),
    ]


@dataclass
class _AllListed:
    """Calls `then` once `count` lists have said they are in."""

    count: int
    then: Callable[[], None]

    def one(self) -> None:
        self.count -= 1
        if self.count == 0:
            self.then()


async def _watch_all(watches: list[ListWatch]) -> None:
    await asyncio.gather(*(w.run() for w in watches))


async def _follow(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


def _stop_on_signals(stop: asyncio.Event) -> None:
    """SIGINT and SIGTERM set `stop` until kopf installs its own handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
