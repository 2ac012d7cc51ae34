"""Every model goalkeeper validates with, and from which the CRD schemas are generated.

All models forbid unknown fields. Field names are camelCase because they are the wire
format: the Monitor spec, the step results, and the status stored in Kubernetes.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    model_validator,
)

DEFAULT_STOP_WHEN = "Stop only when the user explicitly asks to stop."

TASK_MAX = 8000
STOP_WHEN_MAX = 4000
EVERY_MINUTES_MIN, EVERY_MINUTES_MAX, EVERY_MINUTES_DEFAULT = 1, 1440, 30
MAX_CHECKS_MIN, MAX_CHECKS_MAX, MAX_CHECKS_DEFAULT = 1, 1000, 1000

# Raw text may carry surrounding whitespace up to this many extra characters; the bound
# that counts is on the trimmed text. The raw bound keeps the API server's CEL cost low.
WHITESPACE_ALLOWANCE = 256

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"


class Model(BaseModel):
    """Base for every goalkeeper model: closed, and validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _trimmed_text(limit: int) -> Any:
    def check(value: str) -> str:
        trimmed = value.strip()
        if not trimmed:
            raise ValueError("must not be blank")
        if len(trimmed) > limit:
            raise ValueError(f"must be at most {limit} characters after trimming")
        return trimmed

    return Annotated[
        str,
        Field(min_length=1, max_length=limit + WHITESPACE_ALLOWANCE),
        AfterValidator(check),
        Field(json_schema_extra={"x-goalkeeper-trimmed": limit}),
    ]


def Text(limit: int) -> Any:  # noqa: N802 - reads as a type in annotations
    """A bounded, non-blank string (bounds checked after trimming)."""
    return _trimmed_text(limit)


def OptionalText(limit: int) -> Any:  # noqa: N802
    """A bounded string that may be empty (used where the engine reports the absence)."""
    return Annotated[str, Field(max_length=limit)]


Identifier = Annotated[str, Field(pattern=ID_PATTERN, min_length=1, max_length=200)]
ShortList = Annotated[list[Annotated[str, Field(min_length=1, max_length=1000)]], Field(max_length=64)]


# --- the public input --------------------------------------------------------------------


class MonitorSpec(Model):
    """The public input of a Monitor: exactly four fields."""

    task: Text(TASK_MAX) = Field(  # type: ignore[valid-type]
        description=(
            "What must get done, in plain words: the goal, what may and may not be "
            "touched, cost limits, required checks and allowed recovery actions. "
            f"1-{TASK_MAX} characters after trimming."
        )
    )
    stopWhen: Text(STOP_WHEN_MAX) = Field(  # type: ignore[valid-type]  # noqa: N815
        default=DEFAULT_STOP_WHEN,
        description=(
            f"When monitoring ends. 1-{STOP_WHEN_MAX} characters after trimming. "
            f"Default: {DEFAULT_STOP_WHEN!r}"
        ),
    )
    everyMinutes: StrictInt = Field(  # noqa: N815
        default=EVERY_MINUTES_DEFAULT,
        ge=EVERY_MINUTES_MIN,
        le=EVERY_MINUTES_MAX,
        description=(
            "Minutes between timed checks; applies only after an observation finds work "
            f"moving or waiting. {EVERY_MINUTES_MIN}-{EVERY_MINUTES_MAX}."
        ),
    )
    maxChecks: StrictInt = Field(  # noqa: N815
        default=MAX_CHECKS_DEFAULT,
        ge=MAX_CHECKS_MIN,
        le=MAX_CHECKS_MAX,
        description=(
            "Safety limit on accepted observations (not a finish condition). "
            f"{MAX_CHECKS_MIN}-{MAX_CHECKS_MAX}."
        ),
    )


# --- what an observe step returns --------------------------------------------------------


class Route(StrEnum):
    wait = "wait"
    act = "act"
    stop = "stop"


class GoalState(StrEnum):
    complete = "complete"
    incomplete = "incomplete"
    unknown = "unknown"


