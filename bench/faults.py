"""`make faults`: the fault suite (tests/faults/test_faults.py) over many seeds, one run
after another, one line per seed on stdout.

    .venv/bin/python -m bench.faults --seeds 20            # 20 random seeds
    .venv/bin/python -m bench.faults --seed 831447683 --seed 422262351

Each run is a pytest process of its own with `GOALKEEPER_FAULT_SEED` set, so a failed seed
replays exactly as `make test` would run it. A seed's line gives its verdict, its time and
the suite's own figures (checks, faults injected, duplicates, lost, stuck, mismatched act
outcomes, unexplained and extra checks, unknown outcomes); the whole pytest output of a
failed seed is kept under `--logs` (a new temporary folder by default) and named on its
line. The exit status is 0 only when every seed passed.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/faults/test_faults.py::test_fleet_survives_faults"
FIGURES = re.compile(r"^monitors=\S+ .*$", re.M)
SHOWN = (
    "checks",
    "kills",
    "api_faults",
    "restarts",
    "duplicates",
    "lost",
    "stuck",
    "mismatched",
    "unexplained",
    "extra_checks",
    "unknown_outcomes",
)


def figures(output: str) -> dict[str, str]:
    """The suite's `monitors=... stuck=...` line, as name -> value."""
    found = FIGURES.search(output)
    if found is None:
        return {}
    return dict(part.split("=", 1) for part in found.group(0).split() if "=" in part)


def run_seed(seed: int, logs: Path, timeout: float) -> tuple[bool, float, dict[str, str], Path]:
    env = {**os.environ, "GOALKEEPER_FAULT_SEED": str(seed)}
    env.pop("GOALKEEPER_FAULTS_LONG", None)
    log = logs / f"seed-{seed}.log"
    begin = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        output, passed = done.stdout + done.stderr, done.returncode == 0
    except subprocess.TimeoutExpired as expired:
        output = f"timed out after {timeout:.0f} s\n{expired.stdout or ''}{expired.stderr or ''}"
        passed = False
    log.write_text(output)
    return passed, time.monotonic() - begin, figures(output), log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--seeds", type=int, default=0, help="how many random seeds to run")
    parser.add_argument(
        "--seed", type=int, action="append", default=[], help="a seed to run (repeatable)"
    )
    parser.add_argument("--logs", type=Path, help="where each seed's pytest output is kept")
    parser.add_argument("--timeout", type=float, default=2700.0, help="seconds per seed")
    args = parser.parse_args(argv)
    draw = random.SystemRandom()
    seeds = list(args.seed) + [draw.randrange(10**9) for _ in range(args.seeds)]
    if not seeds:
        parser.error("give --seeds N or --seed S")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="goalkeeper-faults-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(f"{len(seeds)} seed(s), one after another; pytest output in {logs}", flush=True)
    passed = 0
    for n, seed in enumerate(seeds, 1):
        ok, seconds, found, log = run_seed(seed, logs, args.timeout)
        passed += ok
        shown = " ".join(f"{k}={found[k]}" for k in SHOWN if k in found) or "no figures"
        tail = "" if ok else f" log={log}"
        verdict = "pass" if ok else "FAIL"
        print(f"{n:3d} seed={seed:<10d} {verdict} {seconds:5.0f}s {shown}{tail}", flush=True)
    print(f"{passed} of {len(seeds)} seeds passed", flush=True)
    return 0 if passed == len(seeds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
