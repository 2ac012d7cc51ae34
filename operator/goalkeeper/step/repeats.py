"""Identical tool calls within one step: answered from the first result, then refused.

A small model often asks for the same thing again. The second identical call (same tool,
same arguments) gets the earlier answer back with a one-line note and reads nothing; the
third and later ones are refused, so the model decides with what it has. Any write clears
the record: after a change, reading the same object again is the verification.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition

REPEAT_NOTE = "(same call as before; result repeated, nothing re-read)"
REPEAT_LIMIT = 3
# Tools that change something; k8s_raw and http_request only with a mutating method.
WRITE_TOOLS = frozenset(
    {
        "k8s_apply",
        "k8s_create",
        "k8s_replace",
        "k8s_patch",
        "k8s_delete",
        "k8s_rerun_job",
        "k8s_scale",
        "k8s_rollout_restart",
        "run_command",
    }
)
_METHOD_TOOLS = frozenset({"k8s_raw", "http_request"})


def is_write(tool: str, args: Any) -> bool:
    if tool in WRITE_TOOLS:
        return True
    if tool in _METHOD_TOOLS and isinstance(args, dict):
        return str(args.get("method") or "GET").strip().upper() not in ("GET", "HEAD")
    return False


def refusal(tool: str, count: int) -> str:
    return f"REFUSED: the same {tool} call was repeated {count} times; decide with what you have."


@dataclass
class RepeatGuard(AbstractCapability[Any]):
    """See the module docstring; one per run."""

    _seen: dict[str, tuple[int, Any]] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        tool = call.tool_name
        if is_write(tool, args):
            self._seen.clear()
            return await handler(args)
        key = tool + json.dumps(args, sort_keys=True, default=str)
        # Identical calls in one response run concurrently: the later ones wait for the first.
        async with self._locks.setdefault(key, asyncio.Lock()):
            seen = self._seen.get(key)
            if seen is None:
                result = await handler(args)
                self._seen[key] = (1, result)
                return result
            count, result = seen[0] + 1, seen[1]
            self._seen[key] = (count, result)
            if count >= REPEAT_LIMIT:
                return refusal(tool, count)
            return f"{REPEAT_NOTE}\n{result}"


__all__ = ["REPEAT_LIMIT", "REPEAT_NOTE", "RepeatGuard", "is_write"]
