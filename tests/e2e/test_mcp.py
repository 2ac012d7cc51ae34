"""`goalkeeper mcp` end to end: an agent host (the MCP SDK's own client) starts the server
over stdio as a person whose kubeconfig holds nothing but their token, and hands a goal
over through it: the API server stamps that person as the Monitor's author, and a person
who may not create Monitors hears the API server's "forbidden"."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.subscriptions import ResourceUpdated, listen

from goalkeeper.core.permissions import AUTHOR
from goalkeeper.mcpserver import monitor_uri
from tests.e2e.harness import (
    BIN,
    GROUP,
    VERSION,
    Cluster,
    OperatorProcess,
    Scenario,
    wait_until,
    write_token_kubeconfig,
)
from tests.e2e.test_approvals import PAID_TASK, READING, paid_resume
from tests.e2e.test_author_rights import LOGS, READS, person
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

STOP_WHEN = "Stop when Job build has succeeded."
# What a person who hands the build over holds in the namespace: what the observer reads,
# the writes the resume needs (core/permissions.py writes_for), and goalkeeper's own kinds.
HANDS_OVER = [
    *READS,
    LOGS,
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    {
        "apiGroups": [GROUP],
        "resources": ["monitors"],
        "verbs": ["create", "get", "list", "watch", "patch", "delete"],
    },
    {"apiGroups": [GROUP], "resources": ["monitorsteps"], "verbs": ["get", "list"]},
    {"apiGroups": [GROUP], "resources": ["monitorapprovals"], "verbs": ["create", "get", "list"]},
]
# Someone who may look at Monitors but not start one.
LOOKS_ON = [{"apiGroups": [GROUP], "resources": ["monitors"], "verbs": ["get", "list", "watch"]}]


def kubeconfig(
    control_plane: Any, cluster: Cluster, name: str, rules: list[dict[str, Any]], tmp_path: Path
) -> Path:
    """A kubeconfig holding only the token of ServiceAccount `name`, which holds `rules`."""
    person(control_plane, cluster.api, cluster.ns, name, rules)
    path = tmp_path / f"{name}.kubeconfig"
    write_token_kubeconfig(cluster.api, control_plane.kubeconfig, cluster.ns, name, path)
    assert set(_user(path)) == {"token"}
    return path


def _user(path: Path) -> dict[str, Any]:
    import yaml

    config = yaml.safe_load(path.read_text())
    return dict(config["users"][0]["user"])


class Host:
    """The agent host's side: calls tools, keeps a transcript, hears resource updates."""

    def __init__(self, session: ClientSession, updates: list[str]) -> None:
        self.session = session
        self.updates = updates
        self.transcript: list[str] = []

    async def call(self, tool: str, **arguments: Any) -> tuple[str, bool]:
        result = await self.session.call_tool(tool, arguments)
        text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
        shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        self.transcript.append(f"→ {tool}({shown})\n" + ("error: " if result.is_error else ""))
        self.transcript[-1] += text.rstrip() + "\n"
        return text, bool(result.is_error)

    async def ok(self, tool: str, **arguments: Any) -> str:
        text, failed = await self.call(tool, **arguments)
        assert not failed, f"{tool} failed: {text}"
        return text


@asynccontextmanager
async def host(
    kubeconfig: Path, namespace: str, log: Path, *, modern: bool = False
) -> AsyncIterator[Host]:
    """`goalkeeper mcp` started as an agent host starts it: a command and an environment.
    The session opens with the initialize handshake (protocol 2025-11-25, what hosts speak
    today), or with `server/discover` when `modern` (2026-07-28)."""
    params = StdioServerParameters(
        command=str(BIN / "goalkeeper"),
        args=["mcp", "--namespace", namespace],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    updates: list[str] = []

    async def heard(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    with log.open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=heard) as session,
        ):
            await (session.discover() if modern else session.initialize())
            yield Host(session, updates)


async def listen_for(
    kubeconfig: Path,
    namespace: str,
    log: Path,
    uri: str,
    ready: anyio.Event,
    heard: list[str],
    done: anyio.Event,
) -> None:
    """A second host on the 2026-07-28 protocol: a `subscriptions/listen` stream for the
    Monitor's resource, kept until its first update."""
    async with (
        host(kubeconfig, namespace, log, modern=True) as other,
        listen(other.session, resource_subscriptions=[uri]) as stream,
    ):
        ready.set()
        async for event in stream:
            if isinstance(event, ResourceUpdated):
                heard.append(event.uri)
                done.set()
                return


