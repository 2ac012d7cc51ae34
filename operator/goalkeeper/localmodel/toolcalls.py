"""Tool calls a small model cannot get wrong: each call is JSON text under a grammar.

The default local model writes a correct call, but not in the form llama.cpp's server
parses into `tool_calls`, so its calls are lost (docs/local-model.md). `ToolCallProxy`
sits in front of the server on 127.0.0.1 and speaks plain Chat Completions with tools to
the steps. Upstream, a request goes without `tools`: they are described in the system
message as the model's own chat template describes them, and `response_format` carries
one JSON schema, a choice of `{"name": TOOL, "arguments": {...}}` over the request's tools,
which the server enforces with a grammar. The answer is read back into one tool call.
Earlier calls and their results travel as the text the template would make of them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from goalkeeper.localmodel.signatures import describe_tools

log = logging.getLogger("goalkeeper.localmodel")

HOST = "127.0.0.1"
CHAT_PATH = "/v1/chat/completions"
UPSTREAM_TIMEOUT_SECONDS = 3600.0
BODY_MAX = 16 * 1024 * 1024

Json = dict[str, Any]

# As Qwen2.5's chat template introduces tools (the format the model was trained on), with
# each tool written as a signature instead of its JSON schema (signatures.py).
TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    'arguments, on one line: {"name": <function-name>, "arguments": <args-json-object>}'
)


class ToolCallError(ValueError):
    """A request the proxy cannot carry: the message names what is wrong."""


def _functions(body: Mapping[str, Any]) -> list[Json]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise ToolCallError("tools must be a list")
    functions = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ToolCallError("every tool must be a function with a name")
        functions.append(function)
    return functions


def _hoist(schema: Any, prefix: str, defs: Json) -> Any:
    """`schema` with its own `$defs` moved into `defs` under `prefix`, and every local
    `$ref` rewritten to match: the grammar resolves references from the root schema."""
    if isinstance(schema, list):
        return [_hoist(item, prefix, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: Json = {}
    for key, value in schema.items():
        if key in ("$defs", "definitions") and isinstance(value, dict):
            for name, definition in value.items():
                defs[f"{prefix}{name}"] = _hoist(definition, prefix, defs)
        elif key == "$ref" and isinstance(value, str) and value.startswith("#/"):
            out[key] = "#/$defs/" + prefix + value.rsplit("/", 1)[-1]
        else:
            out[key] = _hoist(value, prefix, defs)
    return out


def call_schema(functions: list[Json]) -> Json:
    """One JSON schema for one call to any of `functions`."""
    defs: Json = {}
    choices = []
    for index, function in enumerate(functions):
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        choices.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": function["name"]},
                    "arguments": _hoist(parameters, f"t{index}_", defs),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: Json = choices[0] if len(choices) == 1 else {"anyOf": choices}
    if defs:
        schema = {**schema, "$defs": defs}
    return schema


def tools_text(functions: list[Json]) -> str:
    return TOOLS_INTRO + describe_tools(functions) + TOOLS_OUTRO


def _text(content: Any) -> str:
    """A message's content as text (a list of parts keeps its text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _messages(messages: list[Any], functions: list[Json]) -> list[Json]:
    """The conversation as plain text turns, the tools described in the system message."""
    out: list[Json] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ToolCallError("every message must be an object")
        role = message.get("role")
        if role == "tool":
            result = f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>"
            # The results of one turn's calls share one user turn, as the template has it.
            after_tool = index > 0 and isinstance(messages[index - 1], dict)
            if after_tool and messages[index - 1].get("role") == "tool":
                out[-1]["content"] += "\n" + result
            else:
                out.append({"role": "user", "content": result})
        elif role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = function.get("arguments")
                calls.append(
                    "<tool_call>\n"
                    + json.dumps({"name": function.get("name"), "arguments": arguments})
                    + "\n</tool_call>"
                )
            text = _text(message.get("content"))
            out.append({"role": "assistant", "content": "\n".join([text, *calls]).strip()})
        elif role in ("system", "developer"):
            out.append({"role": "system", "content": _text(message.get("content"))})
        else:
            out.append({"role": str(role), "content": _text(message.get("content"))})
    if functions:
        described = tools_text(functions)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + described}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out


def wants_tools(body: Mapping[str, Any]) -> bool:
    """Whether the answer to `body` is to be a tool call."""
    return bool(_functions(body)) and body.get("tool_choice") != "none"


