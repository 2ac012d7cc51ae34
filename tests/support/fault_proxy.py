"""A loopback fault-injecting proxy between a client (the operator) and one kube-apiserver.

The client talks plain HTTP to `http://127.0.0.1:PORT` (its own bearer token passes
through unchanged); the proxy forwards every request over TLS, verified with the control
plane's CA, to the one API server it was given, and to nothing else: only the request's
path and query are taken from the client. With probabilities drawn from a seeded
`random.Random`, it answers 500 or 429 (with Retry-After) instead of the API server,
before or after forwarding (a write that happened but whose answer was lost), resets
connections, delays answers, and cuts watch streams mid-stream. Each injected fault is
counted by kind in `counts`.

    proxy = FaultProxy("https://127.0.0.1:6443", ca_file, random.Random(seed)).start()
    proxy.faults = Faults(error500=0.05, reset=0.02)
    ...
    proxy.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

# Headers that belong to one hop, never forwarded (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
AUTO_HEADERS = ("Content-Type", "Accept-Encoding", "User-Agent")


@dataclass
class Faults:
    """Per-request probabilities; a watch request is cut after `watch_cut_after` seconds
    (drawn uniformly) with probability `cut_watch`."""

    error500: float = 0.0
    error429: float = 0.0
    reset: float = 0.0
    delay: float = 0.0
    delay_seconds: tuple[float, float] = (0.05, 1.5)
    cut_watch: float = 0.0
    watch_cut_after: tuple[float, float] = (0.2, 5.0)


class FaultProxy:
    def __init__(self, upstream: str, ca_file: Path | str, rng: random.Random) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "https" or parts.hostname != "127.0.0.1" or parts.path not in ("", "/"):
            raise ValueError(f"the upstream must be https://127.0.0.1:PORT, not {upstream!r}")
        self.upstream = f"https://127.0.0.1:{parts.port}"
        self.ca_file = Path(ca_file)
        self.rng = rng
        self.faults = Faults()
        self.counts: Counter[str] = Counter()
        self.requests = 0
        self.port = 0
        self._rng_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def injected(self) -> int:
        return sum(self.counts.values())

    # --- lifecycle ----------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> FaultProxy:
        self._thread = threading.Thread(target=self._main, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the fault proxy did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError("the fault proxy failed to start") from self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        context = ssl.create_default_context(cafile=str(self.ca_file))
        self._session = ClientSession(
            connector=TCPConnector(ssl=context, limit=0),
            timeout=ClientTimeout(total=None, connect=10, sock_read=None),
            auto_decompress=False,
            trust_env=False,  # never through another proxy: only the given API server
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await self._runner.cleanup()
            await self._session.close()

    # --- faults -------------------------------------------------------------------------

    def _roll(self, probability: float) -> bool:
        if probability <= 0:
            return False
        with self._rng_lock:
            return self.rng.random() < probability

    def _uniform(self, bounds: tuple[float, float]) -> float:
        with self._rng_lock:
            return self.rng.uniform(*bounds)

    def _count(self, kind: str) -> None:
        with self._rng_lock:
            self.counts[kind] += 1

    @staticmethod
    def _reset(request: web.Request) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.abort()
        # Never sent: the connection is gone. aiohttp needs a response object regardless.
        return web.Response(status=502)

    def _answer_error(self, kind: str) -> web.Response:
        self._count(kind)
        code, reason = (429, "TooManyRequests") if kind == "error429" else (500, "InternalError")
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason}
        headers = {"Retry-After": "1"} if code == 429 else None
        return web.json_response({**body, "code": code}, status=code, headers=headers)

    # --- forwarding ---------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if request.method == "CONNECT" or not request.rel_url.path.startswith("/"):
            return web.Response(status=400, text="this proxy forwards to one API server only")
        faults = self.faults
        watch = request.rel_url.query.get("watch", "").lower() in ("1", "true")
        # A fault before forwarding: the API server never sees the request.
        if self._roll(faults.reset / 2):
            self._count("reset")
            return self._reset(request)
        for kind in ("error500", "error429"):
            if self._roll(getattr(faults, kind) / 2):
                return self._answer_error(kind)
        if self._roll(faults.delay):
            self._count("delay")
            await asyncio.sleep(self._uniform(faults.delay_seconds))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            body = await request.read()
        except (ClientError, OSError):
            return self._reset(request)  # the client went away mid-request
        assert self._session is not None
        # Only the path and query come from the client; the host is always the upstream.
        target = self.upstream + request.rel_url.path_qs
        try:
            upstream = await self._session.request(
                request.method,
                target,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                # Send exactly the client's headers: the API server reads a missing
                # Content-Type as JSON, but refuses aiohttp's default octet-stream.
                skip_auto_headers=AUTO_HEADERS,
            )
        except (TimeoutError, ClientError, OSError):
            # The API server is down or restarting: the client sees what it would see.
            return self._reset(request)
        async with upstream:
            answer_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP
            }
            if watch and upstream.status == 200:
                return await self._stream(request, upstream, answer_headers)
            try:
                data = await upstream.read()
            except (TimeoutError, ClientError, OSError):
                return self._reset(request)
        # A fault after forwarding: the request took effect, its answer is lost.
        if self._roll(faults.reset / 2):
            self._count("reset")
            return self._reset(request)
        for kind in ("error500", "error429"):
            if self._roll(getattr(faults, kind) / 2):
                return self._answer_error(kind)
        return web.Response(status=upstream.status, body=data, headers=answer_headers)

    async def _stream(
        self, request: web.Request, upstream: Any, headers: dict[str, str]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        cut_at = None
        if self._roll(self.faults.cut_watch):
            cut_at = asyncio.get_running_loop().time() + self._uniform(self.faults.watch_cut_after)
        try:
            while True:
                timeout = None
                if cut_at is not None:
                    timeout = max(cut_at - asyncio.get_running_loop().time(), 0)
                try:
                    chunk = await asyncio.wait_for(upstream.content.readany(), timeout)
                except TimeoutError:
                    self._count("cut_watch")
                    self._reset(request)
                    return response
                if not chunk:
                    break
                await response.write(chunk)
        except (ClientError, OSError):
            self._reset(request)
            return response
        with contextlib.suppress(ClientError, OSError):
            await response.write_eof()
        return response
