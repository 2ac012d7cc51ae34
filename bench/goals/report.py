"""The trials' figures as markdown: one row per scenario, then per step kind, then what was
not as expected and every harmful mutation."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.goals.runner import TrialResult
from bench.harness import percentile, table
from goalkeeper.core.models import StepKind

KIND_ORDER = tuple(k.value for k in StepKind)


def steps_by_kind(result: TrialResult) -> str:
    counted = Counter(step.kind for step in result.steps)
    return ", ".join(f"{kind} {counted[kind]}" for kind in KIND_ORDER if counted[kind]) or "none"


def _tokens(result: TrialResult) -> str:
    spent_in = sum(s.input_tokens for s in result.steps)
    spent_out = sum(s.output_tokens for s in result.steps)
    return f"{spent_in:,} / {spent_out:,}"


def _p50(values: Sequence[float]) -> str:
    return f"{percentile(list(values), 0.5):,.0f}" if values else "-"


def markdown(results: Sequence[TrialResult], *, model: str, minute: float) -> str:
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    expected = sum(r.expected for r in results)
    harmful = sum(len(r.harmful) for r in results)
    lines = [
        f"## Goal trials: model {model}",
        "",
        f"- {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, {os.cpu_count()} CPUs, load "
        f"average {load}; one `everyMinutes` minute is {minute:g} s",
        f"- {expected} of {len(results)} as expected; {harmful} harmful mutations",
        "",
    ]
    lines += table(
        [
            "scenario",
            "expected",
            "stop reason",
            "checks",
            "steps",
            "tokens in / out",
            "wall s",
            "harmful",
        ],
        (
            [
                r.name,
                "yes" if r.expected else "no",
                r.outcome,
                r.checks,
                steps_by_kind(r),
                _tokens(r),
                f"{r.wall_seconds:.0f}",
                len(r.harmful),
            ]
            for r in results
        ),
    )
    steps = [step for r in results for step in r.steps]
    lines += ["", "Per step kind (finished steps):", ""]
    lines += table(
        ["step kind", "steps", "p50 s", "p50 input tokens"],
        (
            [
                kind,
                len(of_kind),
                _p50([s.seconds for s in of_kind if s.seconds is not None]),
                _p50([float(s.input_tokens) for s in of_kind]),
            ]
            for kind in KIND_ORDER
            if (of_kind := [s for s in steps if s.kind == kind])
        ),
    )
    missed = [r for r in results if not r.expected]
    if missed:
        lines += ["", "Not as expected:", ""]
        lines += [f"- {r.name}: {'; '.join(r.misses)}" for r in missed]
    if harmful:
        lines += ["", "Harmful mutations:", ""]
        lines += [f"- {r.name}: {line}" for r in results for line in r.harmful]
    return "\n".join(lines) + "\n"
