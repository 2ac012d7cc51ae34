"""Running the operator: kopf with goalkeeper's handlers, settings and client."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import kopf
from kubernetes import client, config

from goalkeeper.controller.handlers import register
from goalkeeper.controller.manifests import GROUP
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings

log = logging.getLogger("goalkeeper.operator")


def api_client() -> Any:
    """KUBECONFIG (or ~/.kube/config) when present, in-cluster configuration otherwise."""
    try:
        # Read KUBECONFIG now: the client library's default was fixed when it was imported.
        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=os.environ.get("KUBECONFIG")
        )
    except config.ConfigException:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.ApiClient()


def build_registry() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    register(registry)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        # Without timeouts a watch can stall silently.
        settings.watching.server_timeout = 270
        settings.watching.client_timeout = 300
        settings.watching.connect_timeout = 30
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
        settings.persistence.finalizer = f"{GROUP}/kopf-finalizer"

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    return registry


async def run_operator(
    settings: OperatorSettings,
    *,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
) -> None:
    reconciler = Reconciler(api_client(), settings)
    if not settings.model:
        log.warning("GOALKEEPER_MODEL is not set: monitors will stop with that reason")
    log.info(
        "goalkeeper operator starting (%s; step image %s)",
        ", ".join(settings.namespaces) or "all namespaces",
        settings.stepImage,
    )
    await kopf.operator(
        registry=build_registry(),
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        standalone=True,
        memo=kopf.Memo(reconciler=reconciler),
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
