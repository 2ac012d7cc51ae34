"""The Kubernetes calls the reconciler makes, with their errors typed once.

Every call runs in a worker thread (the client is synchronous) and answers the API's own
JSON as plain dicts. Failures become one of a few exceptions, so the reconciler and the
work queue decide by kind, never by status code: `NotFound`, `Conflict` (a stale
resourceVersion), `AlreadyExists`, `Transient` (5xx, 429, timeouts, dropped connections:
worth a retry) and `Permanent` (any other refusal: retrying the same request cannot help).
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import json
import socket
import ssl
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from goalkeeper.controller.manifests import (
    GROUP,
    LABEL_MONITOR,
    LABEL_SEQ,
    VERSION,
    label_value,
    owned_by,
)
from goalkeeper.core.permissions import Author, Permission

Body = dict[str, Any]


class ApiError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class AlreadyExists(ApiError):
    pass


class Transient(ApiError):
    """Worth retrying; `retry_after` is the server's own hint in seconds, when it gave one."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message, status)
        self.retry_after = retry_after


class Permanent(ApiError):
    pass


# Pauses before the in-place retries of one call; a longer Retry-After goes to the queue.
CALL_RETRY_PAUSES = (0.1, 0.3)
IN_PLACE_WAIT_MAX = 2.0

_NETWORK_ERRORS = (
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
    socket.timeout,
    ssl.SSLError,
)


def typed(error: BaseException, what: str) -> ApiError:
    """The typed form of a client error raised while doing `what`."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, ApiException):
        status = int(error.status or 0)
        message = f"{what}: {status} {error.reason or ''}".strip()
        if status == 404:
            return NotFound(message, status)
        if status == 409:
            reason = _reason(error)
            return (AlreadyExists if reason == "AlreadyExists" else Conflict)(message, status)
        if status == 429 or status >= 500 or status == 0:
            return Transient(message, status, _retry_after(error))
        # The server's own words name what refused (a role, a policy, a field).
        said = server_message(error)
        return Permanent(f"{message}: {said}" if said else message, status)
    if isinstance(error, _NETWORK_ERRORS):
        return Transient(f"{what}: {type(error).__name__}: {error}")
    raise error


def _reason(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("reason") or "")
    except (ValueError, AttributeError):
        return ""


def server_message(error: ApiException) -> str:
    """The API server's own words in a refusal (a role, a policy, a field), cut short."""
    try:
        return str(json.loads(error.body or "{}").get("message") or "")[:500]
    except (ValueError, AttributeError):
        return ""


def _retry_after(error: ApiException) -> float | None:
    headers = error.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _pause_before_retry(failure: ApiError, attempt: int) -> float | None:
    """Seconds to wait before retrying a call in place, or None to give up here (the work
    queue then retries the whole reconcile, later)."""
    if not isinstance(failure, Transient) or attempt >= len(CALL_RETRY_PAUSES):
        return None
    hint = failure.retry_after or 0.0
    if hint > IN_PLACE_WAIT_MAX:
        return None
    return max(CALL_RETRY_PAUSES[attempt], hint)


