"""Part 3, restart: N monitors, each with an observe step in flight (the fake step marks it
Running and holds its result). The operator is killed (SIGKILL), every step then writes
its result while the operator is down, and the operator starts again. Measured: the time
from that start until every result is accepted, and the operator's requests during the
resume, by verb and resource (audit log).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench import invariants
from bench.fake_step import FakeStep
from bench.harness import (
    DISCOVERY,
    WRITE_VERBS,
    Bench,
    MonitorWatch,
    by_verb_and_resource,
    monitor_names,
    poll_until,
    say,
    settle_timeout,
    table,
    verdict,
    waiting_after,
)

# Per resumed monitor, what accepting a result written while the operator was down needs:
# the status write that accepts it and its report, as an Event and kept on its step
# (`goalkeeper history`). Everything else is read from the lists and watches the operator
# starts with: one of each per watched kind.
WRITE_FLOORS = {
    ("patch", "monitors/status"): 1,
    ("create", "events"): 1,
    ("patch", "monitorsteps"): 1,
}


@dataclass
class RestartFigures:
    monitors: int
    results_s: float  # the fake step writing every result, operator down
    first_request_s: float  # operator start → its first API request
    resumed_s: float  # operator start → every result accepted
    requests: dict[tuple[str, str], int]


def measure(bench: Bench, monitors: int) -> RestartFigures:
    namespace = bench.namespace("restart")
    names = monitor_names(monitors)
    audit = bench.audit()
    with (
        FakeStep(bench.kubeconfig, namespace) as fake,
        MonitorWatch(bench.kubeconfig, namespace) as watch,
        bench.operator(namespace) as operator,
    ):
        fake.hold()
        bench.create_monitors(namespace, names, every_minutes=1440)
        timeout = settle_timeout(monitors)
        watch.wait_all(names, lambda m: m.in_flight, timeout, "every observe step in flight")
        poll_until(lambda: fake.held == monitors, timeout, "every step Running, its result held")
        operator.alive()
        operator.kill()
        say(f"restart: operator killed with {monitors} steps in flight; results written")
        released = time.time()
        fake.release()
        written = poll_until(lambda: fake.written == monitors, timeout, "every result written")
        restarted = time.time()
        operator.start()
        resumed = watch.wait_all(names, waiting_after(1), timeout, "every result accepted")
        first = audit.wait_for(
            lambda r: r.by_operator and r.received >= restarted, 60, "the restarted operator"
        )
        operator.alive()
        invariants.check("restart", bench.api, fake, audit)
    requests = by_verb_and_resource(audit.operator_requests(restarted, resumed))
    audit.close()
    return RestartFigures(
        monitors=monitors,
        results_s=written - released,
        first_request_s=first.received - restarted,
        resumed_s=resumed - restarted,
        requests=dict(requests),
    )


def _floor(verb: str, resource: str, monitors: int) -> int | str:
    if resource == DISCOVERY:
        return "—"
    if verb in ("list", "watch"):
        return 1
    return WRITE_FLOORS.get((verb, resource), 0) * monitors


def run(bench: Bench, monitors: int) -> list[str]:
    f = measure(bench, monitors)
    writes = sum(n for (verb, _), n in f.requests.items() if verb in WRITE_VERBS)
    gets = sum(n for (verb, res), n in f.requests.items() if verb == "get" and res != DISCOVERY)
    per = f.monitors
    floor_writes = sum(WRITE_FLOORS.values())
    return [
        "## 3. Restart",
        "",
        f"{f.monitors} monitors with an observe step in flight; the operator is killed "
        "(SIGKILL), every step writes its result, the operator starts again.",
        "",
        *table(
            ["figure", "measured", "floor", "verdict"],
            [
                ["results written while the operator was down (s)", f"{f.results_s:.1f}", "—", ""],
                ["start → first API request (s)", f"{f.first_request_s:.1f}", "—", ""],
                ["start → every result accepted (s)", f"{f.resumed_s:.1f}", "—", ""],
                [
                    "writes per resumed monitor",
                    f"{writes / per:.2f}",
                    str(floor_writes),
                    verdict(writes <= floor_writes * per),
                ],
                [
                    "gets per resumed monitor (discovery apart)",
                    f"{gets / per:.2f}",
                    "0",
                    verdict(gets == 0),
                ],
            ],
        ),
        "",
        *table(
            ["verb", "resource", "requests during the resume", "per monitor", "floor"],
            [
                [verb, resource, n, f"{n / per:.2f}", _floor(verb, resource, per)]
                for (verb, resource), n in sorted(f.requests.items())
            ],
        ),
        "",
        "Floors in the last table are totals: a list and a watch per kind the operator "
        "watches, one status write, one Report Event and the report kept on its step per "
        "monitor, nothing else; discovery at start has no floor. A report kept after every "
        "result was accepted falls outside the window.",
    ]
