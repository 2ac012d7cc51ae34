"""An upgrade from the last release keeps every run.

The previous release (RELEASES) is checked out from this clone's history into a git
worktree; its CRDs and RBAC are installed and its operator runs from that checkout, with
monitors in every state: one waiting on its timer, one with a step in flight, one awaiting
a person's approval, one stopped. Then the upgrade, as docs/install.md says to do it: the
old operator goes, the current CRDs are applied (`kubectl apply --server-side
--force-conflicts`; Helm never upgrades crds/), the current RBAC with them, and the current
operator starts. Each monitor
carries on where the release left it: the timer fires on time once, the in-flight result is
taken once, the approval is answered and its action runs, the stopped monitor stays stopped.

Step pods started while the release runs run the release's `goalkeeper-step`, as its image
would, and a running one keeps it across the upgrade. Both releases share this venv's
third-party packages, and the admission policies stay the current ones.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    ROOT,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    wait_until,
)
from tests.e2e.test_approvals import PAID_TASK, READING, account, goalkeeper, paid_resume
from tests.support.model_server import HttpError, ModelServer, Reply
from tests.support.observations import TASK
from tests.support.releases import Release, git, has_history, previous_release

pytestmark = pytest.mark.cluster

APPROVAL_TIMEOUT = "10m"
# The waiting monitor's timer (GOALKEEPER_TIME_SCALE=1: seconds): long enough for the
# upgrade to happen while it waits, short enough for the test.
TIMER_MINUTES = 45
# Monitors that must not check again during the test.
LONG_MINUTES = 600
# The most a due check may come after the later of its due time and the operator's start.
PROMPT_SECONDS = 30


@dataclass(frozen=True)
class Checkout:
    """A release checked out into a git worktree."""

    release: Release
    root: Path

    @property
    def code(self) -> Path:
        return self.root / "operator"

    def crds(self) -> list[Path]:
        return sorted((self.root / "crds").glob("*.yaml"))


@pytest.fixture
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checkout]:
    """The previous release in a worktree of this clone, removed afterwards. Without the
    history the test fails: CI runs on a clone that has it."""
    if not has_history():
        pytest.fail(
            f"{ROOT} has no .git: the upgrade test checks the previous release out of the "
            "git history (RELEASES names its commit); run it in a git clone",
            pytrace=False,
        )
    release = previous_release()
    assert release.commit is not None
    path = tmp_path_factory.mktemp("release") / release.tag
    added = git("worktree", "add", "--detach", str(path), release.commit, check=False)
    if added.returncode != 0:
        pytest.fail(
            f"cannot check out release {release.tag} ({release.commit}): "
            f"{added.stderr.strip()}; a shallow clone needs `git fetch --unshallow`",
            pytrace=False,
        )
    try:
        yield Checkout(release, path)
    finally:
        if git("worktree", "remove", "--force", str(path), check=False).returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
            git("worktree", "prune", check=False)


@pytest.fixture
def current_manifests_after(control_plane: Any) -> Iterator[None]:
    """The session's control plane gets the current CRDs and operator RBAC back, whatever
    the test left installed."""
    yield
    control_plane.apply_crds()
    control_plane.kubectl(
        "apply", "-f", str(ROOT / "config" / "rbac" / "operator.yaml"), check=True
    )


@pytest.fixture
def operators(
    current_manifests_after: None,
    request: pytest.FixtureRequest,
    cluster: Cluster,
) -> Iterator[list[OperatorProcess]]:
    """The operators the test starts: stopped afterwards, their logs and the monitors'
    statuses printed when the test failed."""
    started: list[OperatorProcess] = []
    yield started
    for process in started:
        process.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for process in started:
            kind = "release" if process.code is not None else "current"
            print(f"---- {kind} operator log ----\n" + process.logs()[-30000:])
        for name in CASES:
            print(f"---- Monitor {name} status ----\n" + json.dumps(cluster.status(name), indent=1))


# --- the monitors ------------------------------------------------------------------------

CASES = ("timer", "inflight", "approval", "stopped")


def marker(case: str) -> str:
    """What a monitor's task carries so the scripted model knows which monitor asks."""
    return f"(upgrade case {case})"


class Cases:
    """The scripted model of several monitors: each request goes to the Scenario of the
    monitor whose task it quotes."""

    def __init__(self) -> None:
        self.scenarios: dict[str, Scenario] = {}

    def __call__(self, body: dict[str, Any]) -> Reply:
        said = json.dumps(body.get("messages", []))
        found = [case for case in self.scenarios if marker(case) in said]
        if len(found) != 1:
            return HttpError(500, f"the request names {found or 'no'} upgrade case")
        return self.scenarios[found[0]](body)


