"""Which model a Monitor's steps use: a ModelConfig of its namespace, or the operator's.

A Monitor uses the ModelConfig its annotation `goalkeeper.dev/model-config` names; without
the annotation, the namespace's ModelConfig `default` when there is one; else the operator's
own settings. A named config that is missing or invalid is a problem the run waits on,
never a reason to fall back to another model and key. The spend of every Monitor through a
config is summed here for its status, which its spend cap is held against. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from goalkeeper.core.models import (
    CONFIG_USERS_KEPT,
    DEFAULT_MODEL_CONFIG,
    MODEL_CONFIG_ANNOTATION,
    ConfigUsage,
    ConfigUser,
    ModelConfigSpec,
    ModelConfigStatus,
    StepUsage,
)

Body = Mapping[str, Any]
# A monitor keeps its usage through this many configs; the oldest goes first.
USAGE_CONFIGS_KEPT = 8


@dataclass(frozen=True)
class ModelChoice:
    """The model a monitor's next step runs with. `name` is empty for the operator's own
    settings; `problem` says why the config named cannot be used; `spent_usd` is what every
    monitor spent through it, as its status last said."""

    name: str = ""
    spec: ModelConfigSpec | None = None
    problem: str = ""
    spent_usd: float = 0.0

    @property
    def cap_reached(self) -> bool:
        cap = self.spec.spendCapUsd if self.spec is not None else None
        return cap is not None and self.spent_usd >= cap


OPERATOR_SETTINGS = ModelChoice()


def config_name(annotations: Mapping[str, str] | None) -> tuple[str, bool]:
    """The ModelConfig a Monitor asks for, and whether its annotation names it."""
    named = (annotations or {}).get(MODEL_CONFIG_ANNOTATION, "").strip()
    return (named, True) if named else (DEFAULT_MODEL_CONFIG, False)


def choose(name: str, named: bool, namespace: str, found: Body | None) -> ModelChoice:
    """The choice for a Monitor of `namespace` asking for config `name` (`named`: by its
    annotation), given the config found under that name (None: there is none)."""
    if found is None:
        if not named:
            return OPERATOR_SETTINGS
        return ModelChoice(
            name,
            problem=f"ModelConfig {name}, named by annotation {MODEL_CONFIG_ANNOTATION}, does "
            f"not exist in namespace {namespace}; no step runs until it does or the annotation "
            "is removed.",
        )
    try:
        spec = ModelConfigSpec.model_validate(found.get("spec") or {})
    except ValidationError as error:
        where = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in error.errors(include_url=False)
        )
        return ModelChoice(name, problem=f"ModelConfig {name} is invalid: {where}")
    status = found.get("status") or {}
    try:
        spent = float(status.get("spendUsd") or 0)
    except (TypeError, ValueError):
        spent = 0.0
    return ModelChoice(name, spec, spent_usd=spent)


def model_string(spec: ModelConfigSpec) -> str:
    """The `provider:model` form the steps take."""
    return f"{spec.provider.value}:{spec.model}"


def add_usage(kept: list[ConfigUsage], config: str, usage: StepUsage) -> list[ConfigUsage]:
    """`kept` with one step's usage added to its config's entry (made last when new)."""
    entry = next((u for u in kept if u.config == config), None) or ConfigUsage(config=config)
    added = entry.model_copy(
        update={
            "requests": entry.requests + usage.requests,
            "inputTokens": entry.inputTokens + usage.inputTokens,
            "outputTokens": entry.outputTokens + usage.outputTokens,
            "costUsd": float(entry.costUsd) + float(usage.costUsd or 0),
        }
    )
    others = [u for u in kept if u.config != config]
    return [*others, added][-USAGE_CONFIGS_KEPT:]


def config_status(
    name: str,
    monitors: Iterable[Body],
    generation: int | None,
    previous: ModelConfigStatus | None = None,
) -> ModelConfigStatus:
    """A ModelConfig's status from the statuses of its namespace's Monitors: who spent
    what through it (a Monitor that moved to another config keeps its spend here), and
    what those listed in the `previous` status and deleted since had spent, so deleting a
    Monitor lowers no spend its cap is held against."""
    users: list[ConfigUser] = []
    listed: set[str] = set()
    for monitor in monitors:
        status = monitor.get("status") or {}
        for entry in status.get("usageByConfig") or []:
            if not isinstance(entry, Mapping) or entry.get("config") != name:
                continue
            try:
                used = ConfigUsage.model_validate(entry)
            except ValidationError:
                continue
            users.append(
                ConfigUser(
                    monitor=str((monitor.get("metadata") or {}).get("name")),
                    uid=str((monitor.get("metadata") or {}).get("uid") or ""),
                    costUsd=used.costUsd,
                    inputTokens=used.inputTokens,
                    outputTokens=used.outputTokens,
                )
            )
            listed.add(users[-1].monitor)
        # Using it now, before any usage through it is counted.
        meta = monitor.get("metadata") or {}
        who = str(meta.get("name"))
        if status.get("modelConfig") == name and who not in listed:
            users.append(ConfigUser(monitor=who, uid=str(meta.get("uid") or "")))
            listed.add(who)
    users.sort(key=lambda u: (-float(u.costUsd), u.monitor))
    retired = float(previous.retiredSpendUsd) if previous is not None else 0.0
    if previous is not None:
        live = {u.uid for u in users if u.uid}
        retired += sum(float(u.costUsd) for u in previous.monitors if u.uid and u.uid not in live)
    return ModelConfigStatus(
        monitors=users[:CONFIG_USERS_KEPT],
        monitorCount=len(users),
        spendUsd=round(retired + sum(float(u.costUsd) for u in users), 6),
        retiredSpendUsd=round(retired, 6),
        observedGeneration=generation,
    )
