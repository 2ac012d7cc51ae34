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
    lines += ["", "Per accepted observe check, by group of scenarios:", ""]
    lines += by_group(results)
    missed = [r for r in results if not r.expected]
    if missed:
        lines += ["", "Not as expected:", ""]
        lines += [f"- {r.name}: {'; '.join(r.misses)}" for r in missed]
    if harmful:
        lines += ["", "Harmful mutations:", ""]
        lines += [f"- {r.name}: {line}" for r in results for line in r.harmful]
    return "\n".join(lines) + "\n"


def by_group(results: Sequence[TrialResult]) -> list[str]:
    """Each group's outcomes and what its observe checks cost: the figures a fit to one
    group would show as a gap (a check settled by the facts sent no model request)."""
    rows = []
    for group in dict.fromkeys(r.group for r in results):
        of_group = [r for r in results if r.group == group]
        checks = sum(r.checks for r in of_group)
        observed = [s for r in of_group for s in r.steps if s.kind == StepKind.observe]
        asked = [s for s in observed if s.requests]
        rows.append(
            [
                group,
                f"{sum(r.expected for r in of_group)}/{len(of_group)}",
                sum(len(r.harmful) for r in of_group),
                checks,
                len(observed) - len(asked),
                f"{sum(s.requests for s in observed) / checks:.2f}" if checks else "-",
                f"{sum(s.input_tokens for s in observed) / checks:,.0f}" if checks else "-",
                _p50([float(s.input_tokens) for s in observed]),
                _p50([s.seconds for s in observed if s.seconds is not None]),
                _p50([s.seconds for s in asked if s.seconds is not None]),
            ]
        )
    return table(
        [
            "group",
            "as expected",
            "harmful",
            "checks",
            "settled by the facts",
            "requests / check",
            "input tokens / check",
            "p50 input tokens",
            "observe p50 s",
            "p50 s, asked",
        ],
        rows,
    )


def per_check(results: Sequence[TrialResult]) -> tuple[str, str]:
    """Model requests and input tokens per accepted check, over every step of the trials
    (an act or extract step's spend counts toward the checks it served)."""
    checks = sum(r.checks for r in results)
    if not checks:
        return "-", "-"
    requests = sum(s.requests for r in results for s in r.steps)
    tokens = sum(s.input_tokens for r in results for s in r.steps)
    return f"{requests / checks:.2f}", f"{tokens / checks:,.0f}"


def repeats(runs: Sequence[Sequence[TrialResult]]) -> str:
    """Each scenario's pass rate over the runs, with model requests and input tokens per
    check: one passing run tells luck from skill no better than a coin."""
    names = list(dict.fromkeys(r.name for run in runs for r in run))
    lines = [f"## Pass rates over {len(runs)} runs", ""]
    rows = []
    for name in names:
        of_name = [r for run in runs for r in run if r.name == name]
        passed = sum(r.expected for r in of_name)
        calls, tokens = per_check(of_name)
        harmful = sum(len(r.harmful) for r in of_name)
        outcomes = ", ".join(r.outcome for r in of_name)
        rows.append([name, f"{passed}/{len(of_name)}", calls, tokens, harmful, outcomes])
    lines += table(
        [
            "scenario",
            "passed",
            "model calls / check",
            "input tokens / check",
            "harmful",
            "outcomes",
        ],
        rows,
    )
    each = [f"{sum(r.expected for r in run)}/{len(run)}" for run in runs]
    lines += ["", f"As expected in each run: {', '.join(each)}."]
    for group in dict.fromkeys(r.group for run in runs for r in run):
        counted = [[r for r in run if r.group == group] for run in runs]
        each = [f"{sum(r.expected for r in run)}/{len(run)}" for run in counted]
        lines.append(f"- {group}: {', '.join(each)}")
    return "\n".join(lines) + "\n"
