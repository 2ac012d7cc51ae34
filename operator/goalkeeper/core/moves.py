"""The act the person's own grant makes when the facts ask for it: the one typed grant whose
condition and preconditions hold and whose effect makes a false leaf of the stop rule true.

A model that waits, or stops short, while such a grant stands is not asked again in words:
the engine routes the check to that act itself, the first such grant in the person's order
when several stand (a model that acts names its own); with none, its route stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from goalkeeper.core import authority, reading
from goalkeeper.core.goals import LeafValue, evaluate
from goalkeeper.core.models import (
    _WORKLOADS,
    LIST_ENTRY_MAX,
    ActionKind,
    ActionRequest,
    ConditionState,
    GoalLeaf,
    GoalRule,
    GoalState,
    GrantCondition,
    GrantVerb,
    LeafKind,
    NamedIn,
    ObjectFacts,
    ObjectRef,
    Observation,
    Route,
    TypedGrant,
    WorkState,
)
from goalkeeper.core.progress import clip


@dataclass(frozen=True)
class Move:
    """A grant, the false leaf its act makes true, and that leaf's value as read."""

    grant: TypedGrant
    leaf: GoalLeaf
    value: LeafValue

    def action(self) -> ActionRequest:
        """The act, in the fields a model's request carries, every one from the record."""
        grant, leaf = self.grant, self.leaf
        return grant_act(
            grant,
            incomplete=f'"{leaf.quote}" does not hold ({self.value.reason})',
            evidence=self.value.reason,
            verification=f'The next check reads whether "{leaf.quote}" holds.',
            failure_id=f"{leaf.id}-{leaf.kind.value}-false",
            state_id=f"{grant.id}-{leaf.id}",
        )


def grant_act(
    grant: TypedGrant,
    *,
    incomplete: str,
    evidence: str,
    verification: str,
    failure_id: str,
    state_id: str,
) -> ActionRequest:
    """The act of a grant on one object, in the fields a model's request carries: what it
    does, its authority and its object from the record; why it is asked, from the caller."""
    assert grant.object is not None  # only grants on one object are acted on by the engine
    return ActionRequest(
        kind=ActionKind.recover if grant.verb is GrantVerb.rerun else ActionKind.advance,
        incomplete=incomplete,
        evidence=evidence,
        action=reading.grant_line(grant),
        authorizedActionId=grant.id,
        authorityBasis=f'The words say: "{grant.quote}"',
        mutationSet=[authority.entry_of(grant.object)],
        verification=verification,
        failureId=failure_id,
        targetStateId=state_id,
    )


def applicable_moves(
    rule: GoalRule | None,
    grants: Sequence[TypedGrant],
    facts: Sequence[ObjectFacts],
    *,
    checks: int,
    paid: bool = False,
) -> list[Move]:
    """Each grant the act step does by code alone, unpaid (with `paid`: paid only), whose
    condition holds and whose act would change something the facts show, paired with a
    false leaf of a done group that its act makes true; at most one move per grant."""
    return [
        move
        for move in _false_leaf_moves(rule, grants, facts, checks=checks)
        if move.grant.paid is paid
        and (move.grant.condition is None or authority.condition_holds(move.grant.condition, facts))
    ]


def settled_move(
    rule: GoalRule | None,
    grants: Sequence[TypedGrant],
    facts: Sequence[ObjectFacts],
    *,
    checks: int,
    unanswered: str,
) -> Observation | None:
    """The check's observation when the model gave no valid answer (`unanswered` says what
    it was last told) and a grant makes a false leaf true by the facts: that act, the first
    in the person's order, as the engine would take it over a wait. None when none does."""
    found = applicable_moves(rule, grants, facts, checks=checks)
    if not found:
        return None
    move = found[0]
    action = move.action()
    said = clip(
        f"{action.incomplete}; grant {move.grant.id} ({action.action}) makes it hold.",
        LIST_ENTRY_MAX,
    )
    return Observation(
        route=Route.act,
        goal=GoalState.incomplete,
        work=WorkState.idle,
        observation=said,
        report=said,
        reason=clip(
            f"The model gave no valid answer ({unanswered}); settled by the facts and the "
            f"person's grant: {said}",
            LIST_ENTRY_MAX,
        ),
        action=action,
    )


