"""Kubernetes label selectors, parsed and matched the way the API server does, so the
operator can say which Monitors a shard owns and check an object it read against it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
KEY = re.compile(rf"^({_PREFIX}/)?{_NAME}$")
VALUE = re.compile(rf"^({_NAME})?$")
_SET = re.compile(r"^(\S+)\s+(in|notin)\s*\(([^()]*)\)$")
_COMPARE = re.compile(r"^([^!=\s]+)\s*(==|!=|=)\s*(\S*)$")


class SelectorError(ValueError):
    """A label selector that does not parse; the message says which part and why."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # in, notin, exists, absent (= and == are `in` one value, != `notin`)
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "absent":
            return self.key not in labels
        if self.operator == "in":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


@dataclass(frozen=True)
class LabelSelector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Every requirement holds; the empty selector matches everything."""
        return all(r.matches(labels or {}) for r in self.requirements)

    @property
    def keys(self) -> tuple[str, ...]:
        """The label keys it reads, each once, in the order written."""
        return tuple(dict.fromkeys(r.key for r in self.requirements))

    def __bool__(self) -> bool:
        return bool(self.requirements)


def _split(text: str) -> list[str]:
    """The requirements of `text`: its commas outside parentheses separate them."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError("a ')' closes nothing")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise SelectorError("a '(' is not closed")
    parts.append(current)
    return [p.strip() for p in parts]


def _key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if not KEY.match(key) or len(name) > 63 or len(prefix) > 253:
        raise SelectorError(f"{key!r} is not a label key")
    return key


def _value(value: str) -> str:
    if not VALUE.match(value) or len(value) > 63:
        raise SelectorError(f"{value!r} is not a label value (at most 63 characters)")
    return value


def _requirement(part: str) -> Requirement:
    if not part:
        raise SelectorError("an empty requirement (two commas, or one at an end)")
    found = _SET.match(part)
    if found is not None:
        values = [v.strip() for v in found.group(3).split(",")]
        if not any(values):
            raise SelectorError(f"{part!r}: '{found.group(2)}' needs at least one value")
        return Requirement(
            _key(found.group(1)), found.group(2), frozenset(_value(v) for v in values)
        )
    found = _COMPARE.match(part)
    if found is not None:
        operator = "notin" if found.group(2) == "!=" else "in"
        return Requirement(_key(found.group(1)), operator, frozenset({_value(found.group(3))}))
    if part.startswith("!"):
        return Requirement(_key(part[1:].strip()), "absent")
    return Requirement(_key(part), "exists")


def parse(text: str) -> LabelSelector:
    """`text` in the API server's label-selector syntax (`k=v`, `k!=v`, `k in (a,b)`,
    `k notin (a,b)`, `k`, `!k`, comma-separated); empty selects everything."""
    text = text.strip()
    if not text:
        return LabelSelector("", ())
    return LabelSelector(text, tuple(_requirement(part) for part in _split(text)))
