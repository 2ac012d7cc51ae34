"""ModelConfig: the model, key, prices, limits and spend cap of a namespace's Monitors
(core/modelconfig.py, the engine's launches, the step Job, the reconciler through a fake API,
the config's status)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.support.engine_loop import Loop
from tests.support.fake_api import FakeApi
from tests.support.observations import extraction, observation, observation_dict
from tests.unit.controller.test_reconciler import NS, Clock, finish, new_api, status, step_in_flight

from goalkeeper.controller import manifests
from goalkeeper.controller.cache import MODEL_CONFIG, MONITOR, CachedApi, WatchCache
from goalkeeper.controller.configs import refresh_config_statuses
from goalkeeper.controller.reconciler import Reconciler
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.core import permissions
from goalkeeper.core.engine import (
    LaunchStep,
    ObservationAccepted,
    Started,
    StopMonitor,
    TimerDue,
)
from goalkeeper.core.modelconfig import ModelChoice, choose, config_name, config_status
from goalkeeper.core.models import ModelConfigSpec, StepUsage
from goalkeeper.core.permissions import Permission
from goalkeeper.step.credentials import take_model_key

DONE = {"goal": "complete", "work": "complete", "stopReason": "goalComplete"}
SPEC: dict[str, Any] = {
    "provider": "openai",
    "model": "team-model",
    "baseUrl": "http://127.0.0.1:9/v1",
    "apiKeySecret": {"name": "team-key"},
    "prices": {"inputPerMTokUsd": 2.0, "outputPerMTokUsd": 8.0},
    "stepLimits": {"requests": 7, "costUsd": 0.25},
    "spendCapUsd": 5.0,
}


def config(name: str = "default", spend: float | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "goalkeeper.dev/v1alpha1",
        "kind": "ModelConfig",
        # As the API server stamps its writer (config/admission/monitor-author.yaml).
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {"goalkeeper.dev/author": "team-lead"},
        },
        "spec": {**SPEC, **spec},
    }
    if spend is not None:
        body["status"] = {"spendUsd": spend}
    return body


# --- which config -------------------------------------------------------------------------------


def test_the_annotation_names_the_config_else_default_else_the_operators() -> None:
    assert config_name({"goalkeeper.dev/model-config": "gpu"}) == ("gpu", True)
    assert config_name({}) == ("default", False)
    assert choose("default", False, NS, None) == ModelChoice()
    chosen = choose("default", False, NS, config(spend=1.5))
    assert chosen.name == "default" and chosen.spec is not None and chosen.spent_usd == 1.5
    assert not chosen.cap_reached and choose("default", False, NS, config(spend=5.0)).cap_reached


def test_a_named_config_that_is_missing_or_invalid_is_a_problem_never_a_fallback() -> None:
    missing = choose("gpu", True, NS, None)
    assert missing.spec is None and missing.problem == (
        "ModelConfig gpu, named by annotation goalkeeper.dev/model-config, does not exist in "
        f"namespace {NS}; no step runs until it does or the annotation is removed."
    )
    invalid = choose("default", False, NS, config(stepLimits={"requests": 0}))
    assert invalid.spec is None
    assert "ModelConfig default is invalid: spec.stepLimits.requests: Input should be " in (
        invalid.problem
    )


# --- the engine ---------------------------------------------------------------------------------


def usage(cost: float) -> StepUsage:
    return StepUsage(requests=1, inputTokens=100, outputTokens=10, costUsd=cost)


def test_each_launch_records_its_config_and_each_steps_usage_counts_against_it() -> None:
    team = choose("default", False, NS, config())
    loop = Loop(options={"model": team})
    loop.start()
    assert loop.status.step is not None and loop.status.step.modelConfig == "default"
    assert loop.status.modelConfig == "default"
    loop.send(ObservationAccepted(loop.seq, observation("wait"), usage=usage(0.5)))
    assert [(u.config, float(u.costUsd)) for u in loop.status.usageByConfig] == [("default", 0.5)]
    # The next step runs with the operator's settings: its usage is counted apart.
    loop.options = {}
    loop.later(30)
    assert [e for e in loop.send(TimerDue()) if isinstance(e, LaunchStep)]
    assert loop.status.modelConfig == "" and loop.status.step is not None
    loop.send(ObservationAccepted(loop.seq, observation("wait"), usage=usage(0.25)))
    assert [(u.config, float(u.costUsd)) for u in loop.status.usageByConfig] == [
        ("default", 0.5),
        ("", 0.25),
    ]
    assert float(loop.status.modelUsage.costUsd) == 0.75


def test_a_timer_launch_with_another_config_is_written() -> None:
    loop = Loop(options={"model": choose("default", False, NS, config())})
    loop.start()
    loop.send(ObservationAccepted(loop.seq, observation("wait")))
    loop.later(30)
    from tests.support.engine_loop import knobs

    from goalkeeper.core.engine import decide

    same = decide(loop.spec, loop.status, TimerDue(), loop.now, **knobs(**loop.options))
    assert same.unrecorded
    other = decide(loop.spec, loop.status, TimerDue(), loop.now, **knobs())
    assert not other.unrecorded and other.status.modelConfig == ""


def test_a_config_at_its_spend_cap_stops_the_monitor_before_another_step() -> None:
    loop = Loop(options={"model": choose("default", False, NS, config())})
    loop.start()
    loop.send(ObservationAccepted(loop.seq, observation("wait")))
    loop.options = {"model": choose("default", False, NS, config(spend=5.25))}
    loop.later(30)
    effects = loop.send(TimerDue())
    assert not [e for e in effects if isinstance(e, LaunchStep)]
    (stop,) = [e for e in effects if isinstance(e, StopMonitor)]
    assert stop.reason == "blocked"
    assert stop.message == (
        "The Monitors that use ModelConfig default have spent 5.2500 USD through it, its "
        "spendCapUsd of 5.0 USD; no further step runs."
    )


# --- the step Job -------------------------------------------------------------------------------


def test_the_step_job_runs_the_configs_model_key_prices_and_limits() -> None:
    from tests.unit.controller.test_manifests import created_step

    settings = OperatorSettings(
        model="openai:operator-model",
        modelApiKeySecret="operator-key",
        stepEnv={"GOALKEEPER_REQUEST_LIMIT": "20", "GOALKEEPER_TOOL_CALLS_LIMIT": "9"},
    )
    job = manifests.step_job(created_step(), settings, choose("default", False, NS, config()))
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["GOALKEEPER_MODEL"] == "openai:team-model"
    assert env["GOALKEEPER_MODEL_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert env["GOALKEEPER_PRICE_INPUT_PER_MTOK"] == "2.0"
    assert env["GOALKEEPER_PRICE_OUTPUT_PER_MTOK"] == "8.0"
    # The config's limits win; the operator's others stay.
    assert env["GOALKEEPER_REQUEST_LIMIT"] == "7" and env["GOALKEEPER_TOOL_CALLS_LIMIT"] == "9"
    assert env["GOALKEEPER_COST_LIMIT_USD"] == "0.25"
    assert env["GOALKEEPER_MODEL_API_KEY_SOURCE"] == (
        "key api-key of Secret team-key, named by ModelConfig default"
    )
    [key] = [v for v in pod["volumes"] if v["name"] == manifests.MODEL_KEY_VOLUME]
    assert key["secret"]["secretName"] == "team-key" and key["secret"]["optional"] is True
    # Without a config, the operator's settings, as before.
    plain = manifests.step_job(created_step(), settings)["spec"]["template"]["spec"]
    plain_env = {e["name"]: e.get("value") for e in plain["containers"][0]["env"]}
    assert plain_env["GOALKEEPER_MODEL"] == "openai:operator-model"
    assert "GOALKEEPER_MODEL_API_KEY_SOURCE" not in plain_env
    [plain_key] = [v for v in plain["volumes"] if v["name"] == manifests.MODEL_KEY_VOLUME]
    assert plain_key["secret"]["secretName"] == "operator-key"
    assert "optional" not in plain_key["secret"]


def test_a_missing_key_names_its_secret_and_config(tmp_path: Any) -> None:
    env = {
        "GOALKEEPER_MODEL_API_KEY_FILE": str(tmp_path / "absent"),
        "GOALKEEPER_MODEL_API_KEY_SOURCE": "key api-key of Secret team-key, named by "
        "ModelConfig default",
    }
    held = take_model_key(env)
    assert held.value is None and held.problem == (
        "The model API key, key api-key of Secret team-key, named by ModelConfig default, is "
        "missing: create that Secret with that key in this namespace"
    )


# --- the reconciler and the config's status -----------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


def job_env(api: FakeApi) -> dict[str, Any]:
    step = step_in_flight(api)
    job = api.get("Job", NS, step["metadata"]["name"])
    assert job is not None
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def with_config(name: str = "default") -> FakeApi:
    """The standard monitor's namespace with ModelConfig `name`, whose writer may read its
    key's Secret."""
    api = new_api()
    api.put("ModelConfig", config(name))
    api.grant("team-lead", Permission("get", "", "secrets", NS, "team-key"))
    return api


