"""The repair step: hand-off to the configured workflow command, or blocked without one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.support.step_fakes import step_input

from goalkeeper.core.models import ActionResult, StepErrorKind
from goalkeeper.step.repair import NOT_CONFIGURED, repair_request, run_repair

WORKFLOW = """
import json, os, sys
request = json.load(open(os.environ["GOALKEEPER_REPAIR_REQUEST"]))
copy = sys.argv[1] if len(sys.argv) > 1 else None
if copy:
    json.dump(request, open(copy, "w"))
mode = sys.argv[2] if len(sys.argv) > 2 else "ok"
if mode == "ok":
    json.dump({"outcome": "succeeded", "evidence": "Merged fix for " + request["failureId"],
               "changed": ["repo:build/config.yaml"]},
              open(os.environ["GOALKEEPER_REPAIR_OUTCOME"], "w"))
elif mode == "invalid":
    json.dump({"outcome": "maybe"}, open(os.environ["GOALKEEPER_REPAIR_OUTCOME"], "w"))
elif mode == "sleep":
    import time; time.sleep(30)
elif mode == "crash":
    print("exploded", file=sys.stderr); sys.exit(3)
"""


def workflow(tmp_path: Path, mode: str = "ok") -> tuple[list[str], Path]:
    script = tmp_path / "workflow.py"
    script.write_text(WORKFLOW)
    copy = tmp_path / "seen-request.json"
    return [sys.executable, str(script), str(copy), mode], copy


def test_without_a_workflow_the_step_is_blocked() -> None:
    outcome = run_repair(step_input("repair"), None)
    assert outcome.ok
    assert outcome.result == {"outcome": "blocked", "evidence": NOT_CONFIGURED, "changed": []}
    assert NOT_CONFIGURED == "No repair workflow is configured."
    ActionResult.model_validate(outcome.result)


def test_the_workflow_gets_the_request_and_its_outcome_is_the_result(tmp_path: Path) -> None:
    argv, copy = workflow(tmp_path)
    step = step_input("repair")
    outcome = run_repair(step, argv, timeout_seconds=30)
    assert outcome.ok, outcome.error
    assert outcome.result == {
        "outcome": "succeeded",
        "evidence": f"Merged fix for {step.action.failureId}",  # type: ignore[union-attr]
        "changed": ["repo:build/config.yaml"],
    }
    seen = json.loads(copy.read_text())
    assert seen == json.loads(json.dumps(repair_request(step)))
    assert seen["actionRequest"]["action"] == "Scale Deployment web to 2 replicas."
    assert seen["evidence"] == step.action.evidence  # type: ignore[union-attr]
    assert seen["authority"]["authorizedActionId"] == "resume-build"
    assert seen["authority"]["contract"]["goal"]
    assert seen["constraints"]["mutationSet"] == ["deployments/web"]
    assert seen["constraints"]["forbiddenChanges"] == ["source code", "the model provider"]
    assert "repository" in seen and "delivery" in seen


def test_an_invalid_outcome_fails_as_invalid_output(tmp_path: Path) -> None:
    argv, _ = workflow(tmp_path, "invalid")
    outcome = run_repair(step_input("repair"), argv, timeout_seconds=30)
    assert outcome.error_kind is StepErrorKind.invalidOutput
    assert "outcome" in (outcome.error or "")


def test_no_outcome_file_fails_with_the_output_tail(tmp_path: Path) -> None:
    argv, _ = workflow(tmp_path, "crash")
    outcome = run_repair(step_input("repair"), argv, timeout_seconds=30)
    assert outcome.error_kind is StepErrorKind.invalidOutput
    assert "exited 3" in (outcome.error or "") and "exploded" in (outcome.error or "")


def test_the_workflow_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    argv, _ = workflow(tmp_path, "sleep")
    outcome = run_repair(step_input("repair"), argv, timeout_seconds=1)
    assert outcome.error_kind is StepErrorKind.limits
    assert "1s limit" in (outcome.error or "")


def test_a_missing_program_is_a_configuration_error(tmp_path: Path) -> None:
    outcome = run_repair(step_input("repair"), [str(tmp_path / "no-such-program")])
    assert outcome.error_kind is StepErrorKind.configuration
    assert "GOALKEEPER_REPAIR_COMMAND" in (outcome.error or "")


DUMP_ENV = """
import json, os, sys
json.dump(dict(os.environ), open(sys.argv[1], "w"))
json.dump({"outcome": "succeeded", "evidence": "dumped the environment", "changed": []},
          open(os.environ["GOALKEEPER_REPAIR_OUTCOME"], "w"))
"""


def test_the_workflow_never_sees_the_model_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOALKEEPER_MODEL_API_KEY", "sk-live-do-not-leak")
    monkeypatch.setenv("GOALKEEPER_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("COPY_OF_THE_KEY", "sk-live-do-not-leak")
    monkeypatch.setenv("WORKFLOW_TOKEN", "the-workflow-own-token")
    script, dump = tmp_path / "dump.py", tmp_path / "env.json"
    script.write_text(DUMP_ENV)
    argv = [sys.executable, str(script), str(dump)]
    outcome = run_repair(step_input("repair"), argv, timeout_seconds=30)
    assert outcome.ok, outcome.error
    seen = json.loads(dump.read_text())
    assert not [k for k in seen if k.startswith("GOALKEEPER_MODEL_")]
    assert "sk-live-do-not-leak" not in json.dumps(seen)
    assert seen["WORKFLOW_TOKEN"] == "the-workflow-own-token"
    assert seen["GOALKEEPER_REPAIR_OUTCOME"].endswith("outcome.json")


def test_commands_never_see_the_model_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from goalkeeper.step.processes import run_argv

    monkeypatch.setenv("GOALKEEPER_MODEL_API_KEY", "sk-live-do-not-leak")
    code, output = run_argv(
        [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], 30
    )
    assert code == 0
    assert "GOALKEEPER_MODEL_API_KEY" not in output and "sk-live-do-not-leak" not in output
