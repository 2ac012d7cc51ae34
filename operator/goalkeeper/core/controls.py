"""What a person does to a running Monitor without editing its spec. Pure, no I/O.

Two annotations, in the way Flux does it (`reconcile.fluxcd.io/requestedAt`):

- `goalkeeper.dev/paused: "true"`: the running step finishes and its result is taken, then
  nothing launches (no timer, no wake) until the annotation is removed, which checks at once.
- `goalkeeper.dev/check-now: <any new value>`: a monitor that waits checks at once; the
  value it honoured is kept in status, so the same value never starts a second check.

Neither is part of the spec, so neither makes a new generation; `goalkeeper pause`,
`goalkeeper resume` and `goalkeeper check` set them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PAUSED = "goalkeeper.dev/paused"
CHECK_NOW = "goalkeeper.dev/check-now"
# The longest check-now value kept in status; a longer one is kept cut to this.
CHECK_NOW_MAX = 128


@dataclass(frozen=True)
class Controls:
    """The controls a Monitor's annotations set now."""

    paused: bool = False
    # The requested check's value; "" when none is requested.
    check_now: str = ""


def controls_of(annotations: Mapping[str, str] | None) -> Controls:
    """The controls in a Monitor's annotations: paused only for the value "true" (any
    case, surrounding spaces ignored), as `kubectl annotate` users write it."""
    found = annotations or {}
    paused = str(found.get(PAUSED, "")).strip().lower() == "true"
    check_now = str(found.get(CHECK_NOW, "")).strip()[:CHECK_NOW_MAX]
    return Controls(paused=paused, check_now=check_now)
