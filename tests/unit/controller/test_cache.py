"""The watch cache: a check path that reads nothing from the API, staleness caught by the
status write's precondition, one slim entry per live object, and history pruned in
batches."""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta
from typing import Any

import pytest
from tests.support.fake_api import FakeApi
from tests.support.observations import extraction, observation_dict
from tests.unit.controller.test_reconciler import NS, Clock, finish, new_api, reports, status

from goalkeeper.controller import cache as cache_module
from goalkeeper.controller.api import Conflict, NotFound
from goalkeeper.controller.cache import (
    JOB,
    MODEL_CONFIG,
    MONITOR,
    POD,
    STEP,
    CachedApi,
    WatchCache,
)
from goalkeeper.controller.reconciler import Reconciler, prune_batch
from goalkeeper.controller.settings import OperatorSettings

READS = ("get_monitor", "get_step", "get_job", "get_pod", "get_service_account", "step_history")
WATCHED = {"Monitor": MONITOR, "MonitorStep": STEP, "Job": JOB, "Pod": POD}


def watch(api: FakeApi, cache: WatchCache) -> None:
    """Deliver what the watches would: every watched object as the API server has it now."""
    live = set()
    for (kind, namespace, name), body in list(api.objects.items()):
        if kind in WATCHED:
            cache.put(WATCHED[kind], copy.deepcopy(body))
            live.add((WATCHED[kind], namespace, name))
    for kind in WATCHED.values():
        for namespace, name in cache.keys(kind):
            if (kind, namespace, name) not in live:
                cache.drop(kind, namespace, name)


def reads(api: FakeApi) -> int:
    return sum(api.count(method) for method in READS)


async def read_the_task(api: FakeApi, cache: WatchCache, reconciler: Reconciler) -> None:
    """The first reconcile launches extract step 1; its pod answers with the standard
    grants of TASK and, once the watches have delivered that, the next reconcile launches
    observe step 2."""
    await reconciler.reconcile(NS, "build")
    assert status(api)["step"]["kind"] == "extract"
    finish(api, extraction())
    watch(api, cache)
    await reconciler.reconcile(NS, "build")
    assert status(api)["step"]["kind"] == "observe"


@pytest.fixture
def api() -> FakeApi:
    return new_api()


@pytest.fixture
def cache() -> WatchCache:
    return WatchCache()


def cached_reconciler(api: FakeApi, cache: WatchCache, clock: Clock, **settings: Any) -> Reconciler:
    return Reconciler(
        CachedApi(api, cache),
        OperatorSettings(model="openai:m", timeScale=1, **settings),
        clock=clock,
    )


async def test_a_check_reads_nothing_once_the_watches_have_delivered(
    api: FakeApi, cache: WatchCache
) -> None:
    clock = Clock()
    reconciler = cached_reconciler(api, cache, clock)
    watch(api, cache)
    await read_the_task(api, cache, reconciler)
    # The first launch in a namespace checks the step's ServiceAccount once; the task's
    # reading and the first observe step run as the same one.
    assert reads(api) == 1 and api.count("get_service_account") == 1
    for check in range(1, 4):
        finish(api, observation_dict("wait"))
        watch(api, cache)
        before = len(api.calls)
        await reconciler.reconcile(NS, "build")
        assert status(api)["checks"] == check
        clock.now += timedelta(minutes=5)
        await reconciler.reconcile(NS, "build")
        calls = [method for method, _ in api.calls[before:]]
        assert [c for c in calls if c in READS] == [], f"check {check} read {calls}"
        # The floor: one status write, one Event and the report kept on its step per
        # check; the timer's launch is found again under its name and needs no write of
        # its own.
        assert calls == [
            "create_event",  # the report, before the write: a lost write doubles nothing
            "patch_monitor_status",  # the observation accepted
            "annotate_step",  # the same report kept on its step, off the check's path
            "create_step",
            "create_job",
        ], calls
    assert len(reports(api)) == 3


