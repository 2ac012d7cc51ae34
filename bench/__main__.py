"""`python -m bench`: the operator's check path against a local control plane.

Every part runs on a fresh control plane, checks its invariants, then prints its tables
(stdout, markdown). Exit status: 0 when every invariant held, 1 when one did not (each
violation is printed), 2 when a part could not measure.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bench import check_path, idle, restart, shards
from bench.harness import Bench, BenchError, InvariantError, machine_header, say


@dataclass(frozen=True)
class Plan:
    idle_sizes: tuple[int, ...]
    idle_window_s: float
    check_monitors: int
    check_window: int  # accepted checks
    time_scale: float  # seconds in one everyMinutes minute
    restart_monitors: int
    shard_idle: int  # waiting monitors per shard
    shard_monitors: int  # checking monitors per shard
    shard_window: int  # accepted checks
    shard_moved: int  # monitors relabelled mid-window


DEFAULT = Plan(
    idle_sizes=(100, 1000, 10000),
    idle_window_s=60,
    check_monitors=50,
    check_window=500,
    time_scale=1.0,
    restart_monitors=1000,
    shard_idle=10000,
    shard_monitors=50,
    shard_window=500,
    shard_moved=100,
)
QUICK = Plan(
    # With 1,000 monitors the operator's list takes two pages (it lists 500 a page).
    idle_sizes=(20, 1000),
    idle_window_s=10,
    check_monitors=10,
    check_window=60,
    time_scale=1.0,
    restart_monitors=50,
    shard_idle=500,
    shard_monitors=10,
    shard_window=60,
    shard_moved=10,
)
LARGE_IDLE = (50000,)
PARTS = ("idle", "check", "restart", "model", "shards")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument(
        "--large",
        action="store_true",
        help=f"add {' and '.join(map(str, LARGE_IDLE))} monitors to the idle sizes",
    )
    parser.add_argument(
        "--only", action="append", choices=PARTS, help="run this part only (repeatable)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the run folder (audit logs, operator logs)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = QUICK if args.quick else DEFAULT
    if args.large:
        plan = replace(plan, idle_sizes=(*plan.idle_sizes, *LARGE_IDLE))
    parts: dict[str, Callable[[Bench], list[str]]] = {
        "idle": lambda b: idle.run(b, plan.idle_sizes, plan.idle_window_s),
        "check": lambda b: check_path.run(
            b, plan.check_monitors, plan.check_window, plan.time_scale
        ),
        "restart": lambda b: restart.run(b, plan.restart_monitors),
        "shards": lambda b: shards.run(
            b,
            plan.shard_idle,
            plan.idle_window_s,
            plan.shard_monitors,
            plan.shard_window,
            plan.shard_moved,
            plan.time_scale,
        ),
    }
    chosen = [p for p in PARTS if not args.only or p in args.only]
    clustered = [p for p in chosen if p in parts]
    folder = Path(tempfile.mkdtemp(prefix="goalkeeper-bench-"))
    began = time.monotonic()
    status = 0
    try:
        for index, part in enumerate(clustered):
            (folder / part).mkdir()
            with Bench(folder / part) as bench:
                if index == 0:
                    print("# goalkeeper benchmark\n")
                    print("\n".join(machine_header(bench.server_version())), flush=True)
                lines = parts[part](bench)
            print("\n" + "\n".join(lines), flush=True)
        if "model" in chosen:
            if not clustered:
                print("# goalkeeper benchmark\n")
                print("\n".join(machine_header("(not started: no part needs it)")), flush=True)
            print("\n" + "\n".join(model_cost_part()), flush=True)
    except InvariantError as error:
        print(f"\nINVARIANT VIOLATED in {error.part}; no figure of this part is printed:")
        print("\n".join(f"- {line}" for line in error.violations))
        status = 1
    except BenchError as error:
        print(f"\nThe benchmark could not measure: {error}", file=sys.stderr)
        status = 2
    minutes = (time.monotonic() - began) / 60
    print(f"\nRun time: {minutes:.1f} min, control plane starts included.")
    if status or args.keep:
        say(f"audit and operator logs kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return status


def model_cost_part() -> list[str]:
    """What one observe check sends to the model (bench/model_cost.py): in-process steps
    and the scripted model over loopback HTTP, no cluster."""
    from bench import model_cost

    return [
        "## 4. Model cost per check",
        "",
        "The end-to-end scenario's observe checks, each request counted in full as a provider "
        "bills it; cacheable is the byte-identical prefix shared with the request before.",
        "",
        "```",
        model_cost.run(),
        "```",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
