"""What went wrong in a step run, in plain words, naming the setting a user can change.

`explain` turns an exception from a pydantic-ai run (usage limits, a cut-off answer, the
provider's HTTP errors, connection problems, timeouts, answers that stay invalid) into the
`StepErrorKind` and the message for `status.error`. The message says what happened, then
which `GOALKEEPER_...` variable to change and its current value; it counts attempts only
when there were several. Pure: everything it reports comes in through `RunFacts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from pydantic_ai.exceptions import (
    ContentFilterError,
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelTimeoutError,
    OutputTokenLimitExceeded,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)

from goalkeeper.core.models import StepErrorKind

ERROR_MAX = 4000
DETAIL_MAX = 300


@dataclass(frozen=True)
class RunFacts:
    """The settings of the run and what it did, as far as a message needs them."""

    request_limit: int = 30
    tool_calls_limit: int = 60
    total_tokens_limit: int = 500_000
    cost_limit_usd: Decimal | None = None
    output_retries: int = 3
    max_output_tokens: int | None = None
    http_timeout_seconds: float | None = None
    provider_retries: int = 0
    attempts: int = 1  # of the request that failed, retries included
    model: str = ""  # as GOALKEEPER_MODEL names it, e.g. openai:qwen3
    base_url: str | None = None
    requests: int = 0
    tool_calls: int = 0
    total_tokens: int = 0
    # Where the key comes from when a ModelConfig names it (GOALKEEPER_MODEL_API_KEY_SOURCE).
    key_source: str = ""


def explain(exc: BaseException, facts: RunFacts) -> tuple[StepErrorKind, str]:
    """The error kind and the message for an exception that ended a run."""
    kind, message = _explain(exc, facts)
    return kind, message[:ERROR_MAX]


def limit_hit(exc: BaseException, f: RunFacts) -> tuple[str, object] | None:
    """The setting whose limit ended the run, and its value; None for other errors."""
    if isinstance(exc, OutputTokenLimitExceeded):
        return "GOALKEEPER_MAX_OUTPUT_TOKENS", f.max_output_tokens
    if not isinstance(exc, UsageLimitExceeded):
        return None
    text = str(exc)
    for name, setting, value in (
        ("request_limit", "GOALKEEPER_REQUEST_LIMIT", f.request_limit),
        ("tool_calls_limit", "GOALKEEPER_TOOL_CALLS_LIMIT", f.tool_calls_limit),
        ("total_tokens_limit", "GOALKEEPER_TOTAL_TOKENS_LIMIT", f.total_tokens_limit),
        ("cost_limit", "GOALKEEPER_COST_LIMIT_USD", f.cost_limit_usd),
    ):
        if name in text:
            return setting, value
    return None


def _explain(exc: BaseException, f: RunFacts) -> tuple[StepErrorKind, str]:
    if isinstance(exc, UsageLimitExceeded):
        return StepErrorKind.limits, _usage_limit(str(exc), f)
    if isinstance(exc, OutputTokenLimitExceeded):
        return StepErrorKind.limits, (
            "The model's answer was cut off at the output token limit "
            f"(GOALKEEPER_MAX_OUTPUT_TOKENS={_value(f.max_output_tokens)}) before it was "
            "complete. Raise GOALKEEPER_MAX_OUTPUT_TOKENS."
        )
    if isinstance(exc, ModelAPIError):
        return _provider(exc, f)
    if isinstance(exc, ContentFilterError):
        return StepErrorKind.provider, (
            f"The model provider's content filter blocked the answer of {_model(f)}. "
            "Try another model (GOALKEEPER_MODEL)."
        )
    if isinstance(exc, UnexpectedModelBehavior):
        return StepErrorKind.invalidOutput, _invalid_output(exc, f)
    return StepErrorKind.internal, f"{type(exc).__name__}: {exc}"


def _usage_limit(text: str, f: RunFacts) -> str:
    if "request_limit" in text:
        return (
            f"The step made the {f.request_limit} model requests it may make "
            f"(GOALKEEPER_REQUEST_LIMIT={f.request_limit}) without a final answer. Raise "
            "GOALKEEPER_REQUEST_LIMIT, or make the task quicker to check."
        )
    if "tool_calls_limit" in text:
        return (
            f"The model asked for more tool calls than the {f.tool_calls_limit} a step may make "
            f"(GOALKEEPER_TOOL_CALLS_LIMIT={f.tool_calls_limit}). Raise "
            "GOALKEEPER_TOOL_CALLS_LIMIT, or make the task quicker to check."
        )
    if "total_tokens_limit" in text:
        return (
            f"The step used {f.total_tokens or 'more'} tokens, past its limit of "
            f"{f.total_tokens_limit} (GOALKEEPER_TOTAL_TOKENS_LIMIT={f.total_tokens_limit}). "
            "Raise GOALKEEPER_TOTAL_TOKENS_LIMIT, or make the task quicker to check."
        )
    if "cost_limit" in text:
        return (
            f"The step's model cost reached its ceiling of {_value(f.cost_limit_usd)} US dollars "
            f"(GOALKEEPER_COST_LIMIT_USD={_value(f.cost_limit_usd)}). Raise "
            "GOALKEEPER_COST_LIMIT_USD."
        )
    return f"The step reached a usage limit: {_first_sentence(text)}."


def _provider(exc: ModelAPIError, f: RunFacts) -> tuple[StepErrorKind, str]:
    status = exc.status_code if isinstance(exc, ModelHTTPError) else None
    http = f"HTTP {status}" if status is not None else type(exc).__name__
    detail = _detail(exc)
    tries = f" on all {f.attempts} attempts" if f.attempts > 1 else ""
    retries = (
        f"Raise GOALKEEPER_PROVIDER_RETRIES (now {f.provider_retries}) to try longer."
        if f.attempts > 1 or f.provider_retries == 0
        else ""
    )
    if isinstance(exc, ModelTimeoutError | ModelRequestTimeout):
        return StepErrorKind.provider, _join(
            f"The model at {_where(f)} did not answer within "
            f"GOALKEEPER_HTTP_TIMEOUT_SECONDS={_value(f.http_timeout_seconds)} seconds{tries}.",
            "Raise GOALKEEPER_HTTP_TIMEOUT_SECONDS, or lower GOALKEEPER_MAX_OUTPUT_TOKENS.",
            retries,
        )
    if isinstance(exc, ModelConnectionError):
        return StepErrorKind.provider, _join(
            f"Could not reach the model server at {_where(f)}{tries}: {detail}.",
            "Check GOALKEEPER_MODEL_BASE_URL and that the server is up.",
            retries,
        )
    if isinstance(exc, ModelAuthenticationError) or status in (401, 403):
        return StepErrorKind.configuration, _join(
            f"The model provider at {_where(f)} refused the API key ({http}: {detail}).",
            (
                f"Check the key, {f.key_source}, and that it may use model {_model(f)}."
                if f.key_source
                else "Check the key in the Secret named by GOALKEEPER_MODEL_API_KEY_SECRET "
                "(the step reads it from the file GOALKEEPER_MODEL_API_KEY_FILE), and that it "
                f"may use GOALKEEPER_MODEL={_model(f)}."
            ),
        )
    if isinstance(exc, ModelNotFoundError) or status == 404:
        return StepErrorKind.configuration, _join(
            f"The model server at {_where(f)} does not know the model "
            f"GOALKEEPER_MODEL={_model(f)} ({http}: {detail}).",
            "Check GOALKEEPER_MODEL and GOALKEEPER_MODEL_BASE_URL.",
        )
    if isinstance(exc, ModelQuotaExceededError):
        return StepErrorKind.provider, _join(
            f"The model provider says the account's quota or credits are used up ({http}: "
            f"{detail}).",
            "Top up the account, or use another model (GOALKEEPER_MODEL).",
        )
    if isinstance(exc, ModelRateLimitError) or status == 429:
        return StepErrorKind.provider, _join(
            f"The model provider kept limiting the request rate ({http}){tries}: {detail}.",
            retries or "Raise GOALKEEPER_PROVIDER_RETRIES or GOALKEEPER_RETRY_BACKOFF_SECONDS.",
        )
    if isinstance(exc, ModelContextWindowExceededError):
        return StepErrorKind.provider, _join(
            f"The conversation grew past the context window of {_model(f)} ({http}: {detail}).",
            "Use a model with a larger window (GOALKEEPER_MODEL), or lower "
            "GOALKEEPER_MAX_OUTPUT_TOKENS.",
        )
    if status is not None and status >= 500:
        return StepErrorKind.provider, _join(
            f"The model server at {_where(f)} failed with {http}{tries}: {detail}.",
            retries,
        )
    if status is not None:
        return StepErrorKind.provider, _join(
            f"The model server at {_where(f)} rejected the request ({http}: {detail}).",
            f"Check that GOALKEEPER_MODEL={_model(f)} names a model that supports tool calls.",
        )
    return StepErrorKind.provider, _join(
        f"The model provider failed{tries}: {type(exc).__name__}: {detail}.", retries
    )


_TOOL_RETRIES = re.compile(r"Tool '(?P<tool>[^']+)' exceeded max retries count of (?P<n>\d+)")


def _invalid_output(exc: UnexpectedModelBehavior, f: RunFacts) -> str:
    text = exc.message
    tool = _TOOL_RETRIES.search(text)
    if tool:
        return (
            f"The model called the tool {tool.group('tool')} with invalid arguments "
            f"{int(tool.group('n')) + 1} times in a row. A model that is better at tool calls "
            f"(GOALKEEPER_MODEL, now {_model(f)}) may help."
        )
    if text.startswith("Exceeded maximum output retries"):
        answers = f.output_retries + 1
        several = f"in {answers} tries" if answers > 1 else "in its only try"
        return (
            f"The model did not give a valid answer {several} "
            f"(GOALKEEPER_OUTPUT_RETRIES={f.output_retries}). Raise GOALKEEPER_OUTPUT_RETRIES, "
            f"or use a model that is better at structured answers (GOALKEEPER_MODEL, now "
            f"{_model(f)})."
        )
    return (
        f"The model answered in a way the step cannot use: {_first_sentence(text)}. "
        f"Another model (GOALKEEPER_MODEL, now {_model(f)}) may help."
    )


def _detail(exc: ModelAPIError) -> str:
    """The provider's own message, or the transport's deepest cause: the part that says why."""
    text: object = exc.message
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        text = body["message"]
    elif body:
        text = body
    if isinstance(exc, ModelConnectionError):
        cause: BaseException = exc
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
        if cause is not exc:
            text = f"{type(cause).__name__}: {cause}"
    flat = " ".join(str(text).split()).rstrip(".")
    return flat[:DETAIL_MAX] or type(exc).__name__


def _first_sentence(text: str) -> str:
    return " ".join(text.split(". ", 1)[0].split())[:DETAIL_MAX].rstrip(".")


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _value(value: object) -> str:
    return "unset" if value is None else str(value)


def _model(f: RunFacts) -> str:
    return f.model or "unset"


def _where(f: RunFacts) -> str:
    return f"GOALKEEPER_MODEL_BASE_URL={f.base_url}" if f.base_url else "the provider's API"


__all__ = ["ERROR_MAX", "RunFacts", "explain", "limit_hit"]
