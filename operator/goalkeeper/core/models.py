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
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from goalkeeper.core.controls import CHECK_NOW_MAX

# The layout of MonitorStatus this version writes; core/migrate.py reads every earlier one.
STATUS_SCHEMA_VERSION = 2

DEFAULT_STOP_WHEN = "Stop only when the user explicitly asks to stop."

TASK_MAX = 8000
STOP_WHEN_MAX = 4000
EVERY_MINUTES_MIN, EVERY_MINUTES_MAX, EVERY_MINUTES_DEFAULT = 1, 1440, 30
MAX_CHECKS_MIN, MAX_CHECKS_MAX, MAX_CHECKS_DEFAULT = 1, 1000, 1000
# Completed repairs remembered per run.
REPAIRS_KEPT = 64

# The whitespace trimmed from bounded text: what CEL's trim() removes (Go's unicode.IsSpace),
# so the model and the API server count the same characters. Python's own strip() would
# also remove the separators U+001C-U+001F.
WHITESPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"


def _without_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class Model(BaseModel):
    """Base for every goalkeeper model: closed, and validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _trimmed(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        trimmed = value.strip(WHITESPACE)
        if not trimmed:
            raise ValueError("must not be blank")
        if len(trimmed) > limit:
            raise ValueError(f"must be at most {limit} characters after trimming")
        return trimmed

    return AfterValidator(check)


def _text_field(limit: int) -> Any:
    # Any amount of surrounding whitespace is allowed, so the raw text has no bound here.
    # The schema's maxLength is the bound on the text meant (what a model should write);
    # the marker says it counts after trimming, and crds.py makes it a CEL rule.
    return Field(
        min_length=1,
        json_schema_extra={"maxLength": limit, "x-goalkeeper-trimmed": limit},
    )


# Non-blank text, bounded after trimming.
Text200 = Annotated[str, _text_field(200), _trimmed(200)]
Text1000 = Annotated[str, _text_field(1000), _trimmed(1000)]
Text2000 = Annotated[str, _text_field(2000), _trimmed(2000)]
Text4000 = Annotated[str, _text_field(4000), _trimmed(4000)]
Text8000 = Annotated[str, _text_field(8000), _trimmed(8000)]
# Text that may be empty, where the engine itself reports the absence.
MaybeText1000 = Annotated[str, Field(max_length=1000)]
MaybeText2000 = Annotated[str, Field(max_length=2000)]

Identifier = Annotated[str, Field(pattern=ID_PATTERN, min_length=1, max_length=200)]
# A list of short entries: 32 at most, 500 characters each, 4,000 in all. With these
# bounds any valid observation fits a Monitor's status budget (core/budget.py).
LIST_ENTRIES, LIST_ENTRY_MAX, LIST_TOTAL_MAX = 32, 500, 4000


def _list_total(entries: list[str]) -> list[str]:
    total = sum(len(entry) for entry in entries)
    if total > LIST_TOTAL_MAX:
        raise ValueError(f"entries must total at most {LIST_TOTAL_MAX} characters, got {total}")
    return entries


ShortList = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=LIST_ENTRY_MAX)]],
    Field(max_length=LIST_ENTRIES),
    AfterValidator(_list_total),
]
# Progress tracks and authorized actions an observation may list.
TRACKS_MAX, ACTIONS_MAX = 64, 32


# --- the public input --------------------------------------------------------------------


class MonitorSpec(Model):
    """The public input of a Monitor: exactly four fields."""

    task: Text8000 = Field(
        description=(
            "What must get done, in plain words: the goal, what may and may not be "
            "touched, cost limits, required checks and allowed recovery actions. "
            f"1-{TASK_MAX} characters after trimming."
        )
    )
    stopWhen: Text4000 = Field(
        default=DEFAULT_STOP_WHEN,
        description=(
            f"When monitoring ends. 1-{STOP_WHEN_MAX} characters after trimming. "
            f"Default: {DEFAULT_STOP_WHEN!r}"
        ),
    )
    everyMinutes: StrictInt = Field(
        default=EVERY_MINUTES_DEFAULT,
        ge=EVERY_MINUTES_MIN,
        le=EVERY_MINUTES_MAX,
        description=(
            "Minutes between timed checks; applies only after an observation finds work "
            f"moving or waiting. {EVERY_MINUTES_MIN}-{EVERY_MINUTES_MAX}."
        ),
    )
    maxChecks: StrictInt = Field(
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
    """Why an observation asks to stop: a closed set. An observe step answers goalComplete,
    materialBlocker, outsideAuthority or paidActionNotApproved; the others are read only
    from observations stored by earlier versions."""

    goalComplete = "goalComplete"
    materialBlocker = "materialBlocker"
    outsideAuthority = "outsideAuthority"
    paidActionNotApproved = "paidActionNotApproved"
    protectedContractChange = "protectedContractChange"
    credentialWithoutAuthority = "credentialWithoutAuthority"
    userRequested = "userRequested"


# The stops an observe step may answer. The others are the engine's to give, each from one
# guard or answer: a protected contract or a credential an act would change, a person who
# stopped the run.
ANSWERED_STOPS = (
    ObservedStopReason.goalComplete,
    ObservedStopReason.materialBlocker,
    ObservedStopReason.outsideAuthority,
    ObservedStopReason.paidActionNotApproved,
)


class StopReason(StrEnum):
    """Why a monitor stopped: every observed reason plus those the engine decides itself
    (`invalidCheckpoint` only for a checkpoint the target itself reports unusable)."""

    goalComplete = "goalComplete"
    materialBlocker = "materialBlocker"
    outsideAuthority = "outsideAuthority"
    paidActionNotApproved = "paidActionNotApproved"
    protectedContractChange = "protectedContractChange"
    credentialWithoutAuthority = "credentialWithoutAuthority"
    invalidCheckpoint = "invalidCheckpoint"
    userRequested = "userRequested"
    repairRepeated = "repairRepeated"
    safetyLimit = "safetyLimit"
    blocked = "blocked"
    cancelled = "cancelled"
    failed = "failed"


class Money(Model):
    amount: StrictFloat | StrictInt = Field(ge=0, le=1e12, description="Amount, not negative.")
    currency: str = Field(
        default="USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code, e.g. USD."
    )


class Contract(Model):
    """The authority the observation found in the task, stop rule and cluster instructions."""

    goal: Text8000 = Field(description="The complete goal.")
    allowedFiles: ShortList = Field(default_factory=list)
    allowedSystems: ShortList = Field(default_factory=list)
    allowedResources: ShortList = Field(default_factory=list)
    forbiddenChanges: ShortList = Field(default_factory=list)
    costCeiling: Money | None = Field(
        default=None, description="Cumulative cost ceiling; null when the task sets none."
    )
    protectedContracts: ShortList = Field(
        default_factory=list,
        description="Provider, runtime, method and data contracts that must not change.",
    )
    requiredChecks: ShortList = Field(default_factory=list)
    stopConditions: ShortList = Field(default_factory=list)
    allowedRecoveryActions: ShortList = Field(default_factory=list)


class ActionKind(StrEnum):
    advance = "advance"
    recover = "recover"
    repair = "repair"


class GrantVerb(StrEnum):
    """The closed vocabulary of what a Monitor may change."""

    resume = "resume"
    suspend = "suspend"
    scale = "scale"
    restart = "restart"
    deleteFailedPods = "delete-failed-pods"
    rerun = "rerun"
    setKey = "set-key"
    repair = "repair"


class AuthorizedAction(Model):
    """A safe action the user has already authorized, listed even when none is needed now."""

    id: Identifier = Field(description="Stable id, referenced by action requests.")
    description: Text1000
    paid: StrictBool = Field(default=False, description="Whether running it costs money.")
    verb: GrantVerb | None = Field(default=None, description="The verb of the typed grant it uses.")


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
    label: Text200
    status: TrackStatus
    completed: Number | None = None
    total: Number | None = None
    unit: Annotated[str, Field(max_length=40)] = ""
    sourceEta: datetime | None = Field(
        default=None, description="An ETA the target itself publishes; never an invented one."
    )
    observedAt: datetime = Field(description="When the target's value was observed.")


class ActionRequest(Model):
    """One precise action, with the authority that covers it."""

    kind: ActionKind
    incomplete: Text2000 = Field(description="What is incomplete.")
    evidence: Text4000 = Field(description="Observed facts that prove it.")
    action: Text2000 = Field(description="The exact next action.")
    authorizedActionId: Annotated[str, Field(max_length=200)] = Field(
        description="The id of the authorized action that covers this one."
    )
    authorityBasis: MaybeText2000 = Field(description="Why existing authority covers the action.")
    mutationSet: ShortList = Field(description="Files, systems or resources that may change.")
    verification: Text2000 = Field(description="How to verify the action.")
    failureId: Identifier = Field(description="Stable id of the failure, from observed facts.")
    targetStateId: Identifier = Field(
        description="Stable id of the relevant target state, from observed facts."
    )
    estimatedCost: Money | None = Field(default=None, description="For paid work.")
    approval: MaybeText1000 | None = Field(
        default=None, description="The spending approval a paid action relies on."
    )


# Object names as Kubernetes allows them (DNS subdomains).
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# Target objects one observation may name for a wake.
WATCH_MAX = 16


class WatchTarget(Model):
    """An object in the Monitor's namespace whose change would change the route."""

    apiVersion: Annotated[str, Field(pattern=r"^([a-z0-9][a-z0-9.-]{0,252}/)?v[0-9a-z]{1,20}$")]
    kind: Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{0,62}$")]
    name: Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)]

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"


