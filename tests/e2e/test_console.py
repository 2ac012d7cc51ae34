"""`goalkeeper console` end to end: a real browser (Debian's chromium through its
chromedriver) against the console, which runs as a person whose kubeconfig holds nothing
but their token. The monitors page lists the person's Monitor and no other namespace's;
its page plots one point per accepted check; Approve creates the MonitorApproval as that
person; a report holding markup runs nothing; a POST without the CSRF token is refused; a
console in cluster mode serves a pasted token and shows it only what it may read. The
test writes the screenshots in docs/."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from goalkeeper.console.server import Person, Watching, _follow_steps
from goalkeeper.monitors import monitor_manifest
from tests.e2e.harness import (
    BIN,
    GROUP,
    ROOT,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    wait_until,
)
from tests.e2e.test_approvals import PAID_TASK, READING, paid_resume
from tests.e2e.test_mcp import HANDS_OVER, LOOKS_ON, STOP_WHEN, kubeconfig
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

# One who hands a goal over and follows its steps live (a page follows them by a watch).
FOLLOWS = [*HANDS_OVER, {"apiGroups": [GROUP], "resources": ["monitorsteps"], "verbs": ["watch"]}]
REPORT, CHECK = "goalkeeper.dev/report", "goalkeeper.dev/check"

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
DOCS = ROOT / "docs"
# What a model might write to take over the page of whoever reads its report.
MARKUP = '<script>window.__ran = "script"</script><img src=x onerror="window.__ran = \'img\'">'


def marked_report(facts: Facts, n: int) -> dict[str, Any]:
    """The paid resume's answers, each report carrying markup."""
    answer = paid_resume(facts, n)
    answer["report"] = f"{answer['report']} {MARKUP}"
    return answer


@contextmanager
def console(kubeconfig_path: Path | None, *args: str) -> Iterator[str]:
    """`goalkeeper console` as a person: the URL it prints."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if kubeconfig_path is not None:
        env["KUBECONFIG"] = str(kubeconfig_path)
    process = subprocess.Popen(
        [str(BIN / "goalkeeper"), "console", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    url: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            found = re.search(r"open (http://127\.0\.0\.1:\d+/\S*)", line)
            if found and not url:
                url.append(found.group(1))

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_until(lambda: url, 60, "the console's URL", lambda: "".join(lines))
        yield url[0]
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        print("---- goalkeeper console ----\n" + "".join(lines)[-4000:])


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if os.environ.get("GOALKEEPER_REQUIRE_BROWSER"):
            pytest.fail("chromium and chromium-driver are required (apt-get install them)")
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1100"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def seen(driver: Any, css: str, timeout: float = 60) -> Any:
    from selenium.webdriver.common.by import By

    def found() -> Any:
        elements = driver.find_elements(By.CSS_SELECTOR, css)
        return elements[0] if elements else None

    return wait_until(
        found, timeout, f"{css} on {driver.current_url}", lambda: driver.page_source[-3000:]
    )


def steady(driver: Any, read: Any, what: str, timeout: float = 60) -> Any:
    """`read()` of the page, again when the live section was swapped under it."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    def attempt() -> tuple[Any] | None:
        try:
            return (read(),)
        except (NoSuchElementException, StaleElementReferenceException):
            return None

    found = wait_until(attempt, timeout, what, lambda: driver.page_source[-3000:])
    return found[0]


def plotted(driver: Any) -> int:
    """How many points the page's plot of the modules track shows."""
    circles = 'figure[data-track="modules"] circle'
    return int(steady(driver, lambda: len(driver.find_elements("css selector", circles)), "plot"))


def press(driver: Any, css: str) -> None:
    """Click what `css` finds once it is there, found again if the page swapped it."""
    seen(driver, css)
    steady(driver, lambda: driver.find_element("css selector", css).click(), f"a click on {css}")


def post(url: str, cookie: str, form: dict[str, str]) -> tuple[int, str]:
    """A form POST with the browser's session cookie, as a page elsewhere might send it."""
    body = "&".join(f"{k}={v}" for k, v in form.items()).encode()
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def token_of(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["users"][0]["user"]["token"])


