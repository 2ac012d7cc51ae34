"""The monitor's health, decided from its check history. Pure: no I/O, no clock of its own.

- `Stalled`: the target showed progress before (a track or counter moved between two
  checks), claims running work, and its progress then stayed frozen for `stall_checks`
  checks in a row. Elapsed time alone is never unhealthy: a target that shows no progress
  signal is never stalled; the observe step is told once that it may look for one.
- `RunawayLoop`: acts in a row after which the checks saw the same (the engine's own
  fingerprint of work, progress and the objects acted on, never the model's IDs); one act
  before the brake, which stops the monitor or asks a person (`braked`).
- `Failing`: the last `FAILING_STEPS` steps failed to run (provider errors, Job failures).
- `AwaitingHuman`: something waits for a person's decision (`awaiting`, `answered`).
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
    BRAKE_ACTS_MAX,
    TERMINAL_TRACK_STATUSES,
    ActionKind,
    ActionRequest,
    BrakeAct,
    Health,
    HealthState,
    Observation,
    Route,
    WorkState,
)
from goalkeeper.core.mutations import parse_entry
from goalkeeper.core.policy import Policy

FAILING_STEPS = 2


def _digest(value: object) -> str:
    return sha256(json.dumps(value, default=str).encode()).hexdigest()[:16]


def _tracks(observation: Observation) -> list[tuple[str, str, object, object]]:
    return sorted((t.key, t.status.value, t.completed, t.total) for t in observation.progress or ())


def _signal(observation: Observation) -> list[tuple[str, object]]:
    """The progress signal: the counters of tracks still under way. A finished track, a
    track without a number, or a change of status or label is no signal of movement."""
    return sorted(
        (t.key, t.completed)
        for t in observation.progress or ()
        if t.completed is not None and t.status not in TERMINAL_TRACK_STATUSES
    )


def fingerprint(observation: Observation) -> str:
    """What a check saw that moves when work moves: the work state and every track."""
    return _digest([observation.work.value, _tracks(observation)])


def _seen(observation: Observation) -> str:
    """What a check saw, as the brake reckons it: the goal and work states and every track."""
    return _digest([observation.goal.value, observation.work.value, _tracks(observation)])


def acted_on(action: ActionRequest, namespace: str) -> str:
    """The objects an act changes, parsed in the monitor's namespace, so a respelling of
    the same object is the same. The model's failure and target-state IDs are no part of
    it: renaming them changes nothing here."""
    targets = []
    for entry in action.mutationSet:
        parsed = parse_entry(entry, namespace)
        targets.append(" ".join(entry.split()) if parsed is None else repr(parsed))
    return _digest(sorted(targets))


def checked(
    health: HealthState,
    observation: Observation,
    now: datetime,
    policy: Policy,
    namespace: str = "default",
) -> HealthState:
    """The health after an accepted check (with the act it asks for, if any)."""
    signal = _signal(observation)
    keys, values = _digest([k for k, _ in signal]), _digest(signal) if signal else ""
    # Moved: a counter of the same tracks as the check before changed.
    moved_now = (
        bool(signal)
        and keys == health.signalKeys
        and bool(health.trackPrint)
        and values != health.trackPrint
    )
    moved = health.progressMoved or moved_now
    running = observation.work is WorkState.running
    same = keys == health.signalKeys and values == health.trackPrint
    stalled = health.stalledChecks + 1 if running and same else 0
    # The brake compares what each check that asks for an act saw with what the one
    # before it saw. A check in between that asks for none (a wait) resets the row only
    # when progress moved: a work state that flips and flips back is no progress.
    seen, acts = health.brakeFingerprint, health.brakeActs
    if moved_now:
        seen, acts = "", []
    if observation.route is Route.act:
        seen = _seen(observation)
        acts = acts if seen == health.brakeFingerprint else []
    updated = health.model_copy(
        update={
            "fingerprint": fingerprint(observation),
            "signalKeys": keys,
            "trackPrint": values,
            "stalledChecks": stalled,
            "progressMoved": moved,
            "brakeFingerprint": seen,
            "brakeActs": acts,
            "failedSteps": 0,
        }
    )
    return _judged(updated, now, policy, _asked_on(observation, namespace))


def read_same(health: HealthState, facts_print: str, check: int) -> HealthState:
    """The health with the row of checks that read the goal's objects the same, `check`
    being the one just accepted: the row goes on while the print stays the same."""
    if facts_print and facts_print == health.factsPrint:
        return health
    since = check if facts_print else 0
    return health.model_copy(update={"factsPrint": facts_print, "factsSince": since})


def _asked_on(observation: Observation, namespace: str) -> str:
    action = observation.action if observation.route is Route.act else None
    return acted_on(action, namespace) if action is not None else ""


def acted(health: HealthState, action: ActionRequest, check: int, namespace: str) -> HealthState:
    """The brake's row with the act just launched at its end."""
    act = BrakeAct(
        check=check,
        kind=action.kind,
        action=action.action[:300],
        target=acted_on(action, namespace),
    )
    return health.model_copy(update={"brakeActs": [*health.brakeActs, act][-BRAKE_ACTS_MAX:]})


