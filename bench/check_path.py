"""Part 2, the check path: M monitors checking every minute, a minute made short with
GOALKEEPER_TIME_SCALE, each observe step answered by the fake step at once.

Over a window of K accepted checks it measures throughput, the CPU each check costs the
operator, kube-apiserver, etcd (and kube-controller-manager, for the Job's pod), the
operator's requests per check by verb and resource (audit log), and two latencies from
audit timestamps:

  (a) the fake step's result write completing → the operator's Monitor status write that
      accepts that check completing;
  (b) the check's timer due (status.schedule.nextCheckAt) → the operator's MonitorStep
      create received.

Their floors are measured in the same window, under the same load, by one client in its
own process: a MonitorStep-like create + a status patch (a), and the create alone (b).
The step history is kept short so every check in the window also prunes an old step, as
it does for any monitor past its first checks.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import invariants
from bench.fake_step import FakeStep, result_status
from bench.harness import (
    READ_VERBS,
    WRITE_VERBS,
    AuditTail,
    Bench,
    BenchError,
    Clocks,
    MonitorWatch,
    Request,
    by_verb_and_resource,
    monitor_names,
    new_api,
    percentile,
    ratio,
    say,
    settle_timeout,
    table,
    verdict,
)
from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.controller.reconciler import prune_batch
from goalkeeper.core.models import StepPod

STEP_HISTORY = 3
# A check's writes that no operator can do without: its step, the step's Job, the status
# that accepts it, and its report, as an Event and kept on its step (`goalkeeper history`).
WRITE_FLOORS = {
    ("create", "monitorsteps"): 1,
    ("create", "jobs"): 1,
    ("patch", "monitors/status"): 1,
    ("create", "events"): 1,
    ("patch", "monitorsteps"): 1,
}
PROBE_PAUSE_S = 0.1
# A typical status: these monitors carry on alone after the window until each has made
# STATUS_CHECKS checks; their statuses' size is held to STATUS_TYPICAL_BYTES.
STATUS_MONITORS = 5
STATUS_CHECKS = 100
STATUS_TYPICAL_BYTES = 8 * 1024
COMPONENTS = ("operator", "kube-apiserver", "etcd", "kube-controller-manager")


def probe_round_trips(
    kubeconfig: str,
    namespace: str,
    template: dict[str, Any],
    status: dict[str, Any],
    ready: Any,
    go: Any,
    stop: Any,
    out: Any,
) -> None:
    """The floors, in a process of their own so no lock is shared with the fake step:
    one client creating a MonitorStep-like object, then patching its status, paced."""
    from kubernetes import client

    custom = client.CustomObjectsApi(new_api(Path(kubeconfig)))
    samples: list[tuple[float, float]] = []

    def round_trip(name: str) -> tuple[float, float]:
        body = copy.deepcopy(template)
        body["metadata"]["name"] = name
        begin = time.perf_counter()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "monitorsteps", body)
        created = time.perf_counter()
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            "monitorsteps",
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )
        return created - begin, time.perf_counter() - created

    for i in range(3):  # connection and client warm-up, not measured
        round_trip(f"warm-{i}")
    ready.set()
    go.wait()
    while not stop.is_set():
        samples.append(round_trip(f"floor-{len(samples)}"))
        stop.wait(PROBE_PAUSE_S)  # pacing, so the probe adds little load of its own
    out.put(samples)


@dataclass
class CheckFigures:
    monitors: int
    checks: int
    window_s: float
    cpu_s: dict[str, float]
    requests: dict[tuple[str, str], int]
    latency_a: list[float]
    latency_b: list[float]
    floor_a: list[float]
    floor_b: list[float]
    status_bytes: list[int]  # compact JSON, of the monitors that made STATUS_CHECKS checks
    status_checks: list[int]


def _latencies(
    audit: AuditTail,
    namespace: str,
    fake: FakeStep,
    watch: MonitorWatch,
    start: float,
    end: float,
) -> tuple[list[float], list[float]]:
    """(a) and (b) for every check the watch saw accepted, or whose step was created, in
    the window, joined on the audit log's timestamps."""
    finished: dict[str, float] = {}  # step -> its last status write completing (the result)
    accepts: defaultdict[str, list[Request]] = defaultdict(list)  # monitor -> status writes
    created: dict[str, float] = {}  # step -> its create received
    for r in audit.requests:
        if r.stage != "ResponseComplete" or r.namespace != namespace or not r.ok:
            continue
        if not r.by_operator and r.verb == "patch" and r.resource == "monitorsteps/status":
            finished[r.name] = max(finished.get(r.name, 0.0), r.at)
        elif r.by_operator and r.verb == "patch" and r.resource == "monitors/status":
            accepts[r.name].append(r)
        elif r.by_operator and r.verb == "create" and r.resource == "monitorsteps":
            created.setdefault(r.name, r.received)
    steps = {step: key for key, names in fake.launches.items() for step in names}
    latency_a, latency_b = [], []
    for step, (monitor, check) in steps.items():
        seen = watch.seen[monitor]
        accepted = seen.accepted_at.get(check)
        if accepted is not None and start <= accepted <= end:
            # The write that accepted it: the monitor's last status write received before
            # the watch showed the check (the next one waits for a timer a minute later).
            earlier = [w for w in accepts[monitor] if w.received < accepted]
            if step not in finished or not earlier:
                raise BenchError(f"{step}: the audit log lacks its result or its acceptance")
            write = max(earlier, key=lambda w: w.at)
            latency_a.append(write.at - finished[step])
        due = seen.next_check_at.get(check - 1)
        if step in created and start <= created[step] <= end and due is not None:
            latency_b.append(created[step] - due)
    return latency_a, latency_b


