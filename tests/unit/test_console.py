"""The console's views (rows, plot, timeline) and the guards of its web application that
need no API server: the one-time link, the CSRF token, the headers, the escaping."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from goalkeeper.console import views
from goalkeeper.console.server import (
    CSP,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    Console,
    Settings,
    build_app,
)
from goalkeeper.controller.manifests import ANNOTATION_CHECK, ANNOTATION_REPORT

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
UID = "uid-1"


def monitor(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "build",
            "namespace": "team",
            "uid": UID,
            "creationTimestamp": (NOW - timedelta(minutes=90)).isoformat(),
            "annotations": {"goalkeeper.dev/author": "alice"},
        },
        "spec": {"task": "Finish Job build.", "stopWhen": "Stop when Job build succeeded."},
        "status": status,
    }


def step(
    seq: int,
    kind: str,
    check: int,
    *,
    done: float | None = None,
    reported: bool = False,
    usage: dict[str, int] | None = None,
    phase: str = "Succeeded",
) -> dict[str, Any]:
    annotations = {ANNOTATION_REPORT: f"report {check}", ANNOTATION_CHECK: str(check)}
    result: dict[str, Any] = {}
    if done is not None:
        result["progress"] = [
            {"key": "rows", "label": "rows", "completed": done, "total": 100, "unit": "rows"}
        ]
    return {
        "metadata": {
            "name": f"build-{seq}",
            "ownerReferences": [{"uid": UID, "controller": True}],
            "annotations": annotations if reported else {},
        },
        "spec": {"seq": seq, "kind": kind, "check": check},
        "status": {
            "phase": phase,
            "result": result,
            "startedAt": (NOW - timedelta(minutes=10 - seq)).isoformat(),
            "finishedAt": (NOW - timedelta(minutes=10 - seq, seconds=-75)).isoformat(),
            **({"usage": usage} if usage else {}),
        },
    }


@pytest.mark.parametrize(
    ("created", "shown"),
    [
        (NOW - timedelta(seconds=5), "5s"),
        (NOW - timedelta(seconds=119), "119s"),
        (NOW - timedelta(minutes=7, seconds=30), "7m30s"),
        (NOW - timedelta(minutes=12), "12m"),
        (NOW - timedelta(hours=5, minutes=3), "5h3m"),
        (NOW - timedelta(hours=30), "30h"),
        (NOW - timedelta(days=3), "3d"),
        (NOW - timedelta(days=3, hours=4), "3d4h"),
        (NOW - timedelta(days=30), "30d"),
        (NOW - timedelta(days=800), "2y70d"),
        (None, ""),
    ],
)
def test_age_reads_as_kubectl_prints_it(created: datetime | None, shown: str) -> None:
    assert views.age(created.isoformat() if created else None, NOW) == shown


def test_a_row_has_the_printer_columns_of_kubectl_get_monitors() -> None:
    body = monitor(
        goal="incomplete",
        work="running",
        progressSummary="rows 40/100",
        checks=3,
        activity="waiting",
        health={"state": "Healthy"},
        schedule={"nextCheckAt": "2026-12-06T09:30:00Z"},
    )
    row = views.row(body, NOW)
    assert [c["name"] for c in views.COLUMNS] == [
        "Goal", "Work", "Progress", "Checks", "Next Check", "Step", "Health", "Age",
    ]  # fmt: skip
    assert row.cells == [
        "incomplete", "running", "rows 40/100", "3", "2026-12-06T09:30:00Z", "waiting",
        "Healthy", "90m",
    ]  # fmt: skip
    assert row.key == "team/build" and not row.paused


def test_the_plot_has_one_point_per_accepted_check_that_reported_the_track() -> None:
    steps = [
        step(1, "extract", 0),
        step(2, "observe", 1, done=10, reported=True),
        step(3, "act", 1),
        step(4, "observe", 2, done=40, reported=True),
        # Not accepted as a check: no report was written on it.
        step(5, "observe", 3, done=99),
        step(6, "observe", 3, done=60, reported=True),
    ]
    status = views.MonitorStatus.model_validate({})
    plots = views.plots(steps, UID, status, NOW)
    assert len(plots) == 1
    plot = plots[0]
    assert [(p.check, p.completed) for p in plot.points] == [(1, 10), (2, 40), (3, 60)]
    assert plot.total == 100
    xs = [p.x for p in plot.points]
    ys = [p.y for p in plot.points]
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)
    assert plot.polyline.count(",") == 3


def test_steps_of_another_monitor_of_the_same_name_are_not_plotted() -> None:
    other = step(2, "observe", 1, done=10, reported=True)
    other["metadata"]["ownerReferences"] = [{"uid": "earlier", "controller": True}]
    status = views.MonitorStatus.model_validate({})
    assert views.plots([other], UID, status, NOW) == []
    assert views.timeline([other], UID, NOW) == []


USAGE = {"requests": 2, "inputTokens": 3000, "outputTokens": 322}


def test_the_timeline_is_newest_first_with_duration_tokens_and_outcome() -> None:
    steps = [
        step(1, "extract", 0, usage={"requests": 1, "inputTokens": 900, "outputTokens": 100}),
        step(2, "observe", 1, done=5, reported=True, usage=USAGE),
        step(3, "act", 1, phase="Failed"),
    ]
    entries = views.timeline(steps, UID, NOW)
    assert [e.seq for e in entries] == [3, 2, 1]
    observe = entries[1]
    assert (observe.kind, observe.duration, observe.tokens, observe.requests) == (
        "observe", "1m15s", "3,322", "2",
    )  # fmt: skip
    assert observe.outcome == "Succeeded · reported check 1" and observe.reported
    assert entries[0].outcome == "Failed" and entries[0].tokens == ""


def render_page(report: str) -> str:
    console = Console(Settings())
    page = views.monitor_page(monitor(report=report, reportedCheck=1), [], None, NOW)
    return console.templates.get_template("monitor_live.html").render(m=page, csrf="t")


def test_text_a_model_wrote_is_escaped_on_the_page() -> None:
    html = render_page('<script>alert(1)</script><img src=x onerror="alert(2)">')
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "onerror=&#34;alert(2)&#34;" in html


def test_control_characters_of_a_report_are_shown_not_sent() -> None:
    assert "\x1b" not in render_page("done \x1b[31mred")
    # A bidirectional override would reorder what the reader sees.
    assert "\u202e" not in render_page("approve \u202eevil")


# --- the web application, without an API server ----------------------------------------------


KUBECONFIG_CLIENT = object()


async def app_client(
    settings: Settings, kubeconfig_client: Any = KUBECONFIG_CLIENT
) -> TestClient[Any, Any]:
    console = Console(settings, kubeconfig_client)
    test_client = TestClient(TestServer(build_app(console), host="127.0.0.1"))
    await test_client.start_server()
    test_client.app_console = console  # type: ignore[attr-defined]
    return test_client


async def test_the_local_console_lets_in_only_the_one_time_link_once() -> None:
    test_client = await app_client(Settings())
    console: Console = test_client.app_console  # type: ignore[attr-defined]
    token = console.launch_token
    try:
        root = console.root
        assert root.startswith("/s/") and len(root) > 20
        locked = await test_client.get(root + "monitors", allow_redirects=False)
        assert locked.status == 401
        wrong = await test_client.get(root + "monitors?token=nope", allow_redirects=False)
        assert wrong.status == 401
        odd = await test_client.get(root + "?token=n\u00e9", allow_redirects=False)
        assert odd.status == 401
        # Outside the secret prefix nothing is served, the link's token included.
        outside = await test_client.get(f"/?token={token}", allow_redirects=False)
        assert outside.status == 404 and console.launch_token == token
        opened = await test_client.get(f"{root}?token={token}", allow_redirects=False)
        assert opened.status == 303 and opened.headers["Location"] == root + "monitors"
        cookie = opened.cookies[SESSION_COOKIE]
        assert cookie["httponly"] and cookie["samesite"] == "Strict"
        # Bound to the prefix: a server on another port of 127.0.0.1 does not get it.
        assert cookie["path"] == root
        again = await test_client.get(f"{root}?token={token}", allow_redirects=False)
        assert again.status == 401 and "used already" in await again.text()
        assert console.launch_token is None and len(console.sessions) == 1
    finally:
        await test_client.close()


async def test_a_post_without_the_csrf_token_or_from_another_origin_is_refused() -> None:
    test_client = await app_client(Settings())
    console: Console = test_client.app_console  # type: ignore[attr-defined]
    try:
        root = console.root
        await test_client.get(f"{root}?token={console.launch_token}", allow_redirects=False)
        session = next(iter(console.sessions.values()))
        good = console.csrf(session.person)
        for form, headers in (
            ({}, {}),
            ({"csrf": "0" * 64}, {}),
            ({"csrf": good}, {"Origin": "http://evil.example"}),
        ):
            refused = await test_client.post(
                root + "monitors/team/build/pause", data=form, headers=headers
            )
            assert refused.status == 403, (form, headers)
            assert refused.headers["Content-Security-Policy"] == CSP
    finally:
        await test_client.close()


async def test_the_local_console_answers_only_to_a_loopback_host_name() -> None:
    test_client = await app_client(Settings())
    console: Console = test_client.app_console  # type: ignore[attr-defined]
    try:
        rebound = await test_client.get(
            f"{console.root}?token={console.launch_token}",
            headers={"Host": "attacker.example:80"},
            allow_redirects=False,
        )
        assert rebound.status == 421 and console.launch_token is not None
    finally:
        await test_client.close()


async def test_every_response_carries_the_strict_headers() -> None:
    test_client = await app_client(Settings())
    try:
        root = test_client.app_console.root  # type: ignore[attr-defined]
        for path in (root + "monitors", root + "static/console.js", "/healthz"):
            response = await test_client.get(path, allow_redirects=False)
            assert response.headers["Content-Security-Policy"] == CSP
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.headers["Referrer-Policy"] == "same-origin"
        assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    finally:
        await test_client.close()


async def test_a_console_in_a_cluster_sends_a_person_without_a_token_to_sign_in() -> None:
    settings = Settings(server="https://127.0.0.1:1", namespaces=("team",))
    test_client = await app_client(settings, None)
    try:
        response = await test_client.get("/monitors", allow_redirects=False)
        assert response.status == 303 and response.headers["Location"] == "/login"
        # The local link means nothing there.
        response = await test_client.get("/?token=x", allow_redirects=False)
        assert response.status == 303 and response.headers["Location"] == "/login"
        form = await test_client.get("/login")
        assert form.status == 200 and 'name="token"' in await form.text()
        # A sign-in POST without the form's own nonce is refused, and so is one whose
        # cookie was planted with a nonce of the sender's choosing.
        refused = await test_client.post("/login", data={"token": "t"})
        assert refused.status == 403
        test_client.session.cookie_jar.update_cookies({LOGIN_COOKIE: "chosen"})
        planted = await test_client.post("/login", data={"token": "t", "csrf": "chosen"})
        assert planted.status == 403
        # From another origin, even with the form's own nonce.
        test_client.session.cookie_jar.clear()
        page = await (await test_client.get("/login")).text()
        nonce = re.search(r'name="csrf" value="([^"]+)"', page)
        assert nonce is not None
        elsewhere = await test_client.post(
            "/login",
            data={"token": "t", "csrf": nonce.group(1)},
            headers={"Origin": "http://evil.example"},
        )
        assert elsewhere.status == 403
        # A token that cannot be a header value is refused before any request is made.
        bent = await test_client.post("/login", data={"token": "a\r\nb", "csrf": nonce.group(1)})
        assert bent.status == 401 and "printable" in await bent.text()
    finally:
        await test_client.close()
