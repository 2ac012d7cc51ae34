"""The reconciler without a cluster: a fake of the APIs that fails calls on demand.

Each test drives one monitor the way the cluster would (a step's pod writes its result)
and checks that whatever fails in between, reconciling again from the current state
converges with nothing lost and nothing doubled.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.fake_api import FakeApi
from tests.support.observations import TASK, action, extraction, observation_dict, track

from goalkeeper.controller import manifests
from goalkeeper.controller.api import JOB_UID_LABEL, Conflict, Transient
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.core.engine import TIMER_JOB_GRACE, LaunchStep
from goalkeeper.core.models import MonitorStatus, StepInput, StepKind, WatchTarget
from goalkeeper.core.progress import prompt_summary

NS = "team-a"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def new_api() -> FakeApi:
    """One Monitor with the standard task and an author who may do anything
    (system:masters), and the step ServiceAccounts in namespace team-a."""
    fake = FakeApi()
    for account in ("goalkeeper-observer", "goalkeeper-actor"):
        fake.put("ServiceAccount", {"metadata": {"name": account, "namespace": NS}})
    fake.put(
        "Monitor",
        {
            "apiVersion": "goalkeeper.dev/v1alpha1",
            "kind": "Monitor",
            "metadata": {
                "name": "build",
                "namespace": NS,
                "annotations": {
                    "goalkeeper.dev/author": "admin",
                    "goalkeeper.dev/author-groups": "system:masters",
                },
            },
            "spec": {"task": TASK, "everyMinutes": 5, "maxChecks": 10},
        },
    )
    return fake


@pytest.fixture
def api() -> FakeApi:
    return new_api()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reconciler(api: FakeApi, clock: Clock) -> Reconciler:
    return Reconciler(api, OperatorSettings(model="openai:m", timeScale=1), clock=clock)


def status(api: FakeApi) -> dict[str, Any]:
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    return dict(monitor.get("status") or {})


def step_in_flight(api: FakeApi) -> dict[str, Any]:
    """The step status records, or else the one its timer launched without a write."""
    st = status(api)
    step = st.get("step") or {"seq": st["stepSeq"] + 1, "kind": "observe"}
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    name = manifests.step_name(
        "build", monitor["metadata"]["uid"], step["seq"], StepKind(step["kind"])
    )
    found = api.get("MonitorStep", NS, name)
    assert found is not None, f"MonitorStep {name} exists"
    return found


def reports(api: FakeApi) -> list[dict[str, Any]]:
    return [e for e in api.all("Event") if e["reason"] == "Report"]


def finish(api: FakeApi, result: dict[str, Any], *, own_pod: bool = True) -> None:
    """The step's pod writes its result, as the admission policy lets only it."""
    step = step_in_flight(api)
    name = step["metadata"]["name"]
    job = api.get("Job", NS, name)
    assert job is not None
    owner = job if own_pod else {"metadata": {"uid": "someone-else"}}
    pod = api.put(
        "Pod",
        {
            "metadata": {
                "name": f"{name}-x7k2p",
                "namespace": NS,
                "ownerReferences": [
                    {"kind": "Job", "uid": owner["metadata"]["uid"], "controller": True}
                ],
            }
        },
    )
    step["status"] = {
        "phase": "Succeeded",
        "result": result,
        "pod": {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
    }
    api.objects[("MonitorStep", NS, name)] = step


async def started(api: FakeApi, reconciler: Reconciler) -> None:
    """The first reconcile launches extract step 1, which reads the task; its pod answers
    with the standard grants of TASK and the next reconcile launches observe step 2."""
    await reconciler.reconcile(NS, "build")
    assert status(api)["step"]["kind"] == "extract"
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    assert status(api)["step"]["kind"] == "observe"


async def test_a_new_monitor_launches_its_first_observe_step(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await reconciler.reconcile(NS, "build")
    st = status(api)
    # The task is read for its authority first, as a step of its own.
    assert st["observedGeneration"] == 1 and st["step"]["kind"] == "extract"
    assert st["step"]["seq"] == 1
    step = step_in_flight(api)
    assert api.get("Job", NS, step["metadata"]["name"]) is not None
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["step"]["kind"] == "observe" and st["step"]["seq"] == 2
    assert [g["field"] for g in st["authority"]["grants"]]
    step = step_in_flight(api)
    assert api.get("Job", NS, step["metadata"]["name"]) is not None
    # Reconciling again changes nothing and creates nothing.
    before = len(api.calls)
    await reconciler.reconcile(NS, "build")
    assert api.count("create_step") == 2 and api.count("create_job") == 2
    assert api.count("patch_monitor_status") == 2 and len(api.calls) > before


async def test_a_failed_status_write_after_the_report_doubles_nothing(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    api.fail("patch_monitor_status", Transient("500 Internal Server Error", 500))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    assert len(reports(api)) == 1, "the report was emitted before the write failed"
    assert status(api)["checks"] == 0
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["checks"] == 1 and st["reportedCheck"] == 1 and st["schedule"]
    assert len(reports(api)) == 1
    assert api.count("create_step") == 2, "the extract step and the one observe step, none doubled"


async def test_a_conflict_decides_again_from_what_is_there(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    api.fail("patch_monitor_status", Transient("reset", None))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    # Someone else touched the Monitor meanwhile: the stale write conflicts and is redone.
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    api.put("Monitor", monitor)
    api.fail("patch_monitor_status", Conflict("modified", 409))
    await reconciler.reconcile(NS, "build")
    assert status(api)["checks"] == 1
    assert len(reports(api)) == 1


async def retried(api: FakeApi, reconciler: Reconciler, clock: Clock) -> dict[str, Any]:
    """The status once the retry a failed or invalid check scheduled has come due."""
    schedule = status(api)["schedule"]
    assert "Retrying at" in schedule["description"], schedule
    clock.now = max(clock.now, datetime.fromisoformat(schedule["nextCheckAt"]))
    await reconciler.reconcile(NS, "build")
    return status(api)


async def test_a_result_from_a_pod_outside_the_job_is_rejected(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"), own_pod=False)
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["checks"] == 0 and "is not a pod of Job" in st["lastRejection"]
    await retried(api, reconciler, clock)
    step = step_in_flight(api)["spec"]
    assert step["seq"] == 3 and step["kind"] == "observe", "observed again"
    assert reports(api) == []
    warned = [e for e in api.all("Event") if e["reason"] == "ObservationRejected"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning"
    assert "is not a pod of Job" in warned[0]["message"]


async def test_a_step_that_vanished_is_observed_again(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await started(api, reconciler)
    step = step_in_flight(api)
    api.delete("MonitorStep", NS, step["metadata"]["name"])
    await reconciler.reconcile(NS, "build")
    st = await retried(api, reconciler, clock)
    step = step_in_flight(api)["spec"]
    assert step["seq"] == 3 and step["kind"] == "observe"
    assert st["stepFailureStreak"] == 1


async def test_an_act_step_starts_only_once_status_records_it(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    api.fail("patch_monitor_status", Transient("timeout", None))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    kinds = sorted(s["spec"]["kind"] for s in api.all("MonitorStep"))
    assert kinds == ["extract", "observe"], "no act step exists before the write that records it"
    await reconciler.reconcile(NS, "build")
    act_step = next(s for s in api.all("MonitorStep") if s["spec"]["kind"] == "act")
    assert status(api)["step"]["seq"] == act_step["spec"]["seq"]
    # Its Job ran and was deleted by hand before the step wrote a result.
    api.delete("Job", NS, act_step["metadata"]["name"])
    await reconciler.reconcile(NS, "build")
    act_jobs = [name for method, name in api.calls if method == "create_job" and "-act-" in name]
    assert act_jobs == [act_step["metadata"]["name"]], "the act Job is never created twice"
    st = status(api)
    # It may have acted before its Job went: the outcome is unknown, not failed.
    assert st["lastAction"]["outcome"] == "unknown"
    assert "deleted before the step wrote a result" in st["lastAction"]["evidence"]
    assert "the next observation decides" in st["lastAction"]["evidence"]
    assert st["step"]["kind"] == "observe", "the effect is verified by observing"


async def test_an_act_job_that_failed_without_a_result_leaves_an_unknown_outcome_and_why(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    await reconciler.reconcile(NS, "build")
    act_step = step_in_flight(api)
    name = act_step["metadata"]["name"]
    job = api.get("Job", NS, name)
    assert job is not None
    # The step did its work, could not write the result, and said so as it exited.
    said = (
        "act Succeeded: outcome=succeeded: Job build resumed | the result was not written: "
        "MaxRetryError: Connection refused"
    )
    api.put(
        "Pod",
        {
            "metadata": {
                "name": f"{name}-q2w3e",
                "namespace": NS,
                "labels": {JOB_UID_LABEL: job["metadata"]["uid"]},
                "creationTimestamp": "2026-01-01T10:00:00Z",
            },
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {"state": {"terminated": {"exitCode": 2, "reason": "Error", "message": said}}}
                ],
            },
        },
    )
    job["status"] = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        ]
    }
    api.objects[("Job", NS, name)] = job
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["lastAction"]["outcome"] == "unknown" and st["step"]["kind"] == "observe"
    evidence = st["lastAction"]["evidence"]
    assert f"Job {name} failed (BackoffLimitExceeded)" in evidence
    assert f"pod {name}-q2w3e ended Error (exit code 2): {said}" in evidence
    assert "the next observation decides" in evidence
    [told] = [e for e in api.all("Event") if e["reason"] == "StepFailed"]
    assert "ended without a result" in told["message"] and said in told["message"]


async def test_an_act_result_whose_job_went_before_it_was_taken_is_an_unknown_outcome(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    await reconciler.reconcile(NS, "build")
    act_step = step_in_flight(api)
    name = act_step["metadata"]["name"]
    finish(api, {"outcome": "succeeded", "evidence": "resumed", "changed": ["jobs/build"]})
    # The Job was deleted by hand after its pod wrote the result: the pod went with it.
    api.delete("Job", NS, name)
    api.delete("Pod", NS, f"{name}-x7k2p")
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["lastAction"]["outcome"] == "unknown" and st["step"]["kind"] == "observe"
    assert "cannot be verified" in st["lastAction"]["evidence"]


async def test_a_recorded_act_step_that_could_not_be_created_is_never_started_later(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    api.fail("create_step", Transient("reset", None))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    assert status(api)["step"]["kind"] == "act", "recorded first"
    await reconciler.reconcile(NS, "build")
    assert not [s for s in api.all("MonitorStep") if s["spec"]["kind"] == "act"]
    st = status(api)
    # The operator cannot tell a step never made from one deleted after it acted.
    assert st["lastAction"]["outcome"] == "unknown" and st["step"]["kind"] == "observe"


async def test_an_act_step_whose_create_answer_was_lost_still_runs(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    api.lose_answer("create_step")
    await reconciler.reconcile(NS, "build")
    act_step = step_in_flight(api)
    assert act_step["spec"]["kind"] == "act"
    assert api.get("Job", NS, act_step["metadata"]["name"]) is not None, (
        "its own create, retried in place, is not taken for an earlier launch"
    )


async def test_an_act_step_made_by_an_earlier_launch_is_not_started_again(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    # The launch creates the step, then its Job create fails after every retry.
    api.fail("create_job", Transient("reset", None))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    act_step = step_in_flight(api)
    assert api.get("Job", NS, act_step["metadata"]["name"]) is None
    await reconciler.reconcile(NS, "build")
    assert api.get("Job", NS, act_step["metadata"]["name"]) is None
    st = status(api)
    # The operator cannot tell a step never made from one deleted after it acted.
    assert st["lastAction"]["outcome"] == "unknown" and st["step"]["kind"] == "observe"


async def test_an_unrecorded_observe_step_gives_way_to_the_step_status_records(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    """An earlier pass launched observe step 3 and lost its status write; this pass,
    deciding from a result it now accepts, records act step 3: the observe step goes."""
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    orphan = manifests.monitor_step(
        monitor,
        LaunchStep(
            seq=3,
            kind=StepKind.observe,
            input=StepInput.model_validate(step_in_flight(api)["spec"]["input"]),
            at=clock.now,
        ),
    )
    api.put("MonitorStep", {**orphan, "metadata": {**orphan["metadata"], "namespace": NS}})
    await reconciler.reconcile(NS, "build")
    seq3 = [s for s in api.all("MonitorStep") if s["spec"]["seq"] == 3]
    assert [s["spec"]["kind"] for s in seq3] == ["act"], "the orphan gave way"
    assert status(api)["step"]["seq"] == 3 and status(api)["step"]["kind"] == "act"


async def test_a_squatted_step_name_stops_the_monitor_and_is_left_alone(
    api: FakeApi, reconciler: Reconciler
) -> None:
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    taken = manifests.step_name("build", monitor["metadata"]["uid"], 1, StepKind.extract)
    api.put("MonitorStep", {"metadata": {"name": taken, "namespace": NS}, "spec": {"seq": 1}})
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "stopped" and st["stop"]["reason"] == "blocked"
    assert taken in st["stop"]["message"] and api.all("Job") == []
    assert api.get("MonitorStep", NS, taken) == {
        "metadata": {**api.objects[("MonitorStep", NS, taken)]["metadata"]},
        "spec": {"seq": 1},
    }


async def test_a_due_timer_is_found_from_status_alone(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    assert status(api)["schedule"]["everyMinutes"] == 5
    clock.now += timedelta(seconds=4)  # timeScale 1: five minutes are five seconds
    await reconciler.reconcile(NS, "build")
    assert api.count("create_step") == 2, "the extract step and the first observe step"
    clock.now += timedelta(seconds=2)
    writes = api.count("patch_monitor_status")
    in_flight = await reconciler.reconcile(NS, "build")
    assert in_flight is not None and in_flight.step is not None and in_flight.step.check == 2
    step = step_in_flight(api)
    assert step["spec"]["check"] == 2 and api.count("create_step") == 3
    assert api.count("patch_monitor_status") == writes, "the launch needs no status write"


async def waiting_then_due(api: FakeApi, reconciler: Reconciler, clock: Clock) -> None:
    """Check 1 accepted with `wait`; the clock is past its timer."""
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    clock.now += timedelta(seconds=6)  # timeScale 1: five minutes are five seconds


async def test_a_timer_step_is_found_again_by_a_restarted_operator(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await waiting_then_due(api, reconciler, clock)
    launched = await reconciler.reconcile(NS, "build")
    writes = api.count("patch_monitor_status")
    restarted = Reconciler(api, reconciler.settings, clock=clock)
    clock.now += timedelta(seconds=1)
    resumed = await restarted.reconcile(NS, "build")
    assert resumed == launched, "the restart finds the same step in flight"
    # Steps 1 (extract), 2 and 3 (observe): the restart made none of its own.
    assert api.count("create_step") == 3 and api.count("patch_monitor_status") == writes
    finish(api, observation_dict("wait"))
    await restarted.reconcile(NS, "build")
    st = status(api)
    assert st["checks"] == 2 and st["stepSeq"] == 3 and st.get("step") is None
    assert api.count("patch_monitor_status") == writes + 1, "one write accepts the check"
    assert len(reports(api)) == 2


async def test_a_timer_step_whose_job_was_never_made_gets_its_job(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await waiting_then_due(api, reconciler, clock)
    api.fail("create_job", Transient("reset", None))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    step = step_in_flight(api)
    assert api.get("Job", NS, step["metadata"]["name"]) is None
    await reconciler.reconcile(NS, "build")
    assert api.get("Job", NS, step["metadata"]["name"]) is not None
    # The extract step, check 1's observe step and the timer's, given its Job.
    assert len(api.all("MonitorStep")) == 3, "the same step, given its Job"
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    assert status(api)["checks"] == 2 and status(api)["stepFailureStreak"] == 0


async def test_a_timer_step_whose_job_vanished_counts_as_failed_once(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await waiting_then_due(api, reconciler, clock)
    await reconciler.reconcile(NS, "build")
    step = step_in_flight(api)
    api.objects.pop(("Job", NS, step["metadata"]["name"]))
    clock.now += TIMER_JOB_GRACE
    await reconciler.reconcile(NS, "build")
    # Recorded at last, as failed: the retry is the next step, not this one again.
    st = await retried(api, reconciler, clock)
    assert st["stepFailureStreak"] == 1 and step_in_flight(api)["spec"]["seq"] == 4, st


async def test_a_refusal_no_retry_can_fix_shows_on_the_monitor_until_it_is_over(
    api: FakeApi, reconciler: Reconciler
) -> None:
    from goalkeeper.controller.api import Permanent
    from goalkeeper.controller.workqueue import WorkQueue

    api.fail("create_job", Permanent("create Job team-a/build-1: 403 Forbidden", 403), times=2)
    recorded: list[str] = []

    async def record(namespace: str, name: str, message: str) -> None:
        recorded.append(message)
        await reconciler.record_refusal(namespace, name, message)

    queue = WorkQueue(reconciler.reconcile, resync_seconds=60, record_refusal=record)
    queue.trigger(NS, "build")
    for _ in range(200):
        if recorded:
            break
        await asyncio.sleep(0.01)
    await queue.close()
    degraded = [c for c in status(api)["conditions"] if c["type"] == "Degraded"]
    assert degraded and degraded[0]["status"] == "True" and degraded[0]["reason"] == "ApiRefused"
    assert "403 Forbidden" in degraded[0]["message"] and "create Job" in degraded[0]["message"]
    # The same refusal again writes nothing more.
    writes = api.count("patch_monitor_status")
    await reconciler.record_refusal(NS, "build", recorded[0])
    assert api.count("patch_monitor_status") == writes
    # Once the API lets the call through, the condition is gone and the step runs.
    with pytest.raises(Permanent):
        await reconciler.reconcile(NS, "build")
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert [c["type"] for c in st["conditions"]] == ["Ready", "Progressing", "Healthy"]
    # The first step runs: the task's reading.
    assert st["step"]["kind"] == "extract" and api.get(
        "Job", NS, step_in_flight(api)["metadata"]["name"]
    )


class HeldChanges:
    """What the target watches hold for the monitor, as `Reconciler` takes them."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, str], tuple[WatchTarget, str]] = {}

    def take(self, key: tuple[str, str]) -> tuple[WatchTarget, str] | None:
        return self.held.pop(key, None)

    def restore(self, key: tuple[str, str], change: tuple[WatchTarget, str]) -> None:
        self.held.setdefault(key, change)


async def test_a_held_target_change_starts_a_recorded_check_and_survives_a_failed_write(
    api: FakeApi, clock: Clock
) -> None:
    changes = HeldChanges()
    reconciler = Reconciler(
        api, OperatorSettings(model="openai:m", timeScale=1), clock=clock, wakes=changes
    )
    await started(api, reconciler)
    watch = [{"apiVersion": "batch/v1", "kind": "Job", "name": "build"}]
    finish(api, observation_dict("wait", watch=watch))
    await reconciler.reconcile(NS, "build")
    assert status(api)["schedule"]["watch"] == watch
    job = WatchTarget(apiVersion="batch/v1", kind="Job", name="build")
    changes.held[(NS, "build")] = (job, "Complete")
    clock.now += timedelta(seconds=2)  # the 5-second timer is not due

    # The write that records the woken check fails: the change is held again, not lost.
    api.fail("patch_monitor_status", Transient("unavailable", 503))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    assert changes.held[(NS, "build")] == (job, "Complete")
    await reconciler.reconcile(NS, "build")
    assert not changes.held
    step = status(api)["step"]
    assert step["wokenBy"] == "Job/build: Complete" and step["check"] == 2
    assert step_in_flight(api)["spec"]["input"]["wokenBy"] == "Job/build: Complete"
    # Only one step was launched for the wake, under the name the write recorded (beside
    # the extract step and check 1's observe step).
    assert len(api.all("MonitorStep")) == 3


# --- steps planted under the operator's names, and its own steps found again -------------


def plant(
    api: FakeApi, like: dict[str, Any], seq: int, name_kind: StepKind, **spec: Any
) -> dict[str, Any]:
    """A copy of MonitorStep `like` under the name of step `seq` of kind `name_kind`, as
    anyone who may create MonitorSteps can make it: owned by the Monitor and labelled like
    the operator's own, with `spec` changed."""
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    name = manifests.step_name("build", monitor["metadata"]["uid"], seq, name_kind)
    planted = copy.deepcopy(like)
    labels = {**planted["metadata"]["labels"], manifests.LABEL_SEQ: str(seq)}
    planted["metadata"] = {
        **{k: v for k, v in planted["metadata"].items() if k not in ("uid", "resourceVersion")},
        "name": name,
        "labels": labels,
    }
    planted["spec"] = {**planted["spec"], "seq": seq, **spec}
    planted.pop("status", None)
    return api.put("MonitorStep", planted)


def last_step(api: FakeApi) -> dict[str, Any]:
    return max(api.all("MonitorStep"), key=lambda s: s["spec"]["seq"])


def assert_stopped_naming(api: FakeApi, planted: dict[str, Any]) -> None:
    """The monitor stopped, naming the step; no Job ran from it and it is as it was."""
    name = planted["metadata"]["name"]
    st = status(api)
    assert st["monitor"] == "stopped" and st["stop"]["reason"] == "blocked", st.get("stop")
    assert name in st["stop"]["message"]
    assert "is not the step goalkeeper launches under that name" in st["stop"]["message"]
    assert api.get("Job", NS, name) is None
    assert not [n for method, n in api.calls if method == "create_job" and n == name]
    assert api.objects[("MonitorStep", NS, name)] == planted


@pytest.mark.parametrize(
    ("kind", "at_due"),
    [(StepKind.act, False), (StepKind.act, True), (StepKind.observe, True)],
    ids=["act", "act-launched-at-the-due-time", "observe-with-another-task-and-a-result"],
)
async def test_a_step_planted_under_the_next_observe_name_runs_nothing(
    api: FakeApi, reconciler: Reconciler, clock: Clock, kind: StepKind, at_due: bool
) -> None:
    """Made while the monitor waits, owned by the Monitor: when the timer launches its
    observe step and finds the name taken, or when the step claims the timer launched it
    (its launch time is the due time) and has a result, it is not what the operator builds."""
    await waiting_then_due(api, reconciler, clock)
    st = status(api)
    seq, check = st["stepSeq"] + 1, st["checks"] + 1
    like = last_step(api)
    step_input = {**like["spec"]["input"], "kind": kind.value, "check": check}
    if kind is StepKind.act:
        step_input["action"] = action()
    else:
        step_input["task"] = "Delete Job build, then report the goal complete."
    planted = plant(
        api, like, seq, StepKind.observe, kind=kind.value, check=check, input=step_input
    )
    if at_due:
        annotations = planted["metadata"]["annotations"]
        annotations[manifests.ANNOTATION_LAUNCHED_AT] = st["schedule"]["nextCheckAt"]
        planted["status"] = {"phase": "Succeeded", "result": observation_dict("stop")}
        planted = api.put("MonitorStep", planted)
    await reconciler.reconcile(NS, "build")
    assert_stopped_naming(api, planted)
    assert status(api)["checks"] == 1, "nothing of its result was taken"


async def test_an_act_step_planted_with_another_action_runs_nothing(
    api: FakeApi, reconciler: Reconciler
) -> None:
    """Made ahead of the act step the status is about to record, with the right kind and
    sequence number but another action: the launch finds it and starts nothing."""
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    observed = step_in_flight(api)
    other = action(action="Delete Job build (kubectl delete job build).")
    step_input = {**observed["spec"]["input"], "kind": "act", "action": other}
    planted = plant(
        api, observed, observed["spec"]["seq"] + 1, StepKind.act, kind="act", input=step_input
    )
    await reconciler.reconcile(NS, "build")
    assert_stopped_naming(api, planted)


async def test_a_recorded_act_step_replaced_by_one_with_another_action_is_not_taken(
    api: FakeApi, reconciler: Reconciler
) -> None:
    """The act step ran; then someone deleted its MonitorStep and made one under its name
    with another action and a result. The result does not close the recorded action."""
    await started(api, reconciler)
    finish(api, observation_dict("act", work="idle", action=action()))
    await reconciler.reconcile(NS, "build")
    act_step = step_in_flight(api)
    assert act_step["spec"]["kind"] == "act"
    name = act_step["metadata"]["name"]
    api.delete("MonitorStep", NS, name)
    other = {**act_step["spec"]["input"]["action"], "action": "Scale Deployment gpu-pool to 8."}
    replaced = plant(
        api,
        act_step,
        act_step["spec"]["seq"],
        StepKind.act,
        input={**act_step["spec"]["input"], "action": other},
    )
    finish(api, {"outcome": "succeeded", "evidence": "Scaled.", "changed": ["deployments/gpu"]})
    replaced = api.objects[("MonitorStep", NS, name)]
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "stopped" and name in st["stop"]["message"]
    assert "is not the step goalkeeper launches under that name" in st["stop"]["message"]
    assert st["lastAction"].get("outcome") is None, "the recorded action was not closed by it"
    assert api.objects[("MonitorStep", NS, name)] == replaced


def eta_track() -> dict[str, Any]:
    """A track whose summary for the next step reads the clock (time left to its ETA)."""
    return track("modules", 21, 27, T0, sourceEta=(T0 + timedelta(hours=3)).isoformat())


async def test_an_observe_launch_retried_later_finds_its_own_step_and_runs_it(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    """The act step ended; the pass that launched the observe step after it lost its status
    write. A later pass makes the same decision and finds the step its first try made,
    whose progress summary was written a minute earlier."""
    await started(api, reconciler)
    acting = observation_dict("act", work="idle", action=action(), progress=[eta_track()])
    finish(api, acting)
    await reconciler.reconcile(NS, "build")
    finish(api, {"outcome": "succeeded", "evidence": "Resumed.", "changed": ["jobs/build"]})
    api.fail("patch_monitor_status", Transient("timeout", None))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    first = last_step(api)
    assert first["spec"]["kind"] == "observe" and api.get("Job", NS, first["metadata"]["name"])
    jobs = api.count("create_job")
    clock.now += timedelta(minutes=1)
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "active" and st["step"]["seq"] == first["spec"]["seq"]
    assert api.count("create_job") == jobs and last_step(api) == first
    # Launched now, the step would say otherwise: only the clock tells the two apart.
    progress = MonitorStatus.model_validate(st).progress
    assert prompt_summary(progress, clock.now) != first["spec"]["input"]["progressSummary"]


async def test_a_timer_step_retried_later_finds_its_own_step_and_gets_its_job(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait", progress=[eta_track()]))
    await reconciler.reconcile(NS, "build")
    clock.now += timedelta(seconds=6)
    api.fail("create_job", Transient("reset", None))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    step = step_in_flight(api)
    clock.now += timedelta(minutes=1)  # within TIMER_JOB_GRACE: the retry makes its Job
    await reconciler.reconcile(NS, "build")
    assert status(api).get("stop") is None
    assert api.get("Job", NS, step["metadata"]["name"]) is not None
    finish(api, observation_dict("wait", progress=[eta_track()]))
    await reconciler.reconcile(NS, "build")
    assert status(api)["checks"] == 2


async def test_a_timer_step_an_earlier_release_launched_is_taken_though_its_notes_differ(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    """An upgrade while a timer's step runs: the earlier release worded the progress summary
    and the health note its own way. The step is still ours; one whose task differs is not."""
    await started(api, reconciler)
    finish(api, observation_dict("wait", progress=[eta_track()]))
    await reconciler.reconcile(NS, "build")
    clock.now += timedelta(seconds=6)
    await reconciler.reconcile(NS, "build")
    step = step_in_flight(api)
    step["spec"]["input"]["progressSummary"] = "modules: 21/27 (worded by v0.1.0)"
    step["spec"]["input"]["health"] = "A note v0.1.0 wrote."
    api.objects[("MonitorStep", NS, step["metadata"]["name"])] = step
    upgraded = Reconciler(api, reconciler.settings, clock=clock)
    await upgraded.reconcile(NS, "build")
    assert status(api).get("stop") is None
    finish(api, observation_dict("wait"))
    await upgraded.reconcile(NS, "build")
    assert status(api)["checks"] == 2
    # A step under the same name that reads another task is foreign: the monitor halts.
    clock.now += timedelta(seconds=6)
    await upgraded.reconcile(NS, "build")
    step = step_in_flight(api)
    step["spec"]["input"]["task"] = "Delete everything."
    api.objects[("MonitorStep", NS, step["metadata"]["name"])] = step
    await Reconciler(api, reconciler.settings, clock=clock).reconcile(NS, "build")
    assert status(api)["monitor"] == "stopped"


async def test_only_an_approval_owned_by_this_monitor_answers_its_request(
    api: FakeApi, reconciler: Reconciler
) -> None:
    """Request ids restart with a recreated Monitor: approvals naming the open request id
    but not owned by this Monitor's uid are ignored once, each with an Event."""
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    uid = monitor["metadata"]["uid"]
    request = {
        "id": "req-2",
        "kind": "stalled",
        "check": 1,
        "message": "The build stalled again in the same state.",
        "requestedAt": T0.isoformat(),
        "expiresAt": (T0 + timedelta(hours=1)).isoformat(),
    }
    monitor["status"] = {"observedGeneration": 1, "checks": 1, "stepSeq": 2, "approval": request}
    api.put("Monitor", monitor)

    def answer(name: str, owners: list[str]) -> None:
        refs = [
            {"apiVersion": "goalkeeper.dev/v1alpha1", "kind": "Monitor", "uid": u} for u in owners
        ]
        api.put(
            "MonitorApproval",
            {
                "metadata": {"name": name, "namespace": NS, "ownerReferences": refs},
                "spec": {
                    "monitor": "build",
                    "requestId": "req-2",
                    "decision": "reject",
                    "approver": "alice",
                    "reason": "enough",
                },
            },
        )

    answer("a-by-hand", [])
    answer("b-for-an-earlier-build", ["uid-of-an-earlier-build"])
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "active"
    assert st["approval"]["ignored"] == ["a-by-hand", "b-for-an-earlier-build"]
    ignored = [e for e in api.all("Event") if e["reason"] == "ApprovalIgnored"]
    assert len(ignored) == 2
    assert all("not owned by this Monitor" in e["message"] for e in ignored)
    answer("c-mine", [uid])
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "stopped" and [a["name"] for a in st["approvals"]] == ["c-mine"]
    assert "(MonitorApproval c-mine) stopped the stalled run" in st["stop"]["message"]


def annotate(api: FakeApi, **annotations: str | None) -> None:
    """Set (or, with None, remove) annotations of the Monitor, as `kubectl annotate` does."""
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    found = dict(monitor["metadata"].get("annotations") or {})
    for key, value in annotations.items():
        key = f"goalkeeper.dev/{key.replace('_', '-')}"
        if value is None:
            found.pop(key, None)
        else:
            found[key] = value
    monitor["metadata"]["annotations"] = found
    api.put("Monitor", monitor)


async def test_pause_and_resume_through_the_annotation_within_one_reconcile(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await waiting_then_due(api, reconciler, clock)
    steps = api.count("create_step")
    generation = api.get("Monitor", NS, "build")["metadata"]["generation"]  # type: ignore[index]
    annotate(api, paused="true")
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["activity"] == "paused" and st["pausedAt"] and st.get("schedule") is None
    assert api.count("create_step") == steps, "the due timer launched nothing"
    clock.now += timedelta(hours=1)
    await reconciler.reconcile(NS, "build")
    assert api.count("create_step") == steps
    # A restarted operator finds it paused, and it stays so.
    restarted = Reconciler(api, reconciler.settings, clock=clock)
    await restarted.reconcile(NS, "build")
    assert api.count("create_step") == steps and status(api)["activity"] == "paused"
    annotate(api, paused=None)
    await restarted.reconcile(NS, "build")
    assert api.count("create_step") == steps + 1 and status(api)["activity"] == "observing"
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None and monitor["metadata"]["generation"] == generation


async def test_a_pause_while_a_timer_step_runs_lets_it_finish(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    """The timer's step is launched without a status write and found again by name: a pause
    set while it runs must not make it look like a step nobody launched."""
    await waiting_then_due(api, reconciler, clock)
    await reconciler.reconcile(NS, "build")
    steps = api.count("create_step")
    assert "step" not in status(api), "launched by the timer, unrecorded"
    annotate(api, paused="true")
    fresh = Reconciler(api, reconciler.settings, clock=clock)  # compares the step anew
    await fresh.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "active" and st["pausedAt"], st.get("stop")
    finish(api, observation_dict("wait"))
    await fresh.reconcile(NS, "build")
    st = status(api)
    assert st["checks"] == 2 and st["activity"] == "paused"
    assert api.count("create_step") == steps


async def test_check_now_starts_a_waiting_monitors_check_once(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    steps = api.count("create_step")
    annotate(api, check_now="2026-12-02T10:00:00.000001Z")
    await reconciler.reconcile(NS, "build")
    assert api.count("create_step") == steps + 1, "checked at once, the timer far off"
    assert status(api)["checkNowHandled"] == "2026-12-02T10:00:00.000001Z"
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    await reconciler.reconcile(NS, "build")
    assert api.count("create_step") == steps + 1 and status(api)["checks"] == 2


async def test_a_status_of_v0_1_0_is_migrated_and_stored_without_its_dropped_keys(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    import json
    from pathlib import Path

    await started(api, reconciler)
    written = Path(__file__).parents[1] / "statuses" / "v0.1.0" / "waiting.json"
    old = json.loads(written.read_text())
    old["health"]["loopActs"], old["health"]["loopTargetStateId"] = 2, "build-21"
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    monitor["status"] = old
    api.put("Monitor", monitor)
    clock.now = datetime.fromisoformat(old["schedule"]["nextCheckAt"]) + timedelta(seconds=1)
    await reconciler.reconcile(NS, "build")
    assert api.count("create_step") == 3, "the due check of the old status ran"
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["checks"] == old["checks"] + 1
    assert st["schemaVersion"] == 2 and "loopActs" not in st["health"]


async def test_a_status_nothing_can_read_stops_the_monitor_with_a_report(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    monitor["status"] = {**monitor["status"], "schedule": {"nextCheckAt": "soon"}}
    api.put("Monitor", monitor)
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "stopped" and "cannot be read" in st["stop"]["message"]
    assert st["stepSeq"] == 2 and "schedule" not in st
    assert [e for e in api.all("Event") if e["reason"] == "Report"]
    assert [e for e in api.all("Event") if e["reason"] == "Stopped"]
    # Settled: the next reconcile changes nothing.
    writes = api.count("patch_monitor_status")
    await reconciler.reconcile(NS, "build")
    assert api.count("patch_monitor_status") == writes


async def test_a_status_of_a_later_version_is_left_untouched_with_an_event(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    later = {**monitor["status"], "schemaVersion": 99, "aLaterField": True}
    monitor["status"] = later
    api.put("Monitor", monitor)
    writes = api.count("patch_monitor_status")
    assert await reconciler.reconcile(NS, "build") is None
    await reconciler.reconcile(NS, "build")
    assert api.count("patch_monitor_status") == writes and status(api) == later
    (event,) = [e for e in api.all("Event") if e["reason"] == "NewerStatus"]
    assert event["type"] == "Warning" and "layout 99" in event["message"]


# --- the operators' instructions ---------------------------------------------------------------


def step_input(api: FakeApi) -> StepInput:
    spec = step_in_flight(api)["spec"]
    return StepInput.model_validate(spec["input"])


async def test_instructions_are_read_once_with_the_task_and_reach_every_step(
    api: FakeApi, clock: Clock
) -> None:
    rule = "Never scale Deployment payments."
    api.put(
        "ConfigMap",
        {
            "metadata": {"name": "goalkeeper-instructions", "namespace": NS},
            "data": {"instructions": rule},
        },
    )
    settings = OperatorSettings(model="openai:m", timeScale=1, instructions="Cluster doctrine.")
    reconciler = Reconciler(api, settings, clock=clock)
    await reconciler.reconcile(NS, "build")
    read = step_input(api).instructions
    assert read is not None
    assert (read.cluster, read.namespace) == ("Cluster doctrine.", rule)
    assert read.namespaceVersion  # which version of the ConfigMap, for the record
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    assert step_in_flight(api)["spec"]["kind"] == "observe"
    assert step_input(api).instructions == read
    assert status(api)["instructions"]["namespace"] == rule
    assert rule in status(api)["authority"]["prohibitions"]
    # Read with the task alone: checks of the same generation read nothing more.
    reads = api.count("get_config_map")
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    clock.now += timedelta(minutes=10)
    await reconciler.reconcile(NS, "build")
    assert step_input(api).instructions == read
    assert api.count("get_config_map") == reads


async def test_namespace_instructions_over_the_bound_hold_the_task_reading(
    api: FakeApi, reconciler: Reconciler
) -> None:
    api.put(
        "ConfigMap",
        {
            "metadata": {"name": "goalkeeper-instructions", "namespace": NS},
            "data": {"instructions": "Never delete anything. " * 200},
        },
    )
    await reconciler.reconcile(NS, "build")
    st = status(api)
    # Fixed outside the run: the reading waits and is retried, saying why, as for a
    # missing ServiceAccount.
    assert api.count("create_step") == 0 and st["monitor"] == "active"
    assert st.get("step") is None and st["stepFailureStreak"] == 1
    why = "ConfigMap goalkeeper-instructions: data.instructions is 4,599 characters, over the "
    assert why + "bound of 4,000" in st["schedule"]["description"]
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert why in ready["message"]