def waits(facts: Facts, n: int) -> dict[str, Any]:
    return observation("wait", "incomplete", "running", facts, f"Check {n}: the build runs.")


def completes(facts: Facts, n: int) -> dict[str, Any]:
    return observation("stop", "complete", "complete", facts, "Done.", stopReason="goalComplete")


def reports_logged(process: OperatorProcess, namespace: str, name: str) -> list[int]:
    """The checks whose report an operator emitted for Monitor `name`, in its log."""
    pattern = rf"^\S.* {re.escape(namespace)}/{re.escape(name)} check (\d+):$"
    return [int(n) for n in re.findall(pattern, process.logs(), re.M)]


def report_events(cluster: Cluster, name: str) -> list[str]:
    return sorted(
        e.metadata.name for e in cluster.events("Report") if e.involved_object.name == name
    )


def observe_steps(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [s for s in cluster.steps(name) if s["spec"]["kind"] == "observe"]


def step_phases(steps: Cluster | list[dict[str, Any]], name: str = "") -> list[tuple[str, str]]:
    """Each MonitorStep's name and phase, of a list or of Monitor `name` in the cluster."""
    found = steps.steps(name) if isinstance(steps, Cluster) else steps
    return [(s["metadata"]["name"], (s.get("status") or {}).get("phase", "")) for s in found]


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@contextlib.contextmanager
def steps_of(pod_runner: Any, code: Path) -> Iterator[None]:
    """Step pods started meanwhile run `code`'s goalkeeper-step, as the release's image
    would; a pod keeps it until it ends, as a pod keeps its image."""
    before = pod_runner.extra_env.get("PYTHONPATH")
    pod_runner.extra_env["PYTHONPATH"] = str(code)
    try:
        yield
    finally:
        if before is None:
            pod_runner.extra_env.pop("PYTHONPATH", None)
        else:
            pod_runner.extra_env["PYTHONPATH"] = before


def running(process: OperatorProcess) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """A predicate that fails at once, with the log, when `process` has exited."""

    def wrap(predicate: Callable[[], Any]) -> Callable[[], Any]:
        def checked() -> Any:
            assert process.proc is not None
            code = process.proc.poll()
            if code is not None:
                raise AssertionError(f"the operator exited ({code}):\n{process.logs()[-8000:]}")
            return predicate()

        return checked

    return wrap


def step_code(cluster: Cluster, pod_runner: Any, name: str) -> str:
    """The PYTHONPATH of the process of Monitor `name`'s observe step in flight: whose code
    it runs."""
    step = observe_steps(cluster, name)[-1]
    (pod,) = cluster.core.list_namespaced_pod(
        cluster.ns, label_selector=f"goalkeeper.dev/step={step['metadata']['name']}"
    ).items
    record = pod_runner.record(cluster.ns, pod.metadata.name)
    assert record is not None and record.pid is not None, "the pod runner runs the step"
    environ = Path(f"/proc/{record.pid}/environ").read_bytes().split(b"\0")
    found = [v for v in environ if v.startswith(b"PYTHONPATH=")]
    return found[0].decode().partition("=")[2] if found else ""


def install_release(control_plane: Any, namespace: str, checkout: Checkout) -> None:
    """What the release's chart installs for the operator: its CRDs and RBAC."""
    control_plane.apply_crds(checkout.crds())
    rbac = checkout.root / "config" / "rbac"
    control_plane.kubectl("apply", "-f", str(rbac / "operator.yaml"), check=True)
    control_plane.kubectl("apply", "-n", namespace, "-f", str(rbac / "steps.yaml"), check=True)


def upgrade_manifests(control_plane: Any, namespace: str) -> None:
    """The current CRDs as docs/install.md says to apply them (Helm leaves crds/ alone),
    then what `helm upgrade` changes: the RBAC."""
    crds = str(ROOT / "crds")
    applied = control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", crds)
    assert applied.returncode == 0, f"applying the current CRDs failed: {applied.stderr}"
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "-f", crds, check=True
    )
    rbac = ROOT / "config" / "rbac"
    control_plane.kubectl("apply", "-f", str(rbac / "operator.yaml"), check=True)
    control_plane.kubectl("apply", "-n", namespace, "-f", str(rbac / "steps.yaml"), check=True)


# --- the test ------------------------------------------------------------------------------