def _allowed(functions: list[Json], choice: Any) -> list[Json]:
    """The tools `tool_choice` lets this turn call: one named function, or the named
    `allowed_tools`; all of them otherwise (or when it names none of them)."""
    names: list[Any] = []
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        listed = (choice.get("allowed_tools") or {}).get("tools") or []
        names = [(t.get("function") or {}).get("name") for t in listed if isinstance(t, dict)]
    elif isinstance(choice, dict):
        names = [(choice.get("function") or {}).get("name")]
    return [f for f in functions if f["name"] in names] or functions


# One server slot per kind of step (extract, observe, act): each keeps its own prompt
# prefix cached, so an act step between two observations does not evict the observe one.
SLOTS = 3
_WRITE_TOOLS = frozenset({"k8s_patch", "k8s_apply", "k8s_create", "k8s_scale", "k8s_delete"})


def slot_for(functions: list[Json]) -> int:
    """The slot of the step a request comes from, told by the tools it offers."""
    names = {f.get("name") for f in functions}
    if names & _WRITE_TOOLS:
        return 2
    if len(names) > 1:
        return 1  # observe: read tools and its answer
    return 0  # extract: its answer alone, or a request without tools


def upstream_request(body: Mapping[str, Any]) -> Json:
    """The request the server gets for `body`: unchanged unless it wants a tool call, and
    sent to its step kind's slot."""
    functions = _functions(body)
    if not wants_tools(body):
        return {**body, "id_slot": slot_for(functions)}

    if body.get("stream"):
        raise ToolCallError("streaming is not supported with tools")
    allowed = _allowed(functions, body.get("tool_choice"))
    upstream = {
        key: value
        for key, value in body.items()
        if key not in ("tools", "tool_choice", "parallel_tool_calls", "response_format")
    }
    # Every tool is described, so the prompt stays the same whichever a turn may call.
    upstream["messages"] = _messages(list(body.get("messages") or []), functions)
    upstream["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "tool_call", "schema": call_schema(allowed), "strict": True},
    }
    upstream["id_slot"] = slot_for(functions)
    return upstream


_ids = itertools.count(1)


def client_response(answer: Mapping[str, Any], tools: bool) -> Json:
    """The server's answer as the client expects it: its JSON text as one tool call.

    Text that is not a call (cut short at the token limit) stays text: the client
    sees an answer that called no tool, as it would from any model.
    """
    response = dict(answer)
    if not tools:
        return response
    choices = []
    for choice in answer.get("choices") or []:
        message = dict(choice.get("message") or {})
        try:
            call = json.loads(_text(message.get("content")))
        except ValueError:
            call = None
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{next(_ids)}",
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call.get("arguments") or {}),
                        },
                    }
                ],
            }
            choice = {**choice, "message": message, "finish_reason": "tool_calls"}
        choices.append(choice)
    response["choices"] = choices
    return response


class ToolCallProxy:
    """Chat Completions with tools on 127.0.0.1, carried to `upstream` as above; every
    other path is passed through unchanged."""

    def __init__(self, upstream: str, port: int = 0) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy._forward(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > BODY_MAX:
                    self._reply(413, {"error": {"message": "request body too large"}})
                    return
                proxy._forward(self, self.rfile.read(length))

            def _reply(self, status: int, body: Json) -> None:
                self._send(status, json.dumps(body).encode())

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("tool-call proxy: " + format, *args)

        self._server = ThreadingHTTPServer((HOST, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://{HOST}:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="tool-call-proxy", daemon=True
        )

    def start(self) -> ToolCallProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ToolCallProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _forward(self, handler: Any, data: bytes | None) -> None:
        tools = False
        if data is not None and handler.path.split("?")[0] == CHAT_PATH:
            try:
                body = json.loads(data)
                tools = wants_tools(body)
                data = json.dumps(upstream_request(body)).encode()
            except (ValueError, ToolCallError) as error:
                handler._reply(400, {"error": {"message": f"bad request: {error}"}})
                return
        request = urllib.request.Request(  # noqa: S310 - the upstream is on loopback
            self.upstream + handler.path,
            data=data,
            method="POST" if data is not None else "GET",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=UPSTREAM_TIMEOUT_SECONDS) as answer:  # noqa: S310
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        except OSError as error:
            handler._reply(502, {"error": {"message": f"the local model is unreachable: {error}"}})
            return
        if status == 200 and tools:
            with contextlib.suppress(ValueError):  # not JSON: passed on as it came
                raw = json.dumps(client_response(json.loads(raw), tools=True)).encode()
        handler._send(status, raw)