class Api(Protocol):
    """What the reconciler needs of the cluster; a fake implements it in unit tests.

    A read with `fresh=True` must come from the API server itself: a caching
    implementation (see cache.py) may answer the others from what its watches showed.
    """

    async def get_monitor(self, namespace: str, name: str, fresh: bool = False) -> Body: ...
    async def patch_monitor_status(
        self, namespace: str, name: str, resource_version: str, status: Body
    ) -> Body: ...
    async def get_step(self, namespace: str, name: str, fresh: bool = False) -> Body: ...
    async def create_step(self, namespace: str, body: Body) -> Body: ...
    async def annotate_step(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> Body: ...
    async def label_step(
        self, namespace: str, name: str, labels: dict[str, str | None]
    ) -> Body: ...
    async def step_history(
        self, namespace: str, monitor: str, uid: str, fresh: bool = False
    ) -> dict[int, str]: ...
    async def delete_steps(
        self, namespace: str, monitor: str, uid: str, seqs: list[int]
    ) -> None: ...
    async def get_job(self, namespace: str, name: str, fresh: bool = False) -> Body: ...
    async def create_job(self, namespace: str, body: Body) -> Body: ...
    async def get_pod(self, namespace: str, name: str, fresh: bool = False) -> Body: ...
    async def list_job_pods(self, namespace: str, job_uid: str) -> list[Body]: ...
    async def get_event(self, namespace: str, name: str) -> Body: ...
    async def create_event(self, namespace: str, body: Body) -> Body: ...
    async def get_service_account(self, namespace: str, name: str) -> Body: ...
    async def get_config_map(self, namespace: str, name: str) -> Body: ...
    async def get_model_config(self, namespace: str, name: str) -> Body: ...
    async def patch_model_config_status(self, namespace: str, name: str, status: Body) -> Body: ...
    async def list_approvals(self, namespace: str) -> list[Body]: ...
    async def review_access(self, author: Author, permission: Permission) -> bool: ...


class AccessReviews(Protocol):
    """Whether a user may do something, as the API server's authorizers decide; a fake
    answers in unit tests."""

    async def review_access(self, author: Author, permission: Permission) -> bool: ...


async def denied_permissions(
    reviews: AccessReviews, author: Author, permissions: Sequence[Permission]
) -> tuple[Permission, ...]:
    """Those of `permissions` that `author` does not hold, in order, all asked at once."""
    answers = await asyncio.gather(
        *(reviews.review_access(author, permission) for permission in permissions)
    )
    return tuple(p for p, allowed in zip(permissions, answers, strict=True) if not allowed)


# The label the Job controller puts on each pod of a Job: the Job's uid.
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"

# Calls in flight at once; the client's connection pool is sized to match (run.py).
API_THREADS = 16


def owned_steps(listed: list[Body], monitor_uid: str) -> dict[int, str]:
    """seq -> name of the MonitorSteps in `listed` that `monitor_uid` owns."""
    history: dict[int, str] = {}
    for step in listed:
        seq = (step.get("spec") or {}).get("seq")
        if isinstance(seq, int) and owned_by(step, monitor_uid):
            history[seq] = step["metadata"]["name"]
    return history


class KubeApi:
    """`Api` over the official client, reading the API's JSON as it comes: no typed models
    built and taken apart again for every answer."""

    def __init__(self, api_client: Any) -> None:
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)
        self.authorization: Any = client.AuthorizationV1Api(api_client)
        self._threads = ThreadPoolExecutor(API_THREADS, thread_name_prefix="kube-api")

    async def _call(self, what: str, call: Callable[[], Any]) -> Body:
        """One API call, retried in place a few times on a transient failure: every call
        here is safe to repeat (reads, creates whose AlreadyExists the caller handles,
        writes guarded by a resourceVersion, an annotation merge that sets the same values
        again), and a reconcile that needs many calls in a row should not start over for
        one dropped connection."""
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                answer = await loop.run_in_executor(self._threads, _read_json, call)
            except Exception as error:  # every client failure leaves here typed
                failure = typed(error, what)
                pause = _pause_before_retry(failure, attempt)
                if pause is None:
                    raise failure from error
                await asyncio.sleep(pause)
                attempt += 1
                continue
            return answer

    async def list_monitors(self, namespace: str) -> list[Body]:
        """Every Monitor of `namespace`, every shard's: a shard's ModelConfig statuses
        count the spend of all of them, not only of those its own watch shows."""
        listed = await self._call(
            f"list the Monitors of {namespace}",
            lambda: self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "monitors", _preload_content=False
            ),
        )
        return list(listed.get("items") or [])

    async def get_monitor(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._call(
            f"read Monitor {namespace}/{name}",
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "monitors", name, _preload_content=False
            ),
        )

    async def patch_monitor_status(
        self, namespace: str, name: str, resource_version: str, status: Body
    ) -> Body:
        body = {"metadata": {"resourceVersion": resource_version}, "status": status}
        return await self._call(
            f"write the status of Monitor {namespace}/{name}",
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                "monitors",
                name,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
            ),
        )

    async def get_step(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._call(
            f"read MonitorStep {namespace}/{name}",
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "monitorsteps", name, _preload_content=False
            ),
        )

    async def create_step(self, namespace: str, body: Body) -> Body:
        return await self._call(
            f"create MonitorStep {namespace}/{body['metadata']['name']}",
            lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "monitorsteps", body, _preload_content=False
            ),
        )

    async def annotate_step(self, namespace: str, name: str, annotations: dict[str, str]) -> Body:
        """Merge `annotations` into a MonitorStep's metadata."""
        return await self._patch_step_metadata(
            namespace, name, "annotate", {"annotations": annotations}
        )

    async def label_step(self, namespace: str, name: str, labels: dict[str, str | None]) -> Body:
        """Set (None: remove) a MonitorStep's labels."""
        return await self._patch_step_metadata(namespace, name, "label", {"labels": labels})

    async def _patch_step_metadata(
        self, namespace: str, name: str, verb: str, metadata: Body
    ) -> Body:
        """A merge patch of a MonitorStep's metadata: of the object itself, never its status
        (the step's pod owns that)."""
        body = {"metadata": metadata}
        return await self._call(
            f"{verb} MonitorStep {namespace}/{name}",
            lambda: self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "monitorsteps",
                name,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
            ),
        )

    async def step_history(
        self, namespace: str, monitor: str, uid: str, fresh: bool = False
    ) -> dict[int, str]:
        listed = await self._call(
            f"list the MonitorSteps of {namespace}/{monitor}",
            lambda: self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "monitorsteps",
                label_selector=f"{LABEL_MONITOR}={label_value(monitor)}",
                _preload_content=False,
            ),
        )
        return owned_steps(list(listed.get("items") or []), uid)

    async def delete_steps(self, namespace: str, monitor: str, uid: str, seqs: list[int]) -> None:
        # One request for the batch; the seq label picks them, the monitor label scopes it.
        listed = ",".join(map(str, seqs))
        selector = f"{LABEL_MONITOR}={label_value(monitor)},{LABEL_SEQ} in ({listed})"
        await self._call(
            f"delete MonitorSteps {listed} of {namespace}/{monitor}",
            lambda: self.custom.delete_collection_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "monitorsteps",
                label_selector=selector,
                propagation_policy="Background",
                _preload_content=False,
            ),
        )

    async def get_job(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._call(
            f"read Job {namespace}/{name}",
            lambda: self.batch.read_namespaced_job(name, namespace, _preload_content=False),
        )

    async def create_job(self, namespace: str, body: Body) -> Body:
        return await self._call(
            f"create Job {namespace}/{body['metadata']['name']}",
            lambda: self.batch.create_namespaced_job(namespace, body, _preload_content=False),
        )

    async def get_pod(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._call(
            f"read Pod {namespace}/{name}",
            lambda: self.core.read_namespaced_pod(name, namespace, _preload_content=False),
        )

    async def list_job_pods(self, namespace: str, job_uid: str) -> list[Body]:
        listed = await self._call(
            f"list the pods of Job uid {job_uid} in {namespace}",
            lambda: self.core.list_namespaced_pod(
                namespace,
                label_selector=f"{JOB_UID_LABEL}={job_uid}",
                _preload_content=False,
            ),
        )
        return list(listed.get("items") or [])

    async def get_event(self, namespace: str, name: str) -> Body:
        return await self._call(
            f"read Event {namespace}/{name}",
            lambda: self.core.read_namespaced_event(name, namespace, _preload_content=False),
        )

    async def create_event(self, namespace: str, body: Body) -> Body:
        return await self._call(
            f"create Event {namespace}/{body['metadata']['name']}",
            lambda: self.core.create_namespaced_event(namespace, body, _preload_content=False),
        )

    async def get_service_account(self, namespace: str, name: str) -> Body:
        return await self._call(
            f"read ServiceAccount {namespace}/{name}",
            lambda: self.core.read_namespaced_service_account(
                name, namespace, _preload_content=False
            ),
        )

    async def get_config_map(self, namespace: str, name: str) -> Body:
        return await self._call(
            f"read ConfigMap {namespace}/{name}",
            lambda: self.core.read_namespaced_config_map(name, namespace, _preload_content=False),
        )

    async def get_model_config(self, namespace: str, name: str) -> Body:
        return await self._call(
            f"read ModelConfig {namespace}/{name}",
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "modelconfigs", name, _preload_content=False
            ),
        )

    async def patch_model_config_status(self, namespace: str, name: str, status: Body) -> Body:
        return await self._call(
            f"write the status of ModelConfig {namespace}/{name}",
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                "modelconfigs",
                name,
                {"status": status},
                _preload_content=False,
            ),
        )

    async def get_secret(self, namespace: str, name: str) -> Body:
        # The error names the Secret, never its data; its body goes nowhere but the caller.
        return await self._call(
            f"read Secret {namespace}/{name}",
            lambda: self.core.read_namespaced_secret(name, namespace, _preload_content=False),
        )

    async def list_notification_sinks(self, namespaces: Sequence[str] = ()) -> list[Body]:
        """Every NotificationSink, or those of `namespaces` (an operator limited to them
        may list no other)."""
        if not namespaces:
            listed = await self._call(
                "list the NotificationSinks",
                lambda: self.custom.list_cluster_custom_object(
                    GROUP, VERSION, "notificationsinks", _preload_content=False
                ),
            )
            return list(listed.get("items") or [])
        found: list[Body] = []
        for namespace in namespaces:
            listed = await self._call(
                f"list the NotificationSinks of {namespace}",
                functools.partial(
                    self.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    "notificationsinks",
                    _preload_content=False,
                ),
            )
            found.extend(listed.get("items") or [])
        return found

    async def record_delivered(
        self, namespace: str, name: str, uid: str, sink: str, seq: int
    ) -> None:
        """Record that `sink` received this Monitor's messages up to `seq`: one key set by a
        JSON patch whose first operation tests the uid, so a Monitor recreated under the
        name refuses it (422); a status subresource ignores a uid in a merge patch."""
        key = sink.replace("~", "~0").replace("/", "~1")
        body = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "add", "path": f"/status/notices/delivered/{key}", "value": seq},
        ]
        await self._call(
            f"record notifications delivered of Monitor {namespace}/{name}",
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                "monitors",
                name,
                body,
                _content_type="application/json-patch+json",
                _preload_content=False,
            ),
        )

    async def patch_sink_status(self, namespace: str, name: str, status: Body) -> None:
        await self._call(
            f"write the status of NotificationSink {namespace}/{name}",
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                "notificationsinks",
                name,
                {"status": status},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            ),
        )

    async def list_approvals(self, namespace: str) -> list[Body]:
        # Read only while a monitor awaits an answer; they are few, and kept as a record.
        listed = await self._call(
            f"list the MonitorApprovals of {namespace}",
            lambda: self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "monitorapprovals", _preload_content=False
            ),
        )
        return list(listed.get("items") or [])

    async def review_access(self, author: Author, permission: Permission) -> bool:
        """Whether `author`, with the uid and groups recorded for them, may do
        `permission`: a SubjectAccessReview, which asks every authorizer the API server
        has (RBAC, webhooks, ...), not only the rules this operator could read."""
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": author.user,
                "uid": author.uid,
                "groups": list(author.groups),
                "resourceAttributes": {
                    "verb": permission.verb,
                    "group": permission.group,
                    "resource": permission.resource,
                    "subresource": permission.subresource,
                    "namespace": permission.namespace,
                    "name": permission.name,
                },
            },
        }
        answer = await self._call(
            f"review whether {author.user} may {permission.text}",
            lambda: self.authorization.create_subject_access_review(review, _preload_content=False),
        )
        return (answer.get("status") or {}).get("allowed") is True


def _read_json(call: Callable[[], Any]) -> Body:
    """Run one raw client call and decode its JSON answer."""
    response = call()
    data = response.data
    answer: Body = json.loads(data) if data else {}
    return answer