async def test_a_namespaces_default_config_runs_its_steps_and_its_status_counts_them(
    clock: Clock,
) -> None:
    api = with_config()
    reconciler = Reconciler(api, OperatorSettings(model="openai:m", timeScale=1), clock=clock)
    await reconciler.reconcile(NS, "build")
    assert job_env(api)["GOALKEEPER_MODEL"] == "openai:team-model"
    assert status(api)["modelConfig"] == "default"
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    finish(api, observation_dict("wait"))
    step = step_in_flight(api)
    step["status"]["usage"] = {"requests": 1, "inputTokens": 1000, "outputTokens": 100}
    step["status"]["usage"] |= {"costUsd": 0.0028, "costSource": "configured"}
    api.objects[("MonitorStep", NS, step["metadata"]["name"])] = step
    await reconciler.reconcile(NS, "build")
    assert status(api)["usageByConfig"] == [
        {
            "config": "default",
            "requests": 1,
            "inputTokens": 1000,
            "outputTokens": 100,
            "costUsd": 0.0028,
        }
    ]

    cache = WatchCache()
    for kind in (MONITOR, MODEL_CONFIG):
        for body in api.all(kind):
            cache.put(kind, body)
    assert await refresh_config_statuses(cache, CachedApi(api, cache)) == 1
    written = api.get("ModelConfig", NS, "default")
    assert written is not None
    [user] = written["status"]["monitors"]
    assert user == {
        "monitor": "build",
        "uid": user["uid"],
        "costUsd": 0.0028,
        "inputTokens": 1000,
        "outputTokens": 100,
    }
    assert user["uid"]
    assert written["status"]["monitorCount"] == 1 and written["status"]["spendUsd"] == 0.0028
    # Nothing changed since: nothing is written.
    assert await refresh_config_statuses(cache, CachedApi(api, cache)) == 0


