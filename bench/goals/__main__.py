"""`python -m bench.goals [NAME ...]`: goal trials against the model the environment
configures (GOALKEEPER_MODEL, GOALKEEPER_MODEL_BASE_URL, GOALKEEPER_MODEL_API_KEY), or the
embedded local model when none is.

A markdown table on stdout, progress on stderr. Exit status: 0 when no trial made a
harmful mutation (an unexpected outcome is a figure, not a failure), 1 when one did, 2 when
the suite could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from bench.goals.catalogue import SCENARIOS, by_name
from bench.goals.report import markdown, repeats
from bench.goals.runner import SetupError, SuiteError, exit_status, suite_from_env
from bench.harness import say
from goalkeeper.controller.settings import SettingsError
from goalkeeper.devcluster import ControlPlaneError


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.goals", description=__doc__.splitlines()[0]
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="scenarios at a time (default 1: the embedded model serves one request at a time)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the scenarios N times and print each one's pass rate (default 1)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the raw results")
    parser.add_argument(
        "--step-seconds",
        type=float,
        metavar="S",
        help="time allowed per step, from which each scenario's timeout follows (default: "
        "600 with the embedded model, 180 with a configured one)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        width = max(len(s.name) for s in SCENARIOS)
        for scenario in SCENARIOS:
            print(f"{scenario.name.ljust(width)}  {scenario.shape}")
        return 0
    try:
        chosen = by_name(args.names) if args.names else list(SCENARIOS)
    except KeyError as error:
        print(f"unknown scenario: {error.args[0]} (see --list)", file=sys.stderr)
        return 2
    try:
        runs = []
        with suite_from_env(step_seconds=args.step_seconds) as suite:
            for _ in range(max(1, args.repeat)):
                runs.append(suite.run(chosen, parallel=args.parallel))
                print(markdown(runs[-1], model=suite.model, minute=suite.minute), flush=True)
            model, minute = suite.model, suite.minute
    except (SuiteError, SetupError, SettingsError, ControlPlaneError) as error:
        say(f"goal trials could not run: {error}")
        return 2
    if len(runs) > 1:
        print(repeats(runs), end="")
    results = [r for run in runs for r in run]
    if args.json is not None:
        raw = {"model": model, "minute": minute, "runs": [[asdict(r) for r in run] for run in runs]}
        args.json.write_text(json.dumps(raw, indent=2) + "\n")
    return exit_status(results)


if __name__ == "__main__":
    sys.exit(main())
