"""`goalkeeper console`: a web console that acts as the person who uses it.

It holds no rights of its own. Run locally, it reads the person's kubeconfig, binds
127.0.0.1 on a free port and prints a URL with a one-time token: the first request that
brings it gets a session cookie (HttpOnly, SameSite=Strict) and the token is spent, so
another local user or a page in the browser cannot drive it. Run in a cluster
(`--server`, or `--in-cluster` for the API server a pod sees), every request carries the
person's own bearer token, from an `Authorization` header an auth proxy sets or from a
token the person pasted at /login, and goes to the API server with it: the API server's
RBAC decides what each person sees and may change.

Every state-changing request is a POST carrying the session's CSRF token, from this
console's own origin. Pages are rendered with Jinja2's autoescape, and a strict
Content-Security-Policy (scripts from this console only, none inline) backs it up: a
report a model or a target wrote is shown as text, never run. No Secret is ever read.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import io
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from aiohttp import web

from goalkeeper.console import views
from goalkeeper.controller.manifests import GROUP, LABEL_MONITOR, VERSION, label_value

log = logging.getLogger("goalkeeper.console")

SESSION_COOKIE = "goalkeeper-console"
LOGIN_COOKIE = "goalkeeper-console-login"
SESSION_HOURS = 12
SESSIONS_MAX = 1000
# Live-update streams one person may hold open, and watch threads in all.
STREAMS_PER_PERSON = 4
WATCHERS_MAX = 256
# Events one stream holds for a page that does not read them; past it the stream ends and
# the page's EventSource opens it again, starting from a fresh list.
QUEUED_MAX = 512
# Namespaces tried for a person who may list neither all Monitors nor all namespaces.
NAMESPACES_MAX = 50
SCOPE_SECONDS = 30.0
# A watch request's length: a stream whose page went away is noticed within it.
WATCH_SECONDS = 30
KEEPALIVE_SECONDS = 15.0
LOG_MAX_BYTES = 256 * 1024
NOTE_MAX = 500
STATIC = Path(__file__).parent / "static"
TEMPLATES = Path(__file__).parent / "templates"
SERVICE_ACCOUNT = "system:serviceaccount:"
# What a bearer token may hold: printable ASCII, no space (a header value can carry no more).
TOKEN = re.compile(r"[\x21-\x7e]{1,16384}")
# Kubernetes names: a namespace is a DNS label, a Monitor a DNS subdomain (no `.` or `..`).
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?){0,20}"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@dataclass(frozen=True)
class Settings:
    """How the console reaches the API server and whom it serves, as one value."""

    # Local: the person's kubeconfig; else the API server the people's tokens go to.
    server: str | None = None
    ca_file: str | None = None
    namespaces: tuple[str, ...] = ()
    secure_cookies: bool = False


@dataclass
class Person:
    """Who a request comes from: their API client, and what their CSRF token is bound to."""

    api_client: Any
    key: str


@dataclass
class Session:
    person: Person
    expires: float
    flash: list[str] = field(default_factory=list)


class Console:
    """The console's state: its sessions, the launch token, and how it makes clients."""

    def __init__(self, settings: Settings, kubeconfig_client: Any = None) -> None:
        self.settings = settings
        self.local = settings.server is None
        self.kubeconfig_client = kubeconfig_client
        self.secret = secrets.token_bytes(32)
        self.launch_token: str | None = secrets.token_urlsafe(32) if self.local else None
        # Locally, every path sits under a secret prefix that the session cookie is bound
        # to: a browser sends a cookie of 127.0.0.1 to every port of it, so another local
        # user's server on another port must not be able to name a path that gets it.
        self.root = f"/s/{secrets.token_urlsafe(16)}/" if self.local else "/"
        self.streams: dict[str, int] = {}
        self.watchers = 0
        self.sessions: dict[str, Session] = {}
        self.scopes: dict[str, tuple[float, list[str | None]]] = {}
        from jinja2 import Environment, FileSystemLoader, select_autoescape

        self.templates = Environment(
            loader=FileSystemLoader(str(TEMPLATES)),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )

    # --- who is asking ---------------------------------------------------------------------

    def csrf(self, person: Person) -> str:
        return hmac.new(self.secret, person.key.encode(), hashlib.sha256).hexdigest()

    def login_csrf(self, nonce: str) -> str:
        return hmac.new(self.secret, b"login:" + nonce.encode(), hashlib.sha256).hexdigest()

    def token_client(self, token: str) -> Any:
        """A client that carries `token` and nothing else of this process."""
        from kubernetes import client

        configuration: Any = client.Configuration()
        configuration.host = self.settings.server
        configuration.ssl_ca_cert = self.settings.ca_file
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration)

    def token_person(self, token: str) -> Person:
        key = "bearer:" + hashlib.sha256(token.encode()).hexdigest()
        return Person(self.token_client(token), key)

    def new_session(self, person: Person) -> str:
        self.sweep()
        sid = secrets.token_urlsafe(32)
        self.sessions[sid] = Session(person, time.monotonic() + SESSION_HOURS * 3600)
        return sid

    def sweep(self) -> None:
        now = time.monotonic()
        for sid in [s for s, session in self.sessions.items() if session.expires < now]:
            del self.sessions[sid]
        # The oldest go first when sign-ins outrun expiry.
        for sid in sorted(self.sessions, key=lambda s: self.sessions[s].expires)[
            : max(0, len(self.sessions) - SESSIONS_MAX + 1)
        ]:
            del self.sessions[sid]
        for key in [k for k, (until, _) in self.scopes.items() if until < now]:
            del self.scopes[key]

    def session_of(self, request: web.Request) -> Session | None:
        sid = request.cookies.get(SESSION_COOKIE, "")
        session = self.sessions.get(sid)
        if session is None or session.expires < time.monotonic():
            return None
        return session

    def set_session_cookie(self, response: web.StreamResponse, sid: str) -> None:
        response.set_cookie(
            SESSION_COOKIE,
            sid,
            httponly=True,
            samesite="Strict",
            secure=self.settings.secure_cookies,
            path=self.root,
            max_age=SESSION_HOURS * 3600,
        )

    def render(self, template: str, status: int = 200, **values: Any) -> web.Response:
        text = self.templates.get_template(template).render(
            local=self.local, root=self.root, **values
        )
        return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")

    # --- what the person may see -------------------------------------------------------------

    def scope(self, person: Person) -> list[str | None]:
        """The namespaces whose Monitors the person may list ([None]: all of them), kept
        for a few seconds per person."""
        kept = self.scopes.get(person.key)
        if kept is not None and kept[0] > time.monotonic():
            return kept[1]
        found = _scope(person, self.settings.namespaces)
        self.scopes[person.key] = (time.monotonic() + SCOPE_SECONDS, found)
        return found


