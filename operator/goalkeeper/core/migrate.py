"""Read every status an earlier version wrote. Pure: a dict in, a MonitorStatus out.

A status carries `schemaVersion` (absent before version 2). Each step below turns one
layout into the next; a status that still fails validation after them is salvaged by
giving up history that the next check writes anew (the last observation, earlier runs'
reports), and only a status that cannot be read even then is unreadable: the engine stops
that monitor with the reason (`engine.unreadable`), never leaves it silent.

Layouts:
1. (no `schemaVersion`) v0.1.0 and before: the health kept `loopActs` and
   `loopTargetStateId`, the model's own IDs; before that, the last repair was
   `repairGuard`.
2. The health keeps the engine's own brake (`brakeFingerprint`, `brakeActs`) instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from goalkeeper.core.models import STATUS_SCHEMA_VERSION, MonitorStatus

Raw = dict[str, Any]


def _from_1(raw: Raw) -> Raw:
    health = raw.get("health")
    if isinstance(health, dict):
        # The brake keys on what the engine saw, never on the model's IDs: start it afresh.
        raw["health"] = {
            k: v for k, v in health.items() if k not in ("loopActs", "loopTargetStateId")
        }
    if "repairGuard" in raw:
        guard = raw.pop("repairGuard")
        if isinstance(guard, dict) and not raw.get("repairsDone"):
            raw["repairsDone"] = [guard]
    return raw


# Layout n is turned into n + 1 by _STEPS[n].
_STEPS: dict[int, Callable[[Raw], Raw]] = {1: _from_1}
assert sorted(_STEPS) == list(range(1, STATUS_SCHEMA_VERSION)), "a step per earlier layout"

# History the next check writes anew, given up (in this order) before a status is unreadable.
_SALVAGE = ("lastObservation", "previousRuns", "lastAction", "report", "progress", "notices")


@dataclass(frozen=True)
class Read:
    """A status as read: `status` when it could be read, else `error` says why; `salvaged`
    names what was given up to read it. `newer` is the layout of a status a later version
    wrote (after a rollback): it is left as it is, neither read nor stopped, so rolling
    forward again carries the run on."""

    status: MonitorStatus | None
    error: str = ""
    salvaged: tuple[str, ...] = ()
    newer: int = 0


def migrate(found: Mapping[str, Any]) -> Raw:
    """`found` in the current layout (a copy; `found` is not changed)."""
    raw: Raw = dict(found)
    version = raw.get("schemaVersion", 1)
    if not isinstance(version, int) or version < 1:
        version = 1
    while version < STATUS_SCHEMA_VERSION:
        raw = _STEPS[version](raw)
        version += 1
    if raw:
        raw["schemaVersion"] = STATUS_SCHEMA_VERSION
    return raw


def read(found: Mapping[str, Any] | None, describe: Callable[[ValidationError], str]) -> Read:
    """The status in `found`, migrated, salvaged if it must be; `describe` words a
    validation error (the caller's, so no untrusted input reaches a log)."""
    written = (found or {}).get("schemaVersion")
    if isinstance(written, int) and written > STATUS_SCHEMA_VERSION:
        return Read(
            None,
            error=f"the status has layout {written}, written by a later goalkeeper version; "
            f"this one reads layouts up to {STATUS_SCHEMA_VERSION} and leaves it untouched",
            newer=written,
        )
    raw = migrate(found or {})
    try:
        return Read(MonitorStatus.model_validate(raw))
    except ValidationError as error:
        first = describe(error)
    given_up: list[str] = []
    for field in _SALVAGE:
        if field not in raw:
            continue
        raw.pop(field)
        given_up.append(field)
        try:
            return Read(MonitorStatus.model_validate(raw), salvaged=tuple(given_up))
        except ValidationError:
            continue
    return Read(None, error=first)


def count_of(found: Mapping[str, Any] | None, field: str) -> int:
    """A count (`stepSeq`, `checks`) an unreadable status recorded, or 0: kept so that no
    step name is used twice and the count carries on."""
    value = (found or {}).get(field)
    return value if isinstance(value, int) and 0 <= value <= 1_000_000 else 0


def merge_patch(found: Mapping[str, Any] | None, written: Mapping[str, Any]) -> Raw:
    """`written` as a JSON merge patch over `found`: every key `found` holds that `written`
    lacks is set to null, at any depth, so a key an earlier layout had (and a migration
    dropped) is removed from the stored status instead of surviving beside the new one."""
    patch: Raw = dict(written)
    for key, before in (found or {}).items():
        if key not in written:
            patch[key] = None
        elif isinstance(before, Mapping) and isinstance(written[key], Mapping):
            patch[key] = merge_patch(before, written[key])
    return patch
