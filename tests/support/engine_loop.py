"""The pure engine driven as the operator drives it: one status, a clock, every effect."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from goalkeeper.core.engine import (
    Event,
    ObservationAccepted,
    Started,
    StepFinished,
    decide,
)
from goalkeeper.core.models import MonitorSpec, MonitorStatus, Observation
from tests.support.observations import result

T0 = datetime(2026, 8, 16, 10, 15, 30, tzinfo=UTC)


class Loop:
    """Drives the engine as the operator would, keeping status and a clock; `options` go
    to every `decide` (for example `stall_checks`)."""

    def __init__(self, *, options: dict[str, Any] | None = None, **spec: object) -> None:
        self.spec = MonitorSpec.model_validate({"task": "Finish the nightly build.", **spec})
        self.status = MonitorStatus()
        self.now = T0
        self.log: list[object] = []
        self.options = options or {}

    def send(self, event: Event) -> tuple[object, ...]:
        decision = decide(self.spec, self.status, event, self.now, **self.options)
        self.status = decision.status
        self.log.extend(decision.effects)
        return decision.effects

    @property
    def seq(self) -> int:
        assert self.status.step is not None, "no step in flight"
        return self.status.step.seq

    def start(self) -> tuple[object, ...]:
        return self.send(Started(generation=1))

    def observe(self, obs: Observation) -> tuple[object, ...]:
        return self.send(ObservationAccepted(self.seq, obs))

    def finish(self, outcome: str = "succeeded", **kw: object) -> tuple[object, ...]:
        return self.send(StepFinished(self.seq, result(outcome, **kw)))

    def later(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)