async def in_thread(call: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(call, *args)


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT="10m")
async def test_an_agent_hands_a_goal_over_through_goalkeeper_mcp_as_its_person(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    tmp_path: Path,
) -> None:
    cluster.target()
    model.default = Scenario(cluster.ns, paid_resume, reading=READING)
    alice = kubeconfig(control_plane, cluster, "alice", HANDS_OVER, tmp_path)
    me = f"system:serviceaccount:{cluster.ns}:alice"
    log = tmp_path / "mcp.log"

    try:
        async with host(alice, cluster.ns, log) as agent, anyio.create_task_group() as watchers:
            tools = {tool.name for tool in (await agent.session.list_tools()).tools}
            assert {"start_monitor", "wait_for_report", "approve", "pause", "stop"} <= tools
            assert "confirm_authority" in tools

            started = await agent.ok(
                "start_monitor",
                name="build",
                task=PAID_TASK,
                stopWhen=STOP_WHEN,
                everyMinutes=60,
                maxChecks=6,
            )
            assert f"Created Monitor {cluster.ns}/build (author: {me})." in started
            assert re.search(r"grant +resume-build +resume +Job build ", started), started
            monitor = await in_thread(cluster.monitor)
            assert monitor["metadata"]["annotations"][AUTHOR] == me
            # A spec out of its bounds: the API server's refusal names the field and bound.
            invalid, failed = await agent.call(
                "start_monitor", name="too-often", task=PAID_TASK, everyMinutes=5000
            )
            assert failed and "422" in invalid and "spec.everyMinutes" in invalid
            assert "1440" in invalid and await in_thread(cluster.monitor, "too-often") is None
            # A grant the reading cannot take whole is refused before anything is created.
            unread, failed = await agent.call(
                "confirm_authority", name="build", grants=["resume-build=resume it, please"]
            )
            assert failed and "not one grant the reading parses whole" in unread

            uri = monitor_uri(cluster.ns, "build")
            await agent.session.subscribe_resource(uri)
            listening, listened, updated = anyio.Event(), list[str](), anyio.Event()
            watchers.start_soon(
                listen_for, alice, cluster.ns, log, uri, listening, listened, updated
            )
            with anyio.fail_after(60):
                await listening.wait()

            first = await agent.ok("wait_for_report", name="build", after_check=0)
            assert first.startswith("Check 1 reported; the monitor is active.")
            request = (await in_thread(cluster.status))["approval"]["id"]
            assert f"Awaiting approval: request {request} (check 1)" in first

            approved = await agent.ok("approve", name="build", request_id=request, note="Q4 GPUs")
            assert f"approve request {request} as {me}" in approved

            paused = await agent.ok("pause", name="build")
            assert f"paused monitor {cluster.ns}/build" in paused
            assert (await in_thread(cluster.monitor))["metadata"]["annotations"][
                "goalkeeper.dev/paused"
            ] == "true"
            # The operator takes the pause (it may land before or after it takes the answer).
            await in_thread(
                lambda: wait_until(
                    lambda: cluster.status().get("pausedAt"),
                    60,
                    "the pause to take effect",
                    operator.logs,
                )
            )
            shown = await agent.ok("get_monitor", name="build")
            assert shown.startswith(f"Monitor {cluster.ns}/build: active, paused (")
            resumed = await agent.ok("resume", name="build")
            assert f"resumed monitor {cluster.ns}/build" in resumed

            seen, report = 1, ""
            for _ in range(6):
                report = await agent.ok("wait_for_report", name="build", after_check=seen)
                seen = int(report.split(" ", 2)[1].rstrip(";"))
                if "the monitor is stopped" in report:
                    break
            assert "the monitor is stopped" in report and "goalComplete" in report
            assert agent.updates and set(agent.updates) == {uri}
            with anyio.fail_after(30):
                await updated.wait()
            assert listened == [uri]

            history = await agent.ok("history", name="build")
            assert "check 1 · step 2 observe" in history
            logs = await agent.ok("logs", name="build", step=1, max_bytes=2000)
            assert "extract" in logs.splitlines()[0]
            print("\n".join(agent.transcript))

        approvals = await in_thread(
            lambda: cluster.custom.list_namespaced_custom_object(
                GROUP, VERSION, cluster.ns, "monitorapprovals"
            )["items"]
        )
        assert [(a["spec"]["approver"], a["spec"]["reason"]) for a in approvals] == [
            (me, "Q4 GPUs")
        ]

        # Someone who may not create Monitors hears the API server's refusal, and nothing
        # is created.
        bob = kubeconfig(control_plane, cluster, "bob", LOOKS_ON, tmp_path)
        async with host(bob, cluster.ns, log) as agent:
            refused, failed = await agent.call(
                "start_monitor", name="not-mine", task=PAID_TASK, stopWhen=STOP_WHEN
            )
            assert failed
            assert "forbidden" in refused and 'cannot create resource "monitors"' in refused
            assert "Traceback" not in refused
            # Nor may they confirm another's reading: the API server refuses the approval.
            refused, failed = await agent.call("confirm_authority", name="build")
            assert failed and 'cannot create resource "monitorapprovals"' in refused
            print("\n".join(agent.transcript))
        assert await in_thread(cluster.monitor, "not-mine") is None
    finally:
        if log.exists():
            print("---- goalkeeper mcp log ----\n" + log.read_text()[-8000:])