class Observation(Model):
    """What an observe step returns."""

    route: Route
    goal: GoalState
    work: WorkState
    observation: Text8000 = Field(description="Current facts.")
    report: Text4000 = Field(description="Concise update for the user.")
    reason: Text2000 = Field(description="Why this route.")
    # The task reading pins the authority; an observation may still restate it (a narrowing
    # is recorded, a widening refused), but its schema asks for none: the model does not
    # copy what the operator already holds.
    contract: SkipJsonSchema[Contract | None] = None
    authorizedActions: SkipJsonSchema[
        Annotated[list[AuthorizedAction], Field(max_length=ACTIONS_MAX)] | None
    ] = None
    progress: Annotated[list[ProgressTrack], Field(min_length=1, max_length=TRACKS_MAX)] | None = (
        None
    )
    observedSpend: Money | None = Field(
        default=None, description="Spend so far, as the target's own records show it."
    )
    action: ActionRequest | None = None
    stopReason: ObservedStopReason | None = None
    watch: Annotated[list[WatchTarget], Field(max_length=WATCH_MAX)] = Field(
        default_factory=list,
        description="Target objects whose change would change the route: while the "
        "monitor waits, a change of one wakes it before the timer.",
    )

    def unanswerable_stop(self) -> str | None:
        """Why this observation's stop reason is not an observe step's to give; else None."""
        if self.stopReason is None or self.stopReason in ANSWERED_STOPS:
            return None
        return (
            f"stopReason '{self.stopReason.value}' is not an observation's to give (the "
            "operator gives it when its guards or a person decide); stop with one of "
            f"{', '.join(r.value for r in ANSWERED_STOPS)}, or take another route"
        )

    def without_authority(self) -> Observation:
        """This observation without its restatement of the authority: what is stored and
        handed to the next step, the recorded authority being kept on its own."""
        return self.model_copy(update={"contract": None, "authorizedActions": None})

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
        ids = [a.id for a in self.authorizedActions or []]
        if len(ids) != len(set(ids)):
            raise ValueError("authorizedActions ids must be unique")
        self._route_agrees_with_states()
        return self

    def _route_agrees_with_states(self) -> None:
        """A route must fit the goal and work states the same observation reports."""
        if self.route in (Route.act, Route.wait) and self.goal is GoalState.complete:
            raise ValueError(
                f"route '{self.route.value}' needs goal 'incomplete' or 'unknown', "
                "got 'complete'; a complete goal takes route 'stop'"
            )
        done = self.goal is GoalState.complete
        if self.stopReason is ObservedStopReason.goalComplete and not done:
            raise ValueError(
                f"stopReason 'goalComplete' needs goal 'complete', got '{self.goal.value}'"
            )
        if self.route is Route.wait and self.work not in (WorkState.running, WorkState.waiting):
            raise ValueError(
                f"route 'wait' needs work 'running' or 'waiting', got '{self.work.value}'"
            )
        # Starting or resuming work that already runs would do it twice.
        advance = self.action is not None and self.action.kind is ActionKind.advance
        if advance and self.work is not WorkState.idle:
            raise ValueError(
                f"an 'advance' action needs work 'idle', got '{self.work.value}'; "
                "work that runs or waits takes route 'wait'"
            )


class Outcome(StrEnum):
    succeeded = "succeeded"
    failed = "failed"
    blocked = "blocked"


class ActionOutcome(StrEnum):
    """What became of an action, as the monitor records it: its step's own outcome, or
    `unknown` when the step ended without a result (its Job failed or went, its
    MonitorStep vanished), so whether the action took effect is for the next observation
    to find."""

    succeeded = "succeeded"
    failed = "failed"
    blocked = "blocked"
    unknown = "unknown"


# --- what an extract step returns -------------------------------------------------------

QUOTE_MAX = 1000
# Grants one extraction may list, per kind; with the quote bound they fit the status budget.
GRANTS_MAX = 16

Quote = Annotated[str, Field(min_length=1, max_length=QUOTE_MAX)]


class QuotedEntry(Model):
    """One grant of the contract, with the person's own words that grant it."""

    entry: Annotated[str, Field(min_length=1, max_length=LIST_ENTRY_MAX)] = Field(
        description="The allowed thing, e.g. jobs/render-part-2."
    )
    quote: Quote = Field(
        description="The exact words of the task or stop rule that allow it, copied."
    )


class QuotedAction(Model):
    """One authorized action, with the person's own words that authorize it."""

    id: Identifier = Field(description="Stable id, referenced by action requests.")
    description: Text1000
    paid: StrictBool = Field(default=False, description="Whether running it costs money.")
    quote: Quote = Field(
        description="The exact words of the task or stop rule that allow it, copied."
    )


class QuotedMoney(Model):
    amount: StrictFloat | StrictInt = Field(ge=0, le=1e12)
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    quote: Quote = Field(description="The exact words that set the ceiling, copied.")


QuotedList = Annotated[list[QuotedEntry], Field(max_length=GRANTS_MAX)]


class AuthorityExtraction(Model):
    """What an extract step returns: the authority read from the person's words alone.

    Every grant quotes the words that give it; the engine keeps only grants whose quote
    is in the spec and does not forbid them (core/authority.py). Restrictions narrow, so
    they need no quote.
    """

    goal: Text8000 = Field(description="The complete goal, in the task's words.")
    allowedResources: QuotedList = Field(default_factory=list)
    allowedSystems: QuotedList = Field(default_factory=list)
    allowedFiles: QuotedList = Field(default_factory=list)
    allowedRecoveryActions: QuotedList = Field(default_factory=list)
    authorizedActions: Annotated[list[QuotedAction], Field(max_length=GRANTS_MAX)] = Field(
        default_factory=list
    )
    costCeiling: QuotedMoney | None = None
    forbiddenChanges: ShortList = Field(default_factory=list)
    protectedContracts: ShortList = Field(default_factory=list)
    requiredChecks: ShortList = Field(default_factory=list)
    stopConditions: ShortList = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> Self:
        ids = [a.id for a in self.authorizedActions]
        if len(ids) != len(set(ids)):
            raise ValueError("authorizedActions ids must be unique")
        return self


