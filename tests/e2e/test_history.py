"""`goalkeeper history` against a real run: every check's report outlives its Event in the
step history, and the command prints each one with its time and step, oldest first."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.harness import (
    BIN,
    GROUP,
    VERSION,
    Cluster,
    Facts,
    OperatorProcess,
    Scenario,
    observation,
    report_text,
    wait_until,
)
from tests.support.model_server import ModelServer
from tests.support.observations import action

pytestmark = pytest.mark.cluster

REPORT, CHECK = "goalkeeper.dev/report", "goalkeeper.dev/check"


def utc(stamp: str) -> str:
    """A step's RFC 3339 time as the history prints it."""
    at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S")


def history(control_plane: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """`goalkeeper history` as a user runs it, with the test's kubeconfig."""
    return subprocess.run(
        [str(BIN / "goalkeeper"), "history", *args],
        env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def indented(report: str) -> str:
    return "\n".join("    " + line if line else "" for line in report.splitlines())


def test_history_prints_each_checks_report_with_its_time_and_step(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, control_plane: Any
) -> None:
    cluster.target(done=0)  # suspended: the second check resumes it

    def observe(facts: Facts, n: int) -> dict[str, Any]:
        if n == 1:
            return observation("wait", "incomplete", "waiting", facts, "Check one: queued.")
        if n == 2:
            resume = action(action="Resume Job build (set spec.suspend=false).")
            said = "Check two: idle."
            return observation("act", "incomplete", "idle", facts, said, action=resume)
        # The step reads the Job again once the model answered, and holds the answer to it:
        # answer once the resumed Job has succeeded, never in a race with it.
        wait_until(job_succeeded, 60, "the resumed Job to succeed")
        return observation(
            "stop", "complete", "complete", facts, "Check three: done.", stopReason="goalComplete"
        )

    def job_succeeded() -> bool:
        job = cluster.batch.read_namespaced_job("build", cluster.ns)
        return bool(job.status.succeeded)

    model.default = Scenario(cluster.ns, observe)
    # A judged stop rule: the wait at check 1 stands (with "Job build has succeeded" the
    # engine would resume the suspended Job at once, the one grant that makes it hold).
    cluster.create_monitor(everyMinutes=1, stopWhen="Stop when the build log says it is done.")
    status = wait_until(cluster.stopped, 180, "the monitor to stop", operator.logs)
    assert status["checks"] == 3 and status["stop"]["reason"] == "goalComplete"
    assert cluster.step_kinds() == ["extract", "observe", "observe", "act", "observe"]

    # Each check's report is on the observe step whose observation made it, as the API
    # server has it; the Events carry the same text (until they expire). Both are written
    # just after the status write that stopped the run.
    events = {e.metadata.name.rsplit("-", 1)[-1]: report_text(e) for e in cluster.reports(3)}

    def reports_kept() -> dict[int, dict[str, Any]]:
        return {
            int(s["metadata"]["annotations"][CHECK]): s
            for s in cluster.steps()
            if REPORT in (s["metadata"].get("annotations") or {})
        }

    kept = wait_until(
        lambda: found if len(found := reports_kept()) >= 3 else None,
        30,
        "three checks' reports kept on their steps",
        lambda: str(sorted(reports_kept())),
    )
    steps = cluster.steps()
    assert sorted(kept) == [1, 2, 3]
    assert [kept[n]["spec"]["seq"] for n in (1, 2, 3)] == [2, 3, 5]
    for n, step in kept.items():
        assert step["spec"]["kind"] == "observe"
        assert step["metadata"]["annotations"][REPORT] == events[str(n)]
    assert kept[3]["metadata"]["annotations"][REPORT] == status["report"]

    done = history(control_plane, "build", "-n", cluster.ns)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    print(out)
    assert out.startswith(
        f"Monitor {cluster.ns}/build: 3 check report(s) in 5 kept step(s) (steps 1-5)"
    )
    places = []
    for n in (1, 2, 3):
        step = kept[n]
        started, finished = utc(step["status"]["startedAt"]), utc(step["status"]["finishedAt"])
        # The finish without its date when it shares the start's.
        end = finished[11:] if finished[:10] == started[:10] else finished
        header = (
            f"check {n} · step {step['spec']['seq']} observe {step['metadata']['name']} · "
            f"{started} → {end} UTC\n"
        )
        block = header + indented(events[str(n)]) + "\n"
        assert block in out, f"check {n}'s block:\n{block}"
        places.append(out.index(block))
    assert places == sorted(places), "oldest first"
    # The steps without a report are one line each, in their place.
    extract, act = steps[0], steps[3]
    assert out.index(f"\nstep 1 extract {extract['metadata']['name']} · ") < places[0]
    act_line = f"\nstep 4 act (check 2) {act['metadata']['name']} · "
    assert places[1] < out.index(act_line) < places[2]
    assert out[out.index(act_line) :].split("\n", 2)[1].endswith(" UTC · Succeeded")
    assert "final report" not in out, "the stopping check's report is already its step's"
    assert "Check one: queued." in out and "Check three: done." in out

    missing = history(control_plane, "no-such-monitor", "-n", cluster.ns)
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"Monitor {cluster.ns}/no-such-monitor not found" in missing.stderr


def test_a_final_stop_report_ends_the_history(
    cluster: Cluster, model: ModelServer, operator: OperatorProcess, control_plane: Any
) -> None:
    cluster.target(suspended=False, seconds=600)
    model.default = Scenario(
        cluster.ns,
        lambda facts, n: observation("wait", "incomplete", "running", facts, "Still running."),
    )
    cluster.create_monitor(everyMinutes=600, maxChecks=5)
    waiting = wait_until(
        lambda: (s := cluster.status()).get("schedule") and s.get("checks") == 1 and s,
        120,
        "the first check to wait",
        operator.logs,
    )
    # A limit lowered below the count stops the run between checks, with a final report.
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.ns, "monitors", "build", {"spec": {"maxChecks": 1}}
    )
    stopped = wait_until(cluster.stopped, 60, "the monitor to stop", operator.logs)
    assert stopped["stop"]["reason"] == "safetyLimit" and stopped["report"] != waiting["report"]

    done = history(control_plane, "build", "-n", cluster.ns)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    check = out.index("check 1 · step 2 observe ")
    assert out.index(indented(waiting["report"]), check) > check, "check 1's own report"
    final = (
        f"final report · check 1 · stopped {utc(stopped['stop']['at'])} UTC (status.report)\n"
        + indented(stopped["report"])
        + "\n"
    )
    assert out.endswith("\n\n" + final), out


def test_history_says_when_nothing_is_kept(cluster: Cluster, control_plane: Any) -> None:
    # No operator runs here: the Monitor has no step.
    cluster.create_monitor()
    done = history(control_plane, "build", "-n", cluster.ns)
    assert done.returncode == 1 and done.stdout == ""
    assert f"Monitor {cluster.ns}/build has no step history kept" in done.stderr
