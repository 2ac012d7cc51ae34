"""The observation's schema keyed on its route, for a model whose output a grammar binds.

`Observation` checks in validators which fields each route allows: an action only with
`act`, a stop reason only with `stop`, the goal and work states each route fits. A schema
enforced by a grammar (the local model) can carry those rules itself, so a small model
cannot write an answer they refuse. `RoutedOutput` gives the output tool a choice of one
variant per route instead of the one flat object; what comes back is still validated as an
`Observation`. Only for such a model: hosted providers refuse a choice at the root of a
tool's parameters.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext, ToolDefinition

from goalkeeper.core.models import ActionKind, GoalState, ObservedStopReason, WorkState

Json = dict[str, Any]
SHARED = "Observation_"
OPEN_GOALS = [GoalState.incomplete.value, GoalState.unknown.value]
OTHER_STOPS = [r.value for r in ObservedStopReason if r is not ObservedStopReason.goalComplete]


def _variant(base: Json, drop: tuple[str, ...], **fixed: Any) -> Json:
    """`base` with fields dropped, or bound (and required) to the given schemas; every
    other field refers to its one definition under `SHARED`, so the variants stay short."""
    properties = {k: {"$ref": f"#/$defs/{SHARED}{k}"} for k in base["properties"] if k not in drop}
    properties.update(fixed)
    required = [k for k in base.get("required", []) if k not in drop]
    required += [k for k in fixed if k not in required]
    return {**base, "properties": properties, "required": required}


def _action(defs: Json, ref: str, kinds: list[str], name: str) -> Json:
    """A reference to a copy of the action's definition with only `kinds` allowed."""
    action = copy.deepcopy(defs[ref])
    action["properties"]["kind"] = {"enum": kinds}
    defs[name] = action
    return {"$ref": f"#/$defs/{name}"}


def routed_schema(flat: Json) -> Json:
    """`Observation`'s JSON schema as one object per route (and per case a route has)."""
    defs = copy.deepcopy(flat.get("$defs") or {})
    action_ref = "ActionRequest"
    if action_ref not in defs or "route" not in (flat.get("properties") or {}):
        return flat  # not an observation's schema
    base = {k: v for k, v in flat.items() if k not in ("$defs", "title", "description")}
    for key, field in base["properties"].items():
        defs[f"{SHARED}{key}"] = field
    advance = _action(defs, action_ref, [ActionKind.advance.value], "AdvanceAction")
    other = _action(
        defs,
        action_ref,
        [k.value for k in ActionKind if k is not ActionKind.advance],
        "RecoveryAction",
    )
    variants = [
        _variant(
            base,
            ("action", "stopReason"),
            route={"const": "wait"},
            goal={"enum": OPEN_GOALS},
            work={"enum": [WorkState.running.value, WorkState.waiting.value]},
        ),
        # Starting or resuming work needs it idle; a recovery may come at any time.
        _variant(
            base,
            ("stopReason",),
            route={"const": "act"},
            goal={"enum": OPEN_GOALS},
            work={"const": WorkState.idle.value},
            action=advance,
        ),
        _variant(
            base,
            ("stopReason",),
            route={"const": "act"},
            goal={"enum": OPEN_GOALS},
            action=other,
        ),
        _variant(
            base,
            ("action",),
            route={"const": "stop"},
            goal={"const": GoalState.complete.value},
            stopReason={"const": ObservedStopReason.goalComplete.value},
        ),
        _variant(
            base,
            ("action",),
            route={"const": "stop"},
            stopReason={"enum": OTHER_STOPS},
        ),
    ]
    schema: Json = {"type": "object", "anyOf": variants, "$defs": _reachable(variants, defs)}
    if "description" in flat:
        schema["description"] = flat["description"]
    return schema


def _reachable(roots: Any, defs: Json) -> Json:
    """The definitions `roots` refer to, directly or through each other."""
    found: Json = {}
    pending = [roots]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.rsplit("/", 1)[-1]
                if name not in found and name in defs:
                    found[name] = defs[name]
                    pending.append(defs[name])
            pending.extend(node.values())
    return found


@dataclass
class RoutedOutput(AbstractCapability[Any]):
    """Gives the observation's output tool the route-keyed schema above."""

    async def prepare_output_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        return [
            replace(tool, parameters_json_schema=routed_schema(tool.parameters_json_schema))
            for tool in tool_defs
        ]
