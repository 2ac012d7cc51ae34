"""A namespace's objects at one moment, read as an admin, and what can be asked of them.

`take` lists every kind a Monitor, its steps or a scenario's workloads could create or
change there (Events, Leases, MonitorSteps and the endpoint objects of Services are left
out: they are goalkeeper's or the control plane's own). Secret values are kept only as
digests, so no key is held or printed. Everything but `take` is pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

Ref = tuple[str, str]  # (kind, name)


@dataclass(frozen=True)
class Kind:
    kind: str
    api_version: str
    plural: str

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"


KINDS = (
    Kind("ConfigMap", "v1", "configmaps"),
    Kind("Secret", "v1", "secrets"),
    Kind("Pod", "v1", "pods"),
    Kind("Service", "v1", "services"),
    Kind("ServiceAccount", "v1", "serviceaccounts"),
    Kind("PersistentVolumeClaim", "v1", "persistentvolumeclaims"),
    Kind("Deployment", "apps/v1", "deployments"),
    Kind("StatefulSet", "apps/v1", "statefulsets"),
    Kind("DaemonSet", "apps/v1", "daemonsets"),
    Kind("ReplicaSet", "apps/v1", "replicasets"),
    Kind("Job", "batch/v1", "jobs"),
    Kind("CronJob", "batch/v1", "cronjobs"),
    Kind("Role", "rbac.authorization.k8s.io/v1", "roles"),
    Kind("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings"),
    Kind("Monitor", "goalkeeper.dev/v1alpha1", "monitors"),
    Kind("MonitorApproval", "goalkeeper.dev/v1alpha1", "monitorapprovals"),
)


def ref_of(obj: dict[str, Any]) -> Ref:
    return str(obj["kind"]), str(obj["metadata"]["name"])


def uid_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("uid", ""))


def show(ref: Ref) -> str:
    return f"{ref[0]}/{ref[1]}"


@dataclass(frozen=True)
class Snapshot:
    """Objects of one namespace, each with `kind` and `apiVersion` set."""

    objects: tuple[dict[str, Any], ...] = ()
    _by_ref: dict[Ref, dict[str, Any]] = field(init=False, repr=False, compare=False)
    _by_uid: dict[str, dict[str, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_ref", {ref_of(o): o for o in self.objects})
        object.__setattr__(self, "_by_uid", {uid_of(o): o for o in self.objects})

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._by_ref.get((kind, name))

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        return self._by_uid.get(uid)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def uids(self) -> set[str]:
        return set(self._by_uid)

    def pods_of(self, kind: str, name: str, *more: Snapshot) -> list[dict[str, Any]]:
        """The pods whose owner chain reaches (kind, name); owners are looked up here and
        in `more` (a ReplicaSet gone since)."""
        return [p for p in self.of_kind("Pod") if (kind, name) in owners(p, self, *more)]


def owners(obj: dict[str, Any], *where: Snapshot) -> set[Ref]:
    """Every (kind, name) up the ownerReferences chain of `obj`; an owner not found in any
    snapshot still counts, by the kind and name its reference gives."""
    found: set[Ref] = set()
    seen: set[str] = set()
    todo = [obj]
    while todo:
        current = todo.pop()
        for ref in current["metadata"].get("ownerReferences") or []:
            found.add((str(ref.get("kind")), str(ref.get("name"))))
            uid = str(ref.get("uid", ""))
            if uid in seen:
                continue
            seen.add(uid)
            parent = next((s.by_uid(uid) for s in where if s.by_uid(uid) is not None), None)
            if parent is not None:
                todo.append(parent)
    return found


def _masked(obj: dict[str, Any]) -> dict[str, Any]:
    """A Secret with each value replaced by its digest: a change still shows, no value does."""
    if obj.get("kind") != "Secret":
        return obj
    for key in ("data", "stringData"):
        values = obj.get(key) or {}
        obj[key] = {k: hashlib.sha256(str(v).encode()).hexdigest()[:16] for k, v in values.items()}
    return obj


def _get(api: Any, path: str) -> dict[str, Any]:
    method, url, headers, body, post = api.param_serialize(
        method="GET",
        resource_path=path,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    data: dict[str, Any] = json.loads(response.read())
    return data


def list_kind(api: Any, namespace: str, kind: Kind) -> Iterator[dict[str, Any]]:
    listed = _get(api, f"{kind.prefix}/namespaces/{namespace}/{kind.plural}")
    for item in listed.get("items") or []:
        item["kind"], item["apiVersion"] = kind.kind, kind.api_version
        yield _masked(item)


def take(api: Any, namespace: str, kinds: Iterable[Kind] = KINDS) -> Snapshot:
    """The namespace's objects now, as an admin reads them."""
    return Snapshot(tuple(o for kind in kinds for o in list_kind(api, namespace, kind)))
