"""Tool descriptions a small model reads in a fraction of the tokens of their JSON schemas.

The tool-call proxy describes a request's tools in the system message. Written out as JSON
schemas they cost a small context most of its room (the observe step's tools came to
3,916 tokens, its output schema alone to more than half), while the grammar already holds
the model to every bound, pattern and combination the schemas carry. What the model needs
is the names, the types and what each field means, so each tool becomes a signature:

    k8s_get(kind, name, namespace?, api_version?): Read one Kubernetes object.
      kind: string  # The object kind.
      ...

Object types are named once and referred to by name, enums are written as their values,
and parameters that are a choice of objects (one variant per case, as the routed
observation is) are written as the fields of all cases with one line per case naming what
that case binds or leaves out.
"""

from __future__ import annotations

import json
from typing import Any

Json = dict[str, Any]
DESCRIPTION_MAX = 200
NOTE = "  # "


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _description(schema: Any) -> str:
    if not isinstance(schema, dict):
        return ""
    text = " ".join(str(schema.get("description") or "").split())
    return text if len(text) <= DESCRIPTION_MAX else text[: DESCRIPTION_MAX - 3] + "..."


def _is_record(schema: Any) -> bool:
    """An object with named fields: written once under its name."""
    return isinstance(schema, dict) and isinstance(schema.get("properties"), dict)


class _Writer:
    """Renders one tool's parameters; collects the object types they refer to."""

    def __init__(self, root: Json) -> None:
        self.defs: Json = root.get("$defs") or root.get("definitions") or {}
        self.named: dict[str, list[str]] = {}  # type name -> its lines, in first-use order
        self.fields_of: dict[str, Json] = {}  # type name -> its rendered field types

    def resolve(self, schema: Any) -> tuple[str | None, Any]:
        """(type name, schema) with references to anything but a record followed."""
        seen = 0
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 32:
            name = schema["$ref"].rsplit("/", 1)[-1]
            target = self.defs.get(name)
            if target is None:
                return name, {}
            if _is_record(target):
                return name, target
            schema, seen = target, seen + 1
        return None, schema

    def type(self, schema: Any) -> str:
        name, schema = self.resolve(schema)
        if name is not None and _is_record(schema):
            self.define(name, schema)
            return name
        if not isinstance(schema, dict):
            return "any"
        if "const" in schema:
            # A bound object is the grammar's to write: its text would only cost tokens.
            if isinstance(schema["const"], dict | list):
                return "fixed (written for you)"
            return _literal(schema["const"])
        if isinstance(schema.get("enum"), list):
            return " | ".join(_literal(v) for v in schema["enum"])
        choices = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(choices, list):
            parts: list[str] = []
            for choice in choices:
                part = self.type(choice)
                if part not in parts:
                    parts.append(part)
            if "null" in parts:  # the null choice last, as a reader expects it
                parts = [p for p in parts if p != "null"] + ["null"]
            if "number" in parts and "integer" in parts:
                parts.remove("integer")
            return " | ".join(parts)
        kind = schema.get("type")
        if isinstance(kind, list):
            return " | ".join(str(k) for k in kind)
        if kind == "array":
            item = self.type(schema.get("items", {}))
            return f"({item})[]" if " " in item else f"{item}[]"
        if kind == "object" or _is_record(schema):
            fields = schema.get("properties") or {}
            if fields:
                required = set(schema.get("required") or [])
                inner = ", ".join(
                    f"{key}{'' if key in required else '?'}: {self.type(value)}"
                    for key, value in fields.items()
                )
                return "{" + inner + "}"
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return "{[key: string]: " + self.type(extra) + "}"
            return "object"
        if kind == "string" and isinstance(schema.get("format"), str):
            return f"string ({schema['format']})"
        if kind == "string" and isinstance(schema.get("maxLength"), int):
            return f"string ≤{schema['maxLength']}"
        return str(kind) if kind else "any"

    def note(self, schema: Any) -> str:
        """A field's description, unless it is the description of the type it names."""
        name, resolved = self.resolve(schema)
        own = _description(schema)
        if own or (name is not None and _is_record(resolved)):
            return own
        return _description(resolved)

    def field_lines(
        self, fields: Json, required: set[str], indent: str
    ) -> tuple[list[str], dict[str, str]]:
        lines, types = [], {}
        for key, value in fields.items():
            types[key] = self.type(value)
            lines.append(_field_line(indent, key, key in required, types[key], self.note(value)))
        return lines, types

    def define(self, name: str, schema: Json) -> None:
        if name in self.named:
            return
        self.named[name] = []  # reserved first: a type may refer to itself
        fields = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        lines, types = self.field_lines(fields, required, "    ")
        # A copy of a type already written that binds a field or two is written as such.
        for other, other_types in self.fields_of.items():
            if other_types.keys() == types.keys():
                changed = [k for k in types if types[k] != other_types[k]]
                if len(changed) <= 2:
                    bound = "; ".join(f"{k}: {types[k]}" for k in changed)
                    self.named[name] = [f"  type {name}: as {other}, but {bound}"]
                    self.fields_of[name] = types
                    return
        self.fields_of[name] = types
        head = f"  type {name}" + (NOTE + _description(schema) if _description(schema) else "")
        self.named[name] = [head, *lines]


