"""Pause, resume and check-now end to end, each through kubectl and the CLI, across an
operator restart: annotations on the Monitor, never its spec.

A pause lets the running step finish and takes its result, then launches nothing; removing
it checks at once. A new check-now value starts a check at once on a waiting monitor, and
the same value never starts a second one."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from goalkeeper.core.controls import CHECK_NOW, PAUSED
from tests.e2e.harness import (
    BIN,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    wait_until,
    write_token_kubeconfig,
)
from tests.support.model_server import ModelServer

pytestmark = pytest.mark.cluster

LAUNCHED_AT = "goalkeeper.dev/launched-at"
# At a time scale of 1 s per minute: a check every 12 s, short enough that a pause which
# let the timer through would show within the test, long enough to tell "at once" from it.
INTERVAL = 12
# A 24-minute timer, far beyond every deadline here.
LONG_WAIT = 1440
# How soon after a resume or a check-now its observe step must have launched.
AT_ONCE = 5.0


def running(facts: Facts, _: int = 0) -> dict[str, Any]:
    return observation("wait", "incomplete", "running", facts, "Job build is running.")


def goalkeeper(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "goalkeeper"), *args],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def annotate(control_plane: Any, namespace: str, *changes: str) -> None:
    control_plane.kubectl(
        "annotate", "--overwrite", "monitor", "build", "-n", namespace, *changes, check=True
    )


def column(control_plane: Any, namespace: str, name: str) -> str:
    """One column of the monitor's row in `kubectl get monitors`: from its header to the
    next header."""
    table = control_plane.kubectl("get", "monitors", "-n", namespace, check=True).stdout
    header, line = table.splitlines()[:2]
    start = header.index(name)
    rest = header[start + len(name) :]
    end = start + len(name) + len(rest) - len(rest.lstrip()) if rest.strip() else None
    return line[start:end].strip()


def names(cluster: Cluster) -> list[str]:
    return [s["metadata"]["name"] for s in cluster.steps()]


def observe_steps(cluster: Cluster) -> list[dict[str, Any]]:
    return [s for s in cluster.steps() if s["spec"]["kind"] == "observe"]


def launched_at(step: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(step["metadata"]["annotations"][LAUNCHED_AT])


def running_observe(cluster: Cluster) -> dict[str, Any] | None:
    live = [s for s in observe_steps(cluster) if (s.get("status") or {}).get("phase") == "Running"]
    return live[-1] if live else None


def monitor_events(operator: OperatorProcess, latest: bool = False) -> int:
    """How many watch events of a Monitor the operator has handled (in the log of its latest
    start only, with `latest`): it watches only the test's namespace, which holds one."""
    if latest:
        path = operator.log_dir / f"operator-{operator.starts}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
    else:
        text = operator.logs()
    return text.count(": Monitor event ")