class WorkState(StrEnum):
    running = "running"
    idle = "idle"
    waiting = "waiting"
    failed = "failed"
    blocked = "blocked"
    complete = "complete"
    unknown = "unknown"


class ObservedStopReason(StrEnum):
    """Why an observation asks to stop: a closed set."""

    goalComplete = "goalComplete"  # noqa: N815
    materialBlocker = "materialBlocker"  # noqa: N815
    outsideAuthority = "outsideAuthority"  # noqa: N815
    paidActionNotApproved = "paidActionNotApproved"  # noqa: N815
    protectedContractChange = "protectedContractChange"  # noqa: N815
    credentialWithoutAuthority = "credentialWithoutAuthority"  # noqa: N815
    invalidCheckpoint = "invalidCheckpoint"  # noqa: N815
    userRequested = "userRequested"  # noqa: N815


class StopReason(StrEnum):
    """Why a monitor stopped: every observed reason plus those the engine decides itself."""

    goalComplete = "goalComplete"  # noqa: N815
    materialBlocker = "materialBlocker"  # noqa: N815
    outsideAuthority = "outsideAuthority"  # noqa: N815
    paidActionNotApproved = "paidActionNotApproved"  # noqa: N815
    protectedContractChange = "protectedContractChange"  # noqa: N815
    credentialWithoutAuthority = "credentialWithoutAuthority"  # noqa: N815
    invalidCheckpoint = "invalidCheckpoint"  # noqa: N815
    userRequested = "userRequested"  # noqa: N815
    repairRepeated = "repairRepeated"  # noqa: N815
    safetyLimit = "safetyLimit"  # noqa: N815
    blocked = "blocked"
    cancelled = "cancelled"


class Money(Model):
    amount: StrictFloat | StrictInt = Field(ge=0, le=1e12, description="Amount, not negative.")
    currency: str = Field(
        default="USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code, e.g. USD."
    )


class Contract(Model):
    """The authority the observation found in the task, stop rule and cluster instructions."""

    goal: Text(TASK_MAX) = Field(description="The complete goal.")  # type: ignore[valid-type]
    allowedFiles: ShortList = Field(default_factory=list)  # noqa: N815
    allowedSystems: ShortList = Field(default_factory=list)  # noqa: N815
    allowedResources: ShortList = Field(default_factory=list)  # noqa: N815
    forbiddenChanges: ShortList = Field(default_factory=list)  # noqa: N815
    costCeiling: Money | None = Field(  # noqa: N815
        default=None, description="Cumulative cost ceiling; null when the task sets none."
    )
    protectedContracts: ShortList = Field(  # noqa: N815
        default_factory=list,
        description="Provider, runtime, method and data contracts that must not change.",
    )
    requiredChecks: ShortList = Field(default_factory=list)  # noqa: N815
    stopConditions: ShortList = Field(default_factory=list)  # noqa: N815
    allowedRecoveryActions: ShortList = Field(default_factory=list)  # noqa: N815


class ActionKind(StrEnum):
    advance = "advance"
    recover = "recover"
    repair = "repair"


class AuthorizedAction(Model):
    """A safe action the user has already authorized, listed even when none is needed now."""

    id: Identifier = Field(description="Stable id, referenced by action requests.")
    description: Text(1000)  # type: ignore[valid-type]
    paid: StrictBool = Field(default=False, description="Whether running it costs money.")


class TrackStatus(StrEnum):
    running = "running"
    waiting = "waiting"
    idle = "idle"
    paused = "paused"
    blocked = "blocked"
    failed = "failed"
    complete = "complete"
    unknown = "unknown"


TERMINAL_TRACK_STATUSES = frozenset({TrackStatus.complete, TrackStatus.failed, TrackStatus.unknown})

Number = Annotated[StrictFloat | StrictInt, Field(ge=0, le=1e15)]