def _same(offered: str, expected: str) -> bool:
    """A constant-time comparison that any text offered may reach (non-ASCII included)."""
    return hmac.compare_digest(offered.encode(), expected.encode())


def _custom(person: Person) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(person.api_client)


def _forbidden(error: Exception) -> bool:
    from kubernetes.client.exceptions import ApiException

    return isinstance(error, ApiException) and error.status in (401, 403, 404)


def _scope(person: Person, configured: tuple[str, ...]) -> list[str | None]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = _custom(person)
    try:
        custom.list_cluster_custom_object(GROUP, VERSION, "monitors", limit=1)
        return [None]
    except ApiException as error:
        if not _forbidden(error):
            raise
    candidates = [*configured, *_own_namespace(person.api_client)]
    try:
        listed: Any = client.CoreV1Api(person.api_client).list_namespace(limit=NAMESPACES_MAX)
        candidates += [str(n.metadata.name) for n in listed.items]
    except ApiException as error:
        if not _forbidden(error):
            raise
    allowed: list[str | None] = []
    for namespace in dict.fromkeys(candidates):
        try:
            custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "monitors", limit=1)
        except ApiException as error:
            if _forbidden(error):
                continue
            raise
        allowed.append(namespace)
    return allowed


def _list(person: Person, namespace: str | None) -> dict[str, Any]:
    custom = _custom(person)
    if namespace is None:
        found: dict[str, Any] = custom.list_cluster_custom_object(GROUP, VERSION, "monitors")
    else:
        found = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "monitors")
    return found


def _own_namespace(api_client: Any) -> tuple[str, ...]:
    """A service account's own namespace, from who the API server says the token is."""
    from kubernetes import client

    authentication: Any = client.AuthenticationV1Api(api_client)
    review = authentication.create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    username = str(review.status.user_info.username or "")
    if username.startswith(SERVICE_ACCOUNT):
        return (username[len(SERVICE_ACCOUNT) :].split(":", 1)[0],)
    return ()


