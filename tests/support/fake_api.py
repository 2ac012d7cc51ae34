"""A small in-memory fake of the three APIs the reconciler uses (custom objects, core,
batch), implementing `goalkeeper.controller.api.Api`, that can fail any call on demand:
the way production kopf operators test handlers without a cluster. It also implements
`AccessReviews`, answering from the permissions a test grants."""

from __future__ import annotations

import copy
import dataclasses
from collections import defaultdict
from itertools import count
from typing import Any

from goalkeeper.controller.api import (
    JOB_UID_LABEL,
    AlreadyExists,
    ApiError,
    Conflict,
    NotFound,
    Permanent,
    owned_steps,
)
from goalkeeper.controller.manifests import LABEL_MONITOR, LABEL_SEQ, label_value
from goalkeeper.core.permissions import Author, Permission

Body = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies `application/merge-patch+json`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Body] = {}
        self.calls: list[tuple[str, str]] = []
        self._faults: dict[str, list[ApiError]] = defaultdict(list)
        self._lost_answers: dict[str, int] = defaultdict(int)
        self._versions = count(1)
        self._uids = count(1)
        self._granted: dict[str, set[Permission]] = defaultdict(set)

    # --- the test's side ---

    def fail(self, method: str, error: ApiError, times: int = 1) -> None:
        """The next `times` calls of `method` raise `error` (after doing nothing)."""
        self._faults[method].extend([error] * times)

    def lose_answer(self, method: str, times: int = 1) -> None:
        """The next `times` creates by `method` take effect, but their answer is lost: the
        caller meets AlreadyExists, as the client's retry in place does."""
        self._lost_answers[method] += times

    def put(self, kind: str, body: Body) -> Body:
        meta = body.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uids):04d}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(kind, meta.get("namespace", "ns"), meta["name"])] = body
        return copy.deepcopy(body)

    def get(self, kind: str, namespace: str, name: str) -> Body | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def all(self, kind: str) -> list[Body]:
        return [copy.deepcopy(v) for (k, _, _), v in sorted(self.objects.items()) if k == kind]

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace, name), None)

    def grant(self, subject: str, *permissions: Permission) -> None:
        """`subject`, a user or a group, holds `permissions`; one without a name holds for
        every object of its resource, as an RBAC rule without resourceNames does."""
        self._granted[subject].update(permissions)

    def count(self, method: str) -> int:
        return sum(1 for called, _ in self.calls if called == method)

    # --- helpers ---

    def _enter(self, method: str, name: str) -> None:
        self.calls.append((method, name))
        if self._faults[method]:
            raise self._faults[method].pop(0)

    def _read(self, kind: str, namespace: str, name: str) -> Body:
        found = self.get(kind, namespace, name)
        if found is None:
            raise NotFound(f"{kind} {namespace}/{name} not found", 404)
        return found

    def _create(self, kind: str, namespace: str, body: Body) -> Body:
        name = body["metadata"]["name"]
        exists = AlreadyExists(f"{kind} {namespace}/{name} already exists", 409)
        if (kind, namespace, name) in self.objects:
            raise exists
        made = copy.deepcopy(body)
        made["metadata"]["namespace"] = namespace
        made["metadata"].pop("uid", None)
        created = self.put(kind, made)
        method = self.calls[-1][0]
        if self._lost_answers[method]:
            self._lost_answers[method] -= 1
            raise exists
        return created

    # --- the Api protocol ---

    async def get_monitor(self, namespace: str, name: str, fresh: bool = False) -> Body:
        self._enter("get_monitor", name)
        return self._read("Monitor", namespace, name)

    async def patch_monitor_status(
        self, namespace: str, name: str, resource_version: str, status: Body
    ) -> Body:
        self._enter("patch_monitor_status", name)
        current = self._read("Monitor", namespace, name)
        if current["metadata"]["resourceVersion"] != resource_version:
            raise Conflict("the object has been modified", 409)
        current["status"] = merge_patch(current.get("status") or {}, status)
        return self.put("Monitor", current)

    async def get_step(self, namespace: str, name: str, fresh: bool = False) -> Body:
        self._enter("get_step", name)
        return self._read("MonitorStep", namespace, name)

    async def create_step(self, namespace: str, body: Body) -> Body:
        self._enter("create_step", body["metadata"]["name"])
        return self._create("MonitorStep", namespace, body)

    async def annotate_step(self, namespace: str, name: str, annotations: dict[str, str]) -> Body:
        self._enter("annotate_step", name)
        current = self._read("MonitorStep", namespace, name)
        meta = current["metadata"]
        meta["annotations"] = merge_patch(meta.get("annotations") or {}, annotations)
        return self.put("MonitorStep", current)

    async def label_step(self, namespace: str, name: str, labels: dict[str, str | None]) -> Body:
        self._enter("label_step", name)
        current = self._read("MonitorStep", namespace, name)
        meta = current["metadata"]
        meta["labels"] = merge_patch(meta.get("labels") or {}, labels)
        return self.put("MonitorStep", current)

    async def step_history(
        self, namespace: str, monitor: str, uid: str, fresh: bool = False
    ) -> dict[int, str]:
        self._enter("step_history", monitor)
        return owned_steps(
            [s for s in self.all("MonitorStep") if s["metadata"].get("namespace") == namespace],
            uid,
        )

    async def delete_steps(self, namespace: str, monitor: str, uid: str, seqs: list[int]) -> None:
        self._enter("delete_steps", f"{monitor}:{','.join(map(str, seqs))}")
        label = label_value(monitor)
        for step in self.all("MonitorStep"):
            meta = step["metadata"]
            labels = meta.get("labels") or {}
            if (
                meta.get("namespace") == namespace
                and labels.get(LABEL_MONITOR) == label
                and labels.get(LABEL_SEQ) in {str(seq) for seq in seqs}
            ):
                self.delete("MonitorStep", namespace, meta["name"])

    async def get_job(self, namespace: str, name: str, fresh: bool = False) -> Body:
        self._enter("get_job", name)
        return self._read("Job", namespace, name)

    async def create_job(self, namespace: str, body: Body) -> Body:
        self._enter("create_job", body["metadata"]["name"])
        return self._create("Job", namespace, body)

    async def get_pod(self, namespace: str, name: str, fresh: bool = False) -> Body:
        self._enter("get_pod", name)
        return self._read("Pod", namespace, name)

    async def list_job_pods(self, namespace: str, job_uid: str) -> list[Body]:
        self._enter("list_job_pods", job_uid)
        return [
            copy.deepcopy(body)
            for (kind, ns, _), body in sorted(self.objects.items())
            if kind == "Pod"
            and ns == namespace
            and (body["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == job_uid
        ]

    async def get_event(self, namespace: str, name: str) -> Body:
        self._enter("get_event", name)
        return self._read("Event", namespace, name)

    async def create_event(self, namespace: str, body: Body) -> Body:
        self._enter("create_event", body["metadata"]["name"])
        return self._create("Event", namespace, body)

    async def get_service_account(self, namespace: str, name: str) -> Body:
        self._enter("get_service_account", name)
        return self._read("ServiceAccount", namespace, name)

    async def get_config_map(self, namespace: str, name: str) -> Body:
        self._enter("get_config_map", name)
        return self._read("ConfigMap", namespace, name)

    async def get_model_config(self, namespace: str, name: str) -> Body:
        self._enter("get_model_config", name)
        return self._read("ModelConfig", namespace, name)

    async def patch_model_config_status(self, namespace: str, name: str, status: Body) -> Body:
        self._enter("patch_model_config_status", name)
        found = self._read("ModelConfig", namespace, name)
        found["status"] = copy.deepcopy(status)
        return self.put("ModelConfig", found)

    async def list_approvals(self, namespace: str) -> list[Body]:
        self._enter("list_approvals", namespace)
        return [
            copy.deepcopy(v)
            for (kind, ns, _), v in sorted(self.objects.items())
            if kind == "MonitorApproval" and ns == namespace
        ]

    async def get_secret(self, namespace: str, name: str) -> Body:
        self._enter("get_secret", name)
        return self._read("Secret", namespace, name)

    async def record_delivered(
        self, namespace: str, name: str, uid: str, sink: str, seq: int
    ) -> None:
        self._enter("record_delivered", f"{name}:{sink}:{seq}")
        current = self._read("Monitor", namespace, name)
        if current["metadata"]["uid"] != uid:
            raise Permanent("the test operation of the JSON patch failed", 422)
        patch = {"notices": {"delivered": {sink: seq}}}
        current["status"] = merge_patch(current.get("status") or {}, patch)
        self.put("Monitor", current)

    async def patch_sink_status(self, namespace: str, name: str, status: Body) -> None:
        self._enter("patch_sink_status", name)
        found = self._read("NotificationSink", namespace, name)
        found["status"] = merge_patch(found.get("status") or {}, status)
        self.put("NotificationSink", found)

    async def review_access(self, author: Author, permission: Permission) -> bool:
        self._enter("review_access", f"{author.user} {permission.text}")
        if "system:masters" in author.groups:
            return True  # as the API server's own authorizer answers for that group
        held = {p for s in (author.user, *author.groups) for p in self._granted.get(s, ())}
        return bool({permission, dataclasses.replace(permission, name="")} & held)