class ProgressTrack(Model):
    """One independent progress track, as read from the target."""

    key: Identifier
    label: Text(200)  # type: ignore[valid-type]
    status: TrackStatus
    completed: Number | None = None
    total: Number | None = None
    unit: Annotated[str, Field(max_length=40)] = ""
    sourceEta: datetime | None = Field(  # noqa: N815
        default=None, description="An ETA the target itself publishes; never an invented one."
    )
    observedAt: datetime = Field(description="When the target's value was observed.")  # noqa: N815


class ActionRequest(Model):
    """One precise action, with the authority that covers it."""

    kind: ActionKind
    incomplete: Text(2000) = Field(description="What is incomplete.")  # type: ignore[valid-type]
    evidence: Text(4000) = Field(description="Observed facts that prove it.")  # type: ignore[valid-type]
    action: Text(2000) = Field(description="The exact next action.")  # type: ignore[valid-type]
    authorizedActionId: Annotated[str, Field(max_length=200)] = Field(  # noqa: N815
        description="The id of the authorized action that covers this one."
    )
    authorityBasis: OptionalText(2000) = Field(  # type: ignore[valid-type]  # noqa: N815
        description="Why existing authority covers the action."
    )
    mutationSet: Annotated[  # noqa: N815
        list[Annotated[str, Field(min_length=1, max_length=1000)]], Field(max_length=64)
    ] = Field(description="Files, systems or resources that may change.")
    verification: Text(2000) = Field(description="How to verify the action.")  # type: ignore[valid-type]
    failureId: Identifier = Field(description="Stable id of the failure, from observed facts.")  # noqa: N815
    targetStateId: Identifier = Field(  # noqa: N815
        description="Stable id of the relevant target state, from observed facts."
    )
    estimatedCost: Money | None = Field(default=None, description="For paid work.")  # noqa: N815
    approval: OptionalText(1000) | None = Field(  # type: ignore[valid-type]
        default=None, description="The spending approval a paid action relies on."
    )


class Observation(Model):
    """What an observe step returns."""

    route: Route
    goal: GoalState
    work: WorkState
    observation: Text(8000) = Field(description="Current facts.")  # type: ignore[valid-type]
    report: Text(4000) = Field(description="Concise update for the user.")  # type: ignore[valid-type]
    reason: Text(2000) = Field(description="Why this route.")  # type: ignore[valid-type]
    contract: Contract
    authorizedActions: Annotated[list[AuthorizedAction], Field(max_length=64)] = Field(  # noqa: N815
        default_factory=list
    )
    progress: Annotated[list[ProgressTrack], Field(min_length=1, max_length=256)] | None = None
    observedSpend: Money | None = Field(  # noqa: N815
        default=None, description="Spend so far, as the target's own records show it."
    )
    action: ActionRequest | None = None
    stopReason: ObservedStopReason | None = None  # noqa: N815

    @model_validator(mode="after")
    def _route_fields(self) -> Self:
        if self.route is Route.act and self.action is None:
            raise ValueError("action is required when route is 'act'")
        if self.route is not Route.act and self.action is not None:
            raise ValueError("action is allowed only when route is 'act'")
        if self.route is Route.stop and self.stopReason is None:
            raise ValueError("stopReason is required when route is 'stop'")
        if self.route is not Route.stop and self.stopReason is not None:
            raise ValueError("stopReason is allowed only when route is 'stop'")
        if self.progress is not None:
            keys = [track.key for track in self.progress]
            duplicates = sorted({key for key in keys if keys.count(key) > 1})
            if duplicates:
                raise ValueError(f"progress track keys must be unique: {', '.join(duplicates)}")
        ids = [a.id for a in self.authorizedActions]
        if len(ids) != len(set(ids)):
            raise ValueError("authorizedActions ids must be unique")
        return self


class Outcome(StrEnum):
    succeeded = "succeeded"
    failed = "failed"
    blocked = "blocked"


class ActionResult(Model):
    """What an act or repair step returns."""

    outcome: Outcome
    evidence: Text(4000) = Field(description="Factual evidence of the outcome.")  # type: ignore[valid-type]
    changed: ShortList = Field(default_factory=list, description="What changed.")
    actualCost: Money | None = Field(default=None, description="Actual cost where paid.")  # noqa: N815