def _printed(run: Callable[[TextIO, TextIO], int]) -> tuple[bool, str]:
    out, err = io.StringIO(), io.StringIO()
    done = run(out, err) == 0
    said = "\n".join(part.strip() for part in (out.getvalue(), err.getvalue()) if part.strip())
    return done, said or ("done" if done else "goalkeeper: failed")


def _api_refusal(error: Exception) -> tuple[int, str]:
    from kubernetes.client.exceptions import ApiException

    from goalkeeper.controller.api import server_message

    if isinstance(error, ApiException):
        said = server_message(error) or str(error.reason or "")
        return int(error.status or 500), f"{error.status} {error.reason}: {said}"
    # Not its text: a client error may quote the request, and so the person's token.
    return 502, f"the API server could not be asked ({type(error).__name__})"


# --- the web application ---------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
# Paths served to anyone, outside the console's root: the probe, and what a browser asks.
ANYWHERE = ("/healthz", "/favicon.ico")
PERSON = web.RequestKey("person", Person)
# Absent for a request that brings its own bearer token.
SESSION = web.RequestKey("session", Session)


def _person(request: web.Request) -> Person:
    return request[PERSON]


def _same_origin(request: web.Request) -> None:
    origin = request.headers.get("Origin")
    # The host alone: behind a TLS proxy the browser's scheme is not the one seen here.
    if origin is not None and urlsplit(origin).netloc != request.host:
        raise web.HTTPForbidden(text="refused: a request from another origin")


def _strict(headers: Any) -> None:
    headers["Content-Security-Policy"] = CSP
    headers["X-Content-Type-Options"] = "nosniff"
    # Not no-referrer: with it a browser sends `Origin: null` on a form POST.
    headers["Referrer-Policy"] = "same-origin"
    headers["X-Frame-Options"] = "DENY"
    headers.setdefault("Cache-Control", "no-store")