@pytest.mark.operator_env(GOALKEEPER_APPROVAL_TIMEOUT="10m")
def test_a_person_follows_and_answers_a_monitor_in_the_console(
    cluster: Cluster,
    model: ModelServer,
    operator: OperatorProcess,
    control_plane: Any,
    browser: Any,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    # The build runs until the test opens the gate: no race between it and a check.
    gate = tmp_path / "build-may-finish"
    cluster.target(gate=gate)
    model.default = Scenario(cluster.ns, marked_report, reading=READING)
    alice_config = kubeconfig(control_plane, cluster, "alice", FOLLOWS, tmp_path)
    me = f"system:serviceaccount:{cluster.ns}:alice"
    alice = client.CustomObjectsApi(config.new_client_from_config(str(alice_config)))
    alice.create_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.ns,
        "monitors",
        monitor_manifest("build", cluster.ns, PAID_TASK, STOP_WHEN, 60, 6),
    )
    # A Monitor alice may not read, in a namespace of its own (paused: it never runs).
    hidden = f"{cluster.ns}-hidden"
    cluster.core.create_namespace({"metadata": {"name": hidden}})
    secret_monitor = monitor_manifest("payroll-secret", hidden, "Watch Job payroll.")
    secret_monitor["metadata"]["annotations"] = {"goalkeeper.dev/paused": "true"}
    cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, hidden, "monitors", secret_monitor
    )

    with console(alice_config) as url:
        assert "?token=" in url
        # The one-time link signs this browser in, then the token is spent.
        browser.get(url)
        seen(browser, f'tr[data-key="{cluster.ns}/build"]')
        listed = browser.find_element(By.ID, "monitors").text
        assert "build" in listed and "payroll-secret" not in listed and hidden not in listed
        status, said = post(url, "", {})
        assert status == 401 and "used already" in said

        base = url.split("?", 1)[0]
        page = f"{base}monitors/{cluster.ns}/build"
        browser.get(page)
        # Check 1 asks for approval; the page follows the Monitor live.
        seen(browser, "#approve", 120)
        # The page follows the Monitor and its steps: check 1's point, drawn from its report
        # kept on its step just after the status write, comes without a reload.
        wait_until(
            lambda: plotted(browser) == 1,
            60,
            "check 1's point on the plot",
            lambda: browser.page_source[-3000:],
        )
        assert cluster.status()["checks"] == 1
        # A change to a step alone reaches the page too: check 1's kept report taken off its
        # step and put back (as `kubectl annotate` does) takes the point away and back.
        [first] = [
            s for s in cluster.steps() if (s["metadata"].get("annotations") or {}).get(CHECK) == "1"
        ]
        kept = first["metadata"]["annotations"][REPORT]
        for report, points in ((None, 0), (kept, 1)):
            cluster.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                cluster.ns,
                "monitorsteps",
                first["metadata"]["name"],
                {"metadata": {"annotations": {REPORT: report}}},
            )
            wait_until(
                lambda points=points: plotted(browser) == points,
                60,
                f"{points} point(s) on the live page",
                lambda: browser.page_source[-3000:],
            )
        # The report's markup is text: nothing ran, no element was made from it.
        text, children = steady(
            browser,
            lambda: (
                browser.find_element(By.ID, "report").text,
                len(browser.find_element(By.ID, "report").find_elements(By.CSS_SELECTOR, "*")),
            ),
            "the report",
        )
        assert "<script>" in text and "onerror" in text and children == 0
        assert browser.execute_script("return window.__ran === undefined")
        assert browser.find_elements(By.CSS_SELECTOR, "#timeline tr.step-observe")
        DOCS.mkdir(exist_ok=True)

        # A POST without the CSRF token is refused, even with the session cookie.
        cookie = "; ".join(f"{c['name']}={c['value']}" for c in browser.get_cookies())
        status, said = post(f"{page}/pause", cookie, {})
        assert status == 403 and "CSRF" in said
        annotations = cluster.monitor()["metadata"].get("annotations") or {}
        assert "goalkeeper.dev/paused" not in annotations

        # While the note has the focus the page holds its live swap, so Approve stays put.
        steady(
            browser,
            lambda: browser.find_element(By.ID, "approve-note").send_keys("Q4 GPUs"),
            "the note",
        )
        press(browser, "#approve")
        flash = seen(browser, "pre.flash")
        assert f"as {me}" in flash.text
        approvals = cluster.custom.list_namespaced_custom_object(
            GROUP, VERSION, cluster.ns, "monitorapprovals"
        )["items"]
        assert [(a["spec"]["approver"], a["spec"]["reason"]) for a in approvals] == [
            (me, "Q4 GPUs")
        ]

        # The build moves on: the next checks read more of it done.
        cluster.core.patch_namespaced_config_map(
            "build-progress", cluster.ns, {"data": {"done": "25"}}
        )

        # Pause and resume from the page, as alice.
        press(browser, "#pause")
        seen(browser, "#resume")
        assert cluster.monitor()["metadata"]["annotations"]["goalkeeper.dev/paused"] == "true"
        press(browser, "#resume")
        seen(browser, "#pause")
        wait_until(
            lambda: (
                "goalkeeper.dev/paused"
                not in (cluster.monitor()["metadata"].get("annotations") or {})
            ),
            30,
            "the pause to be lifted",
        )

        # A check has read the build running; then it may finish.
        wait_until(
            lambda: cluster.status().get("checks", 0) >= 2,
            240,
            "a check of the running build",
            operator.logs,
        )
        gate.touch()

        # The run ends: the page shows one point per accepted check.
        wait_until(
            lambda: cluster.status().get("monitor") == "stopped",
            240,
            "the monitor to stop",
            operator.logs,
        )
        status = cluster.status()
        assert status["stop"]["reason"] == "goalComplete"

        # One point per accepted check that read the track: a check the facts settled
        # without a model reads no progress. The stopping check's report is kept on its
        # step just after the status write, so the page is read again until both agree.
        def page_and_steps() -> tuple[int, int] | None:
            browser.get(page)
            seen(browser, ".state-stopped")
            points = plotted(browser)
            reported = [
                s
                for s in cluster.steps()
                if s["spec"]["kind"] == "observe"
                and "goalkeeper.dev/check" in (s["metadata"].get("annotations") or {})
                and (s["status"].get("result") or {}).get("progress")
            ]
            return (points, len(reported)) if points == len(reported) >= 2 else None

        points, _ = wait_until(
            page_and_steps, 60, "one point per kept report", lambda: browser.page_source[-3000:]
        )
        assert points <= status["checks"]
        assert browser.execute_script("return window.__ran === undefined")
        browser.set_window_size(1280, 1700)
        browser.save_screenshot(str(DOCS / "console-monitor.png"))
        browser.set_window_size(1280, 1100)
        # Each step's log is a click away.
        press(browser, "#timeline tr.step-extract a")
        assert "extract" in seen(browser, "pre.log").text.splitlines()[0]

        # The list follows a watch: a Monitor made and deleted while the page is open comes
        # and goes without a reload.
        browser.get(f"{base}monitors")
        seen(browser, f'tr[data-key="{cluster.ns}/build"]')
        seen(browser, "#live-state")
        wait_until(
            lambda: browser.find_element(By.ID, "live-state").text == "live updates: on",
            30,
            "the live list to connect",
        )
        later = monitor_manifest("nightly-report", cluster.ns, "Watch Job report.")
        later["metadata"]["annotations"] = {"goalkeeper.dev/paused": "true"}
        alice.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "monitors", later)
        seen(browser, f'tr[data-key="{cluster.ns}/nightly-report"] .tag')
        browser.save_screenshot(str(DOCS / "console-monitors.png"))
        alice.delete_namespaced_custom_object(
            GROUP, VERSION, cluster.ns, "monitors", "nightly-report"
        )
        wait_until(
            lambda: (
                not browser.find_elements(
                    By.CSS_SELECTOR, f'tr[data-key="{cluster.ns}/nightly-report"]'
                )
            ),
            60,
            "the deleted Monitor's row to go",
        )

        # A namespace alice may not read shows her the API server's refusal, nothing of it.
        browser.get(f"{base}monitors/{hidden}/payroll-secret")
        refusal = seen(browser, "pre.refusal").text
        assert "403" in refusal and "forbidden" in refusal
        assert "Watch Job payroll" not in browser.page_source

    # In a cluster the console holds no credentials: each person signs in with a token.
    bob_config = kubeconfig(control_plane, cluster, "bob", LOOKS_ON, tmp_path)

    # One who may not list the steps (bob), or list but not watch them (carol), follows the
    # Monitor alone: following its steps ends at the refusal, and tells the page nothing.
    carol_config = kubeconfig(control_plane, cluster, "carol", HANDS_OVER, tmp_path)
    for who, path in (("bob", bob_config), ("carol", carol_config)):
        told: list[Any] = []
        watching = Watching(threading.Event(), [], told.append)
        _follow_steps(
            Person(config.new_client_from_config(str(path)), who), cluster.ns, "build", watching
        )
        assert told == [] and watching.opened == [], who

    with console(
        None,
        "--server",
        control_plane.server,
        "--certificate-authority",
        str(control_plane.ca_file),
    ) as url:
        assert "token=" not in url
        browser.delete_all_cookies()
        browser.get(url)
        seen(browser, "#token").send_keys(token_of(bob_config))
        browser.find_element(By.ID, "sign-in").click()
        seen(browser, f'tr[data-key="{cluster.ns}/build"]')
        listed = browser.find_element(By.ID, "monitors").text
        assert "payroll-secret" not in listed
        browser.get(f"{url}monitors/{cluster.ns}/build")
        seen(browser, ".state-stopped")
        browser.get(f"{url}monitors/{hidden}/payroll-secret")
        assert "403" in seen(browser, "pre.refusal").text
        status, _ = post(url + "login", "", {"token": token_of(bob_config)})
        assert status == 403