def coming_moves(
    rule: GoalRule | None,
    grants: Sequence[TypedGrant],
    facts: Sequence[ObjectFacts],
    *,
    checks: int,
) -> list[Move]:
    """Each grant, paid or not, that would move a false leaf but for its condition, which
    does not hold yet and is on its way with no act (the Job it waits for runs): the moves a
    wait leads to."""
    return [
        move
        for move in _false_leaf_moves(rule, grants, facts, checks=checks)
        if move.grant.condition is not None
        and authority.condition_coming(move.grant.condition, facts)
    ]


# The leaves whose state an object may reach with no act, as the condition that state is.
_COMING_STATES = {
    LeafKind.jobSucceeded: ConditionState.succeeded,
    LeafKind.workloadAvailable: ConditionState.available,
}


def coming_leaves(
    rule: GoalRule | None, facts: Sequence[ObjectFacts], *, checks: int
) -> list[tuple[GoalLeaf, LeafValue, ObjectRef]]:
    """Each false leaf of a done group whose own object is on its way to it with no act
    (a Job that runs toward "has succeeded", a workload rolling out toward "available"),
    with its value and that object as the facts name it."""
    if rule is None or not rule.done:
        return []
    found = evaluate(rule, facts, checks=checks, unchanged=0, judged={})
    coming = []
    for leaf in (leaf for group in rule.done for leaf in group):
        state = _COMING_STATES.get(leaf.kind)
        value = found.leaves[leaf.id]
        if value.value is False and rolls_out_toward(leaf, rule.namespace, facts):
            assert leaf.object is not None  # a podsStartedAfter leaf names its workload
            coming.append((leaf, value, leaf.object.model_copy(update={"namespace": ""})))
            continue
        if state is None or leaf.negated or leaf.object is None or value.value is not False:
            continue
        if leaf.object.namespace != rule.namespace:
            continue  # facts are read in the Monitor's namespace only
        ref = leaf.object.model_copy(update={"namespace": ""})
        if authority.condition_coming(GrantCondition(object=ref, state=state), facts):
            coming.append((leaf, value, ref))
    return coming


def rolls_out_toward(leaf: GoalLeaf, namespace: str, facts: Sequence[ObjectFacts]) -> bool:
    """Whether the pods a podsStartedAfter leaf is about are being replaced now: the newest
    may start after what the leaf counts from with no further act. `namespace`: the rule's."""
    if leaf.kind is not LeafKind.podsStartedAfter or leaf.negated or leaf.object is None:
        return False
    if leaf.object.namespace != namespace:
        return False  # facts are read in the Monitor's namespace only
    fact = authority.fact_of(leaf.object.model_copy(update={"namespace": ""}), facts)
    return fact is not None and fact.rollingOut is True


# Verbs whose effect the facts read: a key's value or a repair's is not.
_OFFERABLE = frozenset(GrantVerb) - {GrantVerb.setKey, GrantVerb.repair}


def offered_acts(
    rule: GoalRule | None, grants: Sequence[TypedGrant], facts: Sequence[ObjectFacts]
) -> list[ActionRequest]:
    """For a stop rule no typed leaf decides: the act of each unpaid grant on an object the
    stop rule names whose condition holds and whose act would change something the facts
    show. Whether it moves the goal only the person who wrote both can say, so such an act
    is offered to them, never taken alone."""
    if rule is not None and any(leaf.kind is not LeafKind.judged for leaf in rule.leaves()):
        return []  # typed leaves decide by moves
    named = {(f.kind.value, f.name) for f in facts if NamedIn.stopWhen in f.namedIn}
    return [
        grant_act(
            grant,
            incomplete="The model saw no grant for what the goal needs.",
            evidence=f"{grant.object.ref} is named by the stop rule, and the grant applies now.",
            verification="The next check reads the stop rule again.",
            failure_id=f"{grant.id}-offered",
            state_id=f"{grant.id}-offered",
        )
        for grant in grants
        if grant.object is not None
        and not grant.object.namespace
        and (grant.object.kind, grant.object.name) in named
        and grant.verb in _OFFERABLE
        and not grant.paid
        and (grant.condition is None or authority.condition_holds(grant.condition, facts))
        and authority.precondition_unmet(grant, facts) is None
    ]