def _field_line(indent: str, key: str, required: bool, rendered: str, note: str) -> str:
    """One field: its name (`?` when it may be left out), its type and what it means."""
    return f"{indent}{key}{'' if required else '?'}: {rendered}" + (NOTE + note if note else "")


def _parts(rendered: str) -> set[str]:
    return set(rendered.split(" | "))


def _cases(writer: _Writer, variants: list[Json]) -> list[str]:
    """The fields of every variant, then one line per variant with what it binds."""
    order: list[str] = []
    per_variant: list[dict[str, str]] = []
    notes: dict[str, str] = {}
    always = None
    for variant in variants:
        fields = variant.get("properties") or {}
        required = set(variant.get("required") or [])
        always = required if always is None else always & required
        types = {}
        for key, value in fields.items():
            if key not in order:
                order.append(key)
            types[key] = writer.type(value)
            notes.setdefault(key, writer.note(value))
        per_variant.append(types)
    merged: dict[str, str] = {}
    for key in order:
        seen: list[str] = []
        for types in per_variant:
            for part in types.get(key, "").split(" | "):
                if part and part not in seen:
                    seen.append(part)
        merged[key] = " | ".join(seen)
    lines = [
        _field_line("  ", key, key in (always or set()), merged[key], notes[key]) for key in order
    ]
    lines.append("  Exactly one of these cases:")
    for types in per_variant:
        bound = [
            f"{k}: {types[k]}"
            for k in order
            if k in types and _parts(types[k]) != _parts(merged[k])
        ]
        absent = [k for k in order if k not in types]
        parts = bound + ([f"no {', '.join(absent)}"] if absent else [])
        lines.append("  - " + "; ".join(parts))
    return lines


def describe_function(function: Json) -> str:
    """One tool as a signature, its parameters one a line, and the types they use."""
    parameters = function.get("parameters") or {}
    writer = _Writer(parameters)
    _, parameters = writer.resolve(parameters)
    variants = parameters.get("anyOf") or parameters.get("oneOf")
    if not _is_record(parameters) and isinstance(variants, list) and variants:
        records = [writer.resolve(v)[1] for v in variants]
        if all(_is_record(r) for r in records):
            body = _cases(writer, records)
            names = [k for r in records for k in r["properties"]]
            signature = ", ".join(dict.fromkeys(names))
        else:
            body, signature = [f"  arguments: {writer.type(parameters)}"], "arguments"
    else:
        fields = parameters.get("properties") or {}
        required = set(parameters.get("required") or [])
        body, _ = writer.field_lines(fields, required, "  ")
        signature = ", ".join(f"{k}{'' if k in required else '?'}" for k in fields)
    head = f"{function['name']}({signature})"
    description = _description(function)
    lines = [head + (f": {description}" if description else ""), *body]
    for type_lines in writer.named.values():
        lines.extend(type_lines)
    return "\n".join(lines)


def describe_tools(functions: list[Json]) -> str:
    return "\n\n".join(describe_function(function) for function in functions)
