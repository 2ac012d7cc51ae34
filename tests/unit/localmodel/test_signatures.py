"""Tool descriptions as signatures: what the model reads of each tool, in few tokens."""

from __future__ import annotations

import json
from typing import Any

from tests.support.observations import observation_dict

from goalkeeper.core.models import Observation
from goalkeeper.localmodel.signatures import DESCRIPTION_MAX, describe_function
from goalkeeper.step.routed import routed_schema

GET = {
    "name": "k8s_get",
    "description": "Read one Kubernetes object.",
    "parameters": {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "description": "The object kind."},
            "namespace": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "description": "Defaults to the monitor's namespace.",
            },
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "labels": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        },
        "required": ["kind"],
    },
}


def test_a_tool_is_a_signature_with_one_line_per_parameter() -> None:
    assert describe_function(GET).splitlines() == [
        "k8s_get(kind, namespace?, headers?, labels?): Read one Kubernetes object.",
        "  kind: string  # The object kind.",
        "  namespace?: string | null  # Defaults to the monitor's namespace.",
        "  headers?: {[key: string]: string}",
        "  labels?: (string | null)[]",
    ]


def test_a_tool_without_parameters_is_a_bare_signature() -> None:
    assert describe_function({"name": "now", "parameters": None}) == "now()"


def test_object_types_are_written_once_by_name_and_enums_as_their_values() -> None:
    track = {
        "type": "object",
        "description": "One track.",
        "properties": {
            "status": {"$ref": "#/$defs/Status"},
            "parts": {"type": "array", "items": {"$ref": "#/$defs/Track"}},
        },
        "required": ["status"],
    }
    function = {
        "name": "report",
        "parameters": {
            "type": "object",
            "properties": {
                "first": {"$ref": "#/$defs/Track"},
                "second": {"anyOf": [{"$ref": "#/$defs/Track"}, {"type": "null"}]},
                "pinned": {"$ref": "#/$defs/Pinned"},
            },
            "required": ["first"],
            "$defs": {
                "Status": {"enum": ["running", "done"], "type": "string"},
                "Track": track,
                # The same fields as Track with one bound: written as a variation of it.
                "Pinned": {
                    **track,
                    "properties": {**track["properties"], "status": {"const": "done"}},
                },
            },
        },
    }
    assert describe_function(function).splitlines() == [
        "report(first, second?, pinned?)",
        "  first: Track",
        "  second?: Track | null",
        "  pinned?: Pinned",
        "  type Track  # One track.",
        '    status: "running" | "done"',
        "    parts?: Track[]",
        '  type Pinned: as Track, but status: "done"',
    ]


def test_long_descriptions_are_cut_with_a_marker() -> None:
    long = {"name": "t", "description": "word " * 100, "parameters": None}
    head = describe_function(long)
    assert head.endswith("...") and len(head) == len("t(): ") + DESCRIPTION_MAX


def routed_final_result() -> dict[str, Any]:
    schema = routed_schema(Observation.model_json_schema())
    return {"name": "final_result", "description": "An observation.", "parameters": schema}


def test_the_routed_observation_reads_as_its_fields_and_one_line_per_case() -> None:
    function = routed_final_result()
    text = describe_function(function)
    lines = text.splitlines()
    # Every field of the observation's schema is named once, with its merged type.
    for field in Observation.model_json_schema()["properties"]:
        assert sum(line.startswith(f"  {field}") for line in lines) == 1, field
    assert '  route: "wait" | "act" | "stop"' in lines
    cases = lines[lines.index("  Exactly one of these cases:") + 1 :][:5]
    assert cases == [
        '  - work: "running" | "waiting"; goal: "incomplete" | "unknown"; route: "wait"; '
        "no action, stopReason",
        '  - work: "idle"; goal: "incomplete" | "unknown"; route: "act"; action: AdvanceAction; '
        "no watch, stopReason",
        '  - goal: "incomplete" | "unknown"; route: "act"; action: RecoveryAction; '
        "no watch, stopReason",
        '  - goal: "complete"; route: "stop"; stopReason: "goalComplete"; no watch, action',
        '  - route: "stop"; stopReason: "materialBlocker" | "outsideAuthority" | '
        '"paidActionNotApproved"; no watch, action',
    ]
    # The facts come first, in the signature as in the schema.
    assert lines[0].startswith("final_result(observation, work, goal, route,")
    assert '  type RecoveryAction: as AdvanceAction, but kind: "recover" | "repair"' in lines
    # Bound text says its bound; the point of it all: a fraction of the schema's length.
    assert "  observation: string ≤600  # Current facts." in lines
    assert len(text) < 0.4 * len(json.dumps(function))


def test_the_covering_id_is_one_of_the_recorded() -> None:
    recorded = observation_dict("act")
    ids = [a["id"] for a in recorded["authorizedActions"]]
    schema = routed_schema(Observation.model_json_schema(), ids)
    lines = describe_function({"name": "final_result", "parameters": schema}).splitlines()
    assert not [line for line in lines if line.startswith(("  contract", "  authorizedActions"))]
    named = " | ".join(f'"{i}"' for i in ids)
    assert any(line.startswith(f"    authorizedActionId: {named}  # ") for line in lines), lines
