"""The guards an action must pass before it launches: authority, spend, repetition.

Each returns None when the action may run, or a sentence naming the missing decision.
"""

from __future__ import annotations

from goalkeeper.core.models import (
    ActionAttempt,
    ActionRequest,
    Money,
    Observation,
    RepairGuard,
    SpendLedger,
)

# The same failure in the same target state may be acted on at most this often.
MAX_ATTEMPTS_PER_FAILURE = 2
# Cents-level tolerance so float sums such as 0.1 + 0.2 do not trip an exact ceiling.
SPEND_TOLERANCE = 1e-9


def authority_violation(observation: Observation, action: ActionRequest) -> str | None:
    """Why the request is outside recorded authority, or None when it is inside."""
    missing: list[str] = []
    known = sorted(a.id for a in observation.authorizedActions)
    if not action.authorizedActionId.strip():
        missing.append("it names no authorized action")
    elif action.authorizedActionId not in known:
        listed = ", ".join(known) if known else "none"
        missing.append(
            f"authorized action '{action.authorizedActionId}' is not among the "
            f"authorized actions ({listed})"
        )
    if not action.authorityBasis.strip():
        missing.append("it names no authority basis")
    if not action.mutationSet:
        missing.append("it names no mutation set")
    if not missing:
        return None
    return f"The {action.kind} action is outside recorded authority: " + "; ".join(missing) + "."


def is_paid(observation: Observation, action: ActionRequest) -> bool:
    covering = next(
        (a for a in observation.authorizedActions if a.id == action.authorizedActionId), None
    )
    return action.estimatedCost is not None or (covering is not None and covering.paid)


def spent_so_far(observation: Observation, ledger: SpendLedger) -> float:
    """The larger of the target's own records and our ledger: never trust only one."""
    observed = observation.observedSpend.amount if observation.observedSpend else 0.0
    recorded = ledger.total.amount if ledger.total else 0.0
    return float(max(observed, recorded))


def spend_violation(
    observation: Observation, action: ActionRequest, ledger: SpendLedger
) -> str | None:
    """Why a paid action may not launch, or None when it is unpaid or inside its ceiling."""
    if not is_paid(observation, action):
        return None
    estimate = action.estimatedCost
    ceiling = observation.contract.costCeiling
    if estimate is None:
        return "The paid action has no cost estimate, so its cost cannot be verified."
    if ceiling is None:
        return (
            "The paid action needs a cost ceiling, and the recorded contract has no cost ceiling."
        )
    if not action.approval or not action.approval.strip():
        return "The paid action names no spending approval."
    currencies = {estimate.currency, ceiling.currency}
    for money in (observation.observedSpend, ledger.total):
        if money is not None:
            currencies.add(money.currency)
    if len(currencies) > 1:
        return (
            "The paid action cannot be checked against its ceiling: amounts are in "
            f"different currencies ({', '.join(sorted(currencies))})."
        )
    spent = spent_so_far(observation, ledger)
    if spent + float(estimate.amount) > float(ceiling.amount) + SPEND_TOLERANCE:
        return (
            f"The paid action would exceed the cost ceiling: spent {spent:.2f} + estimated "
            f"{float(estimate.amount):.2f} > {float(ceiling.amount):.2f} {ceiling.currency}."
        )
    return None


def add_spend(ledger: SpendLedger, cost: Money) -> Money:
    """The ledger's new total after adding one paid action's cost."""
    previous = ledger.total.amount if ledger.total else 0.0
    return Money(amount=float(previous) + float(cost.amount), currency=cost.currency)


def repeats_repair(guard: RepairGuard | None, action: ActionRequest) -> bool:
    """True when the failure and target state of the last completed repair came back."""
    return (
        guard is not None
        and guard.failureId == action.failureId
        and guard.targetStateId == action.targetStateId
    )


def attempts_for(attempts: list[ActionAttempt], action: ActionRequest) -> int:
    for attempt in attempts:
        if (attempt.failureId, attempt.targetStateId) == (action.failureId, action.targetStateId):
            return attempt.count
    return 0


def repetition_violation(attempts: list[ActionAttempt], action: ActionRequest) -> str | None:
    done = attempts_for(attempts, action)
    if done < MAX_ATTEMPTS_PER_FAILURE:
        return None
    return (
        f"Failure '{action.failureId}' in target state '{action.targetStateId}' was already "
        f"acted on {done} times; a further {action.kind} would be an unbounded retry."
    )


def record_attempt(
    attempts: list[ActionAttempt], action: ActionRequest, keep: int = 64
) -> list[ActionAttempt]:
    """Attempts with this action counted, newest last, bounded to `keep` entries."""
    key = (action.failureId, action.targetStateId)
    count = attempts_for(attempts, action) + 1
    others = [a for a in attempts if (a.failureId, a.targetStateId) != key]
    updated = [
        *others,
        ActionAttempt(failureId=action.failureId, targetStateId=action.targetStateId, count=count),
    ]
    return updated[-keep:]
