"""Facts beat words: an observation whose claims the objects' own state contradicts is refused.

A step's code reads the objects the stop rule, the task and the action name (`ObjectFacts`)
after the model answered. The objects the goal is about are those the stop rule names, or,
when it names none, those the task names. Only plain contradictions count, each one a state
the claim cannot be true in, so a correct observation is never refused for a guess:

- goal `complete` while such a Job has not ended, or such a workload's rollout is short,
  or it has fewer available (and ready) replicas than the stop rule's own number for it
  ("checkout-api has 2 available replicas");
- work `idle` while such a Job runs; work `running` while every such object is a Job that
  is suspended with nothing active;
- an action but a repair on a Job of its mutation set that has succeeded, and an `advance`
  (start, resume) on one that runs or has ended;
- a restart of a workload of its mutation set whose running pods all started after every
  named ConfigMap they read was last written.

A scale to the count a workload's spec already asks for is the typed grant's precondition
(`authority.precondition_unmet`): the engine waits on it, no words of the answer are read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from hashlib import sha256
from typing import Any

from goalkeeper.core.goals import evaluate, refuted_completion
from goalkeeper.core.models import (
    ActionKind,
    AuthorizedAction,
    FactKind,
    GoalRule,
    GoalState,
    GrantVerb,
    JobEnd,
    LeafKind,
    NamedIn,
    ObjectFacts,
    Observation,
    ObservedStopReason,
    SyncedBy,
    WorkState,
)
from goalkeeper.core.moves import rolls_out_toward
from goalkeeper.core.mutations import KubeTarget, parse_entry

# Tokens that may be an object's name: DNS subdomains as Kubernetes allows them.
_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?")
_WORKLOADS = frozenset({FactKind.Deployment, FactKind.StatefulSet, FactKind.DaemonSet})


def names_in(text: str) -> set[str]:
    """Every token of `text` that could name an object (lowercase words, `a-b.c`)."""
    return set(_NAME.findall(text))


def action_names(mutation_set: Iterable[str], namespace: str) -> set[tuple[FactKind, str]]:
    """(kind, name) of each object of a fact kind that an action's mutation set names in
    the monitor's namespace, globs left out."""
    kinds = {k.value: k for k in FactKind}
    named = set()
    for entry in mutation_set:
        target = parse_entry(entry, namespace)
        if not isinstance(target, KubeTarget) or target.namespace != namespace:
            continue
        if target.kind in kinds and "*" not in target.name:
            named.add((kinds[target.kind], target.name))
    return named


def goal_print(facts: Sequence[ObjectFacts]) -> str:
    """What the objects the goal names hold, as a digest: two checks with the same print read
    the same states and counts of them. '' when the step read none of them."""
    goal = sorted(goal_objects(facts), key=lambda f: f.ref)
    if not goal:
        return ""
    held = [f.model_dump(mode="json", exclude={"namedIn"}) for f in goal]
    return sha256(json.dumps(held, sort_keys=True).encode()).hexdigest()[:16]


def goal_objects(facts: Sequence[ObjectFacts]) -> list[ObjectFacts]:
    """The objects the goal is about: named by the stop rule, else by the task."""
    for where in (NamedIn.stopWhen, NamedIn.task):
        chosen = [f for f in facts if where in f.namedIn]
        if chosen:
            return chosen
    return []


def job_runs(job: ObjectFacts) -> bool:
    return job.ended is None and not job.suspended and bool(job.active)


def describe(fact: ObjectFacts) -> str:
    """The state a refusal names, from numbers and fixed words only."""
    if fact.kind is FactKind.Job:
        state = (
            f"ended {fact.ended.value}"
            if fact.ended is not None
            else "suspended"
            if fact.suspended
            else "not ended"
        )
        return (
            f"Job {fact.name} is {state}: active {fact.active or 0}, succeeded "
            f"{fact.succeeded or 0}, failed {fact.failed or 0}"
        )
    if fact.kind is FactKind.CronJob:
        return f"CronJob {fact.name}: suspended {bool(fact.suspended)}, active {fact.active or 0}"
    if fact.kind is FactKind.ConfigMap:
        return f"ConfigMap {fact.name}: keys {', '.join(sorted(fact.data or {})) or 'none'}"
    return (
        f"{fact.kind.value} {fact.name} has {fact.availableReplicas or 0} available, "
        f"{fact.readyReplicas or 0} ready and {fact.updatedReplicas or 0} updated of "
        f"{fact.replicas or 0} replicas"
    )


def _rollout_short(fact: ObjectFacts) -> bool:
    want = fact.replicas or 0
    return any((n or 0) < want for n in (fact.availableReplicas, fact.updatedReplicas))


