"""The reconciler asks the API server whether a Monitor's author holds what its next step
needs, and the engine refuses the step when they do not (no cluster: a fake API that
answers the reviews from its grants)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.fake_api import FakeApi
from tests.support.observations import TASK, action, extraction, observation_dict

from goalkeeper.controller import manifests
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.core.models import StepKind
from goalkeeper.core.permissions import Permission, observer_reads

NS = "team-a"
ALICE = "system:serviceaccount:team-a:alice"


def new_api(annotations: dict[str, str] | None) -> FakeApi:
    fake = FakeApi()
    for account in ("goalkeeper-observer", "goalkeeper-actor"):
        fake.put("ServiceAccount", {"metadata": {"name": account, "namespace": NS}})
    meta: dict[str, Any] = {"name": "build", "namespace": NS}
    if annotations is not None:
        meta["annotations"] = annotations
    fake.put(
        "Monitor",
        {
            "apiVersion": "goalkeeper.dev/v1alpha1",
            "kind": "Monitor",
            "metadata": meta,
            "spec": {"task": TASK, "everyMinutes": 5, "maxChecks": 10},
        },
    )
    return fake


def alice() -> dict[str, str]:
    return {
        "goalkeeper.dev/author": ALICE,
        "goalkeeper.dev/author-uid": "u-1",
        "goalkeeper.dev/author-groups": "system:serviceaccounts,system:authenticated",
    }


def reconciler(api: FakeApi, **settings: Any) -> Reconciler:
    return Reconciler(
        api,
        OperatorSettings(model="openai:m", timeScale=1, **settings),
        clock=lambda: datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
    )


def status(api: FakeApi) -> dict[str, Any]:
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    return dict(monitor.get("status") or {})


def finish(api: FakeApi, result: dict[str, Any]) -> None:
    """The step in flight writes `result` from its own pod."""
    st = status(api)
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    step = st["step"]
    name = manifests.step_name(
        "build", monitor["metadata"]["uid"], step["seq"], StepKind(step["kind"])
    )
    job = api.get("Job", NS, name)
    assert job is not None
    pod = api.put(
        "Pod",
        {
            "metadata": {
                "name": f"{name}-x7k2p",
                "namespace": NS,
                "ownerReferences": [
                    {"kind": "Job", "uid": job["metadata"]["uid"], "controller": True}
                ],
            }
        },
    )
    found = api.get("MonitorStep", NS, name)
    assert found is not None
    found["status"] = {
        "phase": "Succeeded",
        "result": result,
        "pod": {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
    }
    api.put("MonitorStep", found)


async def test_a_monitor_without_a_recorded_author_reads_nothing() -> None:
    api = new_api(None)
    await reconciler(api).reconcile(NS, "build")
    st = status(api)
    assert st["stop"]["reason"] == "outsideAuthority"
    assert "records no author" in st["stop"]["message"]
    assert api.count("create_step") == 0 and api.count("create_job") == 0


async def test_an_author_who_may_not_read_pod_logs_is_stopped_before_the_task_is_read() -> None:
    api = new_api(alice())
    api.grant(ALICE, *[p for p in observer_reads(NS) if p.subresource != "log"])
    await reconciler(api).reconcile(NS, "build")
    st = status(api)
    assert st["stop"]["reason"] == "outsideAuthority"
    assert st["stop"]["message"].startswith(f"{ALICE} may not get pods/* (log) in {NS}")
    assert api.count("create_step") == 0
    asked = [what for method, what in api.calls if method == "review_access"]
    assert len(asked) == len(observer_reads(NS)), "every read asked once, all at once"


@pytest.mark.parametrize(
    ("granted", "extra_verbs", "launched"),
    [
        ((), "", False),
        (("get", "patch"), "", False),  # a Job's failed pods are deleted too
        (("get", "patch", "delete-pods"), "", True),
        (("get", "patch", "delete-pods"), "create,delete", False),
        (("get", "patch", "delete-pods", "create", "delete"), "create,delete", True),
    ],
)
async def test_an_act_runs_only_when_its_author_holds_every_verb_it_may_use(
    granted: tuple[str, ...], extra_verbs: str, launched: bool
) -> None:
    api = new_api(alice())
    api.grant(ALICE, *observer_reads(NS))
    for verb in granted:
        if verb == "delete-pods":
            api.grant(ALICE, Permission("delete", "", "pods", NS))
        else:
            api.grant(ALICE, Permission(verb, "batch", "jobs", NS, "build"))
    operator = reconciler(api, actExtraVerbs=extra_verbs)
    await operator.reconcile(NS, "build")
    finish(api, extraction())
    await operator.reconcile(NS, "build")
    assert status(api)["step"]["kind"] == "observe"
    finish(api, observation_dict("act", action=action()))
    await operator.reconcile(NS, "build")
    st = status(api)
    acts = [s for s in api.all("MonitorStep") if s["spec"]["kind"] == "act"]
    if launched:
        assert st["step"]["kind"] == "act" and len(acts) == 1
        return
    assert acts == [] and st["stop"]["reason"] == "outsideAuthority"
    assert st["stop"]["message"].startswith(f"{ALICE} may not ")
    assert f"{ALICE} may not" in st["report"], "the one report of the check names it"