def build_app(console: Console) -> web.Application:
    @web.middleware
    async def headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as error:
            _strict(error.headers)
            raise
        _strict(response.headers)
        return response

    @web.middleware
    async def who(request: web.Request, handler: Handler) -> web.StreamResponse:
        # A page whose name was rebound to 127.0.0.1 reaches the port, but not by this name.
        if console.local and request.url.host not in LOOPBACK_NAMES:
            raise web.HTTPMisdirectedRequest(text="refused: not a loopback host name")
        if request.path in ANYWHERE:
            return await handler(request)
        if not request.path.startswith(console.root):
            raise web.HTTPNotFound()
        path = "/" + request.path.removeprefix(console.root)
        if path.startswith("/static/") or path == "/login":
            return await handler(request)
        offered = request.query.get("token")
        if console.local and offered is not None:
            _launch(offered)
        session = console.session_of(request)
        header = request.headers.get("Authorization", "")
        # A proxy's header wins over a cookie: a cookie can be planted, the header cannot.
        if not console.local and header.startswith("Bearer "):
            request[PERSON] = console.token_person(header[len("Bearer ") :].strip())
        elif session is not None:
            request[PERSON] = session.person
            request[SESSION] = session
        elif console.local:
            return console.render("locked.html", status=401, title="Open the console's URL")
        else:
            raise web.HTTPSeeOther(console.root + "login")
        if request.method == "POST":
            await _check_post(request)
        return await handler(request)

    def _launch(offered: str) -> None:
        """Sign the browser in with the one-time link, spending it; always raises."""
        expected = console.launch_token
        if expected is None or not _same(offered, expected):
            raise web.HTTPUnauthorized(
                text=console.render(
                    "locked.html", title="This link was used already", spent=True
                ).text,
                content_type="text/html",
            )
        console.launch_token = None
        assert console.kubeconfig_client is not None
        person = Person(console.kubeconfig_client, "local:" + secrets.token_hex(16))
        response = web.HTTPSeeOther(console.root + "monitors")
        console.set_session_cookie(response, console.new_session(person))
        log.info("the console's one-time link was opened; it no longer works")
        raise response

    async def _check_post(request: web.Request) -> None:
        _same_origin(request)
        form = await request.post()
        offered = str(form.get("csrf") or "")
        if not _same(offered, console.csrf(_person(request))):
            raise web.HTTPForbidden(text="refused: the request carries no valid CSRF token")

    async def blocking(call: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(call)

    def page(request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
        session: Session | None = request.get(SESSION)
        flash = session.flash[:] if session is not None else []
        if session is not None:
            session.flash.clear()
        return console.render(
            template,
            status=status,
            csrf=console.csrf(_person(request)),
            flash=flash,
            signed_in=True,
            **values,
        )

    def refused(request: web.Request, error: Exception, what: str) -> web.Response:
        status, said = _api_refusal(error)
        if status >= 500:
            log.warning("%s: %s", what, said)
        return page(request, "error.html", status=status, title=what, message=said)

    # --- pages ---

    async def index(_: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther(console.root + "monitors")

    async def healthz(_: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def favicon(_: web.Request) -> web.StreamResponse:
        return web.Response(status=204)

    async def monitors_page(request: web.Request) -> web.StreamResponse:
        person = _person(request)

        def read() -> tuple[list[str | None], list[views.Row]]:
            scope = console.scope(person)
            found: list[dict[str, Any]] = []
            for namespace in scope:
                found += _list(person, namespace).get("items") or []
            return scope, views.rows(found, datetime.now(UTC))

        try:
            scope, rows = await blocking(read)
        except Exception as error:
            return refused(request, error, "Could not list Monitors")
        return page(
            request,
            "monitors.html",
            title="Monitors",
            columns=[c["name"] for c in views.COLUMNS],
            rows=rows,
            scope=scope,
        )

    def _names(request: web.Request) -> tuple[str, str]:
        return request.match_info["namespace"], request.match_info["name"]

    async def monitor_page(request: web.Request) -> web.StreamResponse:
        from goalkeeper import history, monitors

        person = _person(request)
        namespace, name = _names(request)

        def read() -> views.MonitorPage:
            from kubernetes.client.exceptions import ApiException

            custom = _custom(person)
            monitor = monitors.get_monitor(custom, namespace, name)
            hidden = ""
            try:
                steps = list(history.list_steps(custom, namespace, name))
            except ApiException as error:
                if not _forbidden(error):
                    raise
                # Someone who may read the Monitor but not its steps sees the rest.
                steps, hidden = [], _api_refusal(error)[1]
            shown = views.monitor_page(
                monitor, steps, monitors.authority_reading(monitor), datetime.now(UTC)
            )
            shown.steps_hidden = hidden
            return shown

        try:
            shown = await blocking(read)
        except Exception as error:
            return refused(request, error, f"Could not read Monitor {namespace}/{name}")
        template = "monitor_live.html" if request.query.get("fragment") else "monitor.html"
        return page(request, template, title=f"Monitor {namespace}/{name}", m=shown)

    async def step_log(request: web.Request) -> web.StreamResponse:
        from goalkeeper.logs import show_logs

        person = _person(request)
        namespace, name = _names(request)
        seq = int(request.match_info["seq"])

        def read() -> tuple[bool, str]:
            out, err = io.StringIO(), io.StringIO()
            done = show_logs(
                name,
                namespace,
                seq=seq,
                api_client=person.api_client,
                dev_logs=console.local,
                out=out,
                err=err,
            )
            text = out.getvalue() if done == 0 else err.getvalue()
            return done == 0, text[-LOG_MAX_BYTES:]

        try:
            found, text = await blocking(read)
        except Exception as error:
            return refused(request, error, f"Could not read the log of step {seq}")
        return page(
            request,
            "log.html",
            status=200 if found else 404,
            title=f"Step {seq} of Monitor {namespace}/{name}",
            namespace=namespace,
            name=name,
            text=text,
        )

    # --- changes, each as the person ---

    async def answered(request: web.Request, said: tuple[bool, str]) -> web.StreamResponse:
        namespace, name = _names(request)
        session: Session | None = request.get(SESSION)
        if session is not None:
            session.flash.append(said[1])
            raise web.HTTPSeeOther(f"{console.root}monitors/{namespace}/{name}")
        return page(
            request,
            "error.html" if not said[0] else "done.html",
            status=200 if said[0] else 403,
            title=f"Monitor {namespace}/{name}",
            message=said[1],
            namespace=namespace,
            name=name,
        )

    def decide(decision: str) -> Handler:
        from goalkeeper.approvals import answer
        from goalkeeper.core.models import ApprovalDecision

        async def handler(request: web.Request) -> web.StreamResponse:
            person = _person(request)
            namespace, name = _names(request)
            form = await request.post()
            request_id = str(form.get("request") or "")
            note = str(form.get("note") or "")[:NOTE_MAX]
            if not request_id:
                return await answered(request, (False, "goalkeeper: the form names no request"))

            def run() -> tuple[bool, str]:
                return _printed(
                    lambda out, err: answer(
                        name,
                        namespace,
                        ApprovalDecision(decision),
                        request_id=request_id,
                        reason=note,
                        api_client=person.api_client,
                        out=out,
                        err=err,
                    )
                )

            return await answered(request, await blocking(run))

        return handler

    async def confirm(request: web.Request) -> web.StreamResponse:
        from goalkeeper import authorityctl

        person = _person(request)
        namespace, name = _names(request)
        form = await request.post()
        note = str(form.get("note") or "")[:NOTE_MAX]
        shown = str(form.get("request") or "")

        def run() -> tuple[bool, str]:
            from goalkeeper import monitors

            # What is confirmed is what the person read: not a reading changed since.
            status = (monitors.get_monitor(_custom(person), namespace, name).get("status")) or {}
            open_now = str((status.get("approval") or {}).get("id") or "")
            if not shown or shown != open_now:
                return False, (
                    f"goalkeeper: the request you answered ({shown or 'none'}) is not the one "
                    f"open now ({open_now or 'none'}): read the page again before confirming"
                )
            return _printed(
                lambda out, err: authorityctl.run(
                    name,
                    namespace,
                    confirm=True,
                    reason=note,
                    api_client=person.api_client,
                    out=out,
                    err=err,
                )
            )

        return await answered(request, await blocking(run))

    def control(command: str) -> Handler:
        from goalkeeper.control import Control, run_control

        async def handler(request: web.Request) -> web.StreamResponse:
            person = _person(request)
            namespace, name = _names(request)

            def run() -> tuple[bool, str]:
                return _printed(
                    lambda out, err: run_control(
                        Control(command),
                        name,
                        namespace,
                        api_client=person.api_client,
                        out=out,
                        err=err,
                    )
                )

            return await answered(request, await blocking(run))

        return handler

    # --- sign in and out (in a cluster) ---

    async def login_form(request: web.Request) -> web.StreamResponse:
        if console.local:
            raise web.HTTPNotFound()
        # Kept while the browser holds one: a second load of the page (or a request it
        # redirects here) must not spend the nonce of a form already shown.
        nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
        response = console.render(
            "login.html", title="Sign in", csrf=console.login_csrf(nonce), flash=[]
        )
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            httponly=True,
            samesite="Strict",
            secure=console.settings.secure_cookies,
            path=console.root + "login",
        )
        return response

    async def login(request: web.Request) -> web.StreamResponse:
        if console.local:
            raise web.HTTPNotFound()
        _same_origin(request)
        form = await request.post()
        nonce = request.cookies.get(LOGIN_COOKIE, "")
        # Bound to this console's secret: a cookie planted with a nonce of one's own choosing
        # does not make a form value that passes.
        if not nonce or not _same(str(form.get("csrf") or ""), console.login_csrf(nonce)):
            raise web.HTTPForbidden(text="refused: the request carries no valid CSRF token")
        token = str(form.get("token") or "").strip()
        if not TOKEN.fullmatch(token):
            return console.render(
                "login.html",
                status=401,
                title="Sign in",
                csrf=console.login_csrf(nonce),
                flash=["A bearer token is one line of printable characters; paste it again."],
            )
        person = console.token_person(token)

        try:
            # The API server's word that it takes the token, before a session holds it.
            await blocking(lambda: _own_namespace(person.api_client))
        except Exception as error:
            status, said = _api_refusal(error)
            why = (
                f"The API server did not accept this token: {said}"
                if status == 401
                else f"Could not ask the API server about this token: {said}"
            )
            return console.render(
                "login.html",
                status=401,
                title="Sign in",
                csrf=console.login_csrf(nonce),
                flash=[why],
            )
        response = web.HTTPSeeOther(console.root + "monitors")
        console.set_session_cookie(response, console.new_session(person))
        response.del_cookie(LOGIN_COOKIE, path=console.root + "login")
        raise response

    async def logout(request: web.Request) -> web.StreamResponse:
        console.sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
        console.sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
        response = web.HTTPSeeOther(console.root + ("monitors" if console.local else "login"))
        response.del_cookie(SESSION_COOKIE, path=console.root)
        raise response

    # --- live updates (server-sent events from watches) ---

    async def stream(
        request: web.Request, threads: int, follow: Callable[[Watching], None]
    ) -> web.StreamResponse:
        """Server-sent events from `follow`, run in a thread holding `threads` watches,
        while the page reads them and its session lasts."""
        person = _person(request)
        session: Session | None = request.get(SESSION)
        held = console.streams.get(person.key, 0)
        if held >= STREAMS_PER_PERSON or console.watchers + threads > WATCHERS_MAX:
            raise web.HTTPTooManyRequests(text="too many live updates open; close a page")
        console.streams[person.key] = held + 1
        console.watchers += threads
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        _strict(response.headers)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue(QUEUED_MAX)
        watching = Watching(threading.Event(), [], lambda data: None)

        def put(data: Any) -> None:
            if queue.full():  # a page that does not read: end its stream
                watching.stop.set()
            else:
                queue.put_nowait(data)

        def emit(data: Any) -> None:
            loop.call_soon_threadsafe(put, data)

        watching.emit = emit

        def run() -> None:
            try:
                follow(watching)
            except Exception as error:  # the page shows that its live updates ended
                _, said = _api_refusal(error)
                watching.emit({"type": "ERROR", "message": said})

        def alive() -> bool:
            if watching.stop.is_set():
                return False
            return session is None or console.session_of(request) is session

        try:
            await response.prepare(request)
            threading.Thread(target=run, name="console-watch", daemon=True).start()
            while alive():
                try:
                    data = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                await response.write(f"data: {json.dumps(data)}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watching.stop.set()
            for opened in list(watching.opened):
                await asyncio.to_thread(_shut, opened)
            console.streams[person.key] -= 1
            if not console.streams[person.key]:
                del console.streams[person.key]
            console.watchers -= threads
        return response

    async def monitors_events(request: web.Request) -> web.StreamResponse:
        person = _person(request)
        scope = await blocking(lambda: console.scope(person))

        def follow(watching: Watching) -> None:
            threads = [
                threading.Thread(target=_follow_list, args=(person, ns, watching), daemon=True)
                for ns in scope
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        return await stream(request, len(scope), follow)

    async def monitor_events(request: web.Request) -> web.StreamResponse:
        person = _person(request)
        namespace, name = _names(request)

        def follow(watching: Watching) -> None:
            steps = threading.Thread(
                target=_follow_steps, args=(person, namespace, name, watching), daemon=True
            )
            steps.start()
            _follow_list(person, namespace, watching, name=name)
            steps.join()

        return await stream(request, 2, follow)

    app = web.Application(middlewares=[headers, who], client_max_size=64 * 1024)
    root = console.root
    app.router.add_get(root, index)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_get(root + "login", login_form)
    app.router.add_post(root + "login", login)
    app.router.add_post(root + "logout", logout)
    app.router.add_get(root + "monitors", monitors_page)
    app.router.add_get(root + "events", monitors_events)
    base = root + "monitors/{namespace:" + DNS_LABEL + "}/{name:" + DNS_SUBDOMAIN + "}"
    app.router.add_get(base, monitor_page)
    app.router.add_get(base + "/events", monitor_events)
    app.router.add_get(base + "/steps/{seq:[0-9]{1,7}}/log", step_log)
    app.router.add_post(base + "/approve", decide("approve"))
    app.router.add_post(base + "/reject", decide("reject"))
    app.router.add_post(base + "/confirm", confirm)
    app.router.add_post(base + "/pause", control("pause"))
    app.router.add_post(base + "/resume", control("resume"))
    app.router.add_post(base + "/check-now", control("check"))
    app.router.add_static(root + "static/", STATIC, show_index=False, follow_symlinks=False)
    return app


@dataclass
class Watching:
    """What the watches of one live-update stream share: its stop, the watch responses
    open now (closed at once when the page goes), and how an event reaches the page."""

    stop: threading.Event
    opened: list[Any]
    emit: Callable[[Any], None]


def _shut(response: Any) -> None:
    from goalkeeper.controller.targets import shut

    shut(response, "a live-update watch")


def _follow(
    listing: Callable[..., dict[str, Any]],
    watching: Watching,
    listed: Callable[[list[dict[str, Any]]], None],
    changed: Callable[[str, dict[str, Any]], None],
) -> None:
    """Follow what `listing` lists with a watch until the stream stops: `listed` with the
    items after each list, then `changed` with each change as it comes."""
    from goalkeeper.controller.targets import Gone, watch_events

    stop = watching.stop
    while not stop.is_set():
        found = listing()
        listed(found.get("items") or [])
        version = (found.get("metadata") or {}).get("resourceVersion")
        while not stop.is_set():
            response = listing(
                watch=True,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                _preload_content=False,
                _request_timeout=WATCH_SECONDS + 30,
            )
            watching.opened.append(response)
            try:
                for event in _events(watch_events(response), stop):
                    body = event.get("object") or {}
                    version = (body.get("metadata") or {}).get("resourceVersion") or version
                    kind = str(event.get("type"))
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        changed(kind, body)
            except Gone:
                break
            except Exception:
                if stop.is_set():  # the stream closed this watch under the reading thread
                    return
                raise
            finally:
                watching.opened.remove(response)
                _shut(response)


def _follow_list(
    person: Person,
    namespace: str | None,
    watching: Watching,
    *,
    name: str | None = None,
) -> None:
    """Follow the Monitors of `namespace` (None: all; `name`: that one) until the stream
    stops: a SYNC of every row after each list, then each change as it comes."""
    custom = _custom(person)
    listing: Callable[..., dict[str, Any]]
    if namespace is None:
        listing = functools.partial(custom.list_cluster_custom_object, GROUP, VERSION, "monitors")
    else:
        selector = {"field_selector": f"metadata.name={name}"} if name else {}
        listing = functools.partial(
            custom.list_namespaced_custom_object, GROUP, VERSION, namespace, "monitors", **selector
        )

    def listed(items: list[dict[str, Any]]) -> None:
        rows = views.rows(items, datetime.now(UTC))
        watching.emit(
            {"type": "SYNC", "namespace": namespace, "rows": [r.as_event("ADDED") for r in rows]}
        )

    def changed(kind: str, body: dict[str, Any]) -> None:
        watching.emit(views.row(body, datetime.now(UTC)).as_event(kind))

    _follow(listing, watching, listed, changed)


def _follow_steps(person: Person, namespace: str, name: str, watching: Watching) -> None:
    """Tell a Monitor's page of each change of its steps, which it reads again: a check's
    report kept on its step (the plot's point) comes just after the Monitor's own change,
    and a step's phase changes on the step alone. Someone who may not watch the steps
    follows the Monitor only, as before; any other failure ends the live updates."""
    custom = _custom(person)
    listing = functools.partial(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        "monitorsteps",
        label_selector=f"{LABEL_MONITOR}={label_value(name)}",
    )
    lists = 0

    def listed(items: list[dict[str, Any]]) -> None:
        nonlocal lists
        lists += 1
        if lists > 1:  # listed again after the watch expired: a change may have been missed
            watching.emit({"type": "STEPS"})

    try:
        _follow(listing, watching, listed, lambda kind, body: watching.emit({"type": "STEPS"}))
    except Exception as error:
        if watching.stop.is_set():
            return
        if _forbidden(error):
            log.debug("%s/%s: the steps are not followed live: %s", namespace, name, error)
            return
        watching.emit({"type": "ERROR", "message": _api_refusal(error)[1]})


def _events(events: Iterator[dict[str, Any]], stop: threading.Event) -> Iterator[dict[str, Any]]:
    for event in events:
        if stop.is_set():
            return
        yield event


async def serve(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    kubeconfig_client: Any = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve until cancelled; `announce` hears the URL to open once it listens."""
    console = Console(settings, kubeconfig_client)
    runner = web.AppRunner(build_app(console), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    shown = f"[{bound[0]}]" if ":" in str(bound[0]) else str(bound[0])
    url = f"http://{shown}:{bound[1]}{console.root}"
    if console.launch_token is not None:
        url += f"?token={console.launch_token}"
    announce(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
