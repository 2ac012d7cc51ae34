"""Part 5, shards: two operators, each owning the Monitors labelled with its shard.

Idle: N waiting monitors per shard, written with no operator running (as part 1); each
shard's operator starts in turn and settles on its half alone: its list pages, memory and
idle figures, to be read beside part 1's single operator with the same N.

Checking: M monitors per shard check every minute (a short one) with the fake step; half
way through a window of K accepted checks, R monitors are relabelled to the other shard
(half each way). The fault suite's invariants hold over the whole run: every answered
check accepted once, one report each, no step launched twice; and none is stuck: every
relabelled monitor checks again under its new shard.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from bench import invariants
from bench.fake_step import FakeStep
from bench.harness import (
    Bench,
    BenchError,
    Clocks,
    MonitorWatch,
    by_verb_and_resource,
    cpu_seconds,
    in_parallel,
    rss_bytes,
    say,
    settle_timeout,
    table,
    verdict,
)
from bench.idle import MIB, make_waiting, settle
from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.controller.settings import SHARD_LABEL

SHARDS = ("a", "b")
STEP_HISTORY = 3


def selector(shard: str) -> str:
    return f"{SHARD_LABEL}={shard}"


@dataclass
class ShardIdle:
    shard: str
    monitors: int
    settled_s: float
    pages: int
    rss: int
    cpu_s: float


@dataclass
class IdleFigures:
    shards: list[ShardIdle]
    rss_empty: int
    requests: int  # both shards' API requests in the idle window, watches apart
    window_s: float


def idle(bench: Bench, per_shard: int, window_s: float) -> IdleFigures:
    namespace = bench.namespace("shards-idle")
    empty = bench.namespace("shards-empty")
    versions: dict[str, str] = {}
    for shard in SHARDS:
        names = [f"{shard}-{i:05d}" for i in range(per_shard)]
        say(f"shards: {per_shard} waiting monitors of shard {shard}, no operator running")
        versions |= make_waiting(bench, namespace, names, {SHARD_LABEL: shard})
    audit = bench.audit()
    with bench.operator(empty) as floor:
        settle(audit, floor, 0)
        rss_empty = rss_bytes(floor.pid)
    figures: list[ShardIdle] = []
    with ExitStack() as running:
        operators = []
        for shard in SHARDS:
            operator = running.enter_context(
                bench.operator(namespace, shard, shard_selector=selector(shard))
            )
            settled, pages = settle(audit, operator, per_shard)
            say(f"shards: shard {shard} settled after {settled - operator.started_at:.1f} s")
            figures.append(
                ShardIdle(shard, per_shard, settled - operator.started_at, pages, 0, 0.0)
            )
            operators.append(operator)
        for figure, operator in zip(figures, operators, strict=True):
            figure.rss = rss_bytes(operator.pid)
        start = time.time()
        cpu = [cpu_seconds(o.pid) for o in operators]
        time.sleep(window_s)  # the idle window itself: a fixed span, not a wait for a state
        end = time.time()
        for figure, operator, before in zip(figures, operators, cpu, strict=True):
            operator.alive()
            figure.cpu_s = cpu_seconds(operator.pid) - before
    invariants.check_untouched(
        "shards, idle", bench.api, namespace, versions, audit, floor.started_at
    )
    window = [r for r in audit.operator_requests(start, end) if r.verb != "watch"]
    audit.close()
    return IdleFigures(figures, rss_empty, sum(by_verb_and_resource(window).values()), window_s)


@dataclass
class CheckFigures:
    per_shard: int
    checks: int
    window_s: float
    relabelled: int
    cpu_s: dict[str, float]
    checks_after: int  # the fewest checks a relabelled monitor made under its new shard


def relabel(bench: Bench, namespace: str, moves: dict[str, str]) -> None:
    def move(custom: Any, item: tuple[str, str]) -> None:
        name, shard = item
        patch = {"metadata": {"labels": {SHARD_LABEL: shard}}}
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "monitors", name, patch)

    in_parallel(bench.kubeconfig, move, list(moves.items()))


def checking(
    bench: Bench, per_shard: int, checks: int, moved: int, time_scale: float
) -> CheckFigures:
    namespace = bench.namespace("shards-check")
    names = {shard: [f"{shard}-{i:03d}" for i in range(per_shard)] for shard in SHARDS}
    everyone = [name for shard in SHARDS for name in names[shard]]
    # Half of those moved go a → b, half b → a.
    moves = {name: "b" for name in names["a"][: moved // 2]}
    moves |= {name: "a" for name in names["b"][: moved - moved // 2]}
    audit = bench.audit()
    with ExitStack() as running:
        fake = running.enter_context(FakeStep(bench.kubeconfig, namespace))
        watch = running.enter_context(MonitorWatch(bench.kubeconfig, namespace))
        operators = {
            shard: running.enter_context(
                bench.operator(
                    namespace,
                    shard,
                    shard_selector=selector(shard),
                    time_scale=str(time_scale),
                    step_history=str(STEP_HISTORY),
                    # A step Job that failed reaches a new shard through the resync.
                    resync_seconds="5",
                )
            )
            for shard in SHARDS
        }
        for shard in SHARDS:
            bench.create_monitors(namespace, names[shard], 1, {SHARD_LABEL: shard})
        warm = STEP_HISTORY + 1
        say(f"shards: {len(everyone)} monitors warming up to {warm} checks each")
        watch.wait_all(
            everyone, lambda m: m.checks >= warm, settle_timeout(len(everyone) * warm), "warm-up"
        )
        clocks = Clocks({f"shard {s}": o.pid for s, o in operators.items()}).begin()
        start, base = time.time(), watch.accepted()
        say(f"shards: window of {checks} checks; {len(moves)} monitors move half way")
        watch.wait(
            lambda: watch.accepted() >= base + checks // 2, settle_timeout(checks), "half way"
        )
        before = {name: watch.seen[name].checks for name in moves}
        relabel(bench, namespace, moves)
        end = watch.wait(
            lambda: watch.accepted() >= base + checks, settle_timeout(checks), "the window"
        )
        # None stuck: every monitor moved checks twice more, under its new shard.
        watch.wait(
            lambda: all(watch.seen[n].checks >= before[n] + 2 for n in moves),
            settle_timeout(len(moves) * 2),
            "every moved monitor to check twice more",
        )
        after = min(watch.seen[n].checks - before[n] for n in moves)
        spent = clocks.spent()
        counted = watch.accepted() - base
        for operator in operators.values():
            operator.alive()
        fake.hold()
        watch.wait(
            lambda: all(watch.seen[n].checks == fake.answered[n] for n in everyone),
            settle_timeout(len(everyone)),
            "every answered check accepted",
        )
        invariants.check("shards, checking", bench.api, fake, audit)
        _check_owners(bench, namespace, moves)
    audit.close()
    return CheckFigures(per_shard, counted, end - start, len(moves), spent, after)


def _check_owners(bench: Bench, namespace: str, moves: dict[str, str]) -> None:
    """Each moved monitor's newest step carries its new shard's label (launched or
    adopted there)."""
    custom = client.CustomObjectsApi(bench.api)
    steps = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "monitorsteps")
    newest: dict[str, dict[str, Any]] = {}
    for step in steps["items"]:
        monitor = step["spec"]["monitor"]
        if (
            monitor in moves
            and step["spec"]["seq"] > newest.get(monitor, {"spec": {"seq": 0}})["spec"]["seq"]
        ):
            newest[monitor] = step
    wrong = [
        name
        for name, shard in sorted(moves.items())
        if (newest.get(name, {}).get("metadata", {}).get("labels") or {}).get(SHARD_LABEL) != shard
    ]
    if wrong:
        raise BenchError(f"moved monitors whose newest step is not their new shard's: {wrong[:5]}")


def run(
    bench: Bench,
    idle_per_shard: int,
    idle_window_s: float,
    check_per_shard: int,
    check_window: int,
    moved: int,
    time_scale: float,
) -> list[str]:
    i = idle(bench, idle_per_shard, idle_window_s)
    c = checking(bench, check_per_shard, check_window, moved, time_scale)
    span = f"{i.window_s:.0f} s"
    lines = [
        "## 5. Shards",
        "",
        f"Two operators in one namespace, shard a owning the Monitors labelled "
        f"`{SHARD_LABEL}=a` and shard b those labelled b. Idle: {i.shards[0].monitors} waiting "
        "monitors per shard, each operator started and settled in turn (as in part 1, whose "
        "single operator with as many monitors is the row to read them beside); RSS taken "
        "with both running.",
        "",
        *table(
            [
                "shard",
                "monitors",
                "start → settled (s)",
                "list pages",
                "operator RSS (MiB)",
                "floor: RSS, no monitors",
                "KiB / monitor",
                f"operator CPU s / {span}",
            ],
            [
                (
                    f.shard,
                    f.monitors,
                    f"{f.settled_s:.1f}",
                    f.pages,
                    f"{f.rss / MIB:.0f}",
                    f"{i.rss_empty / MIB:.0f}",
                    f"{(f.rss - i.rss_empty) / 1024 / f.monitors:.1f}",
                    f"{f.cpu_s:.2f} ({verdict(f.cpu_s == 0)})",
                )
                for f in i.shards
            ],
        ),
        "",
        f"API requests of both shards in the idle window, watches apart: {i.requests} "
        f"({verdict(i.requests == 0)}; floor 0).",
        "",
        f"Checking: {c.per_shard} monitors per shard, everyMinutes=1 with a minute of "
        f"{time_scale:g} s; a window of {c.checks} accepted checks in {c.window_s:.1f} s, "
        f"{c.relabelled} monitors relabelled to the other shard half way.",
        "",
        *table(
            ["figure", "measured", "floor", "verdict"],
            [
                ["checks per second, both shards", f"{c.checks / c.window_s:.1f}", "—", ""],
                *(
                    [f"{name} CPU ms per check of the window", f"{s / c.checks * 1e3:.1f}", "—", ""]
                    for name, s in sorted(c.cpu_s.items())
                ),
                [
                    "operator CPU ms per check, both shards together",
                    f"{sum(c.cpu_s.values()) / c.checks * 1e3:.1f}",
                    "part 2's single operator",
                    "",
                ],
                [
                    "fewest checks a moved monitor made under its new shard (waited for)",
                    str(c.checks_after),
                    "≥ 2",
                    verdict(c.checks_after >= 2),
                ],
            ],
        ),
        "",
        "Lost, doubled and twice-launched are the fault suite's invariants, checked over the "
        "whole run before any figure is printed (a violation prints instead of this part).",
    ]
    return lines
