"""The guards an action must pass before it launches: authority, spend, repetition.

Every guard reads the authority recorded in the monitor's status (the contract and the
authorized actions pinned by the first accepted observation of a spec generation), never
the observation that asks for the action: an observation cannot grant itself authority.

Each guard returns None when the action may run, or a sentence naming the missing
decision. A mutation set is read with the grammar of `mutations`: its entries meet the
contract's as the objects, endpoints and programs they name, not as text (free text alone
is compared as text). `review_authority` compares a later observation's authority with the
recorded one: a restatement or a narrowing is recorded, any widening is refused.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

from goalkeeper.core.models import (
    LIST_ENTRIES,
    LIST_TOTAL_MAX,
    REPAIRS_KEPT,
    ActionAttempt,
    ActionRequest,
    AuthorizedAction,
    Contract,
    Money,
    MonitorStatus,
    RepairDone,
    SpendLedger,
    StopReason,
)
from goalkeeper.core.mutations import KubeTarget, Target, covers, overlaps, parse_entry

# The same failure in the same target state may be acted on at most this often.
MAX_ATTEMPTS_PER_FAILURE = 2
# Cents-level tolerance so float sums such as 0.1 + 0.2 do not trip an exact ceiling.
SPEND_TOLERANCE = 1e-9
# How many attempted widenings a stop message lists by name, and how long a quoted entry is.
LISTED_WIDENINGS = 6
QUOTE_MAX = 120

_TRAILING = string.punctuation + "\u2026\u3002"


# --- text ------------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """The comparable form of a contract entry: casefolded, whitespace collapsed, trailing
    punctuation stripped, so a pure restatement compares equal."""
    collapsed = " ".join(text.split()).casefold()
    return collapsed.rstrip(_TRAILING + " ").strip()


def _clip(text: str) -> str:
    one_line = " ".join(text.split())
    if len(one_line) > QUOTE_MAX:
        one_line = one_line[: QUOTE_MAX - 1] + "\u2026"
    return one_line


def _quote(text: str) -> str:
    return f"'{_clip(text)}'"


def _money(money: Money) -> str:
    amount = f"{float(money.amount):.12g}".replace("e+", "e")
    return f"{amount} {money.currency}"


def _and_list(parts: Sequence[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


# --- the recorded authority ------------------------------------------------------------------


def authority_violation(status: MonitorStatus, action: ActionRequest) -> str | None:
    """Why the request is outside the recorded authority, or None when it is inside."""
    missing: list[str] = []
    known = sorted(a.id for a in status.authorizedActions)
    if not action.authorizedActionId.strip():
        missing.append("it names no authorized action")
    elif action.authorizedActionId not in known:
        listed = ", ".join(known) if known else "none"
        missing.append(
            f"authorized action '{action.authorizedActionId}' is not among the "
            f"recorded authorized actions ({listed})"
        )
    if not action.authorityBasis.strip():
        missing.append("it names no authority basis")
    if not action.mutationSet:
        missing.append("it names no mutation set")
    if status.contract is None:
        missing.append("no contract is recorded")
    if not missing:
        return None
    return f"The {action.kind} action is outside recorded authority: " + "; ".join(missing) + "."


def mutation_outside_contract(
    contract: Contract | None, action: ActionRequest, namespace: str
) -> tuple[StopReason, str] | None:
    """Why the mutation set reaches past the recorded allowed resources, as a stop reason
    and message, or None when every entry is covered by one of them (an empty set is
    `authority_violation`'s to refuse). An uncovered Secret is a credential the words do
    not give (`credentialWithoutAuthority`); any other entry is `outsideAuthority`.

    Entries are read in the monitor's `namespace` and compared as what they name
    (`mutations.covers`): a glob, another namespace, a URL or a program is covered only by
    an allowed entry that itself names it. Only `allowedResources` counts: an endpoint or a
    program an action may change is listed there too, since `allowedSystems` is prose. An
    entry that does not parse is never covered.
    """
    written = contract.allowedResources if contract is not None else []
    parsed = (parse_entry(entry, namespace) for entry in written)
    allowed = [target for target in parsed if target is not None]
    uncovered = [
        (entry, target)
        for entry in action.mutationSet
        if not _covered(target := parse_entry(entry, namespace), allowed)
    ]
    if not uncovered:
        return None
    credential = any(_is_secret(target) for _, target in uncovered)
    listed = ", ".join(_clip(entry) for entry in written) or "none"
    return (
        StopReason.credentialWithoutAuthority if credential else StopReason.outsideAuthority,
        f"The {action.kind} action would change {_and_list([_clip(e) for e, _ in uncovered])}, "
        f"which the recorded allowed resources ({listed}) do not cover.",
    )


def _is_secret(target: Target | None) -> bool:
    return isinstance(target, KubeTarget) and target.group == "" and target.resource == "secrets"


def _covered(entry: Target | None, allowed: Sequence[Target]) -> bool:
    return entry is not None and any(covers(target, entry) for target in allowed)


def forbidden_mutation(
    status: MonitorStatus, action: ActionRequest, namespace: str
) -> tuple[StopReason, str] | None:
    """A mutation-set entry the recorded contract forbids or protects, with its stop reason.

    A ruled entry and a mutation entry, both read as objects in the monitor's `namespace`,
    count when some write is named by both (`mutations.overlaps`). Free text meets nothing:
    an entry that names no object is refused as uncovered by the allowed resources, which
    are exactly the typed grants' objects. Protected contracts are checked first.
    """
    contract = status.contract
    if contract is None:
        return None
    rules = (
        (contract.protectedContracts, StopReason.protectedContractChange, "protects"),
        (contract.forbiddenChanges, StopReason.outsideAuthority, "forbids"),
    )
    for entries, reason, verb in rules:
        for rule in entries:
            if not normalise(rule):
                continue
            for target in action.mutationSet:
                if _rule_meets(rule, target, namespace):
                    return reason, (
                        f"The {action.kind} action would change {_quote(target)}, which the "
                        f"recorded contract {verb}: {_quote(rule)}."
                    )
    return None


def _rule_meets(rule: str, entry: str, namespace: str) -> bool:
    """Whether a write the entry names is one the rule names, both read as objects. Prose
    is compared with nothing: what may be written at all is a typed grant's object, which
    the reading already held to every prohibition of the words."""
    ruled, touched = parse_entry(rule, namespace), parse_entry(entry, namespace)
    return ruled is not None and touched is not None and overlaps(ruled, touched)


@dataclass(frozen=True)
class AuthorityReview:
    """A later observation's authority measured against the recorded one."""

    contract: Contract
    actions: list[AuthorizedAction]
    widenings: tuple[str, ...]
    protected: bool

    def refusal(self) -> tuple[StopReason, str] | None:
        if not self.widenings:
            return None
        reason = (
            StopReason.protectedContractChange if self.protected else StopReason.outsideAuthority
        )
        listed = list(self.widenings[:LISTED_WIDENINGS])
        rest = len(self.widenings) - len(listed)
        if rest:
            listed.append(f"{rest} more change{'s' if rest != 1 else ''} like these")
        return reason, (
            f"The observation tried to {_and_list(listed)}. Authority recorded for this spec "
            "generation only narrows; none of these took effect."
        )


# Lists a later observation may shorten but not lengthen, and lists it may lengthen but not
# shorten, with the words a stop message uses for one entry.
_MAY_SHRINK = (
    ("allowedFiles", "allowed file"),
    ("allowedSystems", "allowed system"),
    ("allowedResources", "allowed resource"),
    ("allowedRecoveryActions", "allowed recovery action"),
)
_MAY_GROW = (
    ("forbiddenChanges", "forbidden change"),
    ("protectedContracts", "protected contract"),
    ("requiredChecks", "required check"),
)


def review_authority(
    recorded: Contract,
    recorded_actions: Sequence[AuthorizedAction],
    observed: Contract,
    observed_actions: Sequence[AuthorizedAction],
) -> AuthorityReview:
    """What may be recorded from a later observation, and every widening it attempted.

    The goal and the descriptions of recorded actions keep their recorded wording; entries
    compare after `normalise`, and a matched entry keeps its recorded text.
    """
    widenings: list[str] = []
    protected = False
    update: dict[str, object] = {}

    for field, noun in _MAY_SHRINK:
        before: list[str] = getattr(recorded, field)
        after: list[str] = getattr(observed, field)
        known = {normalise(e) for e in before}
        added = [e for e in _unique(after) if normalise(e) not in known]
        widenings += [f"add {noun} {_quote(e)}" for e in added]
        still = {normalise(e) for e in after}
        update[field] = [e for e in before if normalise(e) in still]

    for field, noun in _MAY_GROW:
        before = getattr(recorded, field)
        after = getattr(observed, field)
        still = {normalise(e) for e in after}
        removed = [e for e in before if normalise(e) not in still]
        widenings += [f"remove {noun} {_quote(e)}" for e in removed]
        protected = protected or (field == "protectedContracts" and bool(removed))
        update[field] = _union(before, after)

    # Stop conditions only add up: one the observation leaves out stays recorded.
    update["stopConditions"] = _union(recorded.stopConditions, observed.stopConditions)

    ceiling_widening, ceiling = _review_ceiling(recorded.costCeiling, observed.costCeiling)
    if ceiling_widening:
        widenings.append(ceiling_widening)
    update["costCeiling"] = ceiling

    actions_widenings, actions = _review_actions(recorded_actions, observed_actions)
    widenings = actions_widenings + widenings

    contract = recorded.model_copy(update=update)
    return AuthorityReview(
        contract=Contract.model_validate(contract.model_dump()),
        actions=actions,
        widenings=tuple(widenings),
        protected=protected,
    )


def _unique(entries: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    kept = []
    for entry in entries:
        key = normalise(entry)
        if key not in seen:
            seen.add(key)
            kept.append(entry)
    return kept


def _union(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """The recorded entries, then the new ones while the list's bounds allow: a new entry
    that does not fit adds nothing the record did not already hold."""
    kept = _unique(before)
    total = sum(len(e) for e in kept)
    for entry in _unique([*before, *after])[len(kept) :]:
        if len(kept) >= LIST_ENTRIES or total + len(entry) > LIST_TOTAL_MAX:
            break
        kept.append(entry)
        total += len(entry)
    return kept


def _review_ceiling(recorded: Money | None, observed: Money | None) -> tuple[str, Money | None]:
    if observed is None:
        return "", None  # no ceiling: no paid action can launch, a narrowing
    if recorded is None:
        return f"set a cost ceiling of {_money(observed)} where none was recorded", None
    if observed.currency != recorded.currency:
        return (
            f"change the cost ceiling from {_money(recorded)} to {_money(observed)}",
            recorded,
        )
    if float(observed.amount) > float(recorded.amount):
        return f"raise the cost ceiling from {_money(recorded)} to {_money(observed)}", recorded
    return "", observed


def _review_actions(
    recorded: Sequence[AuthorizedAction], observed: Sequence[AuthorizedAction]
) -> tuple[list[str], list[AuthorizedAction]]:
    by_id = {a.id.casefold(): a for a in recorded}
    seen = {a.id.casefold(): a for a in observed}
    widenings = []
    for action in observed:
        before = by_id.get(action.id.casefold())
        if before is None:
            widenings.append(f"add authorized action '{action.id}'")
        elif before.paid and not action.paid:
            widenings.append(f"turn authorized action '{before.id}' from paid to unpaid")
    kept = [
        a.model_copy(update={"paid": a.paid or seen[a.id.casefold()].paid})
        for a in recorded
        if a.id.casefold() in seen
    ]
    return widenings, kept


# --- spend -----------------------------------------------------------------------------------


def named_action(
    recorded: Sequence[AuthorizedAction], action: ActionRequest
) -> AuthorizedAction | None:
    """The recorded authorized action whose id `action` names, if any."""
    return next((a for a in recorded if a.id == action.authorizedActionId), None)


def is_paid(status: MonitorStatus, action: ActionRequest) -> bool:
    """Paid when the request carries a cost above zero or the recorded action it names is
    paid (a stated cost of 0 on an unpaid action is no spend: seen from a small model)."""
    covering = named_action(status.authorizedActions, action)
    priced = action.estimatedCost is not None and action.estimatedCost.amount > 0
    return priced or (covering is not None and covering.paid)


def spent_so_far(observed_spend: Money | None, ledger: SpendLedger) -> float:
    """The larger of the target's own records and our ledger: never trust only one."""
    observed = observed_spend.amount if observed_spend else 0.0
    recorded = ledger.total.amount if ledger.total else 0.0
    return float(max(observed, recorded))


def spend_violation(
    status: MonitorStatus, action: ActionRequest, observed_spend: Money | None
) -> str | None:
    """Why a paid action may not launch, or None when it is unpaid or inside the recorded
    ceiling. `observed_spend` is the target's own figure; the ledger is status's."""
    if not is_paid(status, action):
        return None
    estimate = action.estimatedCost
    ceiling = status.contract.costCeiling if status.contract is not None else None
    ledger = status.spend
    if estimate is None:
        return "The paid action has no cost estimate, so its cost cannot be verified."
    if ceiling is None:
        return (
            "The paid action needs a cost ceiling, and the recorded contract has no cost ceiling."
        )
    if not action.approval or not action.approval.strip():
        return "The paid action names no spending approval."
    currencies = _currencies(estimate, ceiling, observed_spend, ledger.total)
    if len(currencies) > 1:
        return (
            "The paid action cannot be checked against its ceiling: amounts are in "
            f"different currencies ({', '.join(sorted(currencies))})."
        )
    spent = spent_so_far(observed_spend, ledger)
    if spent + float(estimate.amount) > float(ceiling.amount) + SPEND_TOLERANCE:
        return (
            f"The paid action would exceed the cost ceiling: spent {spent:.2f} + estimated "
            f"{float(estimate.amount):.2f} > {float(ceiling.amount):.2f} {ceiling.currency}."
        )
    return None


@dataclass(frozen=True)
class ApprovalNeed:
    """What a person must approve for a paid action to run: `amount` more ceiling."""

    estimate: Money
    ceiling: Money | None
    spent: Money
    amount: Money


def approval_need(
    status: MonitorStatus, action: ActionRequest, observed_spend: Money | None
) -> ApprovalNeed | None:
    """What approving the paid action takes, or None when no approval can make it
    checkable: it has no estimate, or its amounts are in different currencies."""
    estimate = action.estimatedCost
    if estimate is None:
        return None
    ceiling = status.contract.costCeiling if status.contract is not None else None
    if len(_currencies(estimate, ceiling, observed_spend, status.spend.total)) > 1:
        return None
    spent = spent_so_far(observed_spend, status.spend)
    room = float(ceiling.amount) if ceiling is not None else 0.0
    amount = max(spent + float(estimate.amount) - room, 0.0)
    currency = estimate.currency
    return ApprovalNeed(
        estimate,
        ceiling,
        Money(amount=spent, currency=currency),
        Money(amount=amount, currency=currency),
    )


def approved_short(need: Money, approved: float) -> str | None:
    """Why an approval of `approved` does not cover a need of `need`, or None when it does."""
    if approved + SPEND_TOLERANCE >= float(need.amount):
        return None
    return (
        f"The approval adds {approved:.2f} {need.currency} to the ceiling, and the action "
        f"needs {float(need.amount):.2f} {need.currency} more."
    )


def _currencies(*amounts: Money | None) -> set[str]:
    return {money.currency for money in amounts if money is not None}


def booked_cost(estimate: Money | None, actual: Money | None) -> tuple[Money, bool] | None:
    """What a finished paid action books, and whether that is the estimate.

    The larger of the estimate and the reported actual cost: a step cannot lower the ledger
    by reporting less than was estimated. An actual cost in another currency than the
    estimate (which was checked against the ceiling) cannot be compared, so the estimate
    is booked.
    """
    if estimate is None and actual is None:
        return None
    if actual is None:
        assert estimate is not None
        return estimate, True
    if estimate is None:
        return actual, False
    if actual.currency != estimate.currency or float(actual.amount) < float(estimate.amount):
        return estimate, True
    return actual, False


def add_spend(ledger: SpendLedger, cost: Money) -> Money:
    """The ledger's new total after adding one paid action's cost."""
    previous = ledger.total.amount if ledger.total else 0.0
    return Money(amount=float(previous) + float(cost.amount), currency=cost.currency)


# --- repetition ------------------------------------------------------------------------------


def repeats_repair(repairs: Sequence[RepairDone], action: ActionRequest) -> bool:
    """True when the failure and target state of any completed repair of the run came back."""
    key = (action.failureId, action.targetStateId)
    return any((r.failureId, r.targetStateId) == key for r in repairs)


def record_repair(
    repairs: Sequence[RepairDone], action: ActionRequest, check: int, keep: int = REPAIRS_KEPT
) -> list[RepairDone]:
    """Completed repairs with this one added, newest last, bounded to `keep` entries."""
    key = (action.failureId, action.targetStateId)
    others = [r for r in repairs if (r.failureId, r.targetStateId) != key]
    done = RepairDone(failureId=action.failureId, targetStateId=action.targetStateId, check=check)
    return [*others, done][-keep:]


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
