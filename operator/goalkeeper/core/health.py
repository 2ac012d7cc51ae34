"""The monitor's health, decided from its check history. Pure: no I/O, no clock of its own.

- `Stalled`: the target claims running work, but nothing it shows moved (the work state,
  every progress track's status and values) for `stall_checks` checks in a row.
- `RunawayLoop`: `LOOP_ACTS` act or repair steps in a row on one unchanged target-state ID,
  whatever failure each names (the attempt limit catches one failure ID at a time).
- `Failing`: the last `FAILING_STEPS` steps failed to run (provider errors, Job failures).
- `AwaitingHuman`: a paid action waits for a person's approval (`awaiting`, `answered`).
- `Unknown` before the first check, `Healthy` otherwise.

The state moves only when a check is accepted, except into `Failing`, which steps that
fail to run reach between checks; the next accepted check decides again. So it never
changes more than once per check, plus once per run of failures.
"""

from __future__ import annotations

import json
from datetime import datetime
from hashlib import sha256

from goalkeeper.core.models import (
    ActionKind,
    Health,
    HealthState,
    Observation,
    Route,
    WorkState,
)

STALL_CHECKS = 3
LOOP_ACTS = 3
FAILING_STEPS = 2


def fingerprint(observation: Observation) -> str:
    """What a check saw that moves when work moves: the work state and every track."""
    tracks = sorted(
        (t.key, t.status.value, t.completed, t.total) for t in observation.progress or ()
    )
    seen = json.dumps([observation.work.value, tracks], default=str)
    return sha256(seen.encode()).hexdigest()[:16]


def checked(
    health: HealthState, observation: Observation, now: datetime, *, stall_checks: int
) -> HealthState:
    """The health after an accepted check (with the act it asks for, if any)."""
    seen = fingerprint(observation)
    running = observation.work is WorkState.running
    stalled = health.stalledChecks + 1 if running and seen == health.fingerprint else 0
    loop, target = 0, ""
    action = observation.action if observation.route is Route.act else None
    if action is not None:
        same = action.targetStateId == health.loopTargetStateId
        loop, target = (health.loopActs + 1 if same else 1), action.targetStateId
    updated = health.model_copy(
        update={
            "fingerprint": seen,
            "stalledChecks": stalled,
            "loopActs": loop,
            "loopTargetStateId": target,
            "failedSteps": 0,
        }
    )
    return _judged(updated, now, stall_checks)


def step_failed(health: HealthState, now: datetime, *, stall_checks: int) -> HealthState:
    failed = health.model_copy(update={"failedSteps": health.failedSteps + 1})
    return _judged(failed, now, stall_checks)


def is_stall_recovery(health: HealthState, observation: Observation) -> bool:
    """A recovery asked for while the target is stalled: the one it gets for that state."""
    action = observation.action
    return (
        health.state is Health.Stalled
        and action is not None
        and action.kind is ActionKind.recover
        and health.recoveredStall != health.fingerprint
    )


def stalled_again(health: HealthState) -> bool:
    """Stalled in the very state its one automatic recovery already ran for."""
    return health.state is Health.Stalled and health.recoveredStall == health.fingerprint


def awaiting(health: HealthState, message: str, now: datetime) -> HealthState:
    """Waiting for a person's decision: the streaks stay as they are."""
    return health.model_copy(
        update={"state": Health.AwaitingHuman, "message": message[:1000], "since": now}
    )


def answered(health: HealthState, now: datetime, *, stall_checks: int) -> HealthState:
    """The health once a person's decision came: from the streaks again."""
    return _judged(health, now, stall_checks)


def note_for_observe(health: HealthState) -> str:
    """What the next observe step is told of an unhealthy run ('' when healthy)."""
    if health.state is Health.Stalled:
        return (
            f"{health.message} If a recorded authorized action recovers it, request that "
            "recovery now (route act, kind recover): a stall gets one; the same stall after "
            "it stops the monitor."
        )
    if health.state in (Health.RunawayLoop, Health.Failing):
        return health.message
    return ""


def _judged(health: HealthState, now: datetime, stall_checks: int) -> HealthState:
    state, message = _state(health, stall_checks)
    if state is health.state and message == health.message:
        return health
    since = now if state is not health.state else health.since
    return health.model_copy(update={"state": state, "message": message, "since": since})


def _state(health: HealthState, stall_checks: int) -> tuple[Health, str]:
    if health.failedSteps >= FAILING_STEPS:
        return Health.Failing, f"The last {health.failedSteps} steps failed to run."
    if health.loopActs >= LOOP_ACTS:
        return Health.RunawayLoop, (
            f"{health.loopActs} actions in a row left target state "
            f"'{health.loopTargetStateId}' unchanged."
        )
    if health.stalledChecks >= stall_checks:
        return Health.Stalled, (
            f"The target claims running work, but nothing it shows moved for "
            f"{health.stalledChecks} checks in a row."
        )
    if not health.fingerprint:
        return Health.Unknown, ""
    return Health.Healthy, ""
