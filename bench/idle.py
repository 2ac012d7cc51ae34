"""Part 1, idle scale: N monitors waiting for a check a day away.

Each monitor gets one accepted observation (the fake step answers `wait`), then waits with
everyMinutes=1440. Measured: the time from creating the monitors until every one shows a
published schedule and is waiting, the operator's memory, and what the operator spends
over an idle window: CPU seconds and API requests (from the audit log, by its identity).
A waiting monitor whose timer is not due needs nothing from the API: the floor is 0.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from bench import invariants
from bench.fake_step import FakeStep
from bench.harness import (
    Bench,
    MonitorWatch,
    by_verb_and_resource,
    cpu_seconds,
    monitor_names,
    rss_bytes,
    say,
    settle_timeout,
    table,
    verdict,
    waiting_after,
)

MIB = 2**20


@dataclass
class IdleFigures:
    monitors: int
    created_s: float  # creating every monitor: nothing can be waiting before that
    settled_s: float  # creating them until every one is waiting on a published schedule
    rss_empty: int  # the operator before any monitor exists
    rss: int  # at the end of the idle window
    cpu_s: float
    requests: Counter[tuple[str, str]]  # by verb and resource, watches apart
    watches: int


def measure(bench: Bench, monitors: int, window_s: float) -> IdleFigures:
    namespace = bench.namespace(f"idle-{monitors}")
    names = monitor_names(monitors)
    audit = bench.audit()
    with (
        FakeStep(bench.kubeconfig, namespace) as fake,
        MonitorWatch(bench.kubeconfig, namespace) as watch,
        bench.operator(namespace) as operator,
    ):
        audit.wait_for(
            lambda r: r.by_operator and r.verb == "watch" and r.resource == "monitors",
            120,
            "the operator's watch on Monitors",
        )
        rss_empty = rss_bytes(operator.pid)
        say(f"idle scale: creating {monitors} monitors")
        begin = time.time()
        bench.create_monitors(namespace, names, every_minutes=1440)
        created = time.time()
        settled = watch.wait_all(
            names, waiting_after(1), settle_timeout(monitors), "every monitor waiting"
        )
        operator.alive()
        say(f"idle scale: {monitors} waiting after {settled - begin:.1f} s; idle window")
        start, cpu_start = time.time(), cpu_seconds(operator.pid)
        time.sleep(window_s)  # the idle window itself: a fixed span, not a wait for a state
        end, cpu_end, rss = time.time(), cpu_seconds(operator.pid), rss_bytes(operator.pid)
        operator.alive()
        invariants.check(f"idle scale, {monitors} monitors", bench.api, fake, audit)
    window = audit.operator_requests(start, end)
    audit.close()
    counted = by_verb_and_resource(r for r in window if r.verb != "watch")
    return IdleFigures(
        monitors=monitors,
        created_s=created - begin,
        settled_s=settled - begin,
        rss_empty=rss_empty,
        rss=rss,
        cpu_s=cpu_end - cpu_start,
        requests=counted,
        watches=sum(1 for r in window if r.verb == "watch"),
    )


def run(bench: Bench, sizes: tuple[int, ...], window_s: float) -> list[str]:
    figures = [measure(bench, size, window_s) for size in sizes]
    span = f"{window_s:.0f} s"
    lines = [
        "## 1. Idle scale",
        "",
        "Monitors waiting after one accepted check (everyMinutes=1440). Settling is timed from "
        "creating the first monitor; the idle window starts when every one is waiting.",
        "",
        *table(
            [
                "monitors",
                "create → all waiting (s)",
                "floor: all created (s)",
                "operator RSS (MiB)",
                "floor: RSS, no monitors",
                "KiB / monitor",
                f"API requests / {span}",
                "floor",
                f"watch requests / {span}",
                f"operator CPU s / {span}",
                "floor",
            ],
            [
                (
                    f.monitors,
                    f"{f.settled_s:.1f}",
                    f"{f.created_s:.1f}",
                    f"{f.rss / MIB:.0f}",
                    f"{f.rss_empty / MIB:.0f}",
                    f"{(f.rss - f.rss_empty) / 1024 / f.monitors:.1f}",
                    f"{sum(f.requests.values())} ({verdict(not f.requests)})",
                    0,
                    f.watches,
                    f"{f.cpu_s:.2f} ({verdict(f.cpu_s == 0)})",
                    0,
                )
                for f in figures
            ],
        ),
    ]
    for f in figures:
        if f.requests:
            listed = ", ".join(f"{verb} {res} {n}" for (verb, res), n in f.requests.most_common())
            lines += ["", f"Idle requests with {f.monitors} monitors: {listed}."]
    return lines
