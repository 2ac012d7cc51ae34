"""Where the step's HTTP tools may connect.

Only to hosts in `GOALKEEPER_HTTP_ALLOWED_HOSTS`: comma-separated `host` (any port) or
`host:port` entries, IPv6 in brackets (`[fd00::1]:8080`); empty allows nothing. Whatever
the list says, never to a cloud metadata name (`BLOCKED_NAMES`), nor to a link-local,
unspecified or metadata address, nor to an IPv6 address that embeds one. The host is
resolved once, every address it resolves to is checked, and the request then connects to
the checked addresses in turn (the Host header and the TLS server name stay the URL's
host), so a name cannot resolve elsewhere between the check and the connection. Redirects
are never followed: the answer shows where it points, and a call there is checked like
any other.
Environment proxies are ignored, so the checked address is the one connected to.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import httpx2

BLOCKED_NAMES = frozenset({"metadata.google.internal", "metadata"})
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_UNSPECIFIED_V4 = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


class EgressRefused(Exception):
    """A URL the step may not reach; the message names the host and why."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"host {host} is not reachable from this step: {reason}")


class Unreachable(Exception):
    """An allowed host that cannot be reached; the message names it and why."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # lowercased, no trailing dot, IPv6 without brackets
    port: int
    path: str  # with the query


def normalise_host(host: str) -> str:
    host = host.strip().strip("[]").rstrip(".").lower()
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    return host


def parse_target(url: str) -> Target:
    """The parts of a URL as the HTTP client will use them."""
    try:
        parsed = httpx2.URL(url)
    except httpx2.InvalidURL as exc:
        raise EgressRefused(url, f"the URL is invalid ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise EgressRefused(url, "only http:// and https:// URLs are supported")
    if not parsed.host:
        raise EgressRefused(url, "the URL has no host")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return Target(parsed.scheme, normalise_host(parsed.host), port, parsed.raw_path.decode("ascii"))


@dataclass(frozen=True)
class AllowedHost:
    host: str
    port: int | None  # None: any port

    def matches(self, target: Target) -> bool:
        return self.host == target.host and self.port in (None, target.port)


def parse_allowed(value: str | Iterable[str]) -> tuple[AllowedHost, ...]:
    """`host` or `host:port` entries, comma-separated or one each; raises ValueError."""
    entries = value.split(",") if isinstance(value, str) else list(value)
    allowed = []
    for raw in (e.strip() for e in entries):
        if not raw:
            continue
        host, port = raw, None
        if raw.startswith("["):
            host, _, rest = raw[1:].partition("]")
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(f"{raw!r} is not host or host:port")
                port = rest[1:]
        elif raw.count(":") == 1:
            host, port = raw.split(":")
        if not host or "/" in host or "@" in host or " " in host:
            raise ValueError(f"{raw!r} is not host or host:port")
        if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{raw!r} has an invalid port")
        allowed.append(AllowedHost(normalise_host(host), int(port) if port else None))
    return tuple(allowed)


def blocked_reason(address: Address) -> str | None:
    """Why no step may connect to this address, or None."""
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    if address.is_unspecified or (
        isinstance(address, ipaddress.IPv4Address) and address in _UNSPECIFIED_V4
    ):
        return f"{address} is an unspecified address"
    if address.is_link_local:
        return f"{address} is a link-local address"
    if isinstance(address, ipaddress.IPv6Address):
        for embedded in _embedded_v4(address):
            reason = blocked_reason(embedded)
            if reason:
                return f"{address} embeds {embedded}: {reason}"
    return None


def _embedded_v4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo:
        found.extend(address.teredo)
    if address in _NAT64 or (address in _V4_COMPATIBLE and int(address) > 1):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Egress:
    """The checks above, and requests that connect only to checked addresses."""

    def __init__(self, allowed: Sequence[AllowedHost], *, resolver: Resolver = resolve) -> None:
        self.allowed = tuple(allowed)
        self.resolver = resolver

    def check(self, target: Target) -> list[str]:
        """The addresses of an allowed target; raises EgressRefused naming the reason."""
        host = target.host
        if host in BLOCKED_NAMES:
            raise EgressRefused(host, "it is a cloud metadata name")
        literal = _literal(host)
        reason = blocked_reason(literal) if literal is not None else None
        if reason:
            raise EgressRefused(host, reason)
        if not any(a.matches(target) for a in self.allowed):
            listed = ", ".join(_entry(a) for a in self.allowed) or "none"
            raise EgressRefused(
                host,
                f"{host}:{target.port} is not in GOALKEEPER_HTTP_ALLOWED_HOSTS (allowed: {listed})",
            )
        try:
            addresses = self.resolver(host, target.port)
        except OSError as exc:
            raise Unreachable(f"cannot reach {host}: its DNS lookup failed ({exc})") from None
        if not addresses:
            raise EgressRefused(host, "it resolves to no address")
        for address in addresses:
            reason = blocked_reason(ipaddress.ip_address(address.split("%", 1)[0]))
            if reason:
                raise EgressRefused(host, f"it resolves to {reason}")
        return addresses

    @contextlib.contextmanager
    def stream(
        self,
        client: httpx2.Client,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None,
        content: str | None,
        timeout: float,
    ) -> Iterator[httpx2.Response]:
        """Send one request to a checked address of the URL's host; redirects unfollowed."""
        target = parse_target(url)
        addresses = self.check(target)
        parsed = httpx2.URL(url)
        sent_headers = {k: v for k, v in (headers or {}).items() if k.lower() != "host"}
        sent_headers["Host"] = parsed.netloc.decode("ascii")
        response: httpx2.Response | None = None
        for i, address in enumerate(addresses):
            request = client.build_request(
                method,
                parsed.copy_with(host=address),
                headers=sent_headers,
                content=content,
                timeout=timeout,
                extensions={"sni_hostname": target.host} if target.scheme == "https" else None,
            )
            try:
                response = client.send(request, stream=True, follow_redirects=False)
                break
            except httpx2.ConnectError:
                if i == len(addresses) - 1:
                    raise
        assert response is not None  # the loop either answered or raised
        try:
            yield response
        finally:
            response.close()


