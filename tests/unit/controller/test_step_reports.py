"""Each accepted check's report is kept on the observe step whose observation made it, so
the step history holds every kept check's report (`goalkeeper history`): written once the
status write that accepts the check is through, and a failed write of it never holds the
loop up."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from tests.support.fake_api import FakeApi
from tests.support.observations import action, observation_dict, result
from tests.unit.controller.test_reconciler import (
    NS,
    Clock,
    finish,
    new_api,
    reports,
    started,
    status,
    step_in_flight,
)

from goalkeeper.controller import manifests
from goalkeeper.controller.api import Permanent, Transient
from goalkeeper.controller.cache import STEP, CachedApi, WatchCache
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings

REPORT, CHECK = manifests.ANNOTATION_REPORT, manifests.ANNOTATION_CHECK


@pytest.fixture
def api() -> FakeApi:
    return new_api()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reconciler(api: FakeApi, clock: Clock) -> Reconciler:
    return Reconciler(api, OperatorSettings(model="openai:m", timeScale=1), clock=clock)


def kept(api: FakeApi) -> dict[int, tuple[str, str | None, str | None]]:
    """seq -> (kind, kept report, kept check) of every MonitorStep."""
    steps = {}
    for step in api.all("MonitorStep"):
        annotations = step["metadata"].get("annotations") or {}
        steps[step["spec"]["seq"]] = (
            step["spec"]["kind"],
            annotations.get(REPORT),
            annotations.get(CHECK),
        )
    return steps


async def test_each_accepted_check_keeps_its_report_on_its_observe_step(
    api: FakeApi, reconciler: Reconciler, clock: Clock
) -> None:
    await started(api, reconciler)
    # Check 1 waits.
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    first = status(api)["report"]
    # Check 2, on the timer, asks to act; the act step runs.
    clock.now += timedelta(minutes=5)
    await reconciler.reconcile(NS, "build")
    finish(api, observation_dict("act", work="idle", action=action()))
    await reconciler.reconcile(NS, "build")
    second = status(api)["report"]
    assert status(api)["step"]["kind"] == "act"
    finish(api, result().model_dump(mode="json"))
    await reconciler.reconcile(NS, "build")
    # An invalid observation is not a check and keeps no report.
    finish(api, observation_dict("wait", work="idle"))
    await reconciler.reconcile(NS, "build")
    assert status(api)["invalidStreak"] == 1
    # Observed again, at once or after a delay.
    clock.now += timedelta(minutes=5)
    await reconciler.reconcile(NS, "build")
    # Check 3 stops.
    finish(api, observation_dict("stop"))
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "stopped" and st["checks"] == 3

    assert kept(api) == {
        1: ("extract", None, None),
        2: ("observe", first, "1"),
        3: ("observe", second, "2"),
        4: ("act", None, None),
        5: ("observe", None, None),
        6: ("observe", st["report"], "3"),
    }
    assert "Stopped:" in st["report"], "the stopping check's report is its own step's"
    # The Events carry the same reports.
    events = {e["metadata"]["annotations"][REPORT] for e in reports(api)}
    assert events == {first, second, st["report"]}


async def test_a_report_is_kept_only_once_its_check_is_written(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    api.fail("patch_monitor_status", Transient("500 Internal Server Error", 500))
    with pytest.raises(Transient):
        await reconciler.reconcile(NS, "build")
    assert api.count("annotate_step") == 0 and kept(api)[2] == ("observe", None, None)
    await reconciler.reconcile(NS, "build")
    assert status(api)["checks"] == 1
    assert api.count("annotate_step") == 1
    assert kept(api)[2] == ("observe", status(api)["report"], "1")


async def test_a_final_stop_report_stays_in_status_alone(
    api: FakeApi, reconciler: Reconciler
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    check_report = status(api)["report"]
    # maxChecks lowered below the count while waiting: a final report of check 1.
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    monitor["spec"]["maxChecks"] = 1
    monitor["metadata"]["generation"] = 2
    api.put("Monitor", monitor)
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["monitor"] == "stopped" and st["stop"]["reason"] == "safetyLimit"
    assert st["report"] != check_report and st["reportedCheck"] == 1
    assert len(reports(api)) == 2, "the check's report and the final one"
    # The observe step keeps the check's own report; the final one is status.report.
    assert kept(api)[2] == ("observe", check_report, "1")


@pytest.mark.parametrize(
    "failure",
    [Permanent("403 Forbidden: cannot patch monitorsteps", 403), Transient("reset", None)],
)
async def test_a_report_that_cannot_be_kept_holds_nothing_up(
    api: FakeApi,
    reconciler: Reconciler,
    clock: Clock,
    failure: Exception,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await started(api, reconciler)
    finish(api, observation_dict("wait"))
    api.fail("annotate_step", failure)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "goalkeeper.reconciler"):
        await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["checks"] == 1 and st["schedule"], "the check was accepted all the same"
    assert len(reports(api)) == 1 and reports(api)[0]["metadata"]["annotations"][REPORT]
    assert kept(api)[2] == ("observe", None, None)
    assert "check 1's report is not kept in the step history" in caplog.text
    # The next check goes on as ever, and keeps its report.
    clock.now += timedelta(minutes=5)
    await reconciler.reconcile(NS, "build")
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    assert status(api)["checks"] == 2
    assert kept(api)[3] == ("observe", status(api)["report"], "2")


async def test_the_cache_keeps_no_report(api: FakeApi, reconciler: Reconciler) -> None:
    await started(api, reconciler)
    cache = WatchCache()
    cached = CachedApi(api, cache)
    name = step_in_flight(api)["metadata"]["name"]
    written: dict[str, Any] = await cached.annotate_step(
        NS, name, manifests.report_annotations(7, "Monitor: active\nGoal: incomplete")
    )
    assert written["metadata"]["annotations"][CHECK] == "7"
    held = cache.get(STEP, NS, name)
    assert held is not None and REPORT not in (held["metadata"].get("annotations") or {})
    # What the API server holds is what `goalkeeper history` reads.
    stored = api.get("MonitorStep", NS, name)
    assert stored is not None and stored["metadata"]["annotations"][REPORT].startswith("Monitor:")
    assert manifests.ANNOTATION_LAUNCH in stored["metadata"]["annotations"], "merged, not replaced"