# A record holds every grant one extraction can make (four lists, the actions, a ceiling),
# each quote cut to this length: bounded, so any record fits a Monitor's status budget.
RECORD_ENTRIES, RECORD_QUOTE_MAX = GRANTS_MAX * 5 + 1, 300


class Words(StrEnum):
    """Whose words a quote is: the Monitor's author's, or the operators' doctrine."""

    task = "task"
    stopWhen = "stopWhen"
    clusterInstructions = "clusterInstructions"
    namespaceInstructions = "namespaceInstructions"
    person = "person"


# The namespace admin's instructions: this key of this ConfigMap in the Monitor's namespace.
INSTRUCTIONS_CONFIGMAP, INSTRUCTIONS_KEY, INSTRUCTIONS_MAX = (
    "goalkeeper-instructions",
    "instructions",
    4000,
)


class Instructions(Model):
    """The operators' doctrine for a spec generation: the cluster admin's text (chart value
    `instructions`) and the namespace admin's (ConfigMap goalkeeper-instructions), read
    when the task is read and pinned with its authority."""

    cluster: Annotated[str, Field(max_length=INSTRUCTIONS_MAX)] = ""
    namespace: Annotated[str, Field(max_length=INSTRUCTIONS_MAX)] = ""
    namespaceVersion: Annotated[str, Field(max_length=64)] = Field(
        default="",
        description="The resourceVersion of ConfigMap goalkeeper-instructions as read; empty "
        "when the namespace has none.",
    )


class Grant(Model):
    """A grant the engine kept, with the quote that gave it and whose words those are."""

    field: Annotated[str, Field(max_length=40)]
    entry: Annotated[str, Field(max_length=LIST_ENTRY_MAX)]
    quote: Annotated[str, Field(min_length=1, max_length=RECORD_QUOTE_MAX)]
    source: Words | None = Field(default=None, description="Whose words the quote is.")


# Typed grants and prohibitions one record holds, and unclear sentences.
TYPED_MAX, UNCLEAR_MAX = GRANTS_MAX, GRANTS_MAX


class ObjectRef(Model):
    """One object by kind and literal name."""

    kind: Annotated[str, Field(pattern=r"^[A-Z][A-Za-z]{1,62}$")]
    name: Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)]
    namespace: Annotated[str, Field(max_length=63)] = Field(
        default="", description="Empty: the Monitor's namespace."
    )

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.name}"


class ConditionState(StrEnum):
    succeeded = "succeeded"
    failed = "failed"
    available = "available"
    suspended = "suspended"


class GrantCondition(Model):
    """A state of a named object that must hold before a grant applies."""

    object: ObjectRef
    state: ConditionState

    def __str__(self) -> str:
        return f"{self.object.kind.lower()} {self.object.name} {self.state.value}"


class TypedGrant(Model):
    """One grant of the closed vocabulary: a verb, exactly one object, its bounds and
    condition, and the person's words it was read from."""

    id: Annotated[str, Field(max_length=200)]
    verb: GrantVerb
    object: ObjectRef | None = Field(default=None, description="None only for a repair.")
    scope: Annotated[str, Field(max_length=200)] = Field(
        default="", description="A repair: what the words say it repairs."
    )
    replicas: Annotated[int, Field(ge=0, le=100000)] | None = None
    minReplicas: Annotated[int, Field(ge=0, le=100000)] | None = None
    maxReplicas: Annotated[int, Field(ge=0, le=100000)] | None = None
    key: Annotated[str, Field(max_length=253)] | None = None
    values: Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=8)] = Field(
        default_factory=list
    )
    times: Annotated[int, Field(ge=1, le=100)] | None = Field(
        default=None, description="How many times it may be done; None: no count."
    )
    condition: GrantCondition | None = None
    gitopsAcknowledged: StrictBool = Field(
        default=False, description="The words say a GitOps controller manages the object."
    )
    paid: StrictBool = False
    quote: Annotated[str, Field(min_length=1, max_length=RECORD_QUOTE_MAX)]
    source: Words | None = None
    confirmedBy: Annotated[str, Field(max_length=600)] = Field(
        default="", description="Set when a person added the grant (goalkeeper authority --grant)."
    )

    def namespace_written(self) -> bool:
        """Whether the words name the object's namespace (else it is the Monitor's)."""
        return self.object is not None and bool(self.object.namespace)


class TypedProhibition(Model):
    """What the words forbid: a verb (None: any change) on one object, or on every object
    but those excepted."""

    verb: GrantVerb | None = None
    forbids: Annotated[list[GrantVerb], Field(max_length=len(GrantVerb))]
    object: ObjectRef | None = Field(default=None, description="None: every object.")
    exceptFor: Annotated[list[ObjectRef], Field(max_length=8)] = Field(default_factory=list)
    quote: Annotated[str, Field(min_length=1, max_length=RECORD_QUOTE_MAX)]
    source: Words | None = None
    confirmedBy: Annotated[str, Field(max_length=600)] = ""


class UnclearWords(Model):
    """A sentence the reading could not parse whole and that may bear on authority."""

    sentence: Annotated[str, Field(max_length=RECORD_QUOTE_MAX)]
    why: Annotated[str, Field(max_length=LIST_ENTRY_MAX)]
    source: Words | None = None


# --- the stop rule as typed predicates (core/goals.py reads and evaluates it) -----------


class LeafKind(StrEnum):
    jobSucceeded = "jobSucceeded"
    jobFailed = "jobFailed"
    jobRunning = "jobRunning"
    jobSuspended = "jobSuspended"
    workloadAvailable = "workloadAvailable"  # availableReplicas >= count (None: all desired)
    workloadReplicas = "workloadReplicas"  # spec replicas == count
    workloadUpdated = "workloadUpdated"  # rollout finished: updated == replicas == available
    podsRestarting = "podsRestarting"  # a pod of the workload or Job crash-loops
    podsStartedAfter = "podsStartedAfter"  # every running pod started after a write or the run
    cronjobSuspended = "cronjobSuspended"
    cronjobLastRunSucceeded = "cronjobLastRunSucceeded"
    configMapKey = "configMapKey"  # data[key] == value
    checksAtLeast = "checksAtLeast"
    unchangedFor = "unchangedFor"  # count checks in a row with nothing changed
    elapsedAtLeast = "elapsedAtLeast"  # minutes since the run started
    judged = "judged"  # only a model can tell


GROUPS_MAX = LEAVES_MAX = GIVE_UP_MAX = UNCLEAR_GOAL_MAX = 8

_JOB = frozenset({"Job"})
_WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet"})
# The kinds of object each leaf is about; a leaf of no kind here names no object.
_FITS: dict[LeafKind, frozenset[str]] = {
    LeafKind.jobSucceeded: _JOB,
    LeafKind.jobFailed: _JOB,
    LeafKind.jobRunning: _JOB,
    LeafKind.jobSuspended: _JOB,
    LeafKind.workloadAvailable: _WORKLOADS,
    LeafKind.workloadReplicas: frozenset({"Deployment", "StatefulSet"}),
    LeafKind.workloadUpdated: _WORKLOADS,
    LeafKind.podsRestarting: _WORKLOADS | _JOB,
    LeafKind.podsStartedAfter: _WORKLOADS,
    LeafKind.cronjobSuspended: frozenset({"CronJob"}),
    LeafKind.cronjobLastRunSucceeded: frozenset({"CronJob"}),
    LeafKind.configMapKey: frozenset({"ConfigMap"}),
}
_LIMITS = frozenset({LeafKind.checksAtLeast, LeafKind.unchangedFor, LeafKind.elapsedAtLeast})
_COUNTED = _LIMITS | {LeafKind.workloadReplicas}
# Leaves that, true, end a run without meeting its goal: only ever give-up leaves.
_FAILURES = frozenset({LeafKind.jobFailed, LeafKind.podsRestarting})

GoalQuote = Annotated[str, Field(min_length=1, max_length=RECORD_QUOTE_MAX)]


