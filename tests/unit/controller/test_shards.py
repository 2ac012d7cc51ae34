"""Shards: the label selector a shard owns its Monitors by, the labels its steps carry, and
a monitor handed over between shards, through the fake API (the API server's selector
semantics and a real handover are tested in tests/e2e/test_shards.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.support.fake_api import FakeApi
from tests.support.observations import action, extraction, observation_dict
from tests.unit.controller.test_reconciler import (
    NS,
    Clock,
    finish,
    new_api,
    status,
    step_in_flight,
)
from tests.unit.test_model_config import with_config

from goalkeeper.controller import manifests
from goalkeeper.controller.api import Transient
from goalkeeper.controller.cache import MODEL_CONFIG, MONITOR, STEP, CachedApi, WatchCache
from goalkeeper.controller.configs import refresh_config_statuses
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import SettingsError, load
from goalkeeper.core import selectors
from goalkeeper.core.selectors import SelectorError
from goalkeeper.core.steps import HANDOVER_GRACE

SHARD = "goalkeeper.dev/shard"


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        (f"{SHARD}=a", {SHARD: "a"}, True),
        (f"{SHARD}==a", {SHARD: "b"}, False),
        (f"{SHARD}=a", {}, False),
        (f"{SHARD}!=a", {}, True),
        (f"{SHARD}!=a", {SHARD: "a"}, False),
        (f"{SHARD} in (a, b)", {SHARD: "b"}, True),
        (f"{SHARD} in (a,b)", {}, False),
        # The default shard: every Monitor no named shard takes, unlabelled ones included.
        (f"{SHARD} notin (a,b)", {}, True),
        (f"{SHARD} notin (a,b)", {SHARD: "c"}, True),
        (f"{SHARD} notin (a,b)", {SHARD: "a"}, False),
        (f"!{SHARD}", {}, True),
        (f"!{SHARD}", {SHARD: ""}, False),
        (SHARD, {SHARD: ""}, True),
        (f"team=pay,{SHARD} in (a)", {"team": "pay", SHARD: "a"}, True),
        (f"{'p' * 253}/k=v", {f"{'p' * 253}/k": "v"}, True),
        (f"team=pay,{SHARD} in (a)", {"team": "ops", SHARD: "a"}, False),
    ],
)
def test_a_selector_matches_as_the_api_server_does(
    selector: str, labels: dict[str, str], matches: bool
) -> None:
    assert selectors.parse(selector).matches(labels) is matches


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        (f"{SHARD} in ()", "needs at least one value"),
        (f"{SHARD} in (a", "not closed"),
        (f"{SHARD}=a,", "empty requirement"),
        ("bad key=a", "not a label key"),
        (f"{SHARD}={'x' * 64}", "at most 63"),
        (f"{SHARD}=a)", "closes nothing"),
        (f"{'p' * 254}/k=v", "not a label key"),
    ],
)
def test_a_malformed_selector_is_refused_saying_where(selector: str, says: str) -> None:
    with pytest.raises(SelectorError, match=says):
        selectors.parse(selector)


def test_the_shard_setting_is_checked_at_start_naming_the_variable() -> None:
    assert load({"GOALKEEPER_SHARD_SELECTOR": f" {SHARD} notin (a) "}).shardSelector == (
        f"{SHARD} notin (a)"
    )
    with pytest.raises(SettingsError, match=r"GOALKEEPER_SHARD_SELECTOR: .*not closed"):
        load({"GOALKEEPER_SHARD_SELECTOR": f"{SHARD} in (a"})
    # Only the shard label: steps are found by goalkeeper's own labels, and a step pod
    # carries no other label a Monitor's author chose.
    for other in ("goalkeeper.dev/monitor=build", f"team=pay,{SHARD}=a"):
        with pytest.raises(SettingsError, match=r"goalkeeper\.dev/shard only"):
            load({"GOALKEEPER_SHARD_SELECTOR": other})


def labelled(api: FakeApi, labels: dict[str, str]) -> None:
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    monitor["metadata"]["labels"] = labels
    api.put("Monitor", monitor)


def shard(api: Any, selector: str, clock: Clock, **env: str) -> Reconciler:
    settings = load(
        {
            "GOALKEEPER_MODEL": "openai:m",
            "GOALKEEPER_TIME_SCALE": "1",
            "GOALKEEPER_SHARD_SELECTOR": selector,
            **env,
        }
    )
    return Reconciler(api, settings, clock=clock)


async def test_a_shard_runs_only_its_monitors_and_their_steps_carry_its_labels() -> None:
    api, clock = new_api(), Clock()
    labelled(api, {SHARD: "a", "team": "pay"})
    other = shard(api, f"{SHARD} notin (a)", clock)
    assert await other.reconcile(NS, "build") is None
    assert api.count("patch_monitor_status") == 0 and api.count("create_step") == 0

    mine = shard(api, f"{SHARD}=a", clock)
    assert await mine.reconcile(NS, "build") is not None
    step = step_in_flight(api)
    # Only the labels the selector reads go with the step: its MonitorStep, Job and pods.
    assert step["metadata"]["labels"][SHARD] == "a" and "team" not in step["metadata"]["labels"]
    job = api.get("Job", NS, step["metadata"]["name"])
    assert job is not None
    assert job["metadata"]["labels"][SHARD] == "a"
    assert job["spec"]["template"]["metadata"]["labels"][SHARD] == "a"


async def test_a_monitor_moved_mid_step_is_finished_by_its_new_shard_once() -> None:
    api, clock = new_api(), Clock()
    labelled(api, {SHARD: "a"})
    a = shard(api, f"{SHARD}=a", clock)
    await a.reconcile(NS, "build")
    finish(api, extraction())
    await a.reconcile(NS, "build")
    observe = step_in_flight(api)
    assert observe["metadata"]["labels"][SHARD] == "a"

    # Relabelled while its observe step runs: shard a lets go, the default shard takes it.
    labelled(api, {})
    assert await a.reconcile(NS, "build") is None
    default = shard(api, f"{SHARD} notin (a)", clock)
    await default.reconcile(NS, "build")
    moved = api.get("MonitorStep", NS, observe["metadata"]["name"])
    assert moved is not None and SHARD not in moved["metadata"]["labels"]
    assert api.count("label_step") == 1
    assert status(api)["checks"] == 0  # the step still runs: nothing decided twice

    finish(api, observation_dict("wait"))
    await default.reconcile(NS, "build")
    assert await a.reconcile(NS, "build") is None
    st = status(api)
    assert st["checks"] == 1 and st["schedule"] is not None
    assert len([e for e in api.all("Event") if e["reason"] == "Report"]) == 1
    assert api.count("create_step") == 2  # the extract step and the one observe step


async def test_the_new_shard_lists_the_history_the_old_one_launched_once() -> None:
    api, clock = new_api(), Clock()
    labelled(api, {SHARD: "a"})
    a = shard(CachedApi(api, WatchCache()), f"{SHARD}=a", clock)
    await a.reconcile(NS, "build", fresh=True)
    finish(api, extraction())
    await a.reconcile(NS, "build", fresh=True)
    finish(api, observation_dict("wait"))
    await a.reconcile(NS, "build", fresh=True)
    labelled(api, {SHARD: "b"})
    # Shard b's cache saw none of shard a's steps (no watch feeds these caches: the
    # monitor and its step in flight are read fresh, the history only from the cache).
    b = shard(CachedApi(api, WatchCache()), f"{SHARD}=b", clock, GOALKEEPER_STEP_HISTORY="1")
    clock.now += timedelta(minutes=10)
    await b.reconcile(NS, "build", fresh=True)
    step = step_in_flight(api)
    assert step["spec"]["seq"] == 3 and step["metadata"]["labels"][SHARD] == "b"
    assert api.count("step_history") == 1  # listed once, then kept
    # ... so shard a's steps are pruned like any: one step kept, the one in flight.
    assert [s["spec"]["seq"] for s in api.all("MonitorStep")] == [3]
    finish(api, observation_dict("wait"))
    await b.reconcile(NS, "build", fresh=True)
    clock.now += timedelta(minutes=10)
    await b.reconcile(NS, "build", fresh=True)
    assert api.count("step_history") == 1
    assert manifests.shard_labels({SHARD: "b", "x": "y"}, (SHARD,)) == {SHARD: "b"}


async def test_a_shards_model_config_status_counts_every_shards_monitors() -> None:
    api = with_config()
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    monitor["metadata"]["labels"] = {SHARD: "b"}
    monitor["status"] = {"modelConfig": "default"}
    api.put("Monitor", monitor)
    # Shard a's cache: the namespace's ModelConfig, none of shard b's Monitors.
    cache = WatchCache()
    config = api.get("ModelConfig", NS, "default")
    assert config is not None
    cache.put(MODEL_CONFIG, config)

    async def listed(namespace: str) -> list[dict[str, Any]]:
        return [m for m in api.all("Monitor") if m["metadata"]["namespace"] == namespace]

    assert await refresh_config_statuses(cache, CachedApi(api, cache), listed) == 1
    written = api.get("ModelConfig", NS, "default")
    assert written is not None
    assert written["status"]["monitorCount"] == 1
    assert written["status"]["monitors"][0]["monitor"] == "build"


async def test_a_recorded_act_step_not_made_yet_is_waited_for_before_it_counts_as_vanished() -> (
    None
):
    """Shard a records an act step, then the monitor moves before a creates the step: the
    default shard must not call it vanished (and act again) while a may still make it."""
    api, clock = new_api(), Clock()
    labelled(api, {SHARD: "a"})
    a = shard(api, f"{SHARD}=a", clock)
    await a.reconcile(NS, "build")
    finish(api, extraction())
    await a.reconcile(NS, "build")
    finish(api, observation_dict("act", work="idle", action=action()))
    api.fail("create_step", Transient("reset", None))
    with pytest.raises(Transient):
        await a.reconcile(NS, "build")
    recorded = status(api)
    assert recorded["step"]["kind"] == "act", "recorded, not made"
    labelled(api, {})
    default = shard(api, f"{SHARD} notin (a)", clock)
    with pytest.raises(Transient, match="may still be making it"):
        await default.reconcile(NS, "build")
    clock.now += HANDOVER_GRACE / 2
    with pytest.raises(Transient):
        await default.reconcile(NS, "build")
    assert status(api) == recorded, "nothing decided while shard a may still make it"
    # Past the grace nobody can be making it any more: it vanished, and is verified.
    clock.now += HANDOVER_GRACE
    await default.reconcile(NS, "build")
    st = status(api)
    # Vanished, it may have acted first: its outcome is unknown until observed.
    assert st["lastAction"]["outcome"] == "unknown" and st["step"]["kind"] == "observe"
    assert not [s for s in api.all("MonitorStep") if s["spec"]["kind"] == "act"]


async def test_a_shard_holding_a_stale_copy_does_not_take_the_step_back() -> None:
    api, clock = new_api(), Clock()
    labelled(api, {SHARD: "a"})
    cache = WatchCache()
    a = shard(CachedApi(api, cache), f"{SHARD}=a", clock)
    await a.reconcile(NS, "build", fresh=True)
    finish(api, extraction())
    await a.reconcile(NS, "build", fresh=True)
    observe = step_in_flight(api)
    name = observe["metadata"]["name"]
    # The monitor moved and shard b took the step; shard a's cache still shows it as a's.
    stale = api.get("Monitor", NS, "build")
    labelled(api, {SHARD: "b"})
    await shard(api, f"{SHARD}=b", clock).reconcile(NS, "build")
    moved = api.get("MonitorStep", NS, name)
    assert moved is not None and moved["metadata"]["labels"][SHARD] == "b"
    assert stale is not None
    cache.put(MONITOR, {**stale, "metadata": {**stale["metadata"], "resourceVersion": "999999"}})
    cache.drop(STEP, NS, name)
    assert await a.reconcile(NS, "build") is not None  # decided from its stale copy
    kept = api.get("MonitorStep", NS, name)
    assert kept is not None and kept["metadata"]["labels"][SHARD] == "b"
    assert api.count("label_step") == 1
