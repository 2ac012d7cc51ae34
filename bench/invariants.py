"""The invariants the parts check before they print a figure.

Where the fake step answers checks: each check it answered is accepted (status.checks
and status.reportedCheck), it has exactly one Report Event (named `check-N`, as
tests/faults/fleet.py reads them), and no MonitorStep or step Job was launched twice.
Where monitors only wait (idle scale): the operator writes nothing, and every monitor
keeps the waiting status it was given.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from bench.fake_step import FakeStep
from bench.harness import WRITE_VERBS, AuditTail, InvariantError, is_waiting, list_all

EXAMPLES = 5  # names shown of a violation that many objects share


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


def _some(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:EXAMPLES])
    return f"{len(names)}: {shown}" + (", ..." if len(names) > EXAMPLES else "")


def untouched_violations(
    api: Any, namespace: str, versions: Mapping[str, str], audit: AuditTail, since: float
) -> list[str]:
    """One line per violation with monitors that only wait, none of them due: any write
    by the operator since `since` (a status write, a MonitorStep, Job or Event), or a
    monitor that is gone, moved from the resourceVersion in `versions`, or not waiting."""
    writes: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for r in audit.operator_requests(since, time.time()):
        if r.verb in WRITE_VERBS:
            writes[(r.verb, r.resource)].append(f"{r.namespace}/{r.name}")
    found = [
        f"the operator wrote with nothing due: {verb} {resource} ({_some(names)})"
        for (verb, resource), names in sorted(writes.items())
    ]
    monitors = {m["metadata"]["name"]: m for m in list_all(api, "monitors", namespace)[0]}
    gone = [name for name in versions if name not in monitors]
    moved = [
        name
        for name, version in versions.items()
        if name in monitors and monitors[name]["metadata"]["resourceVersion"] != version
    ]
    not_waiting = [
        name
        for name in versions
        if name in monitors and not is_waiting(monitors[name].get("status") or {})
    ]
    for what, names in (
        ("monitors gone", gone),
        ("monitors written after their waiting status", moved),
        ("monitors no longer waiting", not_waiting),
    ):
        if names:
            found.append(f"{what} ({_some(names)})")
    return found


def _raise(part: str, found: list[str]) -> None:
    if found:
        raise InvariantError(part, found)


def check(part: str, api: Any, fake: FakeStep, audit: AuditTail) -> None:
    """Raise InvariantError naming every violation; return quietly when all hold."""
    _raise(part, violations(api, fake, audit))


def check_untouched(
    part: str, api: Any, namespace: str, versions: Mapping[str, str], audit: AuditTail, since: float
) -> None:
    """Raise InvariantError naming every violation of `untouched_violations`."""
    _raise(part, untouched_violations(api, namespace, versions, audit, since))