class GoalLeaf(Model):
    """One predicate of the stop rule over facts the step's code reads, with the words it is
    read from. A `judged` leaf carries the words a model must answer as its question."""

    id: Identifier
    kind: LeafKind
    object: ObjectRef | None = None
    count: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    key: Annotated[str, Field(max_length=253)] | None = None
    value: Annotated[str, Field(max_length=253)] | None = None
    negated: StrictBool = False
    after: ObjectRef | None = Field(
        default=None,
        description="podsStartedAfter: the ConfigMap whose last data write the pods must have "
        "started after; none: the run's start, as `since`.",
    )
    since: datetime | None = Field(
        default=None,
        description="podsStartedAfter with no ConfigMap: when the stop rule was recorded.",
    )
    quote: GoalQuote
    question: GoalQuote | None = None

    @model_validator(mode="after")
    def _shaped(self) -> Self:
        fits = _FITS.get(self.kind, frozenset())
        if (self.object.kind if self.object else None) not in (fits or {None}):
            raise ValueError(f"a {self.kind.value} leaf is about one of {sorted(fits) or 'none'}")
        if (self.count is not None) != (self.kind in _COUNTED) and (
            self.kind is not LeafKind.workloadAvailable
        ):
            raise ValueError(f"a {self.kind.value} leaf lacks its count, or has one it takes none")
        if (self.key is not None) != (self.kind is LeafKind.configMapKey) or (
            (self.key is None) != (self.value is None)
        ):
            raise ValueError("a configMapKey leaf, and only it, names a key and a value")
        if (self.question is not None) != (self.kind is LeafKind.judged):
            raise ValueError("a judged leaf, and only it, has a question")
        started = self.kind is LeafKind.podsStartedAfter
        if (self.after is not None or self.since is not None) and not started:
            raise ValueError("only a podsStartedAfter leaf starts after a write or the run")
        if self.after is not None and (self.after.kind != "ConfigMap" or self.since is not None):
            raise ValueError("a podsStartedAfter leaf starts after a ConfigMap or the run")
        return self


class GoalRule(Model):
    """The stop rule as read: done when every leaf of some group holds; given up when any
    give-up leaf holds; `unclear`: sentences the grammar placed nowhere, for a person."""

    namespace: Annotated[str, Field(max_length=63)] = Field(
        default="", description="The Monitor's: facts are read there."
    )
    done: Annotated[
        list[Annotated[list[GoalLeaf], Field(min_length=1, max_length=LEAVES_MAX)]],
        Field(max_length=GROUPS_MAX),
    ] = Field(default_factory=list)
    giveUp: Annotated[list[GoalLeaf], Field(max_length=GIVE_UP_MAX)] = Field(default_factory=list)
    unclear: Annotated[list[GoalQuote], Field(max_length=UNCLEAR_GOAL_MAX)] = Field(
        default_factory=list
    )

    @model_validator(mode="after")
    def _one_leaf_an_id(self) -> Self:
        named: dict[str, GoalLeaf] = {}
        for leaf in [*(leaf for group in self.done for leaf in group), *self.giveUp]:
            if named.setdefault(leaf.id, leaf) != leaf:
                raise ValueError(f"two leaves have the id {leaf.id}")
        return self

    def leaves(self) -> list[GoalLeaf]:
        """Every leaf once, done groups first."""
        found: dict[str, GoalLeaf] = {}
        for leaf in [*(leaf for group in self.done for leaf in group), *self.giveUp]:
            found.setdefault(leaf.id, leaf)
        return list(found.values())


class AuthorityRecord(Model):
    """What goalkeeper understood from the person's words for one spec generation."""

    generation: Annotated[int, Field(ge=0)] | None = None
    check: Count = Field(default=0, description="Accepted checks when it was recorded.")
    recordedAt: datetime | None = Field(
        default=None,
        description="When it was recorded: a time limit in the stop rule counts from it.",
    )
    author: Annotated[str, Field(max_length=512)] = Field(
        default="", description="Who wrote the spec generation, as the API server recorded."
    )
    grants: Annotated[list[Grant], Field(max_length=RECORD_ENTRIES)] = Field(default_factory=list)
    dropped: Annotated[
        list[Annotated[str, Field(max_length=LIST_ENTRY_MAX)]], Field(max_length=RECORD_ENTRIES)
    ] = Field(default_factory=list, description="Grants refused, each with why.")
    prohibitions: ShortList = Field(
        default_factory=list, description="Forbidding sentences the engine found in the task."
    )
    confirmedBy: Annotated[str, Field(max_length=600)] = Field(
        default="", description="Who confirmed the record, when a person must before an act."
    )
    typedGrants: Annotated[list[TypedGrant], Field(max_length=TYPED_MAX)] = Field(
        default_factory=list,
        description="What may change, read from the words or given by a person.",
    )
    typedProhibitions: Annotated[list[TypedProhibition], Field(max_length=TYPED_MAX)] = Field(
        default_factory=list, description="What the words forbid."
    )
    heldBack: Annotated[list[TypedGrant], Field(max_length=TYPED_MAX)] = Field(
        default_factory=list,
        description="Grants the words give that an unclear sentence may take back: never "
        "acted on; a person who means one grants it (goalkeeper authority --grant).",
    )
    unclear: Annotated[list[UnclearWords], Field(max_length=UNCLEAR_MAX)] = Field(
        default_factory=list,
        description="Sentences the reading could not parse whole: no act runs until a person "
        "confirms or corrects the reading.",
    )
    goal: GoalRule | None = Field(
        default=None,
        description="The stop rule read into predicates over facts: done when every leaf of "
        "a group holds, given up when a give-up leaf holds; a judged leaf a model answers.",
    )


class ActionResult(Model):
    """What an act or repair step returns."""

    outcome: Outcome
    evidence: Text4000 = Field(description="Factual evidence of the outcome.")
    changed: ShortList = Field(default_factory=list, description="What changed.")
    actualCost: Money | None = Field(default=None, description="Actual cost where paid.")


# --- what the operator keeps in a Monitor's status ---------------------------------------


class MonitorState(StrEnum):
    active = "active"
    stopped = "stopped"


class StepKind(StrEnum):
    extract = "extract"  # reads the person's words only: no tools, no target
    observe = "observe"
    act = "act"
    repair = "repair"


# Steps that change the target: recorded in status before they start, run as the actor.
MUTATING_STEPS = frozenset({StepKind.act, StepKind.repair})


Count = Annotated[int, Field(ge=0, le=1_000_000)]


class Schedule(Model):
    """Published only on the wait route; `nextCheckAt` is the truth the timer follows."""

    lastCheckAt: datetime
    nextCheckAt: datetime
    everyMinutes: Annotated[int, Field(ge=EVERY_MINUTES_MIN, le=EVERY_MINUTES_MAX)]
    watch: Annotated[list[WatchTarget], Field(max_length=WATCH_MAX)] = Field(
        default_factory=list, description="Objects whose change wakes the monitor early."
    )
    wakeAt: datetime | None = Field(
        default=None, description="An early wake held back by the wake rate limit."
    )
    wokenBy: Annotated[str, Field(max_length=300)] = Field(
        default="", description="The change the held-back wake is for."
    )
    description: Annotated[str, Field(max_length=1000)] = Field(
        default="", description="The schedule in words: the timer and what may wake it sooner."
    )

    @property
    def due_at(self) -> datetime:
        """When the next check starts at the latest: the timer, or a held-back wake."""
        return min(self.nextCheckAt, self.wakeAt) if self.wakeAt else self.nextCheckAt


class Confidence(StrEnum):
    low = "low"
    medium = "medium"
    high = "high"


class ProgressSample(Model):
    at: datetime
    completed: Number


class ProgressEstimate(Model):
    """A rate range and ETA range from the last usable intervals of one track."""

    rateLow: Number
    rateHigh: Number
    ratePer: Annotated[str, Field(max_length=20)] = "hour"
    etaEarliest: datetime | None = None
    etaLatest: datetime | None = None
    confidence: Confidence
    intervals: Annotated[int, Field(ge=1, le=8)]


