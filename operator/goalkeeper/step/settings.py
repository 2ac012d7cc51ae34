"""The step's settings, read from the environment and validated with pydantic.

Every problem is reported as one line naming the variable and what it expects, so the
operator can show it in the MonitorStep status; nothing here raises a bare traceback.
`EXPECTED` lists every variable the step reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from goalkeeper.step.egress import parse_allowed

PREFIX = "GOALKEEPER_"


class SettingsError(ValueError):
    """One or more settings are missing or malformed; `problems` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class StepIdentity(BaseModel):
    """Which MonitorStep this process reads and writes."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str
    # The pod this process runs in, from the downward API; every status write names it.
    pod_name: str | None = None
    pod_uid: str | None = None
    # How long the step's Job may run (its activeDeadlineSeconds); None when not given.
    deadline_seconds: int | None = None


# What each variable expects, used in error messages.
EXPECTED: dict[str, str] = {
    "GOALKEEPER_MODEL": "'openai:NAME' (any OpenAI-compatible Chat Completions server) "
    "or 'anthropic:NAME'",
    "GOALKEEPER_MODEL_BASE_URL": "an http:// or https:// URL of the model API",
    "GOALKEEPER_MODEL_API_KEY": "the API key of the model provider (for local runs)",
    "GOALKEEPER_MODEL_API_KEY_FILE": "the path of a file holding the API key of the model "
    "provider (a mounted Secret)",
    "GOALKEEPER_REQUEST_LIMIT": "an integer from 1 to 1000",
    "GOALKEEPER_TOOL_CALLS_LIMIT": "an integer from 0 to 10000",
    "GOALKEEPER_TOTAL_TOKENS_LIMIT": "an integer from 1000 to 100000000",
    "GOALKEEPER_MAX_OUTPUT_TOKENS": "an integer from 16 to 1000000",
    "GOALKEEPER_HTTP_TIMEOUT_SECONDS": "a number of seconds from 1 to 3600",
    "GOALKEEPER_PROVIDER_RETRIES": "an integer from 0 to 10",
    "GOALKEEPER_RETRY_BACKOFF_SECONDS": "a number of seconds from 0 to 60",
    "GOALKEEPER_OUTPUT_RETRIES": "an integer from 0 to 10",
    "GOALKEEPER_ROUTED_OUTPUT": "true or false",
    "GOALKEEPER_WORKED_EXAMPLES": "true or false",
    "GOALKEEPER_COST_LIMIT_USD": "a non-negative decimal number of US dollars",
    "GOALKEEPER_PRICE_INPUT_PER_MTOK": "a non-negative decimal number of US dollars per "
    "million input tokens",
    "GOALKEEPER_PRICE_OUTPUT_PER_MTOK": "a non-negative decimal number of US dollars per "
    "million output tokens",
    "GOALKEEPER_ALLOW_COMMANDS": "true or false",
    "GOALKEEPER_REPAIR_COMMAND": "a command line (split like a shell would, run without one)",
    "GOALKEEPER_REPAIR_TIMEOUT_SECONDS": "a number of seconds from 1 to 86400",
    "GOALKEEPER_FILE_ROOTS": "a ':'-separated list of absolute directory paths",
    "GOALKEEPER_HTTP_ALLOWED_HOSTS": "comma-separated host or host:port entries the HTTP "
    "tools may reach (IPv6 in brackets); empty allows none",
    "GOALKEEPER_STEP_NAME": "the name of the MonitorStep this step runs",
    "GOALKEEPER_STEP_NAMESPACE": "the namespace of the MonitorStep this step runs",
    "GOALKEEPER_POD_NAME": "the name of the step's pod (downward API fieldRef metadata.name)",
    "GOALKEEPER_POD_UID": "the uid of the step's pod (downward API fieldRef metadata.uid)",
    "GOALKEEPER_STEP_DEADLINE_SECONDS": "the activeDeadlineSeconds of the step's Job, a "
    "whole number of seconds from 1",
}


class ModelRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: Literal["openai", "anthropic"]
    name: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}"


def parse_model_ref(value: str) -> ModelRef:
    provider, sep, name = value.strip().partition(":")
    if not sep or not name.strip() or provider not in ("openai", "anthropic"):
        raise ValueError(f"expected {EXPECTED['GOALKEEPER_MODEL']}, got {value!r}")
    return ModelRef(provider=provider, name=name.strip())


Price = Annotated[Decimal, Field(ge=0, le=Decimal(1_000_000))]


class StepSettings(BaseModel):
    """Everything the step reads from its environment, apart from its identity."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=False)

    model: ModelRef | None = Field(default=None, alias="GOALKEEPER_MODEL")
    base_url: str | None = Field(default=None, alias="GOALKEEPER_MODEL_BASE_URL")
    api_key: str | None = Field(default=None, alias="GOALKEEPER_MODEL_API_KEY", repr=False)

    request_limit: int = Field(default=30, ge=1, le=1000, alias="GOALKEEPER_REQUEST_LIMIT")
    tool_calls_limit: int = Field(default=60, ge=0, le=10_000, alias="GOALKEEPER_TOOL_CALLS_LIMIT")
    total_tokens_limit: int = Field(
        default=500_000, ge=1000, le=100_000_000, alias="GOALKEEPER_TOTAL_TOKENS_LIMIT"
    )
    max_output_tokens: int = Field(
        default=4096, ge=16, le=1_000_000, alias="GOALKEEPER_MAX_OUTPUT_TOKENS"
    )
    http_timeout_seconds: float = Field(
        default=120.0, ge=1, le=3600, alias="GOALKEEPER_HTTP_TIMEOUT_SECONDS"
    )
    provider_retries: int = Field(default=3, ge=0, le=10, alias="GOALKEEPER_PROVIDER_RETRIES")
    retry_backoff_seconds: float = Field(
        default=1.0, ge=0, le=60, alias="GOALKEEPER_RETRY_BACKOFF_SECONDS"
    )
    output_retries: int = Field(default=3, ge=0, le=10, alias="GOALKEEPER_OUTPUT_RETRIES")
    # The observation's schema keyed on its route (step/routed.py): for a model whose
    # output a grammar binds; hosted providers refuse it.
    routed_output: bool = Field(default=False, alias="GOALKEEPER_ROUTED_OUTPUT")
    # A worked example at the end of each step's system prompt (step/prompts.py): a small
    # model follows one far better than rules alone; a large one needs no such tokens.
    worked_examples: bool = Field(default=False, alias="GOALKEEPER_WORKED_EXAMPLES")
    cost_limit_usd: Price | None = Field(default=None, alias="GOALKEEPER_COST_LIMIT_USD")
    price_input_per_mtok: Price | None = Field(
        default=None, alias="GOALKEEPER_PRICE_INPUT_PER_MTOK"
    )
    price_output_per_mtok: Price | None = Field(
        default=None, alias="GOALKEEPER_PRICE_OUTPUT_PER_MTOK"
    )

    allow_commands: bool = Field(default=False, alias="GOALKEEPER_ALLOW_COMMANDS")
    repair_command: str | None = Field(default=None, alias="GOALKEEPER_REPAIR_COMMAND")
    repair_timeout_seconds: float = Field(
        default=3600.0, ge=1, le=86_400, alias="GOALKEEPER_REPAIR_TIMEOUT_SECONDS"
    )
    file_roots: tuple[str, ...] = Field(default=(), alias="GOALKEEPER_FILE_ROOTS")
    http_allowed_hosts: tuple[str, ...] = Field(default=(), alias="GOALKEEPER_HTTP_ALLOWED_HOSTS")
    # Write verbs the act tools may use beyond patch; the operator checked the Monitor's
    # author holds them (core/permissions.py writes_for).
    act_extra_verbs: tuple[Literal["create", "update", "delete"], ...] = Field(
        default=(), alias="GOALKEEPER_ACT_EXTRA_VERBS"
    )

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: Any) -> Any:
        return parse_model_ref(value) if isinstance(value, str) else value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")) or len(value) < 10:
            raise ValueError(f"expected {EXPECTED['GOALKEEPER_MODEL_BASE_URL']}, got {value!r}")
        return value.rstrip("/")

    @field_validator("allow_commands", mode="before")
    @classmethod
    def _bool(cls, value: Any) -> Any:
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"expected true or false, got {value!r}")
        return value

    @field_validator("repair_command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is None:
            return None
        import shlex

        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot be split into arguments ({exc})") from None
        return value if argv else None

    @field_validator("file_roots", mode="before")
    @classmethod
    def _roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            roots = tuple(part for part in value.split(":") if part)
            bad = [r for r in roots if not r.startswith("/")]
            if bad:
                raise ValueError(f"expected absolute paths, got {', '.join(bad)}")
            return tuple(os.path.normpath(r) for r in roots)
        return value

    @field_validator("act_extra_verbs", mode="before")
    @classmethod
    def _verbs(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("http_allowed_hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            parse_allowed(value)
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _provider_needs(self) -> StepSettings:
        problems = []
        if self.model is None:
            pass
        elif self.model.provider == "openai" and not self.base_url:
            problems.append(
                "GOALKEEPER_MODEL_BASE_URL is not set: an 'openai:' model needs the base URL "
                "of its Chat Completions server, e.g. https://api.openai.com/v1"
            )
        elif self.model.provider == "anthropic" and not self.api_key:
            problems.append(
                "GOALKEEPER_MODEL_API_KEY is not set: an 'anthropic:' model needs an API key "
                "(GOALKEEPER_MODEL_API_KEY_FILE, or GOALKEEPER_MODEL_API_KEY in a local run)"
            )
        if (self.price_input_per_mtok is None) != (self.price_output_per_mtok is None):
            problems.append(
                "GOALKEEPER_PRICE_INPUT_PER_MTOK and GOALKEEPER_PRICE_OUTPUT_PER_MTOK must be "
                "set together (US dollars per million tokens)"
            )
        if problems:
            raise SettingsError(problems)
        return self

    @property
    def configured_prices(self) -> tuple[Decimal, Decimal] | None:
        if self.price_input_per_mtok is None or self.price_output_per_mtok is None:
            return None
        return self.price_input_per_mtok, self.price_output_per_mtok

    @property
    def repair_argv(self) -> list[str] | None:
        import shlex

        return shlex.split(self.repair_command) if self.repair_command else None


def _env_values(environ: Mapping[str, str]) -> dict[str, str]:
    # An empty variable counts as unset (Kubernetes renders optional values as "").
    return {k: v for k, v in environ.items() if k.startswith(PREFIX) and v.strip() != ""}


def _problems(exc: ValidationError) -> list[str]:
    problems: list[str] = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        var = str(loc[0]) if loc else ""
        ctx = error.get("ctx") or {}
        inner = ctx.get("error")
        if isinstance(inner, SettingsError):
            problems.extend(inner.problems)
            continue
        if error["type"] == "missing":
            problems.append(f"{var} is not set; expected {EXPECTED.get(var, 'a value')}")
            continue
        message = str(inner) if inner is not None else error["msg"]
        message = message.removeprefix("Value error, ")
        got = error.get("input")
        expected = EXPECTED.get(var)
        if var and expected and expected not in message:
            problems.append(f"{var} is invalid ({message}); expected {expected}, got {got!r}")
        elif var:
            problems.append(f"{var} is invalid: {message}")
        else:
            problems.append(message)
    return problems


def load_settings(
    environ: Mapping[str, str] | None = None, *, require_model: bool = True
) -> StepSettings:
    """Read and validate the settings; raises `SettingsError` with one line per problem.

    A repair step runs a command, not a model, so it may go without `GOALKEEPER_MODEL`.
    """
    values = _env_values(os.environ if environ is None else environ)
    problems: list[str] = []
    if require_model and "GOALKEEPER_MODEL" not in values:
        problems.append(f"GOALKEEPER_MODEL is not set; expected {EXPECTED['GOALKEEPER_MODEL']}")
    try:
        settings = StepSettings.model_validate(values)
    except ValidationError as exc:
        raise SettingsError(problems + _problems(exc)) from None
    if problems:
        raise SettingsError(problems)
    return settings


def load_identity(environ: Mapping[str, str] | None = None) -> StepIdentity:
    env = os.environ if environ is None else environ
    problems = []
    values = {}
    for field, var in (
        ("name", "GOALKEEPER_STEP_NAME"),
        ("namespace", "GOALKEEPER_STEP_NAMESPACE"),
    ):
        value = (env.get(var) or "").strip()
        if not value:
            problems.append(f"{var} is not set; expected {EXPECTED[var]}")
        values[field] = value
    if problems:
        raise SettingsError(problems)
    pod_name = (env.get("GOALKEEPER_POD_NAME") or "").strip() or None
    pod_uid = (env.get("GOALKEEPER_POD_UID") or "").strip() or None
    deadline = (env.get("GOALKEEPER_STEP_DEADLINE_SECONDS") or "").strip()
    # Not a reason to refuse the step: without it the step keeps its default patience.
    seconds = int(deadline) if deadline.isdigit() and int(deadline) > 0 else None
    return StepIdentity(**values, pod_name=pod_name, pod_uid=pod_uid, deadline_seconds=seconds)
