"""`goalkeeper mcp --http`: streamable HTTP on 127.0.0.1 that answers only requests
carrying its bearer token, kept in a file only its owner reads. No cluster is needed to
list the tools; the calls that reach the cluster are tested end to end (tests/e2e)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from goalkeeper.mcpserver import parse_uri, token_of

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`goalkeeper mcp --http` on a free port: its URL and token."""
    port = free_port()
    token_file = tmp_path / "token"
    log = (tmp_path / "mcp.log").open("w")
    command = ["mcp", "--http", "--port", str(port), "--token-file", str(token_file)]
    process = subprocess.Popen(
        [str(BIN / "goalkeeper"), *command],
        env={"KUBECONFIG": str(tmp_path / "none"), "PATH": str(BIN), "HOME": str(tmp_path)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, (tmp_path / "mcp.log").read_text()
                assert time.monotonic() < deadline, "goalkeeper mcp --http never listened"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", token_file.read_text().strip()
    finally:
        process.terminate()
        process.wait(15)
        log.close()
    said = (tmp_path / "mcp.log").read_text()
    assert str(token_file) in said and token_file.read_text().strip() not in said


async def test_http_serves_the_tools_to_the_token_only(served: tuple[str, str]) -> None:
    url, token = served
    async with httpx2.AsyncClient() as plain:
        refused = await plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401
        wrong = await plain.post(url, headers={"Authorization": "Bearer nope"}, json={})
        assert wrong.status_code == 401
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == {
            "start_monitor", "list_monitors", "get_monitor", "history", "logs",
            "wait_for_report", "approve", "reject", "confirm_authority", "pause", "resume",
            "check_now", "stop",
        }  # fmt: skip
        assert tools["get_monitor"].annotations is not None
        assert tools["get_monitor"].annotations.read_only_hint
        assert "deleting it" in (tools["stop"].description or "")
        # Without a kubeconfig a call says so; it never shows a traceback.
        result = await session.call_tool("list_monitors", {})
        text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
        assert result.is_error and "no kubeconfig" in text and "Traceback" not in text


def test_the_token_file_is_made_once_and_read_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "mcp-token"
    token = token_of(path)
    assert len(token) >= 40 and token_of(path) == token
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_monitor_resource_names_its_namespace_and_name() -> None:
    assert parse_uri("goalkeeper://monitors/team-a/build") == ("team-a", "build")
    assert parse_uri("goalkeeper://monitors/team-a") is None
    assert parse_uri("goalkeeper://monitors/../etc/passwd") is None
