"""HTTP egress of the step: the allowed hosts, blocked addresses, resolution and redirects."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tests.support.step_fakes import FakeKube

from goalkeeper.step.egress import parse_allowed
from goalkeeper.step.tools import StepTools, ToolConfig

FID = "e9e55e9e55e9e55e"


class Target:
    """A 127.0.0.1 server that records each request's path and Host header."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, self.headers.get("Host", "")))
                if self.path == "/away":
                    self.send_response(302)
                    self.send_header(
                        "Location", "http://169.254.169.254/latest/meta-data?token=abc"
                    )
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = f"host={self.headers.get('Host')}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Target]:
    target = Target()
    try:
        yield target
    finally:
        target.close()


def tools(*allowed: str, names: dict[str, list[str]] | None = None) -> StepTools:
    def resolver(host: str, port: int) -> list[str]:
        if names is not None and host in names:
            return names[host]
        if host == "127.0.0.1":
            return [host]
        raise OSError(f"unknown host {host}")

    return StepTools(
        FakeKube(),
        ToolConfig(fence_id=FID, namespace="shop", http_allowed_hosts=allowed),
        resolver=resolver,
    )


def test_nothing_is_allowed_by_default(server: Target) -> None:
    out = tools().http_get(f"http://127.0.0.1:{server.port}/")
    assert out == (
        f"REFUSED: host 127.0.0.1 is not reachable from this step: 127.0.0.1:{server.port} "
        "is not in GOALKEEPER_HTTP_ALLOWED_HOSTS (allowed: none)"
    )
    assert server.seen == []


def test_an_allowed_host_is_reached_on_any_port_or_the_named_one(server: Target) -> None:
    assert "host=127.0.0.1" in tools("127.0.0.1").http_get(f"http://127.0.0.1:{server.port}/")
    assert "HTTP 200" in tools(f"127.0.0.1:{server.port}").http_get(
        f"http://127.0.0.1:{server.port}/x"
    )
    other = tools(f"127.0.0.1:{server.port + 1}").http_get(f"http://127.0.0.1:{server.port}/")
    assert f"(allowed: 127.0.0.1:{server.port + 1})" in other
    assert len(server.seen) == 2


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a cloud metadata address"),
        ("http://169.254.10.1/", "169.254.10.1 is a link-local address"),
        ("http://[fe80::1]/", "fe80::1 is a link-local address"),
        ("http://[fd00:ec2::254]/", "fd00:ec2::254 is a cloud metadata address"),
        ("http://metadata.google.internal/computeMetadata/v1/", "it is a cloud metadata name"),
        ("http://METADATA./", "it is a cloud metadata name"),
        ("http://metadata/", "it is a cloud metadata name"),
        ("http://0.0.0.0:8080/", "0.0.0.0 is an unspecified address"),
        ("http://[::]/", ":: is an unspecified address"),
        ("http://[::ffff:169.254.169.254]/", "embeds 169.254.169.254"),
    ],
)
def test_metadata_link_local_and_unspecified_are_never_reached(url: str, reason: str) -> None:
    # even when the list names them
    allowed = ("169.254.169.254", "169.254.10.1", "fe80::1", "fd00:ec2::254", "metadata")
    unspecified = ("0.0.0.0", "::")  # noqa: S104
    t = tools(*allowed, *unspecified, "metadata.google.internal", "::ffff:169.254.169.254")
    result = t.http_get(url)
    assert result.startswith("REFUSED: host ") and reason in result, result


def test_every_resolved_address_is_checked(server: Target) -> None:
    names = {
        "sneaky.test": ["127.0.0.1", "169.254.169.254"],
        "linklocal.test": ["fe80::1%eth0"],
    }
    t = tools("sneaky.test", "linklocal.test", names=names)
    out = t.http_get(f"http://sneaky.test:{server.port}/")
    assert out == (
        "REFUSED: host sneaky.test is not reachable from this step: it resolves to "
        "169.254.169.254 is a cloud metadata address"
    )
    assert "fe80::1 is a link-local address" in t.http_get("http://linklocal.test/")
    assert server.seen == []


def test_unresolvable_allowed_host_says_so() -> None:
    out = tools("missing.test").http_get("http://missing.test/")
    assert (
        out == "ERROR: cannot reach missing.test: its DNS lookup failed (unknown host missing.test)"
    )


def test_a_name_connects_to_the_checked_address_with_its_own_host_header(server: Target) -> None:
    t = tools("build-api.test", names={"build-api.test": ["127.0.0.1"]})
    out = t.http_get(f"http://build-api.test:{server.port}/status", headers={"Host": "evil"})
    assert f"host=build-api.test:{server.port}" in out
    assert server.seen == [("/status", f"build-api.test:{server.port}")]


def test_redirects_are_not_followed(server: Target) -> None:
    out = tools("127.0.0.1").http_get(f"http://127.0.0.1:{server.port}/away")
    assert "HTTP 302 GET" in out
    assert "redirect not followed: location: http://169.254.169.254/latest/meta-data?" in out
    assert "token=<redacted by goalkeeper>" in out
    assert server.seen == [("/away", f"127.0.0.1:{server.port}")]


def test_allowed_host_entries_parse_or_say_what_is_wrong() -> None:
    parsed = parse_allowed(" build-api.shop.svc:8080, 10.0.0.5 ,[fd00::1]:443,[FD00::2], ")
    assert [(a.host, a.port) for a in parsed] == [
        ("build-api.shop.svc", 8080),
        ("10.0.0.5", None),
        ("fd00::1", 443),
        ("fd00::2", None),
    ]
    for bad in ("http://x", "a b", "host:http", "host:0", "[::1]x", "user@host"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            parse_allowed(bad)


def test_the_next_checked_address_is_tried_when_one_refuses(server: Target) -> None:
    # nothing listens on 127.0.0.2; the server on 127.0.0.1 answers
    t = tools("two.test", names={"two.test": ["127.0.0.2", "127.0.0.1"]})
    assert "HTTP 200" in t.http_get(f"http://two.test:{server.port}/")
    assert server.seen == [("/", f"two.test:{server.port}")]