class TrackState(Model):
    """One progress track as the monitor remembers it, with its estimate."""

    key: Identifier
    label: Text200
    status: TrackStatus
    completed: Number | None = None
    total: Number | None = None
    unit: Annotated[str, Field(max_length=40)] = ""
    sourceEta: datetime | None = None
    observedAt: datetime
    stale: bool = Field(default=False, description="Missing from the latest observation.")
    samples: Annotated[list[ProgressSample], Field(max_length=9)] = Field(default_factory=list)
    estimate: ProgressEstimate | None = None
    etaUnavailable: Annotated[str, Field(max_length=200)] | None = Field(
        default=None, description="Short reason when no valid estimate exists."
    )


class LastAction(Model):
    kind: ActionKind
    action: Text2000
    outcome: ActionOutcome | None = Field(
        default=None,
        description="Null while the step runs; unknown when the step ended without a result "
        "and the next observation decides.",
    )
    evidence: Annotated[str, Field(max_length=4000)] = ""
    failureId: Identifier
    targetStateId: Identifier
    check: Count
    at: datetime


class SpendEntry(Model):
    check: Count
    action: Text2000
    cost: Money
    estimated: bool = Field(description="True when the step reported no actual cost.")


class SpendLedger(Model):
    total: Money | None = None
    entries: Annotated[list[SpendEntry], Field(max_length=100)] = Field(default_factory=list)


class RepairDone(Model):
    """The failure and target state of one completed repair of this run."""

    failureId: Identifier
    targetStateId: Identifier
    check: Count


class ActionAttempt(Model):
    """How often one failure in one target state has been acted on."""

    failureId: Identifier
    targetStateId: Identifier
    count: Count


class StepInFlight(Model):
    seq: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        description="Step sequence number; a result from any other step is ignored."
    )
    kind: StepKind
    check: Count = Field(description="The check this step belongs to.")
    startedAt: datetime
    generation: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="The spec generation the step was launched under."
    )
    action: ActionRequest | None = None
    wokenBy: Annotated[str, Field(max_length=300)] = Field(
        default="", description="The target change that started this observe step early."
    )
    modelConfig: Annotated[str, Field(max_length=253)] = Field(
        default="", description="The ModelConfig the step runs with; empty: the operator's."
    )


class ApprovalDecision(StrEnum):
    approve = "approve"
    reject = "reject"


APPROVALS_KEPT = 16


class ApprovalKind(StrEnum):
    paidAction = "paidAction"  # approve: the action runs with more ceiling for it
    stalled = "stalled"  # approve: the run goes on, with one more recovery for the stall
    authority = "authority"  # approve: what was read from the task stands; the first act runs
    repeatedActs = "repeatedActs"  # approve: the brake is released and the asked act runs


class ApprovalRequest(Model):
    """A decision the monitor waits for a person to make, with everything they need."""

    id: Identifier = Field(description="What a MonitorApproval names to answer this request.")
    kind: ApprovalKind = ApprovalKind.paidAction
    check: Count = Field(description="The check that asked.")
    action: ActionRequest | None = Field(default=None, description="The paid action.")
    message: Text2000 = Field(description="Why the monitor cannot go on without a person.")
    estimatedCost: Money | None = None
    ceiling: Money | None = Field(default=None, description="The recorded cost ceiling, if any.")
    spent: Money | None = Field(
        default=None, description="Spent so far, as the ledger and the target show it."
    )
    amount: Money | None = Field(
        default=None,
        description="What an approval must add to the ceiling for the paid action to run.",
    )
    requestedAt: datetime
    expiresAt: datetime
    ignored: Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=16)] = Field(
        default_factory=list, description="MonitorApprovals that did not answer it."
    )
    facts: Annotated[list[ObjectFacts], Field(max_length=FACTS_MAX)] = Field(
        default_factory=list,
        description="The facts the check that asked read: the act it holds is checked on "
        "them again once a person answers.",
    )


class ApprovalRecord(Model):
    """A person's answer to an approval request, as the operator took it."""

    requestId: Identifier
    name: Annotated[str, Field(max_length=253)] = Field(description="The MonitorApproval.")
    decision: ApprovalDecision
    approver: Annotated[str, Field(max_length=512)]
    amount: Money | None = Field(default=None, description="Added to the ceiling for the action.")
    reason: MaybeText1000 = ""
    at: datetime


class MonitorApprovalSpec(Model):
    """A person's answer to a Monitor's approval request; the API server sets `approver`."""

    monitor: Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)] = Field(
        description="The Monitor, in this namespace."
    )
    requestId: Identifier = Field(description="status.approval.id of that Monitor.")
    decision: ApprovalDecision
    amount: Number | None = Field(
        default=None,
        description="Added to the ceiling for this action only, in the request's currency; "
        "default: the request's amount.",
    )
    reason: MaybeText1000 = ""
    approver: Annotated[str, Field(max_length=512)] = Field(
        default="", description="The user who created it, set by the API server."
    )
    grants: Annotated[list[Annotated[str, Field(max_length=500)]], Field(max_length=8)] = Field(
        default_factory=list,
        description="Confirming a reading: grants to add, each in words the reading parses "
        "whole ('resume Job etl once').",
    )
    denied: Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=16)] = Field(
        default_factory=list, description="Confirming a reading: ids of grants to remove."
    )


class StopInfo(Model):
    reason: StopReason
    message: Text2000
    at: datetime


class Activity(StrEnum):
    """What the monitor is doing now, for `kubectl get monitors`."""

    starting = "starting"
    extracting = "extracting"  # reading the task for its authority
    observing = "observing"
    acting = "acting"
    repairing = "repairing"
    waiting = "waiting"
    awaitingApproval = "awaitingApproval"
    paused = "paused"  # goalkeeper.dev/paused: nothing launches until it is removed
    stopped = "stopped"


class Health(StrEnum):
    """How the run is going, decided by the engine from the check history (core/health.py)."""

    Healthy = "Healthy"
    Stalled = "Stalled"  # the target claims running, nothing moved for several checks
    RunawayLoop = "RunawayLoop"  # acts in a row that leave what the checks see unchanged
    Failing = "Failing"  # the last steps failed to run
    AwaitingHuman = "AwaitingHuman"  # a paid action waits for a person's approval
    Unknown = "Unknown"  # no check yet


BRAKE_ACTS_MAX = 20


class BrakeAct(Model):
    """One act of a row that left what the checks saw unchanged."""

    check: Count
    kind: ActionKind
    action: Annotated[str, Field(max_length=300)]
    target: Annotated[str, Field(max_length=64)] = Field(
        default="", description="The objects it changed, as the engine reckons them."
    )


class HealthState(Model):
    """The monitor's health and the streaks it is decided from."""

    state: Health = Health.Unknown
    message: Annotated[str, Field(max_length=1000)] = ""
    since: datetime | None = Field(default=None, description="When the state last changed.")
    stalledChecks: Count = Field(
        default=0, description="Checks in a row that claimed running work with nothing moved."
    )
    fingerprint: Annotated[str, Field(max_length=64)] = Field(
        default="", description="What the last check saw move (work state, progress values)."
    )
    signalKeys: Annotated[str, Field(max_length=64)] = Field(
        default="", description="Which counters of unfinished tracks the last check saw."
    )
    trackPrint: Annotated[str, Field(max_length=64)] = Field(
        default="", description="Their values; empty when it saw none (no progress signal)."
    )
    progressMoved: bool = Field(
        default=False,
        description="A counter of an unfinished track moved between two checks of this "
        "run: only such a target can be stalled.",
    )
    brakeFingerprint: Annotated[str, Field(max_length=64)] = Field(
        default="",
        description="What the last check that asked for an act saw (goal, work, progress), "
        "as the engine reckons it; the brake's row goes on while it stays the same.",
    )
    brakeActs: Annotated[list[BrakeAct], Field(max_length=BRAKE_ACTS_MAX)] = Field(
        default_factory=list,
        description="Acts since a check that asked for one last saw something change, "
        "oldest first.",
    )
    failedSteps: Count = Field(default=0, description="Steps in a row that failed to run.")
    factsPrint: Annotated[str, Field(max_length=64)] = Field(
        default="",
        description="What the objects the goal names held at the last check, as the step's "
        "code read them (a digest); empty when it read none.",
    )
    factsSince: Count = Field(
        default=0, description="The first check of the row that read them the same (0: none)."
    )
    recoveredStall: Annotated[str, Field(max_length=64)] = Field(
        default="", description="The stalled state its one automatic recovery ran for."
    )


