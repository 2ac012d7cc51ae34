"""Part 1, idle scale: how the operator copes with N monitors that are already waiting.

The monitors are made while no operator runs: each is created (everyMinutes=1440) and
given the status the engine writes after one accepted `wait` observation (the engine
itself, run here), so every one waits for a check a day away. Then the operator starts.
Measured: the time from its start until it has listed every monitor and gone quiet, its
memory, and what it spends over an idle window: CPU seconds and API requests (from the
audit log, by its identity). Nothing is due, so the idle figures' floor is 0 and the
operator may write nothing at all.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.observations import extraction, observation_dict

from bench import invariants
from bench.harness import (
    AuditTail,
    Bench,
    BenchError,
    Operator,
    by_verb_and_resource,
    cpu_seconds,
    in_parallel,
    is_waiting,
    monitor_body,
    monitor_names,
    monitor_spec,
    rss_bytes,
    say,
    settle_timeout,
    table,
    verdict,
)
from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.core.engine import AuthorityExtracted, ObservationAccepted, Started, decide
from goalkeeper.core.models import AuthorityExtraction, MonitorSpec, MonitorStatus, Observation

MIB = 2**20
EVERY_MINUTES = 1440
# Settled: the list is complete and the operator's CPU over the last QUIET_WINDOW_S
# seconds, sampled every POLL_S, is below QUIET_CPU of one core.
QUIET_WINDOW_S = 1.0
QUIET_CPU = 0.02
POLL_S = 0.25
# Concurrent clients writing the monitors; the API server, not this process, is the limit.
SETUP_WORKERS = 8


@dataclass
class IdleFigures:
    monitors: int
    setup_s: float  # creating the monitors and writing their status: not an operator figure
    settled_s: float  # operator start → every monitor listed and the operator quiet
    settled_empty_s: float  # the same for an operator watching no monitors
    pages: int  # the operator's list of Monitors, in pages
    rss_empty: int  # an operator watching no monitors, once settled
    rss: int  # once settled
    cpu_s: float
    requests: Counter[tuple[str, str]]  # by verb and resource, watches apart
    watches: int


def waiting_status(spec: MonitorSpec, generation: int, now: datetime) -> dict[str, Any]:
    """The status the engine writes for a new monitor whose first observation is an
    accepted `wait`: the task read (the standard reading of TASK), then the observation."""
    reading = decide(spec, MonitorStatus(), Started(generation), now).status
    assert reading.step is not None
    read = AuthorityExtracted(reading.step.seq, AuthorityExtraction.model_validate(extraction()))
    launched = decide(spec, reading, read, now).status
    assert launched.step is not None
    accepted = ObservationAccepted(
        launched.step.seq, Observation.model_validate(observation_dict("wait"))
    )
    return decide(spec, launched, accepted, now).status.model_dump(mode="json")


def waiting_now(status: dict[str, Any]) -> bool:
    if not is_waiting(status):
        return False
    return datetime.fromisoformat(status["schedule"]["nextCheckAt"]) > datetime.now(UTC)


def make_waiting(
    bench: Bench, namespace: str, names: list[str], labels: dict[str, str] | None = None
) -> dict[str, str]:
    """Create the monitors (with `labels`) and write each one's waiting status (merge
    patch, admin); the resourceVersion each is left at, by name."""
    spec = MonitorSpec.model_validate(monitor_spec(EVERY_MINUTES))
    now = datetime.now(UTC)
    # Every monitor has the same spec, so its generation alone decides its status: the
    # engine runs once per generation seen (a race only computes one twice).
    statuses: dict[int, dict[str, Any]] = {}

    def make(custom: Any, name: str) -> tuple[str, str]:
        created = custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "monitors",
            monitor_body(namespace, name, EVERY_MINUTES, labels),
        )
        generation = created["metadata"]["generation"]
        if generation not in statuses:
            statuses[generation] = waiting_status(spec, generation, now)
        written = custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            "monitors",
            name,
            {"status": statuses[generation]},
            _content_type="application/merge-patch+json",
        )
        if not waiting_now(written.get("status") or {}):
            raise BenchError(f"monitor {name}: the status written is not a waiting one")
        return name, written["metadata"]["resourceVersion"]

    return dict(in_parallel(bench.kubeconfig, make, names, workers=SETUP_WORKERS))


def listed_pages(audit: AuditTail, operator: Operator, monitors: int) -> int | None:
    """The pages of the operator's list of Monitors once it is complete, else None."""
    audit.poll()
    pages = [
        r
        for r in audit.requests
        if r.by_operator
        and r.verb == "list"
        and r.resource == "monitors"
        and r.namespace == operator.namespace
        and r.stage == "ResponseComplete"
        and r.ok
        and r.received >= operator.started_at
    ]
    if not pages:
        return None
    # A chunked list (`limit`) takes one page per `limit` monitors, and at least one.
    limit = parse_qs(urlsplit(pages[0].uri).query).get("limit")
    needed = max(1, math.ceil(monitors / int(limit[0]))) if limit else 1
    return len(pages) if len(pages) >= needed else None