def _false_leaf_moves(
    rule: GoalRule | None,
    grants: Sequence[TypedGrant],
    facts: Sequence[ObjectFacts],
    *,
    checks: int,
) -> list[Move]:
    """Each grant done by code alone whose act would change something the facts show,
    paired with the first false typed leaf of a done group its act makes true, else with the
    condition of another grant that would (resume Job a, so that the grant on Job b once Job
    a has succeeded may apply); whatever its own condition and cost."""
    if rule is None or not rule.done:
        return []
    found = evaluate(rule, facts, checks=checks, unchanged=0, judged={})
    false = [
        (leaf, found.leaves[leaf.id])
        for group in rule.done
        for leaf in group
        if found.leaves[leaf.id].value is False
        and leaf.kind is not LeafKind.judged
        and not rolls_out_toward(leaf, rule.namespace, facts)
    ]
    usable = [g for g in grants if authority.by_code(g) and g.object is not None]
    usable = [g for g in usable if authority.precondition_unmet(g, facts) is None]
    movers = [g for g in usable if any(_moves(g, leaf, rule.namespace) for leaf, _ in false)]
    conditions = [_condition_target(g, rule, facts) for g in movers]
    targets = false + [t for t in conditions if t is not None]
    moves = []
    for grant in usable:
        target = next((t for t in targets if _moves(grant, t[0], rule.namespace)), None)
        if target is not None:
            moves.append(Move(grant, *target))
    return moves


# The leaf a grant's condition is, for the states a grant's act can bring about.
_CONDITION_LEAVES: dict[tuple[ConditionState, str], LeafKind] = {
    (ConditionState.succeeded, "Job"): LeafKind.jobSucceeded,
    (ConditionState.suspended, "Job"): LeafKind.jobSuspended,
    (ConditionState.suspended, "CronJob"): LeafKind.cronjobSuspended,
    **{(ConditionState.available, kind): LeafKind.workloadAvailable for kind in _WORKLOADS},
}


def _condition_target(
    grant: TypedGrant, rule: GoalRule, facts: Sequence[ObjectFacts]
) -> tuple[GoalLeaf, LeafValue] | None:
    """A grant's condition as a leaf with its value, when it holds not and nothing brings
    it about by itself: the state another grant's act may bring about; else None."""
    condition = grant.condition
    if condition is None or authority.condition_holds(condition, facts) is not False:
        return None
    if authority.condition_coming(condition, facts):
        return None
    kind = _CONDITION_LEAVES.get((condition.state, condition.object.kind))
    if kind is None:
        return None
    leaf = GoalLeaf(
        id=f"{grant.id}-condition",
        kind=kind,
        object=condition.object.model_copy(
            update={"namespace": condition.object.namespace or rule.namespace}
        ),
        quote=f"{condition} (the condition of grant {grant.id})",
    )
    alone = GoalRule(namespace=rule.namespace, done=[[leaf]])
    value = evaluate(alone, facts, checks=0, unchanged=0, judged={}).leaves[leaf.id]
    return (leaf, value) if value.value is False else None


def _moves(grant: TypedGrant, leaf: GoalLeaf, namespace: str) -> bool:
    """Whether the grant's act makes the leaf true: it acts on the leaf's object, and its
    effect is the leaf's state."""
    ref, obj = grant.object, leaf.object
    if ref is None or obj is None or (ref.kind, ref.name) != (obj.kind, obj.name):
        return False
    if (ref.namespace or namespace) != obj.namespace:
        return False
    kind, negated = leaf.kind, leaf.negated
    match grant.verb:
        case GrantVerb.resume:
            return (kind in (LeafKind.jobSucceeded, LeafKind.jobRunning) and not negated) or (
                kind is LeafKind.jobSuspended and negated
            )
        case GrantVerb.suspend:
            return kind in (LeafKind.jobSuspended, LeafKind.cronjobSuspended) and not negated
        case GrantVerb.restart:
            return kind is LeafKind.podsStartedAfter and not negated
        case GrantVerb.rerun:
            return kind is LeafKind.jobSucceeded and not negated
        case GrantVerb.scale:
            n = grant.replicas or 0
            if kind is LeafKind.workloadReplicas:
                return not negated and leaf.count == n
            return kind is LeafKind.workloadAvailable and not negated and 0 < (leaf.count or 1) <= n
        case GrantVerb.setKey:
            return (
                kind is LeafKind.configMapKey
                and not negated
                and leaf.key == grant.key
                and [leaf.value] == grant.values
            )
    return False