PREVIOUS_RUNS_KEPT = 5


class ModelUsage(Model):
    """Running totals of the model usage of a monitor's steps."""

    requests: Count = 0
    inputTokens: Annotated[int, Field(ge=0)] = 0
    outputTokens: Annotated[int, Field(ge=0)] = 0
    costUsd: Number = Field(default=0, description="Known cost; see unpricedSteps.")
    unpricedSteps: Count = Field(default=0, description="Steps whose cost is unknown.")


class ConfigUsage(Model):
    """A monitor's model usage through one ModelConfig ('' for the operator's settings)."""

    config: Annotated[str, Field(max_length=253)] = ""
    requests: Count = 0
    inputTokens: Annotated[int, Field(ge=0)] = 0
    outputTokens: Annotated[int, Field(ge=0)] = 0
    costUsd: Number = 0


# --- the ModelConfig resource ------------------------------------------------------------

# The ModelConfig a Monitor uses: the one this annotation names, else `default`.
MODEL_CONFIG_ANNOTATION, DEFAULT_MODEL_CONFIG = "goalkeeper.dev/model-config", "default"
# Monitors a ModelConfig's status lists by name, most spend first.
CONFIG_USERS_KEPT = 100


class ModelProvider(StrEnum):
    openai = "openai"  # any OpenAI-compatible Chat Completions server
    anthropic = "anthropic"


class SecretKeyRef(Model):
    """A key of a Secret in the ModelConfig's own namespace."""

    name: Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)]
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", min_length=1, max_length=253)] = (
        "api-key"
    )


class ModelPrices(Model):
    """US dollars per million tokens; a step's cost is its usage at these prices."""

    inputPerMTokUsd: Annotated[float, Field(ge=0, le=10_000)]
    outputPerMTokUsd: Annotated[float, Field(ge=0, le=10_000)]


class StepLimits(Model):
    """Per-step limits of the steps that use this model; unset ones keep the operator's."""

    requests: Annotated[int, Field(ge=1, le=1000)] | None = None
    toolCalls: Annotated[int, Field(ge=0, le=10_000)] | None = None
    totalTokens: Annotated[int, Field(ge=1000, le=100_000_000)] | None = None
    maxOutputTokens: Annotated[int, Field(ge=16, le=1_000_000)] | None = None
    costUsd: Annotated[float, Field(ge=0, le=1_000_000)] | None = None


class ModelConfigSpec(Model):
    """The model a namespace's Monitors use, with its key, prices, limits and spend cap."""

    provider: ModelProvider
    model: Annotated[str, Field(pattern=r"^\S+$", min_length=1, max_length=200)] = Field(
        description="The provider's model name, e.g. gpt-4o-mini."
    )
    baseUrl: Annotated[str, Field(pattern=r"^https?://\S+$", max_length=2000)] | None = Field(
        default=None, description="The server's base URL, for an OpenAI-compatible server."
    )
    apiKeySecret: SecretKeyRef | None = Field(
        default=None,
        description="The API key: a Secret in this namespace, read by the steps by reference.",
    )
    prices: ModelPrices | None = None
    stepLimits: StepLimits | None = None
    spendCapUsd: Annotated[float, Field(gt=0, le=1_000_000_000)] | None = Field(
        default=None,
        description="Model spend of all the Monitors that use this config together; at the "
        "cap they stop before another step.",
    )


class ConfigUser(Model):
    monitor: Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)]
    uid: Annotated[str, Field(max_length=64)] = ""
    costUsd: Number = 0
    inputTokens: Annotated[int, Field(ge=0)] = 0
    outputTokens: Annotated[int, Field(ge=0)] = 0


class ModelConfigStatus(Model):
    """Who uses this config and what they spent through it (kept by the operator)."""

    monitors: Annotated[list[ConfigUser], Field(max_length=CONFIG_USERS_KEPT)] = Field(
        default_factory=list
    )
    monitorCount: Count = 0
    spendUsd: Number = Field(
        default=0,
        description="Model spend through it of every Monitor, those deleted since included.",
    )
    retiredSpendUsd: Number = Field(
        default=0, description="What Monitors deleted since spent through it."
    )
    observedGeneration: Annotated[int, Field(ge=0)] | None = None


class PreviousRun(Model):
    """A run that stopped before a spec edit started a new one."""

    generation: Annotated[int, Field(ge=0)] | None = None
    checks: Count
    stop: StopInfo
    report: Annotated[str, Field(max_length=4000)] | None = None


class ConditionStatus(StrEnum):
    true = "True"
    false = "False"
    unknown = "Unknown"


class Condition(Model):
    """A condition as the Kubernetes API conventions describe it."""

    type: Annotated[str, Field(pattern=r"^[A-Z][A-Za-z]{0,62}$")]
    status: ConditionStatus
    reason: Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{0,127}$")]
    message: Annotated[str, Field(max_length=4000)] = ""
    lastTransitionTime: datetime
    observedGeneration: Annotated[int, Field(ge=0)] | None = None


NOTICES_KEPT = 16
NOTICE_TEXT_MAX = 2000
# The Secret of a namespace that holds its sinks' webhook URLs: the one Secret there the
# operator may read (its role names it), so a sink can send no other Secret anywhere.
SINK_SECRET = "goalkeeper-notifications"  # noqa: S105 (a name, not a password)


class NoticeKind(StrEnum):
    stop = "stop"  # the monitor stopped: its report and what to do
    approval = "approval"  # a paid action or a stall awaits a person's answer
    health = "health"  # Healthy, Stalled, Failing, ... changed
    report = "report"  # every check's report


class Notice(Model):
    """One message for the notification sinks, kept in status until they took it."""

    seq: Annotated[int, Field(ge=1)]
    id: Annotated[str, Field(max_length=400)] = Field(
        description="Stable across retries and restarts: the Monitor's uid and the event."
    )
    kind: NoticeKind
    at: datetime
    summary: Annotated[str, Field(max_length=200)]
    text: Annotated[str, Field(max_length=NOTICE_TEXT_MAX)]


class Notices(Model):
    """The messages waiting for this Monitor's sinks, and how far each sink has taken them."""

    seq: Count = Field(default=0, description="The last message's number.")
    items: Annotated[list[Notice], Field(max_length=NOTICES_KEPT)] = Field(default_factory=list)
    # Unbounded here so that no count of sinks makes a status unreadable; each status write
    # keeps only the sinks the Monitor's namespace has (core/notices.py).
    delivered: dict[str, Count] = Field(
        default_factory=dict,
        description="Sink -> the number of the last message it received.",
    )


class SinkFormat(StrEnum):
    generic = "generic"  # goalkeeper's own JSON
    slack = "slack"  # a Slack-compatible incoming webhook
    cloudevents = "cloudevents"  # CloudEvents over HTTP, binary mode


DEFAULT_SENDS = [NoticeKind.stop, NoticeKind.approval, NoticeKind.health]