def measure(bench: Bench, monitors: int, checks: int, time_scale: float) -> CheckFigures:
    namespace = bench.namespace("check-path")
    floor_namespace = bench.namespace("check-floor")
    names = monitor_names(monitors)
    audit = bench.audit()
    spawn = multiprocessing.get_context("spawn")
    ready, go, stop, out = spawn.Event(), spawn.Event(), spawn.Event(), spawn.Queue()
    with (
        FakeStep(bench.kubeconfig, namespace) as fake,
        MonitorWatch(bench.kubeconfig, namespace) as watch,
        bench.operator(
            namespace, time_scale=str(time_scale), step_history=str(STEP_HISTORY)
        ) as operator,
    ):
        bench.create_monitors(namespace, names, every_minutes=1)
        warm = STEP_HISTORY + 1
        say(f"check path: {monitors} monitors warming up to {warm} checks each")
        watch.wait_all(
            names, lambda m: m.checks >= warm, settle_timeout(monitors * warm), "the warm-up"
        )
        template = fake.sample_step()
        status = result_status(StepPod(name="floor-pod", uid="floor-uid"), datetime.now(UTC))
        probe = spawn.Process(
            target=probe_round_trips,
            args=(str(bench.kubeconfig), floor_namespace, template, status, ready, go, stop, out),
            daemon=True,
        )
        probe.start()
        if not ready.wait(120):
            raise BenchError("the floor probe did not start")
        pids = {"operator": operator.pid} | {c: bench.pid(c) for c in COMPONENTS[1:]}
        clocks = Clocks(pids).begin()
        start, base = time.time(), watch.accepted()
        go.set()
        say(f"check path: window of {checks} checks")
        end = watch.wait(
            lambda: watch.accepted() >= base + checks, settle_timeout(checks), "the window"
        )
        spent = clocks.spent()
        counted = watch.accepted() - base
        stop.set()
        floors: list[tuple[float, float]] = out.get(timeout=120)
        probe.join(30)
        operator.alive()
        fake.hold()
        watch.wait(
            lambda: all(watch.seen[n].checks == fake.answered[n] for n in names),
            settle_timeout(monitors),
            "every answered check accepted",
        )
        invariants.check("check path", bench.api, fake, audit)
        latency_a, latency_b = _latencies(audit, namespace, fake, watch, start, end)
        status_bytes, status_checks = _typical_statuses(bench, namespace, names, fake, watch)
    requests = by_verb_and_resource(audit.operator_requests(start, end))
    audit.close()
    return CheckFigures(
        monitors=monitors,
        checks=counted,
        window_s=end - start,
        cpu_s=spent,
        requests=dict(requests),
        latency_a=latency_a,
        latency_b=latency_b,
        floor_a=[create + patch for create, patch in floors],
        floor_b=[create for create, _ in floors],
        status_bytes=status_bytes,
        status_checks=status_checks,
    )


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def _typical_statuses(
    bench: Bench, namespace: str, names: list[str], fake: FakeStep, watch: MonitorWatch
) -> tuple[list[int], list[int]]:
    """The other monitors deleted, the first few carry on to STATUS_CHECKS checks: their
    statuses' sizes and checks, as the API server stores them."""
    keep = names[:STATUS_MONITORS]
    custom = client.CustomObjectsApi(bench.api)
    for name in names[STATUS_MONITORS:]:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "monitors", name)
    fake.release()
    say(f"check path: {len(keep)} monitors carry on to {STATUS_CHECKS} checks each")
    watch.wait_all(
        keep,
        lambda m: m.checks >= STATUS_CHECKS,
        settle_timeout(len(keep) * STATUS_CHECKS),
        f"{STATUS_CHECKS} checks",
    )
    statuses = [
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "monitors", name)["status"]
        for name in keep
    ]
    sizes = [len(json.dumps(status, separators=(",", ":"))) for status in statuses]
    return sizes, [int(status["checks"]) for status in statuses]


