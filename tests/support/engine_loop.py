"""The pure engine driven as the operator drives it: one status, a clock, every effect."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

from goalkeeper.core.engine import (
    AuthorityExtracted,
    Event,
    LaunchStep,
    Notify,
    ObservationAccepted,
    Started,
    StepFinished,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    AuthorityExtraction,
    MonitorSpec,
    MonitorStatus,
    Observation,
    StepKind,
)
from goalkeeper.core.policy import Context, Policy
from tests.support.observations import TASK, granting, result
from tests.support.observations import extraction as standard_extraction

T0 = datetime(2026, 8, 16, 10, 15, 30, tzinfo=UTC)
_POLICY = {f.name for f in fields(Policy)}


def knobs(**options: Any) -> dict[str, Any]:
    """`decide`'s policy and context from one set of keywords (`stall_checks`,
    `namespace`, ...), each sorted into the value it belongs to."""
    policy = {k: v for k, v in options.items() if k in _POLICY}
    context = {k: v for k, v in options.items() if k not in _POLICY}
    return {"policy": Policy(**policy), "context": Context(**context)}


def _reading(effect: object) -> bool:
    """The task reading's own effects, which `Loop.log` leaves out."""
    if isinstance(effect, LaunchStep):
        return effect.kind is StepKind.extract
    return isinstance(effect, Notify) and effect.reason == "AuthorityRecorded"


class Loop:
    """Drives the engine as the operator would, keeping status and a clock; `options` go
    to every `decide` (for example `stall_checks`).

    `start()` answers the task reading that precedes the first observation with
    `extraction` (default: the standard grants of `TASK`). With `extraction=None` the
    reading waits for the first `observe()`, which answers it as if the task had granted
    exactly the authority that observation states (`granting`), for tests about what
    happens once authority is recorded."""

    def __init__(
        self,
        *,
        options: dict[str, Any] | None = None,
        extraction: AuthorityExtraction | dict[str, Any] | None = None,
        granted_by_first_observation: bool = False,
        **spec: object,
    ) -> None:
        self.spec = MonitorSpec.model_validate({"task": TASK, **spec})
        self.status = MonitorStatus()
        self.now = T0
        self.log: list[object] = []
        self.options = options or {}
        self.by_first = granted_by_first_observation
        self.extraction = AuthorityExtraction.model_validate(extraction or standard_extraction())

    def send(self, event: Event) -> tuple[object, ...]:
        decision = decide(self.spec, self.status, event, self.now, **knobs(**self.options))
        self.status = decision.status
        self.log.extend(e for e in decision.effects if not _reading(e))
        return decision.effects

    @property
    def seq(self) -> int:
        assert self.status.step is not None, "no step in flight"
        return self.status.step.seq

    def reading(self) -> bool:
        return self.status.step is not None and self.status.step.kind is StepKind.extract

    def start(self) -> tuple[object, ...]:
        effects = self.send(Started(generation=1))
        if self.reading() and not self.by_first:
            return self.extract()
        return effects

    def extract(self, found: AuthorityExtraction | None = None) -> tuple[object, ...]:
        """Answer the task reading in flight."""
        return self.send(AuthorityExtracted(self.seq, found or self.extraction))

    def observe(self, obs: Observation) -> tuple[object, ...]:
        if self.reading():
            words, found = granting(obs)
            self.spec = self.spec.model_copy(update={"task": f"{self.spec.task} {words}"})
            self.extract(found)
        return self.send(ObservationAccepted(self.seq, obs))

    def finish(self, outcome: str = "succeeded", **kw: object) -> tuple[object, ...]:
        return self.send(StepFinished(self.seq, result(outcome, **kw)))

    def later(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)

    def retry(self) -> tuple[object, ...]:
        """Let the retry the schedule holds come due (a failed or invalid check's)."""
        schedule = self.status.schedule
        assert schedule is not None, "no retry is scheduled"
        self.now = max(self.now, schedule.nextCheckAt)
        return self.send(TimerDue())
