"""The repair step: hand the repair request to the cluster's configured repair workflow.

The workflow is a command line from `GOALKEEPER_REPAIR_COMMAND`, split like a shell would
and run without one. It receives the request as a JSON file (path in
`GOALKEEPER_REPAIR_REQUEST`) and writes an `ActionResult` JSON to the path in
`GOALKEEPER_REPAIR_OUTCOME`. goalkeeper does not plan, implement or deliver the repair
itself. The workflow runs as any child of the step (`processes.child_process`): its
environment is the step's without the model credentials, and it cannot read the model key.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from goalkeeper.core.models import ActionResult, Outcome, StepErrorKind, StepInput, StepUsage
from goalkeeper.step.agent import StepOutcome
from goalkeeper.step.processes import child_process

NOT_CONFIGURED = "No repair workflow is configured."
TAIL_CHARS = 1500


def repair_request(step: StepInput) -> dict[str, Any]:
    """The JSON the repair workflow receives."""
    if step.action is None:
        raise ValueError("a repair step needs an action request")
    action = step.action
    contract = step.contract
    return {
        "schema": "goalkeeper.dev/repair-request.v1",
        "check": step.check,
        "actionRequest": action.model_dump(mode="json", exclude_none=True),
        "evidence": action.evidence,
        "failureId": action.failureId,
        "targetStateId": action.targetStateId,
        "task": step.task,
        "stopWhen": step.stopWhen,
        # The operators' doctrine pinned with this generation: binding like the task.
        "instructions": (
            step.instructions.model_dump(mode="json", exclude={"namespaceVersion"})
            if step.instructions
            else None
        ),
        "authority": {
            "authorizedActionId": action.authorizedActionId,
            "authorityBasis": action.authorityBasis,
            "authorizedActions": [a.model_dump(mode="json") for a in step.authorizedActions],
            "contract": contract.model_dump(mode="json", exclude_none=True) if contract else None,
        },
        "constraints": {
            "mutationSet": list(action.mutationSet),
            "forbiddenChanges": list(contract.forbiddenChanges) if contract else [],
            "protectedContracts": list(contract.protectedContracts) if contract else [],
            "requiredChecks": list(contract.requiredChecks) if contract else [],
            "costCeiling": (
                contract.costCeiling.model_dump(mode="json")
                if contract and contract.costCeiling
                else None
            ),
            "estimatedCost": (
                action.estimatedCost.model_dump(mode="json") if action.estimatedCost else None
            ),
            "approval": action.approval,
        },
        "repository": {
            "allowedFiles": list(contract.allowedFiles) if contract else [],
            "allowedSystems": list(contract.allowedSystems) if contract else [],
            "allowedResources": list(contract.allowedResources) if contract else [],
        },
        "delivery": {
            "verification": action.verification,
            "requiredChecks": list(contract.requiredChecks) if contract else [],
            "allowedRecoveryActions": list(contract.allowedRecoveryActions) if contract else [],
        },
        "outcomeSchema": ActionResult.model_json_schema(),
    }


def _tail(text: bytes | str | None) -> str:
    if not text:
        return ""
    s = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return s[-TAIL_CHARS:]


def run_repair(
    step: StepInput,
    argv: Sequence[str] | None,
    *,
    timeout_seconds: float = 3600.0,
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
) -> StepOutcome:
    """Run the repair workflow once and turn its outcome file into the step result."""
    if not argv:
        blocked = ActionResult(outcome=Outcome.blocked, evidence=NOT_CONFIGURED)
        return StepOutcome(blocked.model_dump(mode="json", exclude_none=True), StepUsage())
    try:
        request = repair_request(step)
    except ValueError as exc:
        return StepOutcome(None, StepUsage(), str(exc), StepErrorKind.configuration)

    with tempfile.TemporaryDirectory(prefix="goalkeeper-repair-", dir=workdir) as tmp:
        request_path = Path(tmp) / "request.json"
        outcome_path = Path(tmp) / "outcome.json"
        request_path.write_text(json.dumps(request, indent=1))
        paths = {
            "GOALKEEPER_REPAIR_REQUEST": str(request_path),
            "GOALKEEPER_REPAIR_OUTCOME": str(outcome_path),
        }
        try:
            with child_process({**(os.environ if env is None else env), **paths}) as options:
                proc = subprocess.run(
                    list(argv),
                    capture_output=True,
                    timeout=timeout_seconds,
                    check=False,
                    stdin=subprocess.DEVNULL,
                    cwd=tmp,
                    **options,
                )
        except FileNotFoundError as exc:
            return StepOutcome(
                None,
                StepUsage(),
                f"GOALKEEPER_REPAIR_COMMAND cannot be started: {exc}",
                StepErrorKind.configuration,
            )
        except subprocess.TimeoutExpired as exc:
            return StepOutcome(
                None,
                StepUsage(),
                f"the repair workflow ran past its {timeout_seconds:g}s limit and was stopped; "
                f"output tail: {_tail(exc.stderr) or _tail(exc.stdout)}",
                StepErrorKind.limits,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return StepOutcome(
                None,
                StepUsage(),
                f"GOALKEEPER_REPAIR_COMMAND cannot be started: {exc}",
                StepErrorKind.configuration,
            )
        output = _tail(proc.stderr) or _tail(proc.stdout)
        if not outcome_path.exists():
            return StepOutcome(
                None,
                StepUsage(),
                f"the repair workflow exited {proc.returncode} without writing an outcome to "
                f"GOALKEEPER_REPAIR_OUTCOME; output tail: {output}",
                StepErrorKind.invalidOutput,
            )
        try:
            raw = json.loads(outcome_path.read_text())
            result = ActionResult.model_validate(raw)
        except (ValueError, ValidationError) as exc:
            return StepOutcome(
                None,
                StepUsage(),
                f"the repair workflow wrote an invalid outcome (exit {proc.returncode}): "
                f"{str(exc)[:2000]}",
                StepErrorKind.invalidOutput,
            )
    return StepOutcome(result.model_dump(mode="json", exclude_none=True), StepUsage())