class NotificationSinkSpec(Model):
    """Where the messages of this namespace's Monitors go, and which."""

    format: SinkFormat = SinkFormat.generic
    urlKey: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", min_length=1, max_length=253)] = (
        Field(
            default="url",
            description=f"The key of Secret {SINK_SECRET} in this namespace that holds the "
            "webhook URL (http or https).",
        )
    )
    send: Annotated[list[NoticeKind], Field(min_length=1, max_length=4)] = Field(
        default_factory=lambda: list(DEFAULT_SENDS),
        description="What to send: stop, approval, health, report (every check's report).",
    )

    @field_validator("send")
    @classmethod
    def _once_each(cls, value: list[NoticeKind]) -> list[NoticeKind]:
        if len(set(value)) != len(value):
            raise ValueError("names each kind at most once")
        return value


class NotificationSinkStatus(Model):
    """Whether messages reach the receiver (kept by the operator; never the URL)."""

    conditions: Annotated[list[Condition], Field(max_length=4)] = Field(default_factory=list)
    lastDeliveredAt: datetime | None = None
    observedGeneration: Annotated[int, Field(ge=0)] | None = None


class MonitorStatus(Model):
    """Everything the loop knows: the operator can die at any instant and resume from it."""

    schemaVersion: Annotated[int, Field(ge=1)] = Field(
        default=STATUS_SCHEMA_VERSION,
        description="The layout of this status; an operator migrates earlier ones it reads.",
        # No default in the CRD: the API server would stamp it on an earlier status it
        # serves, and this version could no longer tell that status's layout.
        json_schema_extra=_without_default,
    )
    monitor: MonitorState = MonitorState.active
    goal: GoalState = GoalState.unknown
    work: WorkState = WorkState.unknown
    checks: Count = Field(default=0, description="Accepted observations.")
    invalidStreak: Count = Field(default=0, description="Rejected observations in a row.")
    stepFailureStreak: Count = Field(
        default=0, description="Observe steps in a row that failed to run."
    )
    failingSince: datetime | None = Field(
        default=None,
        description="When the steps that fail to run in a row began to fail; the run ends "
        "once they have failed for the operator's failure window.",
    )
    pausedAt: datetime | None = Field(
        default=None, description="When goalkeeper.dev/paused took effect; none while running."
    )
    checkNowHandled: Annotated[str, Field(max_length=CHECK_NOW_MAX)] = Field(
        default="", description="The goalkeeper.dev/check-now value already honoured."
    )
    stepSeq: Count = Field(default=0, description="Steps launched so far.")
    schedule: Schedule | None = None
    progress: Annotated[list[TrackState], Field(max_length=TRACKS_MAX)] = Field(
        default_factory=list
    )
    progressSummary: Annotated[str, Field(max_length=200)] = Field(
        default="", description="One line for `kubectl get`, e.g. 21/27 modules."
    )
    report: Annotated[str, Field(max_length=4000)] | None = None
    reportedCheck: Count = Field(default=0, description="The check whose report was last emitted.")
    lastObservation: Observation | None = None
    lastRejection: Annotated[str, Field(max_length=4000)] | None = None
    lastWakeAt: datetime | None = Field(
        default=None, description="When a target change last started a check early."
    )
    lastAction: LastAction | None = None
    contract: Contract | None = Field(
        default=None,
        description=(
            "The recorded authority: extracted from the task and stop rule alone before "
            "the first observation of a spec generation, then only ever narrowed."
        ),
    )
    authorizedActions: Annotated[list[AuthorizedAction], Field(max_length=ACTIONS_MAX)] = Field(
        default_factory=list,
        description="The recorded authorized actions; pinned like the contract.",
    )
    authorityGeneration: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="The spec generation the recorded authority belongs to."
    )
    authority: AuthorityRecord | None = Field(
        default=None,
        description="The grants kept from the person's words, each with its quote, and "
        "those refused.",
    )
    instructions: Instructions | None = Field(
        default=None,
        description="The operators' instructions this spec generation's authority was read "
        "with, pinned when the task was read: a later change takes effect at the next "
        "generation.",
    )
    spend: SpendLedger = Field(default_factory=SpendLedger)
    approval: ApprovalRequest | None = Field(
        default=None, description="The paid action waiting for a person's decision."
    )
    approvals: Annotated[list[ApprovalRecord], Field(max_length=APPROVALS_KEPT)] = Field(
        default_factory=list, description="The answers taken, newest last."
    )
    repairsDone: Annotated[list[RepairDone], Field(max_length=REPAIRS_KEPT)] = Field(
        default_factory=list,
        description="Completed repairs of this run, oldest first; none of them runs again.",
    )
    attempts: Annotated[list[ActionAttempt], Field(max_length=64)] = Field(default_factory=list)
    step: StepInFlight | None = None
    stop: StopInfo | None = None
    conditions: Annotated[list[Condition], Field(max_length=8)] = Field(default_factory=list)
    health: HealthState = Field(default_factory=HealthState)
    observedGeneration: Annotated[int, Field(ge=0)] | None = None
    activity: Activity = Field(default=Activity.starting, description="What runs now.")
    modelUsage: ModelUsage = Field(default_factory=ModelUsage)
    modelConfig: Annotated[str, Field(max_length=253)] = Field(
        default="",
        description="The ModelConfig the latest step ran with; empty: the operator's settings.",
    )
    usageByConfig: Annotated[list[ConfigUsage], Field(max_length=8)] = Field(
        default_factory=list, description="Model usage through each ModelConfig used."
    )
    notices: Notices | None = Field(
        default=None,
        description="Messages for the namespace's NotificationSinks, until each took them.",
    )
    previousRuns: Annotated[list[PreviousRun], Field(max_length=PREVIOUS_RUNS_KEPT)] = Field(
        default_factory=list, description="Runs that stopped before a spec edit restarted it."
    )


# --- what a step receives ----------------------------------------------------------------


class StepInput(Model):
    """The whole input of one step, stored in its MonitorStep."""

    kind: StepKind
    check: Count = Field(description="The check number this step serves (1-based).")
    maxChecks: Annotated[int, Field(ge=MAX_CHECKS_MIN, le=MAX_CHECKS_MAX)]
    task: Text8000
    stopWhen: Text4000
    previousObservation: Observation | None = None
    factsPrint: Annotated[str, Field(max_length=64)] = Field(
        default="", description="What the goal's objects held at the last check (a digest)."
    )
    factsSince: Count = Field(
        default=0, description="The first check of the row that read them the same (0: none)."
    )
    progressSummary: Annotated[str, Field(max_length=4000)] = ""
    contract: Contract | None = None
    authorizedActions: Annotated[list[AuthorizedAction], Field(max_length=ACTIONS_MAX)] = Field(
        default_factory=list
    )
    action: ActionRequest | None = Field(default=None, description="For act and repair steps.")
    grant: TypedGrant | None = Field(
        default=None,
        description="For an act step: the typed grant its action names, which the step does "
        "as one API call and reads back.",
    )
    health: Annotated[str, Field(max_length=1000)] = Field(
        default="", description="What the engine sees wrong with the run, for the observe step."
    )
    wokenBy: Annotated[str, Field(max_length=300)] = Field(
        default="", description="The target change that started this check before its timer."
    )
    approvals: bool = Field(
        default=False,
        description="Whether a paid action without approval or over its ceiling goes to a "
        "person for approval instead of stopping the monitor.",
    )
    lastRejection: Annotated[str, Field(max_length=4000)] = Field(
        default="", description="Why the previous observation was refused, for the next one."
    )
    instructions: Instructions | None = Field(
        default=None, description="The operators' doctrine pinned with this generation."
    )
    goal: GoalRule | None = Field(
        default=None,
        description="For an observe step: the stop rule as predicates; when the facts the "
        "step's code reads settle it, the step answers without a model.",
    )
    grants: Annotated[list[TypedGrant], Field(max_length=TYPED_MAX)] = Field(
        default_factory=list,
        description="For an observe step: the typed grants in force; when the model gives no "
        "valid answer and one of them makes a false predicate true, the step answers with "
        "that act.",
    )


# --- the MonitorStep resource ------------------------------------------------------------


class StepPhase(StrEnum):
    Pending = "Pending"
    Running = "Running"
    Succeeded = "Succeeded"
    Failed = "Failed"


