"""Builders for observations and action results, shared by unit and end-to-end tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from goalkeeper.core.models import ActionResult, Observation


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