def _latency_row(name: str, measured: list[float], floor: list[float]) -> list[str]:
    p50, f50 = percentile(measured, 0.5), percentile(floor, 0.5)
    p95, f95 = percentile(measured, 0.95), percentile(floor, 0.95)
    return [
        name,
        f"{p50 * 1e3:.1f}",
        f"{f50 * 1e3:.1f}",
        f"{ratio(p50, f50)} ({verdict(p50 <= 1.5 * f50)})",
        f"{p95 * 1e3:.1f}",
        f"{f95 * 1e3:.1f}",
        f"{ratio(p95, f95)} ({verdict(p95 <= 3 * f95)})",
        f"{max(measured) * 1e3:.1f}",
        f"{max(floor) * 1e3:.1f}",
        f"{len(measured)} / {len(floor)}",
    ]


def run(bench: Bench, monitors: int, checks: int, time_scale: float) -> list[str]:
    f = measure(bench, monitors, checks, time_scale)
    per_check = {key: count / f.checks for key, count in f.requests.items()}
    writes = sum(n for (verb, _), n in per_check.items() if verb in WRITE_VERBS)
    reads = sum(n for (verb, _), n in per_check.items() if verb in READ_VERBS)
    watches = sum(n for (verb, _), n in f.requests.items() if verb == "watch")
    cpu_ms = {name: seconds / f.checks * 1e3 for name, seconds in f.cpu_s.items()}
    share = f.cpu_s["operator"] / f.cpu_s["kube-apiserver"]
    floor_writes = sum(WRITE_FLOORS.values())
    # History pruning is batched: one delete-collection every prune_batch(history) checks.
    prune = per_check.get(("deletecollection", "monitorsteps"), 0.0)
    prune_floor = 1 / prune_batch(STEP_HISTORY)
    # A window may hold one launch (a step, its Job and maybe a prune) per monitor whose
    # check it does not hold: accepted after the window ends.
    edge = f.monitors / f.checks
    lines = [
        "## 2. Check path",
        "",
        f"{f.monitors} monitors, everyMinutes=1 with a minute of {time_scale:g} s, step "
        f"history {STEP_HISTORY}; a window of {f.checks} accepted checks in {f.window_s:.1f} s "
        "after every monitor's first checks.",
        "",
        *table(
            ["figure", "measured", "floor", "verdict"],
            [
                ["checks per second", f"{f.checks / f.window_s:.1f}", "—", ""],
                *(
                    [f"{name} CPU ms per check", f"{cpu_ms[name]:.1f}", "—", ""]
                    for name in COMPONENTS
                ),
                [
                    "operator CPU / kube-apiserver CPU",
                    f"{share:.2f}",
                    "≤ 0.5",
                    verdict(share <= 0.5),
                ],
                [
                    "operator writes per check, pruning apart",
                    f"{writes - prune:.2f}",
                    f"{floor_writes} (+ ≤ {2 * edge:.2f} at the window's edge)",
                    verdict(writes - prune <= floor_writes + 2 * edge),
                ],
                [
                    "history prunes (delete-collection) per check",
                    f"{prune:.2f}",
                    f"1 per {prune_batch(STEP_HISTORY)} checks = {prune_floor:.2f}",
                    verdict(prune <= prune_floor + edge),
                ],
                ["operator reads per check", f"{reads:.2f}", "0", verdict(reads == 0)],
                ["operator watch requests in the window (apart)", str(watches), "—", ""],
            ],
        ),
        "",
        *table(
            ["verb", "resource", "per check", "floor"],
            [
                [
                    verb,
                    resource,
                    f"{n:.2f}",
                    f"{prune_floor:.2f}"
                    if (verb, resource) == ("deletecollection", "monitorsteps")
                    else WRITE_FLOORS.get((verb, resource), 0),
                ]
                for (verb, resource), n in sorted(per_check.items())
                if verb != "watch"
            ],
        ),
        "",
        *table(
            [
                "latency (ms)",
                "p50",
                "floor p50",
                "p50 ratio (≤ 1.5x)",
                "p95",
                "floor p95",
                "p95 ratio (≤ 3x)",
                "max",
                "floor max",
                "samples / floor samples",
            ],
            [
                _latency_row("(a) step result → check accepted", f.latency_a, f.floor_a),
                _latency_row("(b) timer due → step created", f.latency_b, f.floor_b),
            ],
        ),
        "",
        "Floors: (a) one client's MonitorStep create + status patch round trips, (b) its "
        "create round trip, sampled every 0.1 s through the same window.",
        "",
        *table(
            ["figure", "measured", "floor", "verdict"],
            [
                [
                    f"Monitor status after {_span(f.status_checks)} checks, compact JSON "
                    f"(the largest of {len(f.status_bytes)})",
                    f"{max(f.status_bytes) / 1024:.1f} KiB",
                    f"≤ {STATUS_TYPICAL_BYTES // 1024} KiB",
                    verdict(max(f.status_bytes) <= STATUS_TYPICAL_BYTES),
                ]
            ],
        ),
    ]
    return lines
