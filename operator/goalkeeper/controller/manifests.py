"""The Kubernetes objects the operator creates, as plain dicts: MonitorStep, Job, Event.

Names are derived from the monitor and the step sequence number, so a retried create
finds its own earlier object (AlreadyExists) instead of making a second one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from goalkeeper.controller.settings import SHARD_LABEL, OperatorSettings
from goalkeeper.core.engine import LaunchStep
from goalkeeper.core.modelconfig import OPERATOR_SETTINGS, ModelChoice, model_string
from goalkeeper.core.models import MUTATING_STEPS, MonitorStepSpec, StepKind

GROUP = "goalkeeper.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
LABEL_MONITOR = f"{GROUP}/monitor"
LABEL_STEP = f"{GROUP}/step"
LABEL_KIND = f"{GROUP}/kind"
LABEL_SEQ = f"{GROUP}/seq"
# The monitor's full name on its step Jobs (a label value may be shortened): a Job event
# names the monitor to reconcile without a read.
ANNOTATION_MONITOR = f"{GROUP}/monitor-name"
# A report's full text: on its Event, and on the observe step whose observation made it,
# with the check number, so the step history keeps every kept check's report.
ANNOTATION_REPORT = f"{GROUP}/report"
ANNOTATION_CHECK = f"{GROUP}/check"
# Set by the one launch that created a MonitorStep: its own retried create finds it again.
ANNOTATION_LAUNCH = f"{GROUP}/launch"
# When the decision that launched a MonitorStep was made (its step's startedAt).
ANNOTATION_LAUNCHED_AT = f"{GROUP}/launched-at"
MAX_NAME = 63  # Job names become pod label values
STEP_UID = 65532  # the distroless "nonroot" user
POD_TMP = "/tmp"  # noqa: S108 - inside the step container: its own emptyDir
# The model API key reaches the step as a file of its Secret, never as an environment
# variable: a process's starting environment stays readable in /proc to its children.
MODEL_KEY_VOLUME = "model-api-key"
MODEL_KEY_DIR = "/var/run/secrets/goalkeeper.dev/model"
MODEL_KEY_FILE = f"{MODEL_KEY_DIR}/api-key"

Manifest = dict[str, Any]


def _shorten(text: str, room: int) -> str:
    if len(text) <= room:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return f"{text[: room - 7].rstrip('.-')}-{digest}"


def label_value(text: str) -> str:
    return _shorten(text, MAX_NAME)


def step_name(monitor: str, uid: str, seq: int, kind: StepKind) -> str:
    """Unique to one incarnation of the monitor: a Monitor recreated under the same name
    never finds the old one's steps by name."""
    suffix = f"-{seq}-{kind.value}-{uid[:5]}"
    return _shorten(monitor, MAX_NAME - len(suffix)) + suffix


def owned_by(obj: Manifest, uid: str) -> bool:
    """True when `uid` is the controller owner of `obj`."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid and ref.get("controller") for ref in refs)


def launched_at(step: Manifest) -> datetime | None:
    """The launch time a MonitorStep carries, or None when it carries none readable."""
    value = ((step.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_LAUNCHED_AT)
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def report_annotations(check: int, report: str) -> dict[str, str]:
    """What the observe step that made check `check` carries of its report."""
    return {ANNOTATION_REPORT: report, ANNOTATION_CHECK: str(check)}


def step_spec(step: Manifest) -> MonitorStepSpec | None:
    """A MonitorStep's spec as its step reads it, or None when it is not a valid one."""
    try:
        return MonitorStepSpec.model_validate(step.get("spec") or {})
    except ValidationError:
        return None


def same_step(found: Manifest, built: Manifest, *, reading: bool = False) -> bool:
    """Whether MonitorStep `found` runs what `built`, a step this operator builds, runs:
    the same spec as the step reads it. For a `reading` step (extract, observe) the notes
    derived from status or settings (the progress summary, the health note, whether
    approvals are on) may differ: an earlier launch of the same step read another clock,
    an earlier release words them its own way, an upgrade may change a setting; they
    carry no authority, which the rest of the spec pins."""
    spec, expected = step_spec(found), step_spec(built)
    if spec is None or expected is None:
        return False
    if reading:
        derived = {
            "progressSummary": expected.input.progressSummary,
            "health": expected.input.health,
            "approvals": expected.input.approvals,
        }
        spec = spec.model_copy(update={"input": spec.input.model_copy(update=derived)})
    return spec == expected