def connect_problem(target: Target, exc: httpx2.HTTPError, timeout: float) -> str:
    """Which host failed and why: refused, timed out, TLS, a broken connection."""
    where = f"{target.host}:{target.port}"
    detail = _deepest(exc)
    if isinstance(exc, httpx2.ConnectTimeout):
        return f"connecting to {where} timed out after {timeout:g} s"
    if isinstance(exc, httpx2.TimeoutException):
        return f"{where} did not answer within {timeout:g} s"
    low = detail.lower()
    if "ssl" in low or "certificate" in low or "tls" in low:
        return f"the TLS handshake with {where} failed ({detail})"
    if "refused" in low:
        return f"{where} refused the connection (nothing listens there)"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect to {where} ({detail})"
    return f"the connection to {where} failed ({detail})"


def _deepest(exc: BaseException) -> str:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return f"{type(exc).__name__}: {exc}"[:300]


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _entry(allowed: AllowedHost) -> str:
    host = f"[{allowed.host}]" if ":" in allowed.host else allowed.host
    return host if allowed.port is None else f"{host}:{allowed.port}"


def client(timeout: float) -> httpx2.Client:
    """The HTTP client of the tools: no environment proxies, no redirects."""
    return httpx2.Client(timeout=timeout, follow_redirects=False, trust_env=False)


__all__ = [
    "BLOCKED_NAMES",
    "AllowedHost",
    "Egress",
    "EgressRefused",
    "Target",
    "Unreachable",
    "blocked_reason",
    "client",
    "connect_problem",
    "parse_allowed",
    "parse_target",
]