class StepErrorKind(StrEnum):
    """Why a step ended without a result; `configuration` errors are not worth a retry."""

    configuration = "configuration"
    provider = "provider"
    limits = "limits"
    invalidOutput = "invalidOutput"
    internal = "internal"


class CostSource(StrEnum):
    genaiPrices = "genai-prices"
    configured = "configured"
    unknown = "unknown"


class StepUsage(Model):
    requests: Count = 0
    toolCalls: Count = 0
    inputTokens: Annotated[int, Field(ge=0)] = 0
    outputTokens: Annotated[int, Field(ge=0)] = 0
    costUsd: Number | None = Field(default=None, description="Null when the cost is unknown.")
    costSource: CostSource = CostSource.unknown


class MonitorStepSpec(Model):
    # The CRD generator turns the marker into a CEL rule: a step's spec never changes
    # once created, so no one edits what a step runs after the operator made it.
    model_config = ConfigDict(json_schema_extra={"x-goalkeeper-immutable": True})

    monitor: Annotated[str, Field(min_length=1, max_length=253)]
    kind: StepKind
    check: Count
    seq: Annotated[int, Field(ge=1, le=1_000_000)]
    input: StepInput


class StepPod(Model):
    """The pod that wrote a step's status, from the downward API.

    The admission policy requires it to match the writer's bound-token pod claims, and the
    operator accepts a result only when this pod is owned by the step's own Job.
    """

    name: Annotated[str, Field(min_length=1, max_length=253)]
    uid: Annotated[str, Field(min_length=1, max_length=64)]


class FactKind(StrEnum):
    """The kinds of object whose state a step reads itself, as facts."""

    Job = "Job"
    CronJob = "CronJob"
    Deployment = "Deployment"
    StatefulSet = "StatefulSet"
    DaemonSet = "DaemonSet"
    ConfigMap = "ConfigMap"


class NamedIn(StrEnum):
    """Where an object a step read as a fact is named."""

    stopWhen = "stopWhen"
    task = "task"
    action = "action"


class JobEnd(StrEnum):
    Complete = "Complete"
    Failed = "Failed"


# Objects one step reads as facts.
FACTS_MAX = 16


ConfigMapNames = Annotated[
    list[Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)]], Field(max_length=8)
]


# A reason a kubelet gives a container: one CamelCase word (CrashLoopBackOff, OOMKilled).
KUBELET_REASON_PATTERN = r"^[A-Za-z][A-Za-z0-9]{0,63}$"
KubeletReason = Annotated[str, Field(pattern=KUBELET_REASON_PATTERN)]
# A container's last words, as its pod's status keeps them: one line, secrets redacted.
EXIT_MESSAGE_MAX = 300
# No control character (a terminal escape among them) and no bidirectional override.
# Written with escapes that Go's RE2 (the API server) and Rust's regex (pydantic) both read.
ONE_PRINTABLE_LINE_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\x{202a}-\x{202e}\x{2066}-\x{2069}]*$"


class PodExit(Model):
    """The newest failed exit of a container in the pods read: the pod, its exit code, the
    kubelet's reason and the termination message (untrusted text: shown quoted or fenced)."""

    pod: Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)]
    exitCode: int = Field(ge=-(2**31), le=2**31 - 1)
    reason: KubeletReason | None = None
    message: Annotated[
        str, Field(max_length=EXIT_MESSAGE_MAX, pattern=ONE_PRINTABLE_LINE_PATTERN)
    ] = ""


class PodsFacts(Model):
    """What the pods of a workload or Job show, read by the step's code from their status."""

    count: Count = Field(description="Pods read (not being deleted).")
    restarts: Count = Field(description="Container restarts, all pods together.")
    waiting: KubeletReason | None = Field(
        default=None,
        description="A reason a container waits in; CrashLoopBackOff first when any has it.",
    )
    lastExit: PodExit | None = None
    oldestStart: datetime | None = Field(
        default=None, description="When the oldest running pod started; none when none runs."
    )

    @property
    def crash_looping(self) -> bool:
        """The kubelet backs off restarting a container that keeps exiting."""
        return self.waiting == "CrashLoopBackOff"


# A ConfigMap's value kept as a fact; a longer one is left out (its leaf cannot be told).
CONFIG_VALUE_MAX = 256
ConfigMapData = Annotated[
    dict[
        Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]{1,253}$")],
        Annotated[str, Field(max_length=CONFIG_VALUE_MAX)] | None,
    ],
    Field(max_length=LEAVES_MAX),
]


class SyncedBy(Model):
    """The GitOps controller that keeps an object in sync, by the mark it left on it."""

    controller: Annotated[str, Field(max_length=40)] = Field(description="Argo CD or Flux.")
    source: Annotated[str, Field(max_length=300)] = Field(
        description="What of it keeps the object in sync: 'application shop', 'Kustomization apps'."
    )


class ObjectFacts(Model):
    """The state of an object the task, the stop rule or the action names, read by the
    step's own code from the API server, never from the model's words."""

    kind: FactKind
    name: Annotated[str, Field(pattern=OBJECT_NAME_PATTERN, max_length=253)]
    namedIn: Annotated[list[NamedIn], Field(min_length=1, max_length=3)]
    suspended: bool | None = Field(default=None, description="Jobs and CronJobs.")
    active: Count | None = Field(default=None, description="Jobs and CronJobs.")
    succeeded: Count | None = None
    failed: Count | None = None
    ended: JobEnd | None = Field(default=None, description="A Job's Complete or Failed.")
    replicas: Count | None = Field(default=None, description="Workloads: desired replicas.")
    readyReplicas: Count | None = None
    availableReplicas: Count | None = None
    updatedReplicas: Count | None = None
    rollingOut: bool | None = Field(
        default=None,
        description="Workloads: their controller has yet to read the spec, or pods of an "
        "earlier one are still being replaced.",
    )
    staleConfig: ConfigMapNames = Field(
        default_factory=list,
        description="Workloads: named ConfigMaps their pods read, written after the oldest "
        "running pod started.",
    )
    freshConfig: ConfigMapNames = Field(
        default_factory=list,
        description="Workloads: named ConfigMaps their pods read, last written before the "
        "oldest running pod started.",
    )
    syncedBy: SyncedBy | None = Field(
        default=None,
        description="A GitOps controller that would revert a change at its next sync.",
    )
    pods: PodsFacts | None = Field(default=None, description="Workloads and Jobs: their pods.")
    lastRun: JobEnd | None = Field(
        default=None, description="CronJobs: how the newest finished Job they started ended."
    )
    data: ConfigMapData | None = Field(
        default=None,
        description="ConfigMaps: the keys the stop rule names, each with its value when it "
        "is short; a key it lacks is absent.",
    )
    writtenAt: datetime | None = Field(
        default=None,
        description="ConfigMaps the stop rule's pods must have started after: when their data "
        "was last written.",
    )

    @property
    def ref(self) -> str:
        return f"{self.kind.value} {self.name}"


class MonitorStepStatus(Model):
    """Written by the step's pod. `result` is untrusted: the operator validates it again."""

    phase: StepPhase = StepPhase.Pending
    pod: StepPod | None = Field(default=None, description="The pod that wrote this status.")
    result: dict[str, Any] | None = Field(
        default=None,
        description="An AuthorityExtraction (extract), an Observation (observe) or an "
        "ActionResult (act, repair).",
    )
    error: Annotated[str, Field(max_length=4000)] | None = None
    errorKind: StepErrorKind | None = None
    usage: StepUsage | None = None
    facts: Annotated[list[ObjectFacts], Field(max_length=FACTS_MAX)] = Field(
        default_factory=list,
        description="Objects the task, stop rule or action names, as the step's code read "
        "them after the model answered; an observation that contradicts them is refused.",
    )
    traceId: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")] | None = Field(
        default=None, description="The OpenTelemetry trace of this step's check, when traced."
    )
    startedAt: datetime | None = None
    finishedAt: datetime | None = None
