"""Builders for observations and action results, shared by unit and end-to-end tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from goalkeeper.core.models import ActionResult, AuthorityExtraction, Observation

# The standard task: its sentences grant what `contract()` and `AUTHORIZED` list, each in a
# form the engine reads whole (core/reading.py).
TASK = (
    "Finish the nightly build: Job build in this namespace must complete. You may resume "
    "Job build. You may fix the build configuration through the repair flow. Do not change "
    "anything else."
)
RESUME = "You may resume Job build."
FIX = "You may fix the build configuration through the repair flow."
FINISH = "Finish the nightly build: Job build in this namespace must complete."


def extraction(**overrides: Any) -> dict[str, Any]:
    """What an extract step reads from `TASK`: the grants of `contract()` and
    `AUTHORIZED`, each quoting the sentence that gives it."""
    return {
        "goal": "All 27 modules of the nightly build have verified outputs.",
        "allowedSystems": [{"entry": "Job build in namespace default", "quote": FINISH}],
        "allowedResources": [{"entry": "jobs/build", "quote": RESUME}],
        "allowedRecoveryActions": [{"entry": "resume the build Job", "quote": RESUME}],
        "authorizedActions": [
            {**AUTHORIZED[0], "quote": RESUME},
            {**AUTHORIZED[1], "quote": FIX},
        ],
        "forbiddenChanges": ["source code", "the model provider"],
        "requiredChecks": ["outputs verified"],
        "stopConditions": ["all 27 modules verified"],
        **overrides,
    }


# A verb the engine grants for each kind, and how a person writes it.
_SAYS = {
    "Job": "resume Job {name}",
    "CronJob": "resume CronJob {name}",
    "Deployment": "restart Deployment {name}",
    "StatefulSet": "restart StatefulSet {name}",
    "DaemonSet": "restart DaemonSet {name}",
    "ConfigMap": "set key value of ConfigMap {name} to on",
}


# Ways to say the same grant again, so that each action quotes a sentence of its own.
_AGAIN = ("", " if needed", " when needed", " as needed", " if necessary", " when necessary")


def granting(observed: Observation) -> tuple[str, AuthorityExtraction]:
    """Sentences a person could have written to grant the authority `observed` states, and
    the extraction that quotes them: for tests whose subject is what happens after the
    authority is recorded. Each authorized action is a grant on the next allowed resource
    of a kind the engine can grant (a repair workflow when none is left); a resource no
    action uses, or of a kind no verb acts on, is not granted."""
    from goalkeeper.core.mutations import KubeTarget, parse_entry

    said: list[str] = []

    def say(sentence: str) -> str:
        said.append(sentence)
        return sentence

    found = observed.contract
    objects = []
    for entry in found.allowedResources:
        target = parse_entry(entry, "")
        if isinstance(target, KubeTarget) and target.kind in _SAYS and "*" not in target.name:
            objects.append((target.kind, target.name))
    actions = []
    for n, a in enumerate(observed.authorizedActions or []):
        if n < len(objects):
            kind, name = objects[n]
            sentence = f"You may {_SAYS[kind].format(name=name)}{_AGAIN[n % len(_AGAIN)]}."
        else:
            sentence = f"You may fix step {n} through the repair flow."
        actions.append(
            {"id": a.id, "description": a.description, "paid": a.paid, "quote": say(sentence)}
        )
    ceiling = None
    if found.costCeiling is not None:
        amount, currency = found.costCeiling.amount, found.costCeiling.currency
        ceiling = {
            "amount": amount,
            "currency": currency,
            "quote": say(f"The cost ceiling is {amount} {currency}."),
        }
    # Prose grants nothing: each entry quotes one plain sentence.
    prose = ("allowedSystems", "allowedFiles", "allowedRecoveryActions")
    notes = say("The notes below come with the grants.")
    quoted = {
        field: [{"entry": entry, "quote": notes} for entry in getattr(found, field)]
        for field in prose
    }
    body = {
        "goal": found.goal,
        **quoted,
        "authorizedActions": actions,
        "costCeiling": ceiling,
        "forbiddenChanges": found.forbiddenChanges,
        "protectedContracts": found.protectedContracts,
        "requiredChecks": found.requiredChecks,
        "stopConditions": found.stopConditions,
    }
    return " ".join(said), AuthorityExtraction.model_validate(body)


def contract(**overrides: Any) -> dict[str, Any]:
    return {
        "goal": "All 27 modules of the nightly build have verified outputs.",
        "allowedSystems": ["Job build in namespace default"],
        "allowedResources": ["jobs/build"],
        "forbiddenChanges": ["source code", "the model provider"],
        "costCeiling": None,
        "requiredChecks": ["outputs verified"],
        "stopConditions": ["all 27 modules verified"],
        "allowedRecoveryActions": ["resume the build Job"],
        **overrides,
    }


AUTHORIZED = [
    {"id": "resume-build", "description": "Resume the build Job from saved outputs."},
    {"id": "fix-config", "description": "Fix the build configuration through the repair flow."},
]


def action(**overrides: Any) -> dict[str, Any]:
    return {
        "kind": "advance",
        "incomplete": "6 of 27 modules have no output.",
        "evidence": "Job build is suspended; 21 outputs exist.",
        "action": "Resume Job build (set spec.suspend=false).",
        "authorizedActionId": "resume-build",
        "authorityBasis": "The task allows resuming the build from saved outputs.",
        "mutationSet": ["jobs/build"],
        "verification": "Job build has an active pod and no new failures.",
        "failureId": "build-suspended",
        "targetStateId": "build-21-of-27",
        **overrides,
    }


def observation_dict(route: str = "wait", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "route": route,
        "goal": "incomplete",
        "work": {"wait": "running", "act": "idle", "stop": "complete"}[route],
        "observation": "Job build: 21/27 modules done, one pod running.",
        "report": "The build is running: 21 of 27 modules are done.",
        "reason": {
            "wait": "Work is moving.",
            "act": "Idle with an authorized action.",
            "stop": "Done.",
        }[route],
        "contract": contract(),
        "authorizedActions": AUTHORIZED,
    }
    if route == "act":
        body["action"] = action()
    if route == "stop":
        body["goal"] = "complete"
        body["stopReason"] = "goalComplete"
    body.update(overrides)
    return body


def observation(route: str = "wait", **overrides: Any) -> Observation:
    return Observation.model_validate(observation_dict(route, **overrides))


def track(
    key: str, completed: float, total: float | None, at: datetime, **overrides: Any
) -> dict[str, Any]:
    return {
        "key": key,
        "label": overrides.pop("label", key),
        "status": overrides.pop("status", "running"),
        "completed": completed,
        "total": total,
        "unit": overrides.pop("unit", "modules"),
        "observedAt": at.isoformat(),
        **overrides,
    }


def result(outcome: str = "succeeded", **overrides: Any) -> ActionResult:
    return ActionResult.model_validate(
        {
            "outcome": outcome,
            "evidence": f"The action {outcome}.",
            "changed": ["jobs/build"],
            **overrides,
        }
    )


CONTRACT_LISTS = (
    "allowedFiles",
    "allowedSystems",
    "allowedResources",
    "forbiddenChanges",
    "protectedContracts",
    "requiredChecks",
    "stopConditions",
    "allowedRecoveryActions",
)


def maximal_dict(route: str = "wait", n: int = 0, at: datetime | None = None) -> dict[str, Any]:
    """An observation with every field at its bound (the most a model can make us store)."""
    from goalkeeper.core.models import ACTIONS_MAX, LIST_ENTRIES, LIST_TOTAL_MAX, TRACKS_MAX

    entry = LIST_TOTAL_MAX // LIST_ENTRIES - 3
    lists = {k: [f"{i:02d}-" + "x" * entry for i in range(LIST_ENTRIES)] for k in CONTRACT_LISTS}
    observed = (at or datetime(2026, 12, 1, tzinfo=UTC)).isoformat()
    return {
        "route": route,
        "goal": "incomplete",
        "work": "running",
        "observation": "o" * 8000,
        "report": "r" * 4000,
        "reason": "e" * 2000,
        "contract": {"goal": "g" * 8000, **lists},
        "authorizedActions": [
            {"id": f"a{i}-" + "i" * 190, "description": "d" * 1000} for i in range(ACTIONS_MAX)
        ],
        "progress": [
            {
                "key": f"k{i}-" + "k" * 190,
                "label": "l" * 200,
                "status": "running",
                "completed": n,
                "total": 10**9,
                "unit": "u" * 40,
                "observedAt": observed,
            }
            for i in range(TRACKS_MAX)
        ],
    }


def paid_observation(
    ceiling: float | None,
    estimate: float,
    approval: str | None = "budget-42",
    observed: float | None = None,
) -> Observation:
    """An act observation asking for a paid action against a ceiling in USD."""
    extra = (
        {"observedSpend": {"amount": observed, "currency": "USD"}} if observed is not None else {}
    )
    return observation(
        "act",
        contract=contract(
            costCeiling=None if ceiling is None else {"amount": ceiling, "currency": "USD"}
        ),
        action=action(estimatedCost={"amount": estimate, "currency": "USD"}, approval=approval),
        **extra,
    )