def restarted(api: FakeApi, clock: Clock) -> tuple[WatchCache, Reconciler]:
    """A started operator's cache: the Monitors are in (their own watch lists them first),
    the lists of steps, Jobs and pods not yet."""
    cache = WatchCache(listed=False)
    for (kind, _, _), body in api.objects.items():
        if kind == "Monitor":
            cache.put(MONITOR, copy.deepcopy(body))
    return cache, cached_reconciler(api, cache, clock)


async def test_a_resumed_check_waits_for_the_lists_and_reads_nothing(
    api: FakeApi, cache: WatchCache
) -> None:
    clock = Clock()
    watch(api, cache)
    await read_the_task(api, cache, cached_reconciler(api, cache, clock))
    finish(api, observation_dict("wait"))
    resumed, reconciler = restarted(api, clock)
    before = reads(api)
    check = asyncio.get_running_loop().create_task(reconciler.reconcile(NS, "build"))
    for _ in range(100):  # the fake API never blocks: a reconcile not waiting ends here
        await asyncio.sleep(0)
    assert not check.done(), "the resumed check waits for the lists"
    watch(api, resumed)
    resumed.lists_in()
    await check
    assert status(api)["checks"] == 1 and len(reports(api)) == 1
    assert reads(api) == before, api.calls


