"""The observation's schema keyed on its route, for a model whose output a grammar binds.

`Observation` checks in validators which fields each route allows: an action only with
`act`, a stop reason only with `stop`, the goal and work states each route fits. A schema
enforced by a grammar (the local model) can carry those rules itself, so a small model
cannot write an answer they refuse. `RoutedOutput` gives the output tool a choice of one
variant per route instead of the one flat object; what comes back is still validated as an
`Observation`. Only for such a model: hosted providers refuse a choice at the root of a
tool's parameters.

The schema also holds a small model to what the engine would refuse anyway, and to an
answer it writes in reasonable time: the answer is offered only after a first read of the
target, the facts come before the route, a mutation set names only what the act step's
tools can write to (step/mutations.py), and text is bounded tightly enough that a whole tool
result cannot be copied into the answer. The authority is the one the engine pinned from the
task: an action names one of the recorded actions' ids, and with none recorded there is no
`act` at all.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition

from goalkeeper.core.models import (
    ANSWERED_STOPS,
    ActionKind,
    GoalState,
    ObservedStopReason,
    StepInput,
    WorkState,
)

Json = dict[str, Any]
SHARED = "Observation_"
NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")
OPEN_GOALS = [GoalState.incomplete.value, GoalState.unknown.value]
OTHER_STOPS = [r.value for r in ANSWERED_STOPS if r is not ObservedStopReason.goalComplete]
# The facts before the decision: a model writes what it saw, then routes on it.
FIRST = ("observation", "work", "goal", "route", "reason")
TEXT_MAX = {"observation": 600, "evidence": 600, "report": 400}
TEXT_DEFAULT_MAX = 300
# The key of `refuted` under which the ids of acts the facts refuted are kept.
REFUTED_ACT = "authorizedActionId"
ITEMS_MAX = 8
# What the act step's tools can write to: RESOURCE/NAME (with an optional namespace before
# it), an http(s) URL, or command:PROGRAM; anything else would be refused at the write.
WRITABLE = (
    r"^(([a-z0-9][a-z0-9-]*/)?[A-Za-z][A-Za-z0-9.-]*/[A-Za-z0-9*][A-Za-z0-9.*:_@-]*"
    r"|https?://[^ ]+|command:[^ ]+)$"
)


def _variant(base: Json, drop: tuple[str, ...], **fixed: Any) -> Json:
    """`base` with fields dropped, or bound (and required) to the given schemas; every
    other field refers to its one definition under `SHARED`, so the variants stay short."""
    properties = {k: {"$ref": f"#/$defs/{SHARED}{k}"} for k in base["properties"] if k not in drop}
    properties.update(fixed)
    required = [k for k in base.get("required", []) if k not in drop]
    required += [k for k in fixed if k not in required]
    return {**base, "properties": properties, "required": required}


def _action(
    defs: Json,
    ref: str,
    kinds: list[str],
    name: str,
    ids: list[str] | None,
    writable: list[str] | None = None,
) -> Json:
    """A reference to a copy of the action's definition with only `kinds` allowed, a
    mutation set of what the act step can write to (each entry one of `writable`, when
    given) and, when given, one of `ids` as the authorized action that covers it."""
    action = copy.deepcopy(defs[ref])
    action["properties"]["kind"] = {"enum": kinds}
    if ids is not None:
        covering = action["properties"]["authorizedActionId"]
        action["properties"]["authorizedActionId"] = {
            "enum": ids,
            **({"description": covering["description"]} if "description" in covering else {}),
        }
    mutations = action["properties"]["mutationSet"]
    mutations["items"] = {"enum": writable} if writable else {"type": "string", "pattern": WRITABLE}
    mutations["minItems"] = 1
    mutations["description"] = (
        "What the action changes, each as RESOURCE/NAME (for example jobs/build), "
        "an http(s) URL, or command:PROGRAM."
    )
    defs[name] = action
    return {"$ref": f"#/$defs/{name}"}


def _tighten(schema: Any, key: str = "") -> Any:
    """`schema` with text and lists bounded for a grammar-bound model (never loosened);
    `key` is the field the schema is for, through its `items` and choices."""
    if isinstance(schema, list):
        return [_tighten(item, key) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {
        k: {name: _tighten(sub, name) for name, sub in v.items()}
        if k in ("properties", "$defs")
        else _tighten(v, key)
        for k, v in schema.items()
    }
    if out.get("type") == "string" and "pattern" not in out and "format" not in out:
        bound = TEXT_MAX.get(key, TEXT_DEFAULT_MAX)
        out["maxLength"] = min(int(out.get("maxLength", bound)), bound)
        out.pop("x-goalkeeper-trimmed", None)
    if out.get("type") == "array":
        out["maxItems"] = min(int(out.get("maxItems", ITEMS_MAX)), ITEMS_MAX)
    return out


def _ordered(properties: Json) -> Json:
    return {
        **{k: properties[k] for k in FIRST if k in properties},
        **{k: v for k, v in properties.items() if k not in FIRST},
    }


def routed_schema(
    flat: Json,
    action_ids: list[str] | None = None,
    writable: list[str] | None = None,
    refuted: Mapping[str, set[str]] | None = None,
    id_names: Sequence[str] = (),
    copied: Sequence[str] = (),
    said: Sequence[str] = (),
) -> Json:
    """`Observation`'s JSON schema as one object per route (and per case a route has).
    With `writable`, the recorded allowed resources, a mutation set names only those: the
    engine refuses any other, and a model copying an example's object cannot write one.
    `refuted` (field -> values, of `goal`, `work` and `route`, and under `REFUTED_ACT` the
    ids of acts) are claims the named objects refuted in this step: the grammar no longer
    admits them, so a model that repeats itself cannot.
    `id_names`, once an answer copied an example's ids: a failure or target-state id then
    begins with the name of an object this task names; so does each text field in `copied`
    (the example's, once an answer copied one of them word for word).
    `said`, once an action named the example's change: the action is then told in the words
    of one of the recorded actions."""
    action_ref = "ActionRequest"
    if action_ref not in (flat.get("$defs") or {}) or "route" not in (flat.get("properties") or {}):
        return flat  # not an observation's schema
    tight = _tighten(flat)
    defs = tight["$defs"]
    base = {k: v for k, v in tight.items() if k not in ("$defs", "title", "description")}
    base["properties"] = _ordered(base["properties"])
    for key, field in base["properties"].items():
        defs[f"{SHARED}{key}"] = field
    # An act the facts refuted in this step is not offered again; with none left, no act.
    refused = (refuted or {}).get(REFUTED_ACT, set())
    ids = action_ids if action_ids is None else [i for i in action_ids if i not in refused]
    advance = _action(defs, action_ref, [ActionKind.advance.value], "AdvanceAction", ids, writable)
    other = _action(
        defs,
        action_ref,
        [k.value for k in ActionKind if k is not ActionKind.advance],
        "RecoveryAction",
        ids,
        writable,
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
            ("stopReason", "watch"),
            route={"const": "act"},
            goal={"enum": OPEN_GOALS},
            work={"const": WorkState.idle.value},
            action=advance,
        ),
        _variant(
            base,
            ("stopReason", "watch"),
            route={"const": "act"},
            goal={"enum": OPEN_GOALS},
            action=other,
        ),
        _variant(
            base,
            ("action", "watch"),
            route={"const": "stop"},
            goal={"const": GoalState.complete.value},
            stopReason={"const": ObservedStopReason.goalComplete.value},
        ),
        _variant(
            base,
            ("action", "watch"),
            route={"const": "stop"},
            stopReason={"enum": OTHER_STOPS},
        ),
    ]
    if ids == []:  # no recorded authority to act on: no act case at all
        variants = [v for v in variants if v["properties"]["route"] != {"const": "act"}]
    variants = _without_refuted(variants, defs, refuted or {})
    if id_names:
        _ids_name_objects(defs, ("AdvanceAction", "RecoveryAction"), id_names, copied)
    if said:
        for name in ("AdvanceAction", "RecoveryAction"):
            defs[name]["properties"]["action"] = {"enum": list(dict.fromkeys(said))}
    schema: Json = {"type": "object", "anyOf": variants, "$defs": _reachable(variants, defs)}
    if "description" in flat:
        schema["description"] = flat["description"]
    return schema


def _ids_name_objects(
    defs: Json, actions: Sequence[str], names: Sequence[str], copied: Sequence[str] = ()
) -> None:
    """Each action's failure and target-state ids begin with one of `names`, and so does
    each field in `copied`, of an action or the observation."""
    # Object names hold [a-z0-9.-]; only the dot means more in a pattern (and a grammar's
    # pattern reader may not take other escapes).
    either = "|".join(n.replace(".", "\\.") for n in dict.fromkeys(names) if NAME.match(n))
    if not either:
        return
    targets = [(defs[a]["properties"], a) for a in actions if a in defs]
    for properties, _ in targets:
        for field in ("failureId", "targetStateId"):
            prop = properties.get(field)
            if isinstance(prop, dict):
                properties[field] = {
                    **{k: v for k, v in prop.items() if k != "pattern"},
                    "type": "string",
                    "pattern": f"^({either})[A-Za-z0-9._:/-]{{0,80}}$",
                }
    for field in copied:
        if field in ("failureId", "targetStateId"):
            continue
        # The name first, then any text but a quote or backslash, so a grammar keeps it a
        # string: a model that must mention a name anywhere wrote up to the bound before it,
        # four fields a step (523 s once). Bounded, as a pattern takes the place of maxLength.
        bound = TEXT_MAX.get(field, TEXT_DEFAULT_MAX)
        mentions = f'^({either})[^"\\\\]{{0,{bound}}}$'
        shared = defs.get(f"{SHARED}{field}")
        found = [p for p, _ in targets if isinstance(p.get(field), dict)]
        if isinstance(shared, dict) and shared.get("type") == "string":
            defs[f"{SHARED}{field}"] = {**shared, "pattern": mentions}
        for properties in found:
            properties[field] = {**properties[field], "pattern": mentions}


def _values(prop: Json, defs: Json) -> list[Any] | None:
    """The values a field's schema admits, when it is a closed set."""
    if "const" in prop:
        return [prop["const"]]
    if "enum" in prop:
        return list(prop["enum"])
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = defs.get(ref.rsplit("/", 1)[-1])
        return _values(found, defs) if isinstance(found, dict) else None
    return None


def _without_refuted(
    variants: list[Json], defs: Json, refuted: Mapping[str, set[str]]
) -> list[Json]:
    """`variants` with the refuted values taken out of each closed field, and a variant
    left with none dropped; all of them unchanged should nothing be left."""
    if not any(refuted.values()):
        return variants
    kept = []
    for variant in variants:
        properties = dict(variant["properties"])
        possible = True
        for field, values in refuted.items():
            prop = properties.get(field)
            allowed = _values(prop, defs) if isinstance(prop, dict) else None
            if allowed is None or not values & set(allowed):
                continue
            left = [v for v in allowed if v not in values]
            possible = possible and bool(left)
            properties[field] = {"enum": left}
        if possible:
            kept.append({**variant, "properties": properties})
    return kept or variants


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


def pinned_action_ids(step: StepInput) -> list[str] | None:
    """The ids of the step's recorded actions; None before any authority is recorded."""
    if step.contract is None:
        return None
    return [a.id for a in step.authorizedActions]


def pinned_resources(step: StepInput) -> list[str] | None:
    """The recorded allowed resources, the only entries a mutation set may name; None
    when none are recorded (any act is then refused, and the model may say why)."""
    if step.contract is None or not step.contract.allowedResources:
        return None
    return list(dict.fromkeys(step.contract.allowedResources))


@dataclass
class RoutedOutput(AbstractCapability[Any]):
    """Gives the observation's output tool the route-keyed schema above."""

    action_ids: list[str] | None = None
    read_tools: tuple[str, ...] = ()
    writable: list[str] | None = None
    # The claims the named objects refuted so far in this step, and the names ids must
    # begin with once an answer copied an example's (see `routed_schema`).
    refuted: Callable[[], Mapping[str, set[str]]] | None = None
    id_names: Callable[[], Sequence[str]] | None = None
    copied: Callable[[], Sequence[str]] | None = None
    said: Callable[[], Sequence[str]] | None = None

    def get_model_settings(self) -> Callable[[RunContext[Any]], ModelSettings]:
        # No answer before the target has been read once in this check. The tools stay
        # listed (the prompt, and so its cache, stays the same); the choice narrows.
        def settings(ctx: RunContext[Any]) -> ModelSettings:
            if ctx.usage.tool_calls == 0 and self.read_tools:
                return ModelSettings(tool_choice=list(self.read_tools))
            return ModelSettings()

        return settings

    async def prepare_output_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        return [
            replace(
                tool,
                parameters_json_schema=routed_schema(
                    tool.parameters_json_schema,
                    self.action_ids,
                    self.writable,
                    self.refuted() if self.refuted is not None else None,
                    self.id_names() if self.id_names is not None else (),
                    self.copied() if self.copied is not None else (),
                    self.said() if self.said is not None else (),
                ),
            )
            for tool in tool_defs
        ]
