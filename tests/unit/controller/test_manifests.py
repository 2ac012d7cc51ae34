"""The objects the operator creates: names, ownership, identity and least privilege."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from goalkeeper.controller import manifests
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.core.engine import LaunchStep
from goalkeeper.core.models import StepInput, StepKind

MONITOR = {
    "metadata": {"name": "nightly-build", "namespace": "builds", "uid": "1234abcd-0000"},
}


def launch(kind: StepKind = StepKind.observe, seq: int = 3) -> LaunchStep:
    step_input = StepInput(kind=kind, check=2, maxChecks=10, task="Finish.", stopWhen="Done.")
    return LaunchStep(seq=seq, kind=kind, input=step_input, at=datetime(2026, 1, 1, tzinfo=UTC))


def created_step(kind: StepKind = StepKind.observe) -> dict:
    step = manifests.monitor_step(MONITOR, launch(kind))
    step["metadata"]["uid"] = "step-uid"
    return step


def test_names_are_deterministic_per_incarnation_and_fit_label_values() -> None:
    uid = "1234abcd-0000"
    assert manifests.step_name("nightly-build", uid, 3, StepKind.act) == "nightly-build-3-act-1234a"
    long = "m" * 200
    name = manifests.step_name(long, uid, 12, StepKind.observe)
    assert len(name) <= 63 and name.endswith("-12-observe-1234a")
    assert name == manifests.step_name(long, uid, 12, StepKind.observe)
    assert name != manifests.step_name("m" * 199, uid, 12, StepKind.observe)
    # a Monitor recreated under the same name never finds the old one's steps by name
    assert name != manifests.step_name(long, "9999ffff-0000", 12, StepKind.observe)


def test_owned_by_needs_the_controller_owner_uid() -> None:
    step = manifests.monitor_step(MONITOR, launch())
    assert manifests.owned_by(step, "1234abcd-0000")
    assert not manifests.owned_by(step, "other-uid")
    step["metadata"]["ownerReferences"][0]["controller"] = False
    assert not manifests.owned_by(step, "1234abcd-0000")
    assert not manifests.owned_by({"metadata": {}}, "1234abcd-0000")


def test_step_pod_names_itself_through_the_downward_api() -> None:
    job = manifests.step_job(created_step(), OperatorSettings(model="openai:m"))
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GOALKEEPER_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["GOALKEEPER_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"


def test_monitor_step_is_owned_by_its_monitor_and_holds_the_whole_input() -> None:
    step = manifests.monitor_step(MONITOR, launch())
    owner = step["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Monitor", "1234abcd-0000", True)
    assert step["metadata"]["labels"]["goalkeeper.dev/monitor"] == "nightly-build"
    assert step["spec"]["input"]["task"] == "Finish."
    assert (step["spec"]["seq"], step["spec"]["check"], step["spec"]["kind"]) == (3, 2, "observe")


@pytest.mark.parametrize(
    ("kind", "account"),
    [
        (StepKind.observe, "goalkeeper-observer"),
        (StepKind.act, "goalkeeper-actor"),
        (StepKind.repair, "goalkeeper-actor"),
    ],
)
def test_job_runs_the_step_as_the_right_account(kind: StepKind, account: str) -> None:
    job = manifests.step_job(created_step(kind), OperatorSettings(model="openai:m"))
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account
    assert pod["containers"][0]["command"] == ["goalkeeper-step", kind.value]
    assert job["metadata"]["ownerReferences"][0]["kind"] == "MonitorStep"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 900


def test_job_is_restricted_and_non_root() -> None:
    job = manifests.step_job(created_step(), OperatorSettings())
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["restartPolicy"] == "Never" and pod["enableServiceLinks"] is False


def test_api_key_comes_as_a_file_of_its_secret_never_in_the_environment() -> None:
    settings = OperatorSettings(
        model="openai:gpt", modelBaseUrl="http://127.0.0.1:9/v1", modelApiKeySecret="model-api"
    )
    pod = manifests.step_job(created_step(), settings)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert "GOALKEEPER_MODEL_API_KEY" not in env
    assert not [e for e in container["env"] if "secretKeyRef" in (e.get("valueFrom") or {})]
    assert env["GOALKEEPER_MODEL_API_KEY_FILE"]["value"] == manifests.MODEL_KEY_FILE
    [volume] = [v for v in pod["volumes"] if v["name"] == manifests.MODEL_KEY_VOLUME]
    assert volume["secret"] == {
        "secretName": "model-api",
        "items": [{"key": "api-key", "path": "api-key"}],
        "defaultMode": 0o400,
    }
    [mount] = [m for m in container["volumeMounts"] if m["name"] == manifests.MODEL_KEY_VOLUME]
    assert mount == {
        "name": manifests.MODEL_KEY_VOLUME,
        "mountPath": manifests.MODEL_KEY_DIR,
        "readOnly": True,
    }
    # without a Secret there is no key to mount
    bare = manifests.step_job(created_step(), OperatorSettings())["spec"]["template"]["spec"]
    assert [v["name"] for v in bare["volumes"]] == ["tmp"]


def test_repair_command_reaches_repair_steps_only() -> None:
    settings = OperatorSettings(repairCommand="/usr/bin/repair --pr")

    def names(kind: StepKind) -> set[str]:
        job = manifests.step_job(created_step(kind), settings)
        return {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert "GOALKEEPER_REPAIR_COMMAND" in names(StepKind.repair)
    assert "GOALKEEPER_REPAIR_COMMAND" not in names(StepKind.act)


def test_report_event_names_one_report_per_check() -> None:
    name = manifests.event_name("nightly-build", "1234abcd-0000", "check-7")
    assert name == "nightly-build.1234abcd.check-7"
    event = manifests.monitor_event(
        MONITOR,
        name=name,
        reason="Report",
        message="Monitor: active",
        warning=False,
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert event["involvedObject"]["uid"] == "1234abcd-0000" and event["type"] == "Normal"


def test_a_report_event_is_one_line_and_carries_the_full_report() -> None:
    full = "Monitor: active\nGoal: incomplete\nWork: running"
    event = manifests.monitor_event(
        MONITOR,
        name="nightly-build.1234abcd.check-1",
        reason="Report",
        message="check 1: goal incomplete, work running",
        warning=False,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        report=full,
    )
    assert "\n" not in event["message"]
    assert event["metadata"]["annotations"][manifests.ANNOTATION_REPORT] == full


def test_a_launch_time_is_read_only_when_it_is_a_time_with_its_zone() -> None:
    at = datetime(2026, 1, 1, 9, 30, 1, 250000, tzinfo=UTC)

    def step(value: object) -> dict:
        return {"metadata": {"annotations": {manifests.ANNOTATION_LAUNCHED_AT: value}}}

    assert manifests.launched_at(step(at.isoformat())) == at
    assert manifests.launched_at(step("2026-01-01T09:30:01")) is None, "no zone: no time"
    assert manifests.launched_at(step("soon")) is None
    assert manifests.launched_at(step(5)) is None
    assert manifests.launched_at({"metadata": {}}) is None