def holds(
    predicate: Callable[[], Any], seconds: float, what: str, detail: Callable[[], str]
) -> None:
    """The one bounded wait that is itself the assertion: `predicate` stays true for the
    whole period."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what} held for less than {seconds} s\n{detail()[-6000:]}"
        time.sleep(0.25)


def paused_status(cluster: Cluster, checks: int) -> dict[str, Any] | None:
    status = cluster.status()
    if status.get("checks") == checks and status.get("activity") == "paused":
        return status
    return None


def new_observe_step(cluster: Cluster, known: list[str]) -> dict[str, Any] | None:
    fresh = [s for s in observe_steps(cluster) if s["metadata"]["name"] not in known]
    return fresh[0] if fresh else None


def test_a_pause_takes_the_running_steps_result_then_launches_nothing_until_resumed(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, control_plane: Any
) -> None:
    ns = cluster.ns
    cluster.target(suspended=False, seconds=600)
    answer = threading.Event()
    model.default = Scenario(ns, running, gate=answer)
    cluster.create_monitor(everyMinutes=INTERVAL, maxChecks=50)
    step = wait_until(
        lambda: running_observe(cluster), 120, "the first observe step", operator.logs
    )
    generation = cluster.monitor()["metadata"]["generation"]

    # The pause lands while the observe step waits for its answer, and the operator sees it.
    seen = monitor_events(operator)
    annotate(control_plane, ns, f"{PAUSED}=true")
    wait_until(lambda: monitor_events(operator) > seen, 30, "the pause to reach the operator")
    answer.set()

    # The running step's result is taken: the check counts and is reported.
    status = wait_until(lambda: paused_status(cluster, 1), 90, "the paused monitor", operator.logs)
    assert cluster.step_phase(step["metadata"]["name"]) == "Succeeded"
    assert status["monitor"] == "active" and status.get("stop") is None
    reports = cluster.reports(1)
    assert len(reports) == 1 and reports[0].message.startswith("check 1:")
    reasons = {c["type"]: c["reason"] for c in status["conditions"]}
    assert (reasons["Ready"], reasons["Progressing"]) == ("Paused", "Paused"), reasons
    assert column(control_plane, ns, "STEP") == "paused"
    # An annotation is no spec edit: no new generation, no new run.
    monitor = cluster.monitor()
    assert monitor["metadata"]["generation"] == generation
    assert status.get("observedGeneration") == generation and not status.get("previousRuns")

    # Then nothing launches, well past the time the timer would have started a check.
    before = names(cluster)
    schedule = status.get("schedule") or {}
    due = (
        (datetime.fromisoformat(schedule["nextCheckAt"]) - datetime.now(UTC)).total_seconds()
        if schedule.get("nextCheckAt")
        else 0.0
    )
    holds(
        lambda: names(cluster) == before,
        max(INTERVAL, due) + 3,
        "no step launched while paused",
        operator.logs,
    )
    assert paused_status(cluster, 1) is not None

    # Across a restart it stays paused: the new operator reads the monitor and launches
    # nothing, though the timer is overdue by now.
    operator.kill()
    operator.start()
    wait_until(
        lambda: monitor_events(operator, latest=True) > 0,
        60,
        "the restarted operator to read the monitor",
        operator.logs,
    )
    holds(lambda: names(cluster) == before, 5, "no step launched after a restart", operator.logs)
    assert paused_status(cluster, 1) is not None

    # `goalkeeper resume` checks at once, long before the next timer would.
    resumed_at = datetime.now(UTC)
    resumed = goalkeeper(control_plane.kubeconfig, "resume", "build", "-n", ns)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"resumed monitor {ns}/build: an observe step starts now")
    assert PAUSED not in (cluster.monitor()["metadata"].get("annotations") or {})
    first = wait_until(
        lambda: new_observe_step(cluster, before), 30, "an observe step after resume", operator.logs
    )
    assert (launched_at(first) - resumed_at).total_seconds() < AT_ONCE
    assert PAUSED in first["spec"]["input"].get("wokenBy", ""), first["spec"]["input"]
    status = wait_until(
        lambda: (s := cluster.status()).get("checks") == 2 and s.get("activity") == "waiting" and s,
        60,
        "the resumed check",
        operator.logs,
    )
    assert len(cluster.reports(2)) == 2

    # The other way round: `goalkeeper pause` on a waiting monitor, kubectl to resume.
    paused = goalkeeper(control_plane.kubeconfig, "pause", "build", "-n", ns)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith(f"paused monitor {ns}/build: ")
    assert "until `goalkeeper resume build`" in paused.stdout
    assert (cluster.monitor()["metadata"]["annotations"] or {})[PAUSED] == "true"
    wait_until(lambda: paused_status(cluster, 2), 30, "the pause by the CLI", operator.logs)
    before = names(cluster)
    resumed_at = datetime.now(UTC)
    control_plane.kubectl("annotate", "monitor", "build", "-n", ns, f"{PAUSED}-", check=True)
    second = wait_until(
        lambda: new_observe_step(cluster, before),
        30,
        "an observe step after the annotation is removed",
        operator.logs,
    )
    assert (launched_at(second) - resumed_at).total_seconds() < AT_ONCE
    assert PAUSED in second["spec"]["input"].get("wokenBy", "")
    if status.get("schedule"):
        # Before the timer of check 2 was due.
        assert launched_at(second) < datetime.fromisoformat(status["schedule"]["nextCheckAt"])
    wait_until(lambda: cluster.status().get("checks") == 3, 60, "the third check", operator.logs)
    assert cluster.monitor()["metadata"]["generation"] == generation


def test_check_now_starts_one_check_per_value_through_kubectl_and_the_cli(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, control_plane: Any
) -> None:
    ns = cluster.ns
    cluster.target(suspended=False, seconds=600)
    model.default = Scenario(ns, running)
    cluster.create_monitor(everyMinutes=LONG_WAIT, maxChecks=50)
    first = wait_until(
        lambda: (s := cluster.status()).get("checks") == 1 and s.get("schedule") and s,
        120,
        "the first wait",
        operator.logs,
    )
    timer = datetime.fromisoformat(first["schedule"]["nextCheckAt"])
    generation = cluster.monitor()["metadata"]["generation"]

    # kubectl: a new value starts a check at once, 24 minutes before the timer.
    before = names(cluster)
    requested_at = datetime.now(UTC)
    annotate(control_plane, ns, f"{CHECK_NOW}=first-request")
    step = wait_until(
        lambda: new_observe_step(cluster, before), 30, "the requested check", operator.logs
    )
    assert (launched_at(step) - requested_at).total_seconds() < AT_ONCE
    assert launched_at(step) < timer
    assert CHECK_NOW in step["spec"]["input"].get("wokenBy", ""), step["spec"]["input"]
    status = wait_until(
        lambda: (s := cluster.status()).get("checks") == 2 and s.get("activity") == "waiting" and s,
        60,
        "the requested check to be taken",
        operator.logs,
    )
    assert status["checkNowHandled"] == "first-request"
    assert len(cluster.reports(2)) == 2

    # The same value again, with another annotation so the operator surely reads it: no check.
    before = names(cluster)
    seen = monitor_events(operator)
    annotate(control_plane, ns, f"{CHECK_NOW}=first-request", "example.com/touched=1")
    wait_until(lambda: monitor_events(operator) > seen, 30, "the annotation to reach the operator")
    holds(
        lambda: names(cluster) == before, 5, "no check for a value already honoured", operator.logs
    )

    # Nor after a restart: the honoured value is in status.
    operator.kill()
    operator.start()
    wait_until(
        lambda: monitor_events(operator, latest=True) > 0,
        60,
        "the restarted operator to read the monitor",
        operator.logs,
    )
    holds(lambda: names(cluster) == before, 5, "no check after a restart", operator.logs)
    status = cluster.status()
    assert (status["checks"], status["checkNowHandled"]) == (2, "first-request")

    # `goalkeeper check`: a new value of its own, and one check at once.
    requested_at = datetime.now(UTC)
    checked = goalkeeper(control_plane.kubeconfig, "check", "build", "-n", ns)
    assert checked.returncode == 0, checked.stderr
    value = cluster.monitor()["metadata"]["annotations"][CHECK_NOW]
    assert value != "first-request" and datetime.fromisoformat(value) >= requested_at
    assert checked.stdout == (
        f"requested a check of monitor {ns}/build ({CHECK_NOW}={value}): an observe step "
        f"starts now (`kubectl get monitorsteps -l goalkeeper.dev/monitor=build` shows it)\n"
    )
    step = wait_until(
        lambda: new_observe_step(cluster, before), 30, "the CLI's check", operator.logs
    )
    assert (launched_at(step) - requested_at).total_seconds() < AT_ONCE
    assert CHECK_NOW in step["spec"]["input"].get("wokenBy", "")
    status = wait_until(
        lambda: (s := cluster.status()).get("checks") == 3 and s.get("activity") == "waiting" and s,
        60,
        "the CLI's check to be taken",
        operator.logs,
    )
    assert status["checkNowHandled"] == value
    assert len(cluster.reports(3)) == 3
    # Nothing of this touched the spec.
    assert cluster.monitor()["metadata"]["generation"] == generation
    assert not status.get("previousRuns")


def test_the_commands_name_a_missing_monitor_and_the_verb_a_refused_patch_needs(
    cluster: Cluster, control_plane: Any, tmp_path: Path
) -> None:
    ns = cluster.ns
    cluster.create_monitor(everyMinutes=LONG_WAIT)
    # A person who may read Monitors but not patch them, whose context names the namespace.
    control_plane.kubectl("create", "serviceaccount", "reader", "-n", ns, check=True)
    control_plane.kubectl(
        "create", "role", "monitor-reader", "--verb=get,list", "--resource=monitors.goalkeeper.dev",
        "-n", ns, check=True,
    )  # fmt: skip
    control_plane.kubectl(
        "create", "rolebinding", "monitor-reader", "--role=monitor-reader",
        f"--serviceaccount={ns}:reader", "-n", ns, check=True,
    )  # fmt: skip
    reader = tmp_path / "reader.kubeconfig"
    write_token_kubeconfig(cluster.api, control_plane.kubeconfig, ns, "reader", reader)
    config = yaml.safe_load(reader.read_text())
    config["contexts"][0]["context"]["namespace"] = ns
    reader.write_text(yaml.safe_dump(config))

    refused = goalkeeper(reader, "pause", "build")  # the namespace of the context
    assert refused.returncode == 1 and refused.stdout == ""
    assert f"refused to patch Monitor {ns}/build" in refused.stderr
    assert "`goalkeeper pause` needs the RBAC verb patch on monitors" in refused.stderr
    assert PAUSED not in (cluster.monitor()["metadata"].get("annotations") or {})

    missing = goalkeeper(control_plane.kubeconfig, "check", "nothing-here", "-n", ns)
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"goalkeeper: no Monitor nothing-here in namespace {ns}")