async def test_a_monitor_naming_a_missing_config_waits_with_the_reason(clock: Clock) -> None:
    api = new_api()
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    monitor["metadata"]["annotations"]["goalkeeper.dev/model-config"] = "gpu"
    api.put("Monitor", monitor)
    reconciler = Reconciler(api, OperatorSettings(model="openai:m", timeScale=1), clock=clock)
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert api.count("create_job") == 0 and st["monitor"] == "active"
    assert (
        "ModelConfig gpu, named by annotation goalkeeper.dev/model-config, does not exist"
        in (st["schedule"]["description"])
    )
    # Made now: the retry runs with it.
    api.put("ModelConfig", config("gpu"))
    api.grant("team-lead", Permission("get", "", "secrets", NS, "team-key"))
    clock.now += timedelta(minutes=10)
    await reconciler.reconcile(NS, "build")
    assert job_env(api)["GOALKEEPER_MODEL"] == "openai:team-model"


def test_config_status_lists_who_spent_what_through_it() -> None:
    monitors = [
        {
            "metadata": {"name": "a"},
            "status": {
                "modelConfig": "default",
                "usageByConfig": [
                    {"config": "default", "costUsd": 0.5, "inputTokens": 10},
                    {"config": "", "costUsd": 9.0},
                ],
            },
        },
        {"metadata": {"name": "b"}, "status": {"modelConfig": "default"}},
        {"metadata": {"name": "c"}, "status": {"usageByConfig": [{"config": "gpu", "costUsd": 3}]}},
    ]
    found = config_status("default", monitors, 4)
    assert [(u.monitor, float(u.costUsd)) for u in found.monitors] == [("a", 0.5), ("b", 0.0)]
    assert found.monitorCount == 2 and float(found.spendUsd) == 0.5
    assert found.observedGeneration == 4
    assert ModelConfigSpec.model_validate(SPEC).spendCapUsd == 5.0