def contradiction(
    observation: Observation,
    facts: Sequence[ObjectFacts],
    goal_rule: GoalRule | None = None,
    check: int = 0,
    actions: Sequence[AuthorizedAction] | None = None,
) -> str | None:
    """The first claim of `observation` that `facts` contradict, as a sentence; else None.
    A claim of completion is held against `goal_rule`, the stop rule's predicates, at
    `check`, the check answered; an act against the recorded `actions`, when given."""
    goal = goal_objects(facts)
    jobs = [f for f in goal if f.kind is FactKind.Job]
    if observation.goal is GoalState.complete:
        # An object a typed leaf names is the leaves' to judge ("Job a or Job b succeeded").
        typed = {
            (leaf.object.kind, leaf.object.name)
            for leaf in (goal_rule.leaves() if goal_rule is not None else [])
            if leaf.object is not None and leaf.kind is not LeafKind.judged
        }
        for fact in (f for f in goal if (f.kind.value, f.name) not in typed):
            unfinished = fact.kind is FactKind.Job and fact.ended is None
            if unfinished or (fact.kind in _WORKLOADS and _rollout_short(fact)):
                return f"goal 'complete' contradicts what the step read: {describe(fact)}."
            if fact.kind is FactKind.Job and fact.ended is JobEnd.Failed and not fact.succeeded:
                # A stop rule may end the run on a failure; the goal is still not met.
                return (
                    f"goal 'complete' contradicts what the step read: {describe(fact)}: a Job "
                    "that failed completes no goal (route act when the task allows a re-run, "
                    "else stop with goal incomplete)."
                )
        refuted = refuted_completion(goal_rule, facts, checks=check)
        if refuted is not None:
            return refuted
    if observation.stopReason is ObservedStopReason.outsideAuthority:
        for job in jobs:
            if job_runs(job):
                # While it runs by itself, the goal needs no change yet, allowed or not.
                return (
                    f"route 'stop' contradicts what the step read: {describe(job)}, so it "
                    "still runs and needs no change yet: route wait while it moves, or act "
                    "when an action the task allows would help."
                )
    if observation.work is WorkState.idle:
        for job in jobs:
            if job_runs(job):
                return f"work 'idle' contradicts what the step read: {describe(job)}."
    held = bool(jobs) and len(jobs) == len(goal)
    held = held and all(j.suspended and j.ended is None and not j.active for j in jobs)
    if observation.work is WorkState.running and held:
        return f"work 'running' contradicts what the step read: {describe(jobs[0])}."
    # Every workload the goal names is scaled to zero: nothing of it runs.
    idle = bool(goal) and all(
        f.kind in _WORKLOADS and not f.replicas and not f.availableReplicas for f in goal
    )
    if observation.work is WorkState.running and idle:
        return (
            f"work 'running' contradicts what the step read: {describe(goal[0])}, so nothing "
            "of it runs."
        )
    action = observation.action
    if action is None:
        return None
    verb = next((a.verb for a in actions or () if a.id == action.authorizedActionId), None)
    if verb is GrantVerb.restart:
        restarted = restarted_already(goal_rule, facts, check)
        if restarted is not None:
            return f"a restart contradicts the stop rule: {restarted}."
    for fact in facts:
        if NamedIn.action not in fact.namedIn or fact.kind is not FactKind.Job:
            continue
        # A repair goes through the repair workflow, which may fix more than the Job.
        if fact.ended is JobEnd.Complete and action.kind is not ActionKind.repair:
            return f"an action on a Job that has succeeded changes nothing: {describe(fact)}."
        if action.kind is ActionKind.advance and (job_runs(fact) or fact.ended is not None):
            return (
                "an 'advance' action (start or resume) contradicts what the step read: "
                f"{describe(fact)}."
            )
    return None


def restarted_already(
    goal_rule: GoalRule | None, facts: Sequence[ObjectFacts], check: int
) -> str | None:
    """Why no restart is needed by the stop rule's own words: a leaf that the pods of a
    workload started after some moment holds, or their rollout toward it is under way.
    None when no such leaf is there to say it (a restart for another reason stands)."""
    if goal_rule is None:
        return None
    found = evaluate(goal_rule, facts, checks=check, unchanged=0, judged={})
    for leaf in goal_rule.leaves():
        value = found.leaves[leaf.id]
        if leaf.kind is not LeafKind.podsStartedAfter or leaf.negated or leaf.object is None:
            continue
        if leaf.object.namespace != goal_rule.namespace:
            continue  # facts are read in the Monitor's namespace only
        if value.value is True:
            return f'"{leaf.quote}" holds ({value.reason})'
        if value.value is False and rolls_out_toward(leaf, goal_rule.namespace, facts):
            rolling = f"{leaf.object.kind} {leaf.object.name}"
            return f'"{leaf.quote}" is on its way: the rollout of {rolling} is under way'
    return None


# Who keeps an object in sync, by the label or annotation they stamp on it.
_GITOPS_LABELS = (
    ("argocd.argoproj.io/instance", "Argo CD", "application"),
    ("kustomize.toolkit.fluxcd.io/name", "Flux", "Kustomization"),
    ("helm.toolkit.fluxcd.io/name", "Flux", "HelmRelease"),
)
_GITOPS_ANNOTATIONS = (("argocd.argoproj.io/tracking-id", "Argo CD"),)


def synced_by(obj: Mapping[str, Any]) -> SyncedBy | None:
    """The GitOps controller that keeps `obj` in sync (Argo CD's application, Flux's
    Kustomization or HelmRelease), from the marks it leaves; None when none."""
    meta = obj.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    for key, who in _GITOPS_ANNOTATIONS:
        if key in notes:
            return SyncedBy(
                controller=who, source=f"application {str(notes[key]).split(':')[0]}"[:300]
            )
    for key, who, what in _GITOPS_LABELS:
        if key in labels:
            return SyncedBy(controller=who, source=f"{what} {labels[key]}"[:300])
    return None
