"""The invariants every part checks before it prints a figure: each check the fake step
answered is accepted (status.checks and status.reportedCheck), it has exactly one Report
Event (named `check-N`, as tests/faults/fleet.py reads them), and no MonitorStep or step
Job was launched twice."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from bench.fake_step import FakeStep
from bench.harness import AuditTail, InvariantError, list_all


def violations(api: Any, fake: FakeStep, audit: AuditTail) -> list[str]:
    """One line per violation in the fake step's namespace."""
    found = [f"fake step: {error}" for error in fake.errors]
    monitors = {m["metadata"]["name"]: m for m in list_all(api, "monitors", fake.namespace)[0]}
    reports: defaultdict[str, Counter[int]] = defaultdict(Counter)
    for event in list_all(api, "events", fake.namespace)[0]:
        what = event["metadata"]["name"].rsplit(".", 1)[-1]
        if event.get("reason") == "Report" and what.startswith("check-"):
            uid = event["involvedObject"].get("uid", "")
            reports[uid][int(what.removeprefix("check-"))] += max(int(event.get("count") or 1), 1)
    for name, monitor in sorted(monitors.items()):
        status = monitor.get("status") or {}
        answered = fake.answered[name]
        for key in ("checks", "reportedCheck"):
            if int(status.get(key) or 0) != answered:
                found.append(
                    f"check not accepted: {name} status.{key}={status.get(key)} but the fake "
                    f"step answered {answered} check(s)"
                )
        counted = reports[monitor["metadata"]["uid"]]
        for check in sorted(set(counted) | set(range(1, answered + 1))):
            if counted[check] != 1:
                found.append(
                    f"duplicate or missing report: {name} has {counted[check]} Report Event(s) "
                    f"for check {check} (answered {answered})"
                )
    for (owner, check), steps in sorted(fake.launches.items()):
        if len(steps) > 1:
            found.append(f"step launched twice: {owner} check {check}: {sorted(steps)}")
    audit.poll()
    creates = Counter(
        (r.resource, r.name)
        for r in audit.requests
        if r.by_operator
        and r.verb == "create"
        and r.ok
        and r.stage == "ResponseComplete"
        and r.resource in ("monitorsteps", "jobs")
    )
    for (resource, name), count in sorted(creates.items()):
        if count > 1:
            found.append(f"step launched twice: {resource} {name} was created {count} times")
    return found


def check(part: str, api: Any, fake: FakeStep, audit: AuditTail) -> None:
    """Raise InvariantError naming every violation; return quietly when all hold."""
    found = violations(api, fake, audit)
    if found:
        raise InvariantError(part, found)
