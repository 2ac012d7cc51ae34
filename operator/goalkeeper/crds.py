"""CustomResourceDefinitions generated from the pydantic models: one source of truth.

The converter turns pydantic's JSON schema into a Kubernetes structural schema: references
inlined, optional values `nullable`, no `title`/`additionalProperties: false`, the
trimmed-text bound of the models expressed as CEL rules on the Monitor spec (the raw text
there may carry any amount of surrounding whitespace), and an immutable model (the
MonitorStep spec) as a CEL rule that refuses any change of it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from goalkeeper.core.models import (
    ModelConfigSpec,
    ModelConfigStatus,
    MonitorApprovalSpec,
    MonitorSpec,
    MonitorStatus,
    MonitorStepSpec,
    MonitorStepStatus,
    NotificationSinkSpec,
    NotificationSinkStatus,
)

GROUP = "goalkeeper.dev"
VERSION = "v1alpha1"
TRIMMED_MARKER = "x-goalkeeper-trimmed"
IMMUTABLE_MARKER = "x-goalkeeper-immutable"

Schema = dict[str, Any]


def structural(model: type[BaseModel], *, cel: bool) -> Schema:
    """The model's schema as an apiextensions v1 structural schema.

    `cel`: the schema checks what people write, so a trimmed-text bound becomes CEL rules
    on the trimmed text. Without it the values are goalkeeper's own, stored trimmed, and
    `maxLength` holds the bound.
    """
    raw = model.model_json_schema(mode="validation")
    definitions = raw.pop("$defs", {})
    return _convert(raw, definitions, cel=cel)


def _convert(node: Schema, definitions: dict[str, Schema], *, cel: bool) -> Schema:
    node = copy.deepcopy(node)
    if "$ref" in node:
        target = definitions[node.pop("$ref").rsplit("/", 1)[-1]]
        merged = {**copy.deepcopy(target), **node}
        return _convert(merged, definitions, cel=cel)

    nullable = False
    for key in ("anyOf", "oneOf"):
        if key not in node:
            continue
        options = node.pop(key)
        if any(option.get("type") == "null" for option in options):
            nullable = True
            options = [option for option in options if option.get("type") != "null"]
        if {option.get("type") for option in options} == {"integer", "number"}:
            # StrictInt | StrictFloat: a number either way.
            options = [{"type": "number", **_bounds(options)}]
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {options}")
        node = {**_convert(options[0], definitions, cel=cel), **node}

    out: Schema = {}
    if "description" in node:
        out["description"] = node["description"]
    kind = node.get("type")
    if "const" in node:
        out["enum"] = [node["const"]]
        kind = kind or type(node["const"]).__name__.replace("str", "string")
    if kind is None and "enum" in node:
        kind = "string"
    if kind is None and not node.get("properties") and "items" not in node:
        raise ValueError(f"schema node without a type: {node}")
    out["type"] = kind or "object"

    for key in (
        "enum",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "default",
    ):
        if key in node:
            out[key] = node[key]
    if kind == "array":
        out["items"] = _convert(node["items"], definitions, cel=cel)
    if kind == "object" or "properties" in node:
        properties = node.get("properties")
        if properties:
            out["properties"] = {
                name: _convert(child, definitions, cel=cel) for name, child in properties.items()
            }
            if node.get("required"):
                out["required"] = list(node["required"])
        elif isinstance(node.get("additionalProperties"), dict) and node["additionalProperties"]:
            out["additionalProperties"] = _convert(
                node["additionalProperties"], definitions, cel=cel
            )
        else:
            # A free-form object (the untrusted step result): kept as-is, validated by us.
            out["x-kubernetes-preserve-unknown-fields"] = True
    if nullable:
        out["nullable"] = True
        if out.get("default", "") is None:
            del out["default"]  # absent and null mean the same to us
    rules: list[Schema] = []
    if cel and TRIMMED_MARKER in node:
        limit = node[TRIMMED_MARKER]
        # The whitespace around the text is not counted, however much of it there is; the
        # API server's request size bounds the raw text and the rules' CEL cost.
        del out["maxLength"]
        rules += [
            {"rule": "self.trim().size() > 0", "message": "must not be blank"},
            {
                "rule": f"self.trim().size() <= {limit}",
                "message": f"must be at most {limit} characters after trimming",
            },
        ]
    # Emitted whatever `cel` says: the rule is what makes the model immutable at all.
    if node.get(IMMUTABLE_MARKER):
        rules.append({"rule": "self == oldSelf", "message": "is immutable once created"})
    if rules:
        out["x-kubernetes-validations"] = rules
    return out


def _bounds(options: list[Schema]) -> Schema:
    merged: Schema = {}
    for key in ("minimum", "maximum"):
        values = [option[key] for option in options if key in option]
        if values:
            merged[key] = min(values) if key == "minimum" else max(values)
    return merged


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    spec: Schema,
    status: Schema | None,
    columns: list[Schema],
    description: str,
) -> Schema:
    """A namespaced CRD of one version; `status` None: the resource has no status."""
    properties: Schema = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        properties["status"] = status
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["goalkeeper"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    **({"subresources": {"status": {}}} if status is not None else {}),
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": properties,
                        }
                    },
                }
            ],
        },
    }


# The columns of `kubectl get monitors`, which the web console shows too.
MONITOR_COLUMNS: list[Schema] = [
    {"name": "Goal", "type": "string", "jsonPath": ".status.goal"},
    {"name": "Work", "type": "string", "jsonPath": ".status.work"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progressSummary"},
    {"name": "Checks", "type": "integer", "jsonPath": ".status.checks"},
    # A string, not a date: kubectl prints a date as an age, which reads a future
    # time as <invalid> and an overdue one as if it were still ahead.
    {"name": "Next Check", "type": "string", "jsonPath": ".status.schedule.nextCheckAt"},
    {"name": "Step", "type": "string", "jsonPath": ".status.activity"},
    {"name": "Health", "type": "string", "jsonPath": ".status.health.state"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Monitor", "type": "string", "jsonPath": ".status.monitor", "priority": 1},
    {"name": "Stop", "type": "string", "jsonPath": ".status.stop.reason", "priority": 1},
    {
        "name": "Model Cost",
        "type": "number",
        "jsonPath": ".status.modelUsage.costUsd",
        "priority": 1,
    },
    # Empty: the operator's own model settings.
    {
        "name": "Model Config",
        "type": "string",
        "jsonPath": ".status.modelConfig",
        "priority": 1,
    },
]


def monitor_crd() -> Schema:
    spec = structural(MonitorSpec, cel=True)
    spec["description"] = (
        "What the monitor must get done, when it stops, how often it checks, and its "
        "safety limit. Exactly these four fields; any other field is rejected."
    )
    status = structural(MonitorStatus, cel=False)
    status["description"] = "Everything the loop knows; the operator resumes from it."
    return _crd(
        kind="Monitor",
        plural="monitors",
        short_names=["mon"],
        spec=spec,
        status=status,
        description=(
            "A Monitor finishes an authorized goal: it observes the real target read-only, "
            "acts inside recorded authority, verifies at once, reports every accepted check, "
            "and waits on a timer until the goal is complete or cannot continue safely."
        ),
        columns=MONITOR_COLUMNS,
    )


def monitorstep_crd() -> Schema:
    return _crd(
        kind="MonitorStep",
        plural="monitorsteps",
        short_names=["monstep"],
        spec=structural(MonitorStepSpec, cel=False),
        status=structural(MonitorStepStatus, cel=False),
        description=(
            "One observe, act or repair step of a Monitor: its whole input, and the result "
            "its pod wrote. The list for one monitor is its audit trail."
        ),
        columns=[
            {"name": "Monitor", "type": "string", "jsonPath": ".spec.monitor"},
            {"name": "Kind", "type": "string", "jsonPath": ".spec.kind"},
            {"name": "Check", "type": "integer", "jsonPath": ".spec.check"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def monitorapproval_crd() -> Schema:
    return _crd(
        kind="MonitorApproval",
        plural="monitorapprovals",
        short_names=["monapproval"],
        spec=structural(MonitorApprovalSpec, cel=False),
        status=None,  # the Monitor's status records what came of it
        description=(
            "A person's answer to a Monitor's approval request for a paid action. Who may "
            "create one is RBAC on monitorapprovals; the API server stamps spec.approver with "
            "the creating user, and an approval cannot be changed afterwards."
        ),
        columns=[
            {"name": "Monitor", "type": "string", "jsonPath": ".spec.monitor"},
            {"name": "Request", "type": "string", "jsonPath": ".spec.requestId"},
            {"name": "Decision", "type": "string", "jsonPath": ".spec.decision"},
            {"name": "Amount", "type": "number", "jsonPath": ".spec.amount"},
            {"name": "Approver", "type": "string", "jsonPath": ".spec.approver"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def modelconfig_crd() -> Schema:
    return _crd(
        kind="ModelConfig",
        plural="modelconfigs",
        short_names=["mc"],
        spec=structural(ModelConfigSpec, cel=False),
        status=structural(ModelConfigStatus, cel=False),
        description=(
            "The model the Monitors of a namespace use: provider and model, base URL, the API "
            "key's Secret in this namespace, prices, per-step limits and a spend cap for them "
            "all. A Monitor uses the one its annotation goalkeeper.dev/model-config names, "
            "else the one named default, else the operator's settings."
        ),
        columns=[
            {"name": "Provider", "type": "string", "jsonPath": ".spec.provider"},
            {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
            {"name": "Monitors", "type": "integer", "jsonPath": ".status.monitorCount"},
            {"name": "Spend", "type": "number", "jsonPath": ".status.spendUsd"},
            {"name": "Cap", "type": "number", "jsonPath": ".spec.spendCapUsd"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def notificationsink_crd() -> Schema:
    return _crd(
        kind="NotificationSink",
        plural="notificationsinks",
        short_names=["sink"],
        spec=structural(NotificationSinkSpec, cel=False),
        status=structural(NotificationSinkStatus, cel=False),
        description=(
            "A webhook that receives the news of this namespace's Monitors: stops with their "
            "report, approval requests, health changes and, if chosen, every report. The URL "
            "is a key of Secret goalkeeper-notifications in this namespace."
        ),
        columns=[
            {"name": "Format", "type": "string", "jsonPath": ".spec.format"},
            {
                "name": "Ready",
                "type": "string",
                "jsonPath": ".status.conditions[?(@.type=='Ready')].status",
            },
            {"name": "Delivered", "type": "date", "jsonPath": ".status.lastDeliveredAt"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


FILES = {
    "monitors.goalkeeper.dev.yaml": monitor_crd,
    "monitorsteps.goalkeeper.dev.yaml": monitorstep_crd,
    "monitorapprovals.goalkeeper.dev.yaml": monitorapproval_crd,
    "modelconfigs.goalkeeper.dev.yaml": modelconfig_crd,
    "notificationsinks.goalkeeper.dev.yaml": notificationsink_crd,
}


def render(crd: Schema) -> str:
    header = "# Generated by `goalkeeper crds` from goalkeeper.core.models. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)


def render_all() -> str:
    return "---\n".join(render(build()) for build in FILES.values())


def write_all(folder: str | Path) -> list[Path]:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in FILES.items():
        path = out / name
        path.write_text(render(build()), encoding="utf-8")
        written.append(path)
    return written


def stale_files(folder: str | Path) -> list[Path]:
    """The committed CRD files that differ from what the models generate now."""
    out = Path(folder)
    return [
        out / name
        for name, build in FILES.items()
        if not (out / name).exists() or (out / name).read_text(encoding="utf-8") != render(build())
    ]