def act_failed_to_run(health: HealthState, check: int) -> HealthState:
    """The brake's row without the act of `check` whose step failed to run: an act that never
    ran is an infrastructure failure, not one that changed nothing."""
    kept = [a for a in health.brakeActs if a.check != check]
    return health.model_copy(update={"brakeActs": kept})


def repeats(health: HealthState, target: str) -> list[BrakeAct]:
    """The acts of the row on the same objects as `target`."""
    return [a for a in health.brakeActs if a.target == target]


def braked(health: HealthState, policy: Policy, target: str) -> bool:
    """`brake_acts` acts on the objects `target` names (see `acted_on`) left what the
    checks see unchanged, and one more is asked for: it does not run without a person."""
    return len(repeats(health, target)) >= policy.brake_acts


def brake_text(health: HealthState, target: str) -> str:
    acts = repeats(health, target)
    listed = "; ".join(f"check {a.check}: {a.kind} '{a.action}'" for a in acts)
    return (
        f"{len(acts)} acts in a row left what the checks see unchanged (work, progress "
        f"and goal, on the same objects): {listed}."
    )[:1000]


def step_failed(health: HealthState, now: datetime, policy: Policy) -> HealthState:
    failed = health.model_copy(update={"failedSteps": health.failedSteps + 1})
    return _judged(failed, now, policy, "")


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


def answered(health: HealthState, now: datetime, policy: Policy) -> HealthState:
    """The health once a person's decision came: from the streaks again."""
    return _judged(health, now, policy, "")


NO_SIGNAL_NOTE = (
    "The target claims running work but shows no progress signal: no progress track or "
    "counter has moved between checks. That alone is healthy (slow work that is still "
    "working is never stalled for time alone); if the target has a counter, a log line "
    "count or completed items you can read, report it as a progress track."
)


def note_for_observe(health: HealthState) -> str:
    """What the next observe step is told of an unhealthy run ('' when healthy). The note
    that the target shows no progress signal comes once, after the first check that saw
    running work unchanged: it follows from the streak, so a launch needs no write for it."""
    if health.state is Health.Stalled:
        return (
            f"{health.message} If a recorded authorized action recovers it, request that "
            "recovery now (route act, kind recover). The recovery must keep the work done "
            "so far (resume or restart only the stuck part; never start the work over): a "
            "stall gets one recovery; the same stall after it stops the monitor."
        )
    if health.state in (Health.RunawayLoop, Health.Failing):
        return health.message
    if health.stalledChecks == 1 and not health.progressMoved:
        return NO_SIGNAL_NOTE
    return ""


def _judged(health: HealthState, now: datetime, policy: Policy, asked_on: str) -> HealthState:
    state, message = _state(health, policy, asked_on)
    if state is health.state and message == health.message:
        return health
    since = now if state is not health.state else health.since
    return health.model_copy(update={"state": state, "message": message, "since": since})


def _state(health: HealthState, policy: Policy, asked_on: str) -> tuple[Health, str]:
    if health.failedSteps >= FAILING_STEPS:
        return Health.Failing, f"The last {health.failedSteps} steps failed to run."
    if asked_on and len(repeats(health, asked_on)) >= max(policy.brake_acts - 1, 1):
        return Health.RunawayLoop, brake_text(health, asked_on)
    if health.progressMoved and health.trackPrint and health.stalledChecks >= policy.stall_checks:
        return Health.Stalled, (
            f"The target claims running work, but its progress, which moved before, has "
            f"not moved for {health.stalledChecks} checks in a row."
        )
    if not health.fingerprint:
        return Health.Unknown, ""
    return Health.Healthy, ""