async def test_with_nothing_listed_a_read_asks_the_api_server_after_the_wait(
    api: FakeApi, cache: WatchCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    watch(api, cache)
    await read_the_task(api, cache, cached_reconciler(api, cache, clock))
    finish(api, observation_dict("wait"))
    monkeypatch.setattr(cache_module, "LISTS_WAIT", 0.01)
    _, reconciler = restarted(api, clock)
    before = api.count("get_step")
    await reconciler.reconcile(NS, "build")
    assert status(api)["checks"] == 1 and len(reports(api)) == 1
    assert api.count("get_step") == before + 1


class SlowConfigs(FakeApi):
    """An API server whose ModelConfig reads answer only once `answer` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def get_model_config(self, namespace: str, name: str, fresh: bool = False) -> Any:
        self._enter("get_model_config", name)
        await self.answer.wait()
        return self._read("ModelConfig", namespace, name)


@pytest.mark.parametrize("exists", [True, False])
async def test_reconciles_that_miss_a_model_config_at_once_share_one_read(exists: bool) -> None:
    api = SlowConfigs()
    if exists:
        api.put(
            "ModelConfig",
            {"metadata": {"name": "default", "namespace": NS}, "spec": {"model": "m"}},
        )
    cached = CachedApi(api, WatchCache())
    reads = [
        asyncio.get_running_loop().create_task(cached.get_model_config(NS, "default"))
        for _ in range(5)
    ]
    for _ in range(100):  # every read reaches the API server or waits for the one that did
        await asyncio.sleep(0)
    api.answer.set()
    answers = await asyncio.gather(*reads, return_exceptions=True)
    assert api.count("get_model_config") == 1
    if exists:
        assert all(a == answers[0] and a is not answers[0] for a in answers[1:])
        assert answers[0]["spec"] == {"model": "m"}
    else:
        assert all(isinstance(a, NotFound) for a in answers), answers


async def test_a_stale_cached_monitor_conflicts_and_is_read_fresh(
    api: FakeApi, cache: WatchCache
) -> None:
    clock = Clock()
    reconciler = cached_reconciler(api, cache, clock)
    watch(api, cache)
    stale = copy.deepcopy(cache.get(MONITOR, NS, "build"))
    await read_the_task(api, cache, reconciler)
    finish(api, observation_dict("wait"))
    watch(api, cache)
    assert stale is not None
    # A watch event from before our own write, arriving late, never rolls the cache back.
    cache.put(MONITOR, stale)
    assert cache.get(MONITOR, NS, "build") is None
    # A cache that missed a write (another replica's) is caught by the precondition.
    cache.put(MONITOR, stale)
    await reconciler.reconcile(NS, "build")
    assert api.count("get_monitor") == 1, "one fresh read after the conflict"
    assert status(api)["checks"] == 1 and len(reports(api)) == 1


async def test_a_conflict_drops_the_cached_monitor(api: FakeApi, cache: WatchCache) -> None:
    cached = CachedApi(api, cache)
    watch(api, cache)
    api.fail("patch_monitor_status", Conflict("modified", 409))
    with pytest.raises(Conflict):
        await cached.patch_monitor_status(NS, "build", "1", {"checks": 1})
    assert cache.get(MONITOR, NS, "build") is None


def step(name: str, seq: int, owner: str, rv: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "spec": {"monitor": "build", "kind": "observe", "seq": seq, "input": {"big": "x" * 1000}},
        "status": {"phase": phase, "result": {"route": "wait"}},
    }


def test_only_the_newest_step_of_a_monitor_keeps_its_result() -> None:
    cache = WatchCache()
    cache.put(STEP, step("build-1", 1, "m1", 10, "Succeeded"))
    cache.put(STEP, step("build-2", 2, "m1", 11))
    older, newest = cache.get(STEP, NS, "build-1"), cache.get(STEP, NS, "build-2")
    assert older is not None and newest is not None
    assert older["status"] == {"phase": "Succeeded"}, "an older step keeps only its phase"
    assert newest["status"]["result"] == {"route": "wait"}
    assert "input" not in newest["spec"], "the step input is never kept"
    assert cache.history("m1") == {1: "build-1", 2: "build-2"}
    # A deletion older than what is cached is ignored; a current one removes the entry.
    cache.drop(STEP, NS, "build-2", step("build-2", 2, "m1", 5))
    assert cache.get(STEP, NS, "build-2") is not None
    cache.drop(STEP, NS, "build-2", step("build-2", 2, "m1", 11))
    assert cache.get(STEP, NS, "build-2") is None and cache.history("m1") == {1: "build-1"}


def test_a_deleted_monitor_takes_its_steps_out_of_the_cache() -> None:
    cache = WatchCache()
    cache.put(MONITOR, {"metadata": {"name": "build", "namespace": NS, "resourceVersion": "1"}})
    cache.put(STEP, step("build-1", 1, "m1", 10))
    cache.forget_monitor(NS, "build", "m1")
    assert cache.sizes() == {MONITOR: 0, STEP: 0, JOB: 0, POD: 0, MODEL_CONFIG: 0}


def test_a_found_service_account_is_trusted_for_a_while() -> None:
    now = [0.0]
    cache = WatchCache(clock=lambda: now[0])
    cache.account_seen(NS, "goalkeeper-observer")
    assert cache.account_known(NS, "goalkeeper-observer")
    now[0] += 301
    assert not cache.account_known(NS, "goalkeeper-observer")


async def test_history_is_pruned_in_batches(api: FakeApi, cache: WatchCache) -> None:
    clock = Clock()
    reconciler = cached_reconciler(api, cache, clock, stepHistory=4)
    assert prune_batch(4) == 2
    watch(api, cache)
    await read_the_task(api, cache, reconciler)
    for _ in range(9):
        finish(api, observation_dict("wait"))
        watch(api, cache)
        await reconciler.reconcile(NS, "build")
        clock.now += timedelta(minutes=5)
        await reconciler.reconcile(NS, "build")
        watch(api, cache)
        kept = len(api.all("MonitorStep"))
        assert kept <= 4 + prune_batch(4) - 1 + 1, f"{kept} steps kept"
    seqs = sorted(s["spec"]["seq"] for s in api.all("MonitorStep"))
    assert seqs[-1] == 11 and len(seqs) >= 4
    # Eleven launches (the task's reading, ten observe steps), each over the bound once six
    # exist: one request per two excess steps.
    assert api.count("delete_steps") == 3, api.calls


def test_an_older_version_from_the_watch_puts_the_cached_copy_in_doubt() -> None:
    """After etcd came back without its last writes the watch shows an older version: the
    cached newer copy must go, or the monitor would be judged from a state that no longer
    exists."""
    cache = WatchCache()
    newer = {"metadata": {"name": "build", "namespace": NS, "resourceVersion": "20"}}
    older = {"metadata": {"name": "build", "namespace": NS, "resourceVersion": "12"}}
    cache.put(MONITOR, newer)
    cache.put(MONITOR, older)
    assert cache.get(MONITOR, NS, "build") is None, "neither copy is trusted: ask the API"
    cache.put(MONITOR, older)
    assert cache.get(MONITOR, NS, "build") == older


async def test_a_resync_reads_past_a_cache_that_missed_the_result(
    api: FakeApi, cache: WatchCache
) -> None:
    """The watch lost the step's result event, so the cache still shows it running: only
    a fresh pass, as the resync makes, finds the result."""
    clock = Clock()
    reconciler = cached_reconciler(api, cache, clock)
    watch(api, cache)
    await read_the_task(api, cache, reconciler)
    finish(api, observation_dict("wait"))  # written, but never delivered to the cache
    await reconciler.reconcile(NS, "build")
    assert status(api)["checks"] == 0, "from the cache alone nothing has happened"
    await reconciler.reconcile(NS, "build", fresh=True)
    assert status(api)["checks"] == 1 and len(reports(api)) == 1


def test_a_cached_monitor_keeps_no_managed_fields_and_a_large_one_is_kept_compressed() -> None:
    status = {"report": "Check 4: running, 12 of 27 modules built. " * 40}
    body = {
        "metadata": {
            "name": "build",
            "namespace": NS,
            "resourceVersion": "7",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"task": "Finish the build."},
        "status": status,
    }
    cache = WatchCache()
    cache.put(MONITOR, copy.deepcopy(body))
    kept = cache.get(MONITOR, NS, "build")
    assert kept is not None and "managedFields" not in kept["metadata"]
    assert kept["status"] == status and kept["metadata"]["resourceVersion"] == "7"
    entry = cache._objects[MONITOR][(NS, "build")]
    assert len(entry.data) < len(str(status)) / 4
    # A small body is kept as it is.
    cache.put(MONITOR, {"metadata": {"name": "tiny", "namespace": NS}})
    assert cache._objects[MONITOR][(NS, "tiny")].data.startswith(b"{")
    assert cache.get(MONITOR, NS, "tiny") == {"metadata": {"name": "tiny", "namespace": NS}}


def test_an_older_step_kept_with_its_phase_only_is_no_answer_for_its_result() -> None:
    cache = WatchCache()
    cache.put(STEP, step("build-1", 1, "m1", 10, "Succeeded"))
    cache.put(STEP, step("build-2", 2, "m1", 11))
    assert cache.get(STEP, NS, "build-1") == cache.get(STEP, NS, "build-1", whole=False)
    assert cache.get(STEP, NS, "build-1", whole=True) is None
    assert cache.get(STEP, NS, "build-2", whole=True) is not None


async def test_the_result_of_a_step_a_newer_unrecorded_step_follows_is_read_whole(
    api: FakeApi, cache: WatchCache
) -> None:
    """A killed operator launched the next step before its status write recorded the
    result of the one in flight: the one in flight is then an older step in the cache, kept
    with its phase only, and its result must be read from the API server, not taken for
    one that names no pod."""
    clock = Clock()
    reconciler = cached_reconciler(api, cache, clock)
    watch(api, cache)
    await read_the_task(api, cache, reconciler)
    finish(api, observation_dict("wait"))
    in_flight = status(api)["step"]
    [current] = [s for s in api.all("MonitorStep") if s["spec"]["seq"] == in_flight["seq"]]
    newer = copy.deepcopy(current)
    newer["metadata"]["name"] = current["metadata"]["name"].replace(
        f"-{in_flight['seq']}-", f"-{in_flight['seq'] + 1}-"
    )
    newer["spec"]["seq"] = in_flight["seq"] + 1
    newer.pop("status")
    api.put("MonitorStep", newer)
    watch(api, cache)
    await reconciler.reconcile(NS, "build")
    st = status(api)
    assert st["checks"] == 1 and st.get("lastRejection") is None
    assert len(reports(api)) == 1
