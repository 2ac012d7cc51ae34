"""The step's Kubernetes access: client config, a small REST backend, and its MonitorStep.

The backend speaks the Kubernetes REST API through the official client's `ApiClient`
(authentication, TLS and proxies come from the client config), resolving kinds to
resources with the discovery endpoints. It knows nothing about models or prompts; the
tools decide what is allowed and format what comes back.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

GROUP = "goalkeeper.dev"
VERSION = "v1alpha1"
STEP_PLURAL = "monitorsteps"
FIELD_MANAGER = "goalkeeper-step"
# The act tools' writes: a field the object does not have is an error, not dropped with a
# warning (seen: a small model "set spec.maxReplicas" on a Deployment and reported success).
WRITE_QUERY = {"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"}


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status (0 when none came back)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def load_api_client() -> client.ApiClient:
    """`KUBECONFIG` when set, in-cluster config otherwise."""
    cfg = client.Configuration()
    kubeconfig = os.environ.get("KUBECONFIG", "").strip()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration=cfg)


class KubeBackend:
    """Kubernetes REST calls returning parsed JSON (or text for logs)."""

    def __init__(self, api: client.ApiClient, *, timeout: float = 30.0) -> None:
        self.api = api
        self.timeout = timeout
        self._resources: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    # --- low level -----------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str = "application/json",
    ) -> tuple[int, bytes]:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        method_, url, headers_, body_, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(
                method_,
                url,
                header_params=headers_,
                body=body_,
                post_params=post,
                _request_timeout=self.timeout,
            )
            data = response.read() or b""  # type: ignore[no-untyped-call]
            status = int(response.status)
        except ApiException as exc:
            raise KubeError(int(exc.status or 0), str(exc.reason or exc)) from None
        except Exception as exc:  # connection problems and the like
            raise KubeError(0, f"{type(exc).__name__}: {exc}") from None
        if status >= 400:
            raise KubeError(status, _error_message(status, data))
        return status, data

    def request_json(self, method: str, path: str, **kwargs: Any) -> Any:
        _, data = self.request(method, path, **kwargs)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    # --- discovery -----------------------------------------------------------------------

    def _group_resources(self, api_version: str) -> list[dict[str, Any]]:
        with self._lock:
            if api_version not in self._resources:
                path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
                doc = self.request_json("GET", path)
                self._resources[api_version] = list((doc or {}).get("resources", []))
            return self._resources[api_version]

    def _resource(self, api_version: str, kind: str) -> dict[str, Any]:
        wanted = kind.strip()
        for res in self._group_resources(api_version):
            if "/" in res.get("name", ""):
                continue
            if wanted in (res.get("kind"), res.get("name"), res.get("singularName")) or (
                wanted.lower() in (res.get("kind", "").lower(), *res.get("shortNames", []))
            ):
                return res
        raise KubeError(404, f"no resource of kind {kind!r} in {api_version}")

    def resource_for(self, api_version: str, kind: str) -> tuple[str, bool]:
        """The plural resource name and whether it is namespaced, for a kind (or plural)."""
        res = self._resource(api_version, kind)
        return str(res["name"]), bool(res.get("namespaced"))

    def resource_info(self, api_version: str, kind: str) -> tuple[str, str, bool]:
        """The Kind, the plural and whether it is namespaced, for a kind (or plural)."""
        res = self._resource(api_version, kind)
        return str(res.get("kind") or kind), str(res["name"]), bool(res.get("namespaced"))

    def path_for(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        plural, namespaced = self.resource_for(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        parts = [base]
        if namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(plural)
        if name:
            parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
        return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))

    # --- reads ---------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> Any:
        return self.request_json(
            "GET", self.path_for(api_version, kind, namespace=namespace, name=name)
        )

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
    ) -> Any:
        return self.request_json(
            "GET",
            self.path_for(api_version, kind, namespace=namespace),
            query={
                "labelSelector": label_selector or None,
                "fieldSelector": field_selector or None,
                "limit": limit,
            },
        )

    def logs(
        self,
        name: str,
        namespace: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
        previous: bool = False,
    ) -> str:
        _, data = self.request(
            "GET",
            f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/log",
            query={
                "container": container or None,
                "tailLines": tail_lines,
                "limitBytes": limit_bytes,
                "previous": "true" if previous else None,
            },
            accept="*/*",
        )
        return data.decode("utf-8", "replace")

    def events(self, namespace: str, *, kind: str | None, name: str) -> Any:
        selector = f"involvedObject.name={name}"
        if kind:
            selector += f",involvedObject.kind={kind}"
        return self.request_json(
            "GET",
            f"/api/v1/namespaces/{quote(namespace, safe='')}/events",
            query={"fieldSelector": selector},
        )

    # --- writes --------------------------------------------------------------------------

    def apply(self, manifest: dict[str, Any], *, namespace: str | None, force: bool) -> Any:
        meta = manifest.get("metadata") or {}
        ns = meta.get("namespace") or namespace
        path = self.path_for(
            str(manifest.get("apiVersion")),
            str(manifest.get("kind")),
            namespace=ns,
            name=str(meta.get("name")),
        )
        return self.request_json(
            "PATCH",
            path,
            query={**WRITE_QUERY, "force": "true" if force else None},
            body=manifest,
            content_type="application/apply-patch+yaml",
        )

    def create(self, manifest: dict[str, Any], *, namespace: str | None) -> Any:
        meta = manifest.get("metadata") or {}
        ns = meta.get("namespace") or namespace
        path = self.path_for(
            str(manifest.get("apiVersion")), str(manifest.get("kind")), namespace=ns
        )
        return self.request_json("POST", path, query=WRITE_QUERY, body=manifest)

    def replace(self, manifest: dict[str, Any], *, namespace: str | None) -> Any:
        meta = manifest.get("metadata") or {}
        ns = meta.get("namespace") or namespace
        path = self.path_for(
            str(manifest.get("apiVersion")),
            str(manifest.get("kind")),
            namespace=ns,
            name=str(meta.get("name")),
        )
        return self.request_json("PUT", path, query=WRITE_QUERY, body=manifest)

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> Any:
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[patch_type]
        return self.request_json(
            "PATCH",
            self.path_for(
                api_version, kind, namespace=namespace, name=name, subresource=subresource
            ),
            query=WRITE_QUERY,
            body=patch,
            content_type=content_type,
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> Any:
        # Background propagation: dependents go too (a Job's default would orphan its pods),
        # and the name is free at once, so a restart can create the object again.
        return self.request_json(
            "DELETE",
            self.path_for(api_version, kind, namespace=namespace, name=name),
            body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
        )


def _error_message(status: int, data: bytes) -> str:
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and doc.get("message"):
            return f"HTTP {status}: {doc.get('reason', '')} {doc['message']}".strip()
    except ValueError:
        pass
    return f"HTTP {status}: {data[:500].decode('utf-8', 'replace')}"


# --- the MonitorStep this process runs ---------------------------------------------------


def step_path(namespace: str, name: str, *, status: bool = False) -> str:
    path = (
        f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/"
        f"{STEP_PLURAL}/{quote(name, safe='')}"
    )
    return path + "/status" if status else path


def read_step(backend: KubeBackend, namespace: str, name: str) -> dict[str, Any]:
    doc = backend.request_json("GET", step_path(namespace, name))
    if not isinstance(doc, dict):
        raise KubeError(0, "the MonitorStep answer is not an object")
    return doc


def patch_step_status(
    backend: KubeBackend, namespace: str, name: str, status: dict[str, Any]
) -> Any:
    return backend.request_json(
        "PATCH",
        step_path(namespace, name, status=True),
        query={"fieldManager": FIELD_MANAGER},
        body={"status": status},
        content_type="application/merge-patch+json",
    )


# --- through an API server that is restarting, overloaded or briefly away ------------------

# The admission plugins of an API server that has just started refuse every request with
# this until their policies are loaded.
NOT_READY = "not yet ready to handle request"
# The step-results admission policy's refusal of a second write (config/admission).
FINAL_REFUSAL = "result is final"
PAUSE_FIRST = 0.25
PAUSE_MAX = 2.0
# An API server that has just started serves requests before its authorizer has loaded
# the roles and bindings, and refuses them with RBAC's own 403 for a moment: such a refusal
# is tried again for this long, then stands (a role really missing fails that much later).
RBAC_DENIED = re.compile(r'is forbidden: User ".*" cannot \S+ resource')
RBAC_WARMUP = 20.0

T = TypeVar("T")


def transient(error: KubeError) -> bool:
    """Whether a failed call may succeed when made again: no answer at all (connection
    refused or reset, a timeout), 429, a 5xx, or admission that is not ready yet."""
    status = error.status
    return status in (0, 429) or status >= 500 or (status == 403 and NOT_READY in str(error))


def retry_pause(attempt: int) -> float:
    """Seconds before try `attempt + 1`: doubling from PAUSE_FIRST, at most PAUSE_MAX."""
    return float(min(PAUSE_FIRST * 2.0**attempt, PAUSE_MAX))


def rbac_denied(error: KubeError) -> bool:
    """Whether a 403 is RBAC's refusal (not an admission policy's)."""
    return error.status == 403 and RBAC_DENIED.search(str(error)) is not None


def retrying(
    call: Callable[[], T],
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, KubeError, float], None] | None = None,
    warmup: float = RBAC_WARMUP,
) -> T:
    """`call()`, made again after a growing pause while it fails transiently (or RBAC has
    refused it for less than `warmup` seconds) and the next try still starts before
    `deadline` (a `clock` value); the last error otherwise."""
    attempt = 0
    denied_since: float | None = None
    while True:
        try:
            return call()
        except KubeError as exc:
            pause = retry_pause(attempt)
            now = clock()
            again = transient(exc)
            if not again and rbac_denied(exc):
                denied_since = now if denied_since is None else denied_since
                again = now - denied_since < warmup
            if not again or now + pause > deadline:
                raise
            attempt += 1
            if on_retry is not None:
                on_retry(attempt, exc, pause)
            sleep(pause)


def same_result(current: dict[str, Any], sent: dict[str, Any]) -> bool:
    """Whether the status `current` is the final status `sent`: this pod's write of it got
    through, though its answer did not come back."""
    keys = ("phase", "pod", "result", "error", "errorKind", "finishedAt")
    return all(current.get(key) == sent.get(key) for key in keys)


def write_step_status(
    backend: KubeBackend,
    namespace: str,
    name: str,
    status: dict[str, Any],
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, KubeError, float], None] | None = None,
    warmup: float = RBAC_WARMUP,
) -> None:
    """Write the step's final status, through transient failures until `deadline`.

    Idempotent: when the API server refuses the write because the result is already
    final, the status it holds is read; the same status (an earlier try of this write that
    got through) is success, a different one is refused as before.
    """

    def attempt() -> None:
        patch_step_status(backend, namespace, name, status)

    def again(call: Callable[[], T]) -> T:
        return retrying(
            call, deadline=deadline, clock=clock, sleep=sleep, on_retry=on_retry, warmup=warmup
        )

    try:
        again(attempt)
    except KubeError as exc:
        if exc.status != 403 or FINAL_REFUSAL not in str(exc):
            raise
        held = again(lambda: read_step(backend, namespace, name)).get("status") or {}
        if not isinstance(held, dict) or not same_result(held, status):
            raise


__all__ = [
    "FIELD_MANAGER",
    "GROUP",
    "STEP_PLURAL",
    "VERSION",
    "KubeBackend",
    "KubeError",
    "load_api_client",
    "patch_step_status",
    "read_step",
    "retrying",
    "step_path",
    "transient",
    "write_step_status",
]
