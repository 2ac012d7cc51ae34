"""What the engine takes (events) and gives (effects, in a decision). Plain values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from goalkeeper.core.models import (
    ActionResult,
    AuthorityExtraction,
    MonitorApprovalSpec,
    MonitorStatus,
    ObjectFacts,
    Observation,
    Schedule,
    StepInput,
    StepKind,
    StepUsage,
    StopReason,
    WatchTarget,
)

# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """The monitor was created, its spec was edited, or the operator resumed it."""

    generation: int | None = None


@dataclass(frozen=True)
class ObservationAccepted:
    seq: int
    observation: Observation
    usage: StepUsage | None = None
    # What the goal's objects held when it was made, as the step's code read them (a digest).
    facts_print: str = ""
    # The named objects as the step's code read them: a grant's condition is held to them.
    facts: tuple[ObjectFacts, ...] = ()


@dataclass(frozen=True)
class ObservationRejected:
    seq: int
    error: str
    usage: StepUsage | None = None


@dataclass(frozen=True)
class AuthorityExtracted:
    """An extract step read the person's words and quoted the grants it found."""

    seq: int
    extraction: AuthorityExtraction
    usage: StepUsage | None = None


@dataclass(frozen=True)
class ExtractionRejected:
    seq: int
    error: str
    usage: StepUsage | None = None


@dataclass(frozen=True)
class StepFinished:
    """An act or repair step ended with a result."""

    seq: int
    result: ActionResult
    usage: StepUsage | None = None


@dataclass(frozen=True)
class StepFailed:
    """A step ended without a result; `permanent` when retrying cannot help (an object of
    someone else's under the step's name), which stops the run at once. `effect_unknown`
    when the step left no result that can be taken and so no word on what it did: its Job
    failed or went, or its MonitorStep vanished, before it wrote one, or the pod its result
    names is gone, so the result cannot be verified. What an act or repair step did is then
    unknown. Otherwise the step reported a failure itself, or never started."""

    seq: int
    message: str
    permanent: bool = False
    usage: StepUsage | None = None
    effect_unknown: bool = False


@dataclass(frozen=True)
class TimerDue:
    pass


@dataclass(frozen=True)
class TargetChanged:
    """A watched target object changed materially while the monitor waits (`change`
    says how, in a few words: `Complete`, `deleted`)."""

    target: WatchTarget
    change: str


@dataclass(frozen=True)
class ApprovalAnswered:
    """A MonitorApproval named `name` answers the monitor's pending approval request."""

    name: str
    answer: MonitorApprovalSpec
    # The uids its ownerReferences name, and this Monitor's own: a name is reused by a
    # recreated Monitor, its uid never is.
    owners: tuple[str, ...]
    monitor_uid: str


@dataclass(frozen=True)
class ControlsChanged:
    """A person paused, resumed or asked for a check (the decision's `Context.controls`
    says what the annotations set now)."""


@dataclass(frozen=True)
class Cancelled:
    pass


Event = (
    Started
    | ObservationAccepted
    | ObservationRejected
    | AuthorityExtracted
    | ExtractionRejected
    | StepFinished
    | StepFailed
    | TimerDue
    | TargetChanged
    | ApprovalAnswered
    | ControlsChanged
    | Cancelled
)

# --- effects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchStep:
    seq: int
    kind: StepKind
    input: StepInput
    # When the decision launched it: the step's startedAt, kept on the MonitorStep so a
    # timer's step, launched without a status write, is found again as it was launched.
    at: datetime


@dataclass(frozen=True)
class PublishSchedule:
    schedule: Schedule


@dataclass(frozen=True)
class EmitReport:
    check: int
    text: str
    # One line for `kubectl get events`; the full report stays in status.
    summary: str = ""
    # A stop report for a check already reported (maxChecks lowered below the count):
    # its own Event, so the check's first report stays the one report of that check.
    final: bool = False


@dataclass(frozen=True)
class StopMonitor:
    reason: StopReason
    message: str
    # What the user can do about it, for the Stopped Event.
    hint: str = ""


@dataclass(frozen=True)
class Notify:
    """Something the user would want to know, as an Event on the Monitor, once (`what`
    names it uniquely within the monitor's life)."""

    what: str
    reason: str
    message: str
    warning: bool = False


Effect = LaunchStep | PublishSchedule | EmitReport | StopMonitor | Notify


@dataclass(frozen=True)
class Decision:
    status: MonitorStatus
    effects: tuple[Effect, ...]
    # True when the status changed only by the timer launching an observe step: the
    # step is found again under its deterministic name (`timer_launched`), so the
    # launch needs no status write and a timed check costs one write, when it is accepted.
    unrecorded: bool = False
