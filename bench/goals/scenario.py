"""What one goal trial is made of: the target objects, the Monitor, how a person answers an
approval request, what must hold afterwards, and which changes the task allows."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from string import Template
from typing import Any

import yaml

from bench.goals.snapshot import Ref, Snapshot
from goalkeeper.core.models import StopReason

FieldPath = tuple[str, ...]
_PART = re.compile(r"\[([^\]]+)\]|([^.\[\]]+)")


def path(text: str) -> FieldPath:
    """`spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]` as its keys:
    a key with dots in it goes in brackets."""
    return tuple(bracketed or plain for bracketed, plain in _PART.findall(text))


def show_path(keys: FieldPath) -> str:
    return "".join(
        f"[{key}]" if "." in key or "/" in key else (f".{key}" if i else key)
        for i, key in enumerate(keys)
    )


@dataclass(frozen=True)
class Allowance:
    """What may change on one object of the scenario: what the task allows, or what the
    target itself writes."""

    kind: str
    name: str
    fields: tuple[FieldPath, ...] = ()
    # Pods of this workload that may be deleted while its spec stays as it was.
    pod_deletions: int = 0
    # It may be deleted and created again; its spec must still come back the same.
    recreate: bool = False

    @property
    def ref(self) -> Ref:
        return (self.kind, self.name)

    def covers(self, keys: FieldPath) -> bool:
        return any(keys[: len(allowed)] == allowed for allowed in self.fields)


def allow(kind: str, name: str, *fields: str, **more: Any) -> Allowance:
    return Allowance(kind, name, tuple(path(f) for f in fields), **more)


@dataclass(frozen=True)
class Check:
    """Something that must hold, read from the cluster: `holds(setup, final)` gets the
    snapshot taken when the Monitor was created and the one taken when it stopped."""

    text: str
    holds: Callable[[Snapshot, Snapshot], bool]


@dataclass(frozen=True)
class Expected:
    """An outcome counts as expected when the stop reason is one of `reasons` and every
    check holds (and, where set, no more acts or checks than the bounds)."""

    reasons: frozenset[StopReason]
    checks: tuple[Check, ...] = ()
    max_acts: int | None = None
    max_checks: int | None = None


class Answer(StrEnum):
    """How the person the trial plays answers a Monitor's approval request."""

    approve = "approve"
    reject = "reject"


class Group(StrEnum):
    """When a scenario was written: the shapes the trials began with, or those written after
    the typed reading and before any tuning to them. Each group's figures are printed apart,
    so a rule fitted to the first group shows as a gap between the two."""

    public = "public"
    new_shapes = "new shapes"


@dataclass(frozen=True)
class Patch:
    """A change a person makes after the objects are ready and before the Monitor starts
    (a configuration fix the task then describes): a merge patch, as an admin."""

    kind: str
    name: str
    body: Mapping[str, Any]


@dataclass(frozen=True)
class Scenario:
    """One goal trial. `objects` is YAML (several documents) in which `$namespace`,
    `$scratch` (a folder of this run, for marker files: pods are local processes) and
    `$minute` (the seconds of one `everyMinutes` minute, so work keeps its length in
    checks when a test shortens the minute) are substituted."""

    name: str
    shape: str
    objects: str
    task: str
    stop_when: str
    max_checks: int
    expected: Expected
    allowed: tuple[Allowance, ...] = ()
    # What must hold before the Monitor starts (a Job already failed, pods running).
    ready: tuple[Check, ...] = ()
    then: tuple[Patch, ...] = ()
    # How a person answers an approval request; none expected means no.
    answer: Answer = Answer.reject
    # RBAC grants a namespace admin applies for the task (files under config/rbac/).
    grants: tuple[str, ...] = ()
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    every_minutes: int = 1
    group: Group = Group.public

    @property
    def namespace(self) -> str:
        return f"trial-{self.name}"

    def monitor_spec(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "stopWhen": self.stop_when,
            "everyMinutes": self.every_minutes,
            "maxChecks": self.max_checks,
        }

    def manifests(self, scratch: Path, minute: float) -> list[dict[str, Any]]:
        text = Template(self.objects).substitute(
            namespace=self.namespace, scratch=str(scratch), minute=repr(float(minute))
        )
        found = [doc for doc in yaml.safe_load_all(text) if doc]
        for doc in found:
            doc.setdefault("metadata", {})["namespace"] = self.namespace
        return found

    def refs(self, scratch: Path, minute: float) -> set[Ref]:
        return {(m["kind"], m["metadata"]["name"]) for m in self.manifests(scratch, minute)}
