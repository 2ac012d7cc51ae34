"""Fakes and builders for agent step tests: an in-memory Kubernetes backend and step inputs."""

from __future__ import annotations

import copy
from typing import Any

from goalkeeper.core.models import StepInput
from goalkeeper.step.kube import KubeError
from goalkeeper.step.redact import LAST_APPLIED
from tests.support.observations import AUTHORIZED, action, contract, observation_dict

# Kind -> (plural, namespaced), what discovery answers for the kinds the tests use.
RESOURCES: dict[str, tuple[str, bool]] = {
    "ConfigMap": ("configmaps", True),
    "Deployment": ("deployments", True),
    "Job": ("jobs", True),
    "Namespace": ("namespaces", False),
    "Node": ("nodes", False),
    "Pod": ("pods", True),
    "ReplicaSet": ("replicasets", True),
    "Secret": ("secrets", True),
    "StatefulSet": ("statefulsets", True),
}


class FakeKube:
    """An in-memory stand-in for `goalkeeper.step.kube.KubeBackend`; records every call."""

    def __init__(self, objects: list[dict[str, Any]] | None = None) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.logs_text: dict[tuple[str, str], str] = {}
        self.events_items: list[dict[str, Any]] = []
        for obj in objects or []:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = copy.deepcopy(obj)

    def _find(self, kind: str, name: str, namespace: str | None) -> dict[str, Any]:
        key = (kind, namespace or "", name)
        if key not in self.objects:
            raise KubeError(404, f'HTTP 404: NotFound {kind.lower()}s "{name}" not found')
        return self.objects[key]

    def resource_info(self, api_version: str, kind: str) -> tuple[str, str, bool]:
        self.calls.append(("resource_info", (api_version, kind)))
        for real, (plural, namespaced) in RESOURCES.items():
            if kind.lower() in (real.lower(), plural):
                return real, plural, namespaced
        raise KubeError(404, f"no resource of kind {kind!r} in {api_version}")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> Any:
        self.calls.append(("get", (api_version, kind, name, namespace)))
        return copy.deepcopy(self._find(kind, name, namespace))

    def list(self, api_version: str, kind: str, namespace: str | None, **kw: Any) -> Any:
        self.calls.append(("list", (api_version, kind, namespace, kw)))
        items = [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self.objects.items())
            if k == kind and (namespace is None or ns == namespace)
        ]
        for item in items:
            item.pop("kind", None)  # list items come without kind, as from the API server
        return {"kind": f"{kind}List", "apiVersion": api_version, "items": items, "metadata": {}}

    def logs(self, name: str, namespace: str, **kw: Any) -> str:
        self.calls.append(("logs", (name, namespace, kw)))
        return self.logs_text.get((namespace, name), "")

    def events(self, namespace: str, *, kind: str | None, name: str) -> Any:
        self.calls.append(("events", (namespace, kind, name)))
        return {"items": [e for e in self.events_items if e["involvedObject"]["name"] == name]}

    def request_json(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append(("request", (method, path, kw)))
        return {"kind": "Status", "status": "Success", "method": method, "path": path}

    def apply(self, manifest: dict[str, Any], *, namespace: str | None, force: bool) -> Any:
        self.calls.append(("apply", (manifest, namespace, force)))
        obj = copy.deepcopy(manifest)
        obj["metadata"].setdefault("namespace", namespace)
        self.put(obj)
        return obj

    def create(self, manifest: dict[str, Any], *, namespace: str | None) -> Any:
        self.calls.append(("create", (manifest, namespace)))
        return self.apply(manifest, namespace=namespace, force=False)

    def replace(self, manifest: dict[str, Any], *, namespace: str | None) -> Any:
        self.calls.append(("replace", (manifest, namespace)))
        return self.apply(manifest, namespace=namespace, force=False)

    def patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Any, **kw: Any
    ) -> Any:
        self.calls.append(("patch", (api_version, kind, name, namespace, patch)))
        obj = self._find(kind, name, namespace)
        _merge(obj, patch)
        return copy.deepcopy(obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> Any:
        self.calls.append(("delete", (api_version, kind, name, namespace)))
        self._find(kind, name, namespace)
        del self.objects[(kind, namespace or "", name)]
        return {"status": "Success"}

    def writes(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Every write call, raw requests with a mutating method included."""
        return [
            c
            for c in self.calls
            if c[0] in ("apply", "create", "replace", "patch", "delete")
            or (c[0] == "request" and c[1][0] not in ("GET", "HEAD"))
        ]


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def deployment(name: str = "web", namespace: str = "shop", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": name}}}},
        "status": {
            "replicas": replicas,
            "readyReplicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
        },
    }


def secret(name: str = "db", namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {
                LAST_APPLIED: '{"data":{"password":"aHVudGVyMg=="}}',
            },
        },
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"token": "s3cr3t-token"},
    }


def config_map(name: str, data: dict[str, str], namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }


def pod(
    name: str, namespace: str = "shop", *, owner: tuple[str, str, str] | None = None
) -> dict[str, Any]:
    """A Pod; `owner` is the (apiVersion, kind, name) of its controller."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        api_version, kind, owner_name = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{owner_name}",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "example.invalid/x:1"}]},
        "status": {"phase": "Failed"},
    }


def failed_job(name: str = "export", *, ended: str = "Failed") -> dict[str, Any]:
    """A Job as the API server stores it once it ended: selector and labels it added."""
    uid = {"batch.kubernetes.io/controller-uid": "u-1", "controller-uid": "u-1"}
    made = {**uid, "batch.kubernetes.io/job-name": name, "job-name": name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": "u-1",
            "resourceVersion": "7",
            "labels": {"team": "billing", **made},
            "annotations": {"owner": "billing", "batch.kubernetes.io/job-tracking": ""},
        },
        "spec": {
            "backoffLimit": 0,
            "selector": {"matchLabels": uid},
            "template": {
                "metadata": {"labels": {"app": "export", **made}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "export", "image": "example.invalid/export:5"}],
                },
            },
        },
        "status": {"failed": 1, "conditions": [{"type": ended, "status": "True"}]},
    }


def step_input(kind: str = "observe", **overrides: Any) -> StepInput:
    body: dict[str, Any] = {
        "kind": kind,
        "check": 3,
        "maxChecks": 50,
        "task": "Keep Deployment web in namespace shop serving with 2 replicas.",
        "stopWhen": "Stop when the user asks.",
    }
    if kind in ("act", "repair"):
        body["action"] = action(
            action="Scale Deployment web to 2 replicas.",
            mutationSet=["deployments/web"],
            authorizedActionId="resume-build",
        )
        body["contract"] = contract()
        body["authorizedActions"] = AUTHORIZED
    body.update(overrides)
    return StepInput.model_validate(body)


__all__ = [
    "FakeKube",
    "config_map",
    "deployment",
    "failed_job",
    "observation_dict",
    "pod",
    "secret",
    "step_input",
]
