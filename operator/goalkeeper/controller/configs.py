"""ModelConfig statuses: who spent what through each config, from the Monitors' statuses.

A pass reads only the watch cache, only of namespaces where a Monitor or a ModelConfig
changed since the last pass, and writes a status only where it changed: waiting Monitors
cost it nothing, and a config whose spend moved one write.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from goalkeeper.controller.api import Api, ApiError
from goalkeeper.controller.cache import MODEL_CONFIG, MONITOR, WatchCache
from goalkeeper.core.modelconfig import config_status
from goalkeeper.core.models import ModelConfigStatus

log = logging.getLogger("goalkeeper.configs")

Body = dict[str, Any]
# How often the statuses are brought up to date.
REFRESH_SECONDS = 10.0


# Every Monitor of a namespace, read from the API server (a shard's cache holds only its own).
ListMonitors = Callable[[str], Awaitable[list[Body]]]


async def refresh_config_statuses(
    cache: WatchCache, api: Api, list_monitors: ListMonitors | None = None
) -> int:
    """Write the status of every ModelConfig whose users or spend changed; the number
    written. A refused write is logged and tried again on the next pass. With
    `list_monitors` (a shard) the namespace's Monitors are listed, every shard's, so the
    shards write the same status rather than each its own part."""
    due = cache.take_configs_due()
    configs = [key for key in cache.keys(MODEL_CONFIG) if key[0] in due]
    namespaces = {namespace for namespace, _ in configs}
    monitors: dict[str, list[Body]] = defaultdict(list)
    if list_monitors is not None:
        for namespace in sorted(namespaces):
            try:
                monitors[namespace] = await list_monitors(namespace)
            except ApiError as error:
                log.warning("%s: could not list the Monitors: %s", namespace, error)
                cache.config_due(namespace)
                configs = [key for key in configs if key[0] != namespace]
    else:
        for namespace, name in cache.keys(MONITOR):
            if namespace in namespaces:
                found = cache.get(MONITOR, namespace, name)
                if found is not None:
                    monitors[namespace].append(found)
    written = 0
    for namespace, name in configs:
        body = cache.get(MODEL_CONFIG, namespace, name)
        if body is None:
            continue
        generation = (body.get("metadata") or {}).get("generation")
        try:
            previous = ModelConfigStatus.model_validate(body.get("status") or {})
        except ValidationError:
            previous = None
        fresh = config_status(name, monitors[namespace], generation, previous)
        wanted = fresh.model_dump(mode="json")
        if body.get("status") == wanted:
            continue
        try:
            await api.patch_model_config_status(namespace, name, wanted)
        except ApiError as error:
            log.warning(
                "%s/%s: could not write the ModelConfig's status: %s", namespace, name, error
            )
            cache.config_due(namespace)  # the next pass tries again
            continue
        written += 1
    return written


async def keep_config_statuses(
    cache: WatchCache,
    api: Api,
    interval: float = REFRESH_SECONDS,
    list_monitors: ListMonitors | None = None,
) -> None:
    while True:
        await asyncio.sleep(interval)
        await refresh_config_statuses(cache, api, list_monitors)
