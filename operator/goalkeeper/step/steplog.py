"""The step's log: one JSON object per line on stdout, for the user watching a step.

Events, each with `ts` (UTC) and `event` first:

- `step_start`: kind, model, check;
- `model_request`: n (request number), input_tokens, output_tokens, finish, ms; or error;
- `retry`: n, attempt, error (the error class and HTTP status only), delay_s;
- `api_retry`: what (reading the MonitorStep, writing its status), attempt, status (the
  HTTP status, 0 when no answer came), delay_s;
- `tool_call`: n, tool, args (a short summary), result_chars, outcome (ok, error,
  refused, repeated), ms;
- `output_invalid`: n (the model's final answer did not validate and was sent back);
- `limit`: setting (the GOALKEEPER_... variable), value;
- `step_end`: kind, ok, route / outcome or error_kind, s, requests, tool_calls,
  input_tokens, output_tokens, cost_usd.

Nothing here prints a tool result, target text, the prompt or a model credential: argument
summaries keep only names, short values, dict keys and list lengths, go through
`redact_text`, and every line is scrubbed of the model credentials.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from pydantic import ValidationError
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition

from goalkeeper.step.fence import OPEN
from goalkeeper.step.processes import model_credentials
from goalkeeper.step.redact import redact_text, scrub
from goalkeeper.step.repeats import REPEAT_NOTE

VALUE_MAX = 80
ARGS_MAX = 300


class StepLog:
    """Writes the events; `stream` defaults to the current stdout."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def emit(self, event: str, **fields: Any) -> None:
        doc: dict[str, Any] = {
            "ts": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z",
            "event": event,
        }
        doc.update((k, v) for k, v in fields.items() if v is not None)
        line = json.dumps(scrub(doc, model_credentials()), separators=(",", ":"), default=str)
        stream = self.stream or sys.stdout
        stream.write(line + "\n")
        stream.flush()


def step_end(log: StepLog, kind: str, outcome: Any, seconds: float) -> None:
    """The last line of a step: how it ended, how long it took, what it used."""
    result = outcome.result or {}
    usage = outcome.usage
    log.emit(
        "step_end",
        kind=kind,
        ok=outcome.ok,
        route=result.get("route"),
        outcome=result.get("outcome"),
        error_kind=str(outcome.error_kind) if outcome.error_kind else None,
        s=round(seconds, 3),
        requests=usage.requests,
        tool_calls=usage.toolCalls,
        input_tokens=usage.inputTokens,
        output_tokens=usage.outputTokens,
        cost_usd=usage.costUsd,
    )


def summarize_args(args: Any) -> str:
    """`key=value` pairs, values cut short; dicts show their keys, lists their length."""
    if not isinstance(args, dict):
        return ""
    parts = []
    for key, value in args.items():
        if value is None or value == "" or value is False:
            continue
        parts.append(redact_text(f"{key}={_short(value)}"))
    return " ".join(parts)[:ARGS_MAX]


def _short(value: Any) -> str:
    if isinstance(value, dict):
        meta = value.get("metadata")
        if isinstance(meta, dict) and value.get("kind") and meta.get("name"):
            return _cut(f"{value['kind']}/{meta['name']}")  # a manifest
        return _cut("{" + ",".join(str(k) for k in value) + "}")
    if isinstance(value, list):
        return f"[{len(value)} items]"
    return _cut(" ".join(str(value).split()))


def _cut(text: str) -> str:
    return text if len(text) <= VALUE_MAX else text[: VALUE_MAX - 1] + "…"


def result_outcome(text: str) -> str:
    """ok, error, refused or repeated, read from the start of a tool's answer."""
    if text.startswith(REPEAT_NOTE):
        return "repeated"
    if text.startswith("REFUSED:"):
        return "refused"
    first, _, rest = text.partition("\n")
    if text.startswith("ERROR:") or (first.startswith(f"<<<{OPEN}") and rest.startswith("ERROR:")):
        return "error"
    return "ok"


def error_label(exc: BaseException) -> str:
    """The error class, and the HTTP status when there is one: never the body."""
    if isinstance(exc, ModelHTTPError):
        return f"{type(exc).__name__} HTTP {exc.status_code}"
    return type(exc).__name__


def _ms(start: float) -> int:
    return round((time.monotonic() - start) * 1000)


@dataclass
class RunLog(AbstractCapability[Any]):
    """Logs each model request, tool call and rejected final answer of one run."""

    log: StepLog
    requests: int = 0
    tool_calls: int = 0
    _open: list[int] = field(default_factory=list)

    def on_retry(self, attempt: int, exc: ModelAPIError, delay: float) -> None:
        self.log.emit(
            "retry", n=self.requests, attempt=attempt, error=error_label(exc), delay_s=delay
        )

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, handler: Any
    ) -> ModelResponse:
        self.requests += 1
        n, start = self.requests, time.monotonic()
        try:
            response: ModelResponse = await handler(request_context)
        except Exception as exc:
            self.log.emit("model_request", n=n, error=error_label(exc), ms=_ms(start))
            raise
        self.log.emit(
            "model_request",
            n=n,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            finish=response.finish_reason,
            ms=_ms(start),
        )
        return response

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        self.tool_calls += 1
        n, start = self.tool_calls, time.monotonic()
        summary = summarize_args(args)
        try:
            result = await handler(args)
        except Exception as exc:
            self.log.emit(
                "tool_call",
                n=n,
                tool=call.tool_name,
                args=summary,
                outcome="error",
                error=type(exc).__name__,
                ms=_ms(start),
            )
            raise
        text = result if isinstance(result, str) else str(result)
        self.log.emit(
            "tool_call",
            n=n,
            tool=call.tool_name,
            args=summary,
            result_chars=len(text),
            outcome=result_outcome(text),
            ms=_ms(start),
        )
        return result

    async def on_output_validate_error(
        self,
        ctx: RunContext[Any],
        *,
        output_context: Any,
        output: Any,
        error: Any,
    ) -> Any:
        count = len(error.errors()) if isinstance(error, ValidationError) else None
        self.log.emit("output_invalid", n=self.requests, problems=count)
        raise error


__all__ = [
    "RunLog",
    "StepLog",
    "error_label",
    "result_outcome",
    "step_end",
    "summarize_args",
]