async def test_a_restarted_operator_finds_a_timer_step_made_with_a_config(clock: Clock) -> None:
    api = with_config()
    settings = OperatorSettings(model="openai:m", timeScale=1)
    reconciler = Reconciler(api, settings, clock=clock)
    await reconciler.reconcile(NS, "build")
    finish(api, extraction())
    await reconciler.reconcile(NS, "build")
    finish(api, observation_dict("wait"))
    await reconciler.reconcile(NS, "build")
    clock.now += timedelta(seconds=6)  # past the five-minute timer at timeScale 1
    launched = await reconciler.reconcile(NS, "build")
    assert launched is not None and launched.step is not None
    assert launched.step.modelConfig == "default"
    writes = api.count("patch_monitor_status")
    restarted = Reconciler(api, settings, clock=clock)
    clock.now += timedelta(seconds=1)
    resumed = await restarted.reconcile(NS, "build")
    assert resumed == launched, "the restart finds the same step in flight, not a foreign one"
    assert api.count("patch_monitor_status") == writes and status(api)["monitor"] == "active"


@pytest.mark.parametrize(
    ("grants", "why"),
    [
        # The writer of the config may not read the Secret it names: no step sends it.
        (
            ["reader"],
            "team-lead may not get secrets/team-key in team-a; ModelConfig default sends no "
            "Secret its writer could not read.",
        ),
        # The Monitor's author may not read the config it would use.
        (
            ["writer"],
            "alice may not get modelconfigs.goalkeeper.dev/default in team-a; a Monitor uses "
            "no ModelConfig its author could not read.",
        ),
    ],
)
async def test_a_config_is_used_only_within_its_writers_and_its_monitor_authors_rights(
    clock: Clock, grants: list[str], why: str
) -> None:
    api = new_api()
    monitor = api.get("Monitor", NS, "build")
    assert monitor is not None
    monitor["metadata"]["annotations"] = {"goalkeeper.dev/author": "alice"}
    api.put("Monitor", monitor)
    api.put("ModelConfig", config())
    # alice may read and start what the observer reads, and nothing of the config.
    api.grant("alice", *permissions.observer_reads(NS))
    if "writer" in grants:
        api.grant("team-lead", Permission("get", "", "secrets", NS, "team-key"))
    if "reader" in grants:
        api.grant("alice", Permission("get", "goalkeeper.dev", "modelconfigs", NS, "default"))
    reconciler = Reconciler(api, OperatorSettings(model="openai:m", timeScale=1), clock=clock)
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert api.count("create_job") == 0 and st["monitor"] == "active"
    assert why in st["schedule"]["description"]
    # A config without an author recorded is not used either.
    unstamped = config()
    del unstamped["metadata"]["annotations"]
    api.put("ModelConfig", unstamped)
    refused = permissions.model_config_readers(
        choose("default", False, NS, unstamped), NS, unstamped, {"goalkeeper.dev/author": "a"}
    )
    assert refused[1][0] is None


def test_a_deleted_monitors_spend_stays_counted_against_the_cap() -> None:
    spent = {
        "metadata": {"name": "a", "uid": "uid-a"},
        "status": {"usageByConfig": [{"config": "default", "costUsd": 4.0}]},
    }
    first = config_status("default", [spent], 1)
    assert float(first.spendUsd) == 4.0 and float(first.retiredSpendUsd) == 0
    # Deleted, and made again under the same name: a new uid, nothing spent yet.
    again = {"metadata": {"name": "a", "uid": "uid-a2"}, "status": {"modelConfig": "default"}}
    later = config_status("default", [again], 1, first)
    assert float(later.retiredSpendUsd) == 4.0 and float(later.spendUsd) == 4.0
    assert choose("default", False, NS, config(spend=float(later.spendUsd) + 1.0)).cap_reached


def test_a_new_run_keeps_what_went_through_each_config() -> None:
    loop = Loop(options={"model": choose("default", False, NS, config())})
    loop.start()
    loop.send(ObservationAccepted(loop.seq, observation("stop", **DONE), usage=usage(0.5)))
    assert loop.status.monitor == "stopped"
    loop.spec = loop.spec.model_copy(update={"everyMinutes": 5})
    loop.send(Started(generation=2))
    assert loop.status.monitor == "active"
    assert [(u.config, float(u.costUsd)) for u in loop.status.usageByConfig] == [("default", 0.5)]