def test_an_upgrade_from_the_last_release_keeps_every_run(
    previous: Checkout,
    operators: list[OperatorProcess],
    control_plane: Any,
    pod_runner: Any,
    operator_kubeconfig: Path,
    cluster: Cluster,
    model: ModelServer,
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    ns = cluster.ns
    phases: dict[str, float] = {}
    gate = threading.Event()
    cases = Cases()
    cases.scenarios = {
        "timer": Scenario(ns, waits),
        "inflight": Scenario(ns, waits, gate=gate),
        "approval": Scenario(ns, paid_resume, reading=READING),
        "stopped": Scenario(ns, completes),
    }
    model.default = cases
    logs = {kind: tmp_path / kind for kind in ("release", "current")}
    for folder in logs.values():
        folder.mkdir()
    env = {"GOALKEEPER_APPROVAL_TIMEOUT": APPROVAL_TIMEOUT}
    old = OperatorProcess(
        operator_kubeconfig, ns, model, logs["release"], code=previous.code, **env
    )
    new = OperatorProcess(operator_kubeconfig, ns, model, logs["current"], **env)
    operators += [old, new]
    try:
        # --- the previous release runs --------------------------------------------------
        install_release(control_plane, ns, previous)
        with steps_of(pod_runner, previous.code):
            old.start()
            during = running(old)
            origin = wait_until(
                during(lambda: re.search(r"^goalkeeper (\S+) from (\S+)$", old.logs(), re.M)),
                30,
                "the release's operator to start",
                old.logs,
            )
            assert origin.group(1) == previous.release.version, origin.group(0)
            assert Path(origin.group(2)).is_relative_to(previous.code), (
                f"the release's operator imported {origin.group(2)}, not {previous.code}"
            )
            cluster.target(seconds=0)
            cluster.create_monitor("stopped", task=f"{TASK} {marker('stopped')}")
            cluster.create_monitor(
                "approval",
                task=f"{PAID_TASK} {marker('approval')}",
                everyMinutes=LONG_MINUTES,
            )
            cluster.create_monitor(
                "inflight", task=f"{TASK} {marker('inflight')}", everyMinutes=LONG_MINUTES
            )
            wait_until(during(lambda: cluster.stopped("stopped")), 120, "a stop", old.logs)
            wait_until(
                during(lambda: cluster.status("approval").get("approval")),
                120,
                "the approval request",
                old.logs,
            )
            # The model has the in-flight observation and holds its answer.
            wait_until(
                during(lambda: cases.scenarios["inflight"].observed),
                120,
                "the in-flight step to ask the model",
                old.logs,
            )
            assert step_code(cluster, pod_runner, "inflight") == str(previous.code)
            # Last, so its timer is due only after the upgrade.
            cluster.create_monitor(
                "timer", task=f"{TASK} {marker('timer')}", everyMinutes=TIMER_MINUTES
            )
            wait_until(
                during(
                    lambda: (s := cluster.status("timer")).get("schedule") and not s.get("step")
                ),
                120,
                "the first check of the waiting monitor",
                old.logs,
            )
            phases["release running"] = time.monotonic() - began
            before = {name: cluster.status(name) for name in CASES}
            steps_before = {name: cluster.steps(name) for name in CASES}
            events_before = {name: report_events(cluster, name) for name in CASES}
            old.stop()
            assert old.proc is not None and old.proc.poll() is not None
        # What the release left: one monitor in each state.
        assert before["timer"]["checks"] == 1 and before["timer"]["monitor"] == "active"
        assert before["inflight"]["checks"] == 0 and before["inflight"].get("step")
        assert [s["spec"]["kind"] for s in steps_before["inflight"]] == ["extract", "observe"]
        assert before["approval"]["activity"] == "awaitingApproval"
        assert before["stopped"]["stop"]["reason"] == "goalComplete"
        request = before["approval"]["approval"]["id"]
        due = at(before["timer"]["schedule"]["nextCheckAt"])
        in_flight = steps_before["inflight"][-1]["metadata"]["name"]

        # --- the upgrade ----------------------------------------------------------------
        upgrade_manifests(control_plane, ns)
        started_at = datetime.now(UTC)
        new.start()
        phases["upgraded"] = time.monotonic() - began
        live = running(new)

        def settled(name: str) -> Callable[[], bool]:
            return live(lambda: f"{ns}/{name}: nothing to do" in new.logs())

        # The step in flight is the current operator's to take: once, not launched again.
        wait_until(settled("inflight"), 60, "the current operator to see the step", new.logs)
        assert [s["metadata"]["name"] for s in observe_steps(cluster, "inflight")] == [in_flight]
        gate.set()
        taken = wait_until(
            live(
                lambda: (
                    (s := cluster.status("inflight")).get("checks") == 1
                    and s.get("schedule")
                    and not s.get("step")
                    and s
                )
            ),
            90,
            "the in-flight result to be taken",
            new.logs,
        )
        assert taken["monitor"] == "active" and not taken.get("lastRejection"), taken
        assert [s["metadata"]["name"] for s in observe_steps(cluster, "inflight")] == [in_flight]
        assert cluster.step_phase(in_flight) == "Succeeded"
        assert len(cases.scenarios["inflight"].observed) == 1, "the model was asked once"
        assert len(cluster.reports(1, "inflight")) == 1

        # The approval asked for by the release is answered now, and its action runs.
        approver = account(control_plane, cluster, "approver", tmp_path, role=True)
        answered = goalkeeper(approver, "approve", "approval", "-n", ns, "--reason", "upgrade")
        assert answered.returncode == 0, answered.stderr
        assert f"approve request {request} as" in answered.stdout, answered.stdout
        verified = wait_until(
            live(
                lambda: (
                    (s := cluster.status("approval")).get("checks") == 2 and not s.get("step") and s
                )
            ),
            120,
            "the approved action and its verification",
            new.logs,
        )
        assert [r["requestId"] for r in verified["approvals"]] == [request], verified
        kinds = cluster.step_kinds("approval")
        assert kinds == ["extract", "observe", "act", "observe"], kinds
        act = cluster.steps("approval")[2]["metadata"]["name"]
        assert cluster.step_phase(act) == "Succeeded"
        assert cluster.batch.read_namespaced_job("build", ns).spec.suspend is False
        assert cases.scenarios["approval"].acts == 1

        # The waiting monitor checks again when its timer says, once.
        left = (due - datetime.now(UTC)).total_seconds()
        checked = wait_until(
            live(
                lambda: (
                    (s := cluster.status("timer")).get("checks") == 2 and not s.get("step") and s
                )
            ),
            max(left, 0) + 90,
            "the waiting monitor's next check",
            new.logs,
        )
        phases["checked again"] = time.monotonic() - began
        observed = observe_steps(cluster, "timer")
        assert len(observed) == 2, [s["metadata"]["name"] for s in observed]
        launched = at(observed[1]["metadata"]["creationTimestamp"])
        # creationTimestamp is in whole seconds.
        assert launched >= due - timedelta(seconds=1), f"checked at {launched}, due {due}"
        latest = max(due, started_at) + timedelta(seconds=PROMPT_SECONDS)
        assert launched <= latest, f"checked at {launched}, due {due}, started {started_at}"
        assert checked["monitor"] == "active" and checked["activity"] == "waiting", checked
        following = at(checked["schedule"]["nextCheckAt"]) - at(checked["schedule"]["lastCheckAt"])
        assert abs(following.total_seconds() - TIMER_MINUTES) <= 2, checked["schedule"]
        assert len(cluster.reports(2, "timer")) == 2

        # The stopped monitor stays stopped with its report, nothing ran for it again. (A
        # stopped monitor is only read from the watch, which logs nothing of it; by now the
        # current operator has run for the whole timer.)
        after = cluster.status("stopped")
        assert after.get("monitor") == "stopped", after
        for field in ("stop", "report", "checks", "reportedCheck"):
            assert after.get(field) == before["stopped"].get(field), field
        assert step_phases(cluster, "stopped") == step_phases(steps_before["stopped"])
        assert report_events(cluster, "stopped") == events_before["stopped"]

        # No check reported twice: the current operator reports none the release did.
        for name in CASES:
            earlier = reports_logged(old, ns, name)
            later = reports_logged(new, ns, name)
            assert not set(earlier) & set(later), f"{name}: reported {earlier} then {later}"
        assert reports_logged(new, ns, "timer") == [2]
        assert reports_logged(new, ns, "stopped") == []
        # Nothing moved meanwhile.
        assert len(observe_steps(cluster, "timer")) == 2
        assert cluster.status("inflight").get("checks") == 1
        assert new.proc is not None and new.proc.poll() is None, "the operator is still up"
    finally:
        gate.set()
    phases["done"] = time.monotonic() - began
    print(
        "upgrade test, seconds from its start: "
        + ", ".join(f"{k} {v:.0f}" for k, v in phases.items())
    )
