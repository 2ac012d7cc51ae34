"""The operator's settings: one place, read from environment variables (the chart sets them)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator

from goalkeeper import __version__
from goalkeeper.core import policy, selectors
from goalkeeper.core.models import (
    INSTRUCTIONS_MAX,
    Model,
    NoticeKind,
    NotificationSinkSpec,
    SinkFormat,
)
from goalkeeper.core.policy import Policy
from goalkeeper.core.selectors import LabelSelector

PREFIX = "GOALKEEPER_"


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names the variable and the bound."""


NOTIFY_SEND_PATTERN = r"^(stop|approval|health|report)(,(stop|approval|health|report))*$"
ACT_EXTRA_VERBS_PATTERN = r"^((create|update|delete)(,(create|update|delete))*)?$"


# The label that places a Monitor in a shard (docs/operations.md#shards), the only one a
# shard selects on: its steps carry it, and a step pod carries no other label an author set.
SHARD_LABEL = "goalkeeper.dev/shard"


# MonitorSteps kept per monitor by default: 100 checks even when each has an extract, an
# observe and an act step. A step is about 10 KB with a realistic task, at most about
# 400 KB (docs/operations.md#step-history).
STEP_HISTORY = 300


class OperatorSettings(Model):
    model: str = Field(
        default="",
        description="GOALKEEPER_MODEL: `openai:NAME` or `anthropic:NAME`; empty stops monitors.",
    )
    modelBaseUrl: str = Field(default="", description="GOALKEEPER_MODEL_BASE_URL")
    modelApiKeySecret: str = Field(
        default="", description="GOALKEEPER_MODEL_API_KEY_SECRET: Secret holding the API key."
    )
    modelApiKeySecretKey: str = Field(
        default="api-key", description="GOALKEEPER_MODEL_API_KEY_SECRET_KEY"
    )
    stepImage: str = Field(default=f"goalkeeper:{__version__}", description="GOALKEEPER_STEP_IMAGE")
    observerServiceAccount: str = Field(
        default="goalkeeper-observer", description="GOALKEEPER_OBSERVER_SERVICE_ACCOUNT"
    )
    actorServiceAccount: str = Field(
        default="goalkeeper-actor", description="GOALKEEPER_ACTOR_SERVICE_ACCOUNT"
    )
    stepDeadlineSeconds: Annotated[int, Field(ge=30, le=86_400)] = Field(
        default=900,
        description="GOALKEEPER_STEP_DEADLINE_SECONDS: activeDeadlineSeconds of a step.",
    )
    stepHistory: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=STEP_HISTORY,
        description=(
            "GOALKEEPER_STEP_HISTORY: MonitorSteps kept per monitor, each with its check's "
            "report (`goalkeeper history`); the older ones are deleted in batches of half "
            "as many, one request a batch."
        ),
    )
    namespaces: list[str] = Field(
        default_factory=list,
        description="GOALKEEPER_NAMESPACES: comma-separated; empty watches all namespaces.",
    )
    repairCommand: str = Field(default="", description="GOALKEEPER_REPAIR_COMMAND")
    instructions: Annotated[str, Field(max_length=INSTRUCTIONS_MAX)] = Field(
        default="",
        description=(
            "GOALKEEPER_INSTRUCTIONS: the cluster admin's instructions, read with every task "
            "as binding doctrine (what they forbid, no Monitor may do; a grant may quote them)."
        ),
    )
    notifyUrl: SecretStr = Field(
        default=SecretStr(""),
        description=(
            "GOALKEEPER_NOTIFY_URL: the cluster sink's webhook (http or https), for the Monitors "
            "of namespaces with no NotificationSink; empty: none."
        ),
    )
    notifyFormat: SinkFormat = Field(
        default=SinkFormat.generic,
        description="GOALKEEPER_NOTIFY_FORMAT: generic, slack or cloudevents.",
    )
    notifySend: Annotated[str, Field(pattern=NOTIFY_SEND_PATTERN)] = Field(
        default="stop,approval,health",
        description="GOALKEEPER_NOTIFY_SEND: what the cluster sink gets, from stop, approval, "
        "health, report, comma-separated.",
    )
    stepEnv: dict[str, str] = Field(
        default_factory=dict,
        description="Step limits (STEP_PASSTHROUGH) forwarded to every step unchanged.",
    )
    stallChecks: Annotated[int, Field(ge=1, le=100)] = Field(
        default=policy.STALL_CHECKS,
        description=(
            "GOALKEEPER_STALL_CHECKS: checks in a row that claim running work while a "
            "progress signal that moved before stays frozen, before a monitor's health is "
            "Stalled (a target without a progress signal is never stalled)."
        ),
    )
    wakeIntervalSeconds: Annotated[float, Field(ge=1, le=86_400)] = Field(
        default=60.0,
        description=(
            "GOALKEEPER_WAKE_INTERVAL_SECONDS: the least time between two checks that a "
            "change of a watched target starts before their timer; one that comes sooner "
            "is held until then."
        ),
    )
    stepRetrySeconds: Annotated[float, Field(ge=0.1, le=3600)] = Field(
        default=policy.RETRY_FIRST.total_seconds(),
        description=(
            "GOALKEEPER_STEP_RETRY_SECONDS: the delay before a failed or invalid check is "
            "retried; it doubles with each failure in a row, up to the monitor's interval, "
            "and is jittered so monitors failing together do not retry together."
        ),
    )
    failureWindowSeconds: Annotated[float, Field(ge=1, le=90 * 86_400)] = Field(
        default=policy.FAILURE_WINDOW.total_seconds(),
        description=(
            "GOALKEEPER_FAILURE_WINDOW_SECONDS: how long steps may fail to run in a row (the "
            "model provider, the API server, a step's pod) before the run ends; until then "
            "they are retried."
        ),
    )
    invalidAnswersLimit: Annotated[int, Field(ge=1, le=100)] = Field(
        default=policy.INVALID_ANSWERS,
        description=(
            "GOALKEEPER_INVALID_ANSWERS_LIMIT: invalid model answers in a row that end a run."
        ),
    )
    brakeActs: Annotated[int, Field(ge=1, le=20)] = Field(
        default=policy.BRAKE_ACTS,
        description=(
            "GOALKEEPER_BRAKE_ACTS: acts in a row after which the checks see the same (work, "
            "progress, the objects acted on) before the monitor stops, or asks a person with "
            "approvals on."
        ),
    )
    confirmAuthority: bool = Field(
        default=False,
        description=(
            "GOALKEEPER_CONFIRM_AUTHORITY: with approvals on (GOALKEEPER_APPROVAL_TIMEOUT), "
            "the first act of each spec generation waits until a person confirms what was "
            "read from the task, with a MonitorApproval of its own kind."
        ),
    )
    actExtraVerbs: Annotated[str, Field(pattern=ACT_EXTRA_VERBS_PATTERN)] = Field(
        default="",
        description=(
            "GOALKEEPER_ACT_EXTRA_VERBS: write verbs the act tools may use beyond patch (and "
            "deleting a named Job's pods), comma-separated from create, update, delete; a "
            "Monitor's author must then hold them too on every object an action names."
        ),
    )
    approvalTimeout: Annotated[str, Field(pattern=r"^(0|([0-9]{1,6}[smhd]){1,4})$")] = Field(
        default="0",
        description=(
            "GOALKEEPER_APPROVAL_TIMEOUT: how long a paid action that needs approval waits "
            "for a MonitorApproval (for example 24h, 90m, 1h30m); 0 stops the monitor at "
            "once, as without approvals."
        ),
    )
    modelSpendCapUsd: Annotated[float, Field(gt=0, le=1e9)] | None = Field(
        default=None,
        description=(
            "GOALKEEPER_MODEL_SPEND_CAP_USD: model cost one Monitor may run up; at the cap it "
            "stops before launching another step. Unset: no cap."
        ),
    )
    resyncSeconds: Annotated[float, Field(ge=1, le=3600)] = Field(
        default=60.0,
        description=(
            "GOALKEEPER_RESYNC_SECONDS: how often the operator looks for monitors a lost "
            "event left behind; one that waits on the same step or due timer as at the "
            "previous look is reconciled from the API server, so a lost event heals within "
            "two periods."
        ),
    )
    healthPort: Annotated[int, Field(ge=0, le=65535)] = Field(
        default=0, description="GOALKEEPER_HEALTH_PORT: liveness endpoint /healthz; 0 is off."
    )
    metricsPort: Annotated[int, Field(ge=0, le=65535)] = Field(
        default=0, description="GOALKEEPER_METRICS_PORT: Prometheus /metrics; 0 is off."
    )
    listenAddress: str = Field(
        # Probes and scrapes come from outside the pod: the kubelet and Prometheus.
        default="0.0.0.0",  # noqa: S104
        description="GOALKEEPER_LISTEN_ADDRESS: where the health and metrics ports listen.",
    )
    shardSelector: str = Field(
        default="",
        description=(
            "GOALKEEPER_SHARD_SELECTOR: a label selector on the label "
            f"{SHARD_LABEL} for the Monitors this operator owns (for example "
            f"`{SHARD_LABEL}=a`, or `{SHARD_LABEL} notin (a,b)` for the shard that takes "
            "every Monitor no other shard names); their steps carry it. Empty: every Monitor."
        ),
    )
    modelConfigStatuses: bool = Field(
        default=True,
        description=(
            "GOALKEEPER_MODEL_CONFIG_STATUSES: this operator keeps the ModelConfigs' statuses. "
            "Of several shards only one does (the chart: the release's own), counting every "
            "shard's Monitors."
        ),
    )
    leaderElection: bool = Field(
        default=False,
        description="GOALKEEPER_LEADER_ELECTION: one replica reconciles, the others wait.",
    )
    leaseName: str = Field(default="goalkeeper-operator", description="GOALKEEPER_LEASE_NAME")
    leaseNamespace: str = Field(
        default="goalkeeper-system", description="GOALKEEPER_LEASE_NAMESPACE"
    )
    leaseSeconds: Annotated[float, Field(ge=2, le=300)] = Field(
        default=15.0, description="GOALKEEPER_LEASE_SECONDS: a leader holds the Lease this long."
    )
    identity: str = Field(
        default="",
        description="GOALKEEPER_IDENTITY: this replica's name in the Lease (default: hostname).",
    )
    timeScale: Annotated[float, Field(gt=0, le=60)] = Field(
        default=60.0,
        description=(
            "GOALKEEPER_TIME_SCALE: seconds in one `everyMinutes` minute. For tests only; "
            "production leaves it at 60."
        ),
    )

    @field_validator("model")
    @classmethod
    def _model_form(cls, value: str) -> str:
        if value and (":" not in value or value.split(":", 1)[0] not in {"openai", "anthropic"}):
            raise ValueError("must be `openai:NAME` or `anthropic:NAME`")
        return value

    @field_validator("notifyUrl")
    @classmethod
    def _notify_url(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value().strip()
        parts = urlsplit(url)
        if url and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise ValueError("must be an http or https URL (its value is not shown)")
        return SecretStr(url)

    @field_validator("shardSelector")
    @classmethod
    def _shard_selector(cls, value: str) -> str:
        try:
            parsed = selectors.parse(value)
        except selectors.SelectorError as error:
            raise ValueError(f"not a label selector: {error}") from None
        other = [key for key in parsed.keys if key != SHARD_LABEL]
        if other:
            raise ValueError(f"may select on {SHARD_LABEL} only, not {', '.join(other)}")
        return parsed.text

    @property
    def shard(self) -> LabelSelector:
        return selectors.parse(self.shardSelector)

    @property
    def minute(self) -> timedelta:
        return timedelta(seconds=self.timeScale)

    def policy(self) -> Policy:
        """The engine's knobs: every decision of this operator is made with this value."""
        return Policy(
            minute=self.minute,
            model_spend_cap_usd=self.modelSpendCapUsd,
            stall_checks=self.stallChecks,
            wake_interval=timedelta(seconds=self.wakeIntervalSeconds),
            approval_window=self.approval_window,
            confirm_authority=self.confirmAuthority,
            retry_first=timedelta(seconds=self.stepRetrySeconds),
            failure_window=timedelta(seconds=self.failureWindowSeconds),
            invalid_answers=self.invalidAnswersLimit,
            brake_acts=self.brakeActs,
        )

    def cluster_sink(self) -> NotificationSinkSpec | None:
        """The chart's sink for namespaces with none of their own; None when no URL is set."""
        if not self.notifyUrl.get_secret_value():
            return None
        send = [NoticeKind(kind) for kind in dict.fromkeys(self.notifySend.split(","))]
        return NotificationSinkSpec(format=self.notifyFormat, send=send)

    @property
    def act_extra_verbs(self) -> tuple[str, ...]:
        return tuple(verb for verb in self.actExtraVerbs.split(",") if verb)

    @property
    def approval_window(self) -> timedelta:
        """The approval timeout as a duration; zero when approvals are off."""
        units = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
        parts = re.findall(r"([0-9]+)([smhd])", self.approvalTimeout)
        return timedelta(seconds=sum(int(n) * units[u] for n, u in parts))


# Step limits the operator forwards to the step pods (the step validates them).
STEP_PASSTHROUGH = (
    "GOALKEEPER_REQUEST_LIMIT",
    "GOALKEEPER_TOOL_CALLS_LIMIT",
    "GOALKEEPER_TOTAL_TOKENS_LIMIT",
    "GOALKEEPER_MAX_OUTPUT_TOKENS",
    "GOALKEEPER_HTTP_TIMEOUT_SECONDS",
    "GOALKEEPER_PROVIDER_RETRIES",
    "GOALKEEPER_PRICE_INPUT_PER_MTOK",
    "GOALKEEPER_PRICE_OUTPUT_PER_MTOK",
    "GOALKEEPER_ALLOW_COMMANDS",
    "GOALKEEPER_COST_LIMIT_USD",
    "GOALKEEPER_OUTPUT_RETRIES",
    "GOALKEEPER_RETRY_BACKOFF_SECONDS",
    "GOALKEEPER_FILE_ROOTS",
    "GOALKEEPER_HTTP_ALLOWED_HOSTS",
    "GOALKEEPER_REPAIR_TIMEOUT_SECONDS",
    "GOALKEEPER_ROUTED_OUTPUT",
    "GOALKEEPER_WORKED_EXAMPLES",
    "GOALKEEPER_ACT_EXTRA_VERBS",
)

_FIELDS = {
    "model": "MODEL",
    "modelBaseUrl": "MODEL_BASE_URL",
    "modelApiKeySecret": "MODEL_API_KEY_SECRET",
    "modelApiKeySecretKey": "MODEL_API_KEY_SECRET_KEY",
    "stepImage": "STEP_IMAGE",
    "observerServiceAccount": "OBSERVER_SERVICE_ACCOUNT",
    "actorServiceAccount": "ACTOR_SERVICE_ACCOUNT",
    "stepDeadlineSeconds": "STEP_DEADLINE_SECONDS",
    "stepHistory": "STEP_HISTORY",
    "repairCommand": "REPAIR_COMMAND",
    "instructions": "INSTRUCTIONS",
    "notifyUrl": "NOTIFY_URL",
    "notifyFormat": "NOTIFY_FORMAT",
    "notifySend": "NOTIFY_SEND",
    "timeScale": "TIME_SCALE",
    "resyncSeconds": "RESYNC_SECONDS",
    "modelSpendCapUsd": "MODEL_SPEND_CAP_USD",
    "stallChecks": "STALL_CHECKS",
    "wakeIntervalSeconds": "WAKE_INTERVAL_SECONDS",
    "approvalTimeout": "APPROVAL_TIMEOUT",
    "actExtraVerbs": "ACT_EXTRA_VERBS",
    "confirmAuthority": "CONFIRM_AUTHORITY",
    "stepRetrySeconds": "STEP_RETRY_SECONDS",
    "failureWindowSeconds": "FAILURE_WINDOW_SECONDS",
    "invalidAnswersLimit": "INVALID_ANSWERS_LIMIT",
    "brakeActs": "BRAKE_ACTS",
    "healthPort": "HEALTH_PORT",
    "metricsPort": "METRICS_PORT",
    "listenAddress": "LISTEN_ADDRESS",
    "shardSelector": "SHARD_SELECTOR",
    "modelConfigStatuses": "MODEL_CONFIG_STATUSES",
    "leaderElection": "LEADER_ELECTION",
    "leaseName": "LEASE_NAME",
    "leaseNamespace": "LEASE_NAMESPACE",
    "leaseSeconds": "LEASE_SECONDS",
    "identity": "IDENTITY",
}


def load(environ: Mapping[str, str] | None = None) -> OperatorSettings:
    """Settings from the environment; a bad value raises SettingsError naming the variable."""
    env = os.environ if environ is None else environ
    raw: dict[str, object] = {
        field: env[PREFIX + name] for field, name in _FIELDS.items() if PREFIX + name in env
    }
    if env.get(PREFIX + "NAMESPACES"):
        raw["namespaces"] = [n.strip() for n in env[PREFIX + "NAMESPACES"].split(",") if n.strip()]
    raw["stepEnv"] = {name: env[name] for name in STEP_PASSTHROUGH if name in env}
    try:
        return OperatorSettings.model_validate(raw)
    except ValidationError as error:
        problems = []
        for item in error.errors(include_url=False, include_input=False):
            field = str(item["loc"][0])
            variable = PREFIX + _FIELDS.get(field, field.upper())
            problems.append(f"{variable}: {item['msg']}")
        raise SettingsError("; ".join(problems)) from None