def settle(audit: AuditTail, operator: Operator, monitors: int) -> tuple[float, int]:
    """Poll until the operator has listed every monitor and is quiet; the time (epoch)
    and the pages of its list."""
    deadline = time.monotonic() + settle_timeout(monitors)
    samples: deque[tuple[float, float]] = deque()  # (monotonic, CPU seconds)
    pages = None
    while True:
        operator.alive()  # a dead operator is quiet too
        now, cpu = time.monotonic(), cpu_seconds(operator.pid)
        samples.append((now, cpu))
        while len(samples) > 1 and now - samples[1][0] >= QUIET_WINDOW_S:
            samples.popleft()
        pages = pages or listed_pages(audit, operator, monitors)
        since, cpu_then = samples[0]
        span = now - since
        if pages and span >= QUIET_WINDOW_S and (cpu - cpu_then) / span < QUIET_CPU:
            return time.time(), pages
        if now > deadline:
            state = "is not quiet" if pages else "has not listed every monitor"
            raise BenchError(
                f"timed out after {settle_timeout(monitors):.0f} s waiting for the operator "
                f"with {monitors} monitors to settle (it {state})"
            )
        time.sleep(POLL_S)


def measure(bench: Bench, empty: str, monitors: int, window_s: float) -> IdleFigures:
    namespace = bench.namespace(f"idle-{monitors}")
    say(f"idle scale: {monitors} waiting monitors, written with no operator running")
    began = time.monotonic()
    versions = make_waiting(bench, namespace, monitor_names(monitors))
    setup_s = time.monotonic() - began
    say(f"idle scale: {monitors} monitors set up in {setup_s:.1f} s; the operators start")
    audit = bench.audit()
    with bench.operator(empty) as floor:
        settled, _ = settle(audit, floor, 0)
        settled_empty_s, rss_empty = settled - floor.started_at, rss_bytes(floor.pid)
    with bench.operator(namespace) as operator:
        settled, pages = settle(audit, operator, monitors)
        settled_s, rss = settled - operator.started_at, rss_bytes(operator.pid)
        say(f"idle scale: settled after {settled_s:.1f} s; idle window")
        start, cpu_start = time.time(), cpu_seconds(operator.pid)
        time.sleep(window_s)  # the idle window itself: a fixed span, not a wait for a state
        end, cpu_end = time.time(), cpu_seconds(operator.pid)
        operator.alive()
    invariants.check_untouched(
        f"idle scale, {monitors} monitors", bench.api, namespace, versions, audit, floor.started_at
    )
    window = audit.operator_requests(start, end)
    audit.close()
    return IdleFigures(
        monitors=monitors,
        setup_s=setup_s,
        settled_s=settled_s,
        settled_empty_s=settled_empty_s,
        pages=pages,
        rss_empty=rss_empty,
        rss=rss,
        cpu_s=cpu_end - cpu_start,
        requests=by_verb_and_resource(r for r in window if r.verb != "watch"),
        watches=sum(1 for r in window if r.verb == "watch"),
    )


def run(bench: Bench, sizes: tuple[int, ...], window_s: float) -> list[str]:
    empty = bench.namespace("idle-empty")
    figures = [measure(bench, empty, size, window_s) for size in sizes]
    span = f"{window_s:.0f} s"
    setup = ", ".join(f"{f.monitors} in {f.setup_s:.1f} s" for f in figures)
    lines = [
        "## 1. Idle scale",
        "",
        f"Monitors that already wait (everyMinutes={EVERY_MINUTES}, the status the engine "
        "writes after one accepted `wait` observation) when the operator starts. Settled: "
        "its list of Monitors is complete (every page) and its CPU over the last "
        f"{QUIET_WINDOW_S:.0f} s is below {QUIET_CPU:.0%} of a core, timed from its process "
        "start; the floor is an operator watching no monitors, settling the same way. RSS is "
        "taken once settled, where the idle window starts.",
        "",
        *table(
            [
                "monitors",
                "start → settled (s)",
                "floor: no monitors (s)",
                "list pages",
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
                    f"{f.settled_empty_s:.1f}",
                    f.pages,
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
        "",
        f"Setup with no operator running, not a figure of the operator: {setup}.",
    ]
    for f in figures:
        if f.requests:
            listed = ", ".join(f"{verb} {res} {n}" for (verb, res), n in f.requests.most_common())
            lines += ["", f"Idle requests with {f.monitors} monitors: {listed}."]
    return lines