def event_name(monitor: str, uid: str, what: str) -> str:
    """One name per monitor incarnation and report, so a repeated create is a no-op."""
    return f"{_shorten(monitor, 200)}.{uid[:8]}.{what}"


def owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def shard_labels(labels: Mapping[str, str] | None, keys: Sequence[str]) -> dict[str, str]:
    """The labels of `labels` that a shard selects on (`keys`): a step carries its
    Monitor's, so each shard's watches see exactly its own monitors' steps."""
    return {key: labels[key] for key in keys if labels and key in labels}


def monitor_step(monitor: Manifest, launch: LaunchStep, shard_keys: Sequence[str] = ()) -> Manifest:
    meta = monitor["metadata"]
    name = step_name(meta["name"], meta["uid"], launch.seq, launch.kind)
    spec = MonitorStepSpec(
        monitor=meta["name"],
        kind=launch.kind,
        check=launch.input.check,
        seq=launch.seq,
        input=launch.input,
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "MonitorStep",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {
                **shard_labels(meta.get("labels"), shard_keys),
                LABEL_MONITOR: label_value(meta["name"]),
                LABEL_KIND: launch.kind.value,
                LABEL_SEQ: str(launch.seq),
            },
            "ownerReferences": [owner(API_VERSION, "Monitor", meta["name"], meta["uid"])],
        },
        "spec": spec.model_dump(mode="json", exclude_none=True),
    }


def step_job(
    step: Manifest,
    settings: OperatorSettings,
    choice: ModelChoice = OPERATOR_SETTINGS,
    tracing: Mapping[str, str] | None = None,
) -> Manifest:
    """The Job that runs `step`, with the model `choice` names (the operator's by default)
    and the `tracing` settings (the OTLP endpoint, the check's TRACEPARENT) when traced."""
    meta = step["metadata"]
    model = StepModel.of(settings, choice)
    kind = StepKind(step["spec"]["kind"])
    # Only a step that changes something runs as the actor; reading the task needs no
    # Kubernetes rights at all, and runs with the observer's read-only ones.
    account = (
        settings.actorServiceAccount if kind in MUTATING_STEPS else settings.observerServiceAccount
    )
    labels = {
        # The step carries its Monitor's shard label when the operator is sharded.
        **shard_labels(meta.get("labels"), (SHARD_LABEL,)),
        LABEL_STEP: meta["name"],
        LABEL_MONITOR: meta["labels"][LABEL_MONITOR],
        LABEL_KIND: kind.value,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {**labels, LABEL_SEQ: str(step["spec"]["seq"])},
            "annotations": {ANNOTATION_MONITOR: step["spec"]["monitor"]},
            "ownerReferences": [owner(API_VERSION, "MonitorStep", meta["name"], meta["uid"])],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.stepDeadlineSeconds,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": account,
                    "automountServiceAccountToken": True,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": STEP_UID,
                        "runAsGroup": STEP_UID,
                        "fsGroup": STEP_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "step",
                            "image": settings.stepImage,
                            "command": ["goalkeeper-step", kind.value],
                            "env": [
                                *step_env(meta, kind, settings, model),
                                *({"name": k, "value": v} for k, v in (tracing or {}).items()),
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "256Mi"},
                                "limits": {"cpu": "1", "memory": "1Gi"},
                            },
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": step_mounts(model),
                        }
                    ],
                    "volumes": step_volumes(model),
                },
            },
        },
    }


