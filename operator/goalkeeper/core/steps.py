"""What a finished step stands for: its untrusted status turned into one engine event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from goalkeeper.core.engine import (
    Event,
    ObservationAccepted,
    ObservationRejected,
    StepFailed,
    StepFinished,
)
from goalkeeper.core.models import (
    ActionResult,
    MonitorStepStatus,
    Observation,
    StepErrorKind,
    StepKind,
    StepPhase,
)

ERROR_LIMIT = 2000


def describe_errors(error: ValidationError, limit: int = ERROR_LIMIT) -> str:
    """Field paths and messages only: the input itself is untrusted and may be large."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def step_event(
    kind: StepKind,
    seq: int,
    raw_status: Mapping[str, Any] | None,
    *,
    forged: str | None = None,
) -> Event | None:
    """The event a MonitorStep's status stands for, or None while the step has not ended.

    `forged` says why the status was not written by the step's own pod (the caller checks
    provenance); such a result is never accepted: an observation is rejected, an act or
    repair step counts as failed, so the next observation verifies what really happened.
    """
    try:
        status = MonitorStepStatus.model_validate(raw_status or {})
    except ValidationError as error:
        message = f"The step wrote an invalid status: {describe_errors(error)}"
        if kind is StepKind.observe:
            return ObservationRejected(seq, message)
        return StepFailed(seq, message)
    if forged is not None and status.phase in (StepPhase.Succeeded, StepPhase.Failed):
        message = f"The step's result was not written by its own pod: {forged}"
        if kind is StepKind.observe:
            return ObservationRejected(seq, message)
        return StepFailed(seq, message)
    if status.phase is StepPhase.Failed:
        message = status.error or "The step failed without saying why."
        if kind is StepKind.observe and status.errorKind is StepErrorKind.invalidOutput:
            return ObservationRejected(seq, message)
        return StepFailed(seq, message, permanent=status.errorKind is StepErrorKind.configuration)
    if status.phase is not StepPhase.Succeeded:
        return None
    if kind is StepKind.observe:
        try:
            return ObservationAccepted(seq, Observation.model_validate(status.result or {}))
        except ValidationError as error:
            return ObservationRejected(seq, f"Invalid observation: {describe_errors(error)}")
    try:
        return StepFinished(seq, ActionResult.model_validate(status.result or {}))
    except ValidationError as error:
        return StepFailed(seq, f"Invalid action result: {describe_errors(error)}")