@dataclass(frozen=True)
class StepModel:
    """The model a step runs with, as its pod gets it: from a ModelConfig of the Monitor's
    namespace, or the operator's own settings."""

    model: str
    base_url: str
    key_secret: str
    key: str
    # Where the key comes from, for the step's error when it is missing; a ModelConfig's
    # Secret is mounted optional, so that error names it instead of a pod stuck pending.
    key_source: str = ""
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, settings: OperatorSettings, choice: ModelChoice = OPERATOR_SETTINGS) -> StepModel:
        spec = choice.spec
        if spec is None:
            return cls(
                settings.model,
                settings.modelBaseUrl,
                settings.modelApiKeySecret,
                settings.modelApiKeySecretKey,
                env=tuple(sorted(settings.stepEnv.items())),
            )
        env = dict(settings.stepEnv)
        if spec.prices is not None:
            env["GOALKEEPER_PRICE_INPUT_PER_MTOK"] = repr(spec.prices.inputPerMTokUsd)
            env["GOALKEEPER_PRICE_OUTPUT_PER_MTOK"] = repr(spec.prices.outputPerMTokUsd)
        limits = spec.stepLimits.model_dump(exclude_none=True) if spec.stepLimits else {}
        env.update({_LIMIT_ENV[name]: str(value) for name, value in limits.items()})
        secret = spec.apiKeySecret
        source = (
            f"key {secret.key} of Secret {secret.name}, named by ModelConfig {choice.name}"
            if secret is not None
            else ""
        )
        return cls(
            model_string(spec),
            spec.baseUrl or "",
            secret.name if secret is not None else "",
            secret.key if secret is not None else "",
            source,
            tuple(sorted(env.items())),
        )


# ModelConfig spec.stepLimits -> the step setting it sets.
_LIMIT_ENV = {
    "requests": "GOALKEEPER_REQUEST_LIMIT",
    "toolCalls": "GOALKEEPER_TOOL_CALLS_LIMIT",
    "totalTokens": "GOALKEEPER_TOTAL_TOKENS_LIMIT",
    "maxOutputTokens": "GOALKEEPER_MAX_OUTPUT_TOKENS",
    "costUsd": "GOALKEEPER_COST_LIMIT_USD",
}


def step_volumes(model: StepModel) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]
    if model.key_secret:
        # Owner-read only; the kubelet adds group read for the pod's fsGroup, the step's.
        secret: dict[str, Any] = {
            "secretName": model.key_secret,
            "items": [{"key": model.key, "path": "api-key"}],
            "defaultMode": 0o400,
        }
        if model.key_source:
            secret["optional"] = True
        volumes.append({"name": MODEL_KEY_VOLUME, "secret": secret})
    return volumes


def step_mounts(model: StepModel) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": POD_TMP}]
    if model.key_secret:
        mounts.append({"name": MODEL_KEY_VOLUME, "mountPath": MODEL_KEY_DIR, "readOnly": True})
    return mounts


def step_env(
    meta: Manifest, kind: StepKind, settings: OperatorSettings, model: StepModel
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "GOALKEEPER_STEP_NAME", "value": meta["name"]},
        {"name": "GOALKEEPER_STEP_NAMESPACE", "value": meta["namespace"]},
        # The step names its pod in every status write; the admission policy checks it
        # against the pod its token is bound to.
        {"name": "GOALKEEPER_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GOALKEEPER_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "GOALKEEPER_MODEL", "value": model.model},
        {"name": "HOME", "value": POD_TMP},
        # The Job's deadline: how long the step keeps trying to write its result.
        {"name": "GOALKEEPER_STEP_DEADLINE_SECONDS", "value": str(settings.stepDeadlineSeconds)},
    ]
    if model.base_url:
        env.append({"name": "GOALKEEPER_MODEL_BASE_URL", "value": model.base_url})
    if model.key_secret:
        # The key stays in its Secret: the pod reads its file, the Job spec never holds it.
        env.append({"name": "GOALKEEPER_MODEL_API_KEY_FILE", "value": MODEL_KEY_FILE})
    if model.key_source:
        env.append({"name": "GOALKEEPER_MODEL_API_KEY_SOURCE", "value": model.key_source})
    if kind is StepKind.repair and settings.repairCommand:
        env.append({"name": "GOALKEEPER_REPAIR_COMMAND", "value": settings.repairCommand})
    env.extend({"name": k, "value": v} for k, v in model.env)
    return env


def monitor_event(
    monitor: Manifest,
    *,
    name: str,
    reason: str,
    message: str,
    warning: bool,
    now: datetime,
    report: str | None = None,
) -> Manifest:
    """An Event on the Monitor; a report's full text rides in an annotation, so the message
    stays one line for `kubectl get events` and no report is lost to the next one."""
    meta = monitor["metadata"]
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    event_meta: Manifest = {"name": name, "namespace": meta["namespace"]}
    if report is not None:
        event_meta["annotations"] = {ANNOTATION_REPORT: report}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": event_meta,
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": "Monitor",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": "goalkeeper"},
        "reportingComponent": "goalkeeper.dev/operator",
        "reportingInstance": "goalkeeper",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
