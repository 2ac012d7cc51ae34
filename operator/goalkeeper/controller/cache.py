"""What the watches showed, kept in memory so the check path reads nothing from the API.

The operator already receives every Monitor, MonitorStep, step Job and step pod on its
watches (server-side label selectors keep them to ours). `WatchCache` keeps one entry per
live object, slimmed to the fields the reconciler reads: a MonitorStep keeps its status
only while it is its monitor's newest step (the step in flight, or the last one), a Job
its owners and conditions, a pod its owners. Entries are kept as compact JSON: a waiting
monitor costs its size in bytes, not the many times that of a tree of Python objects,
and every read hands out a copy nobody else holds. `CachedApi` answers the reconciler's reads
from it and falls through to the API on a miss, so a cache that has not caught up yet
(a watch still listing, an event in transit) costs one read and never a wrong answer
about existence. At a start, a read of a step, Job or pod that misses first waits (a few
seconds at most) for the lists of those kinds to be in: each kind has a watch of its own,
and Monitors are often listed sooner; each resumed monitor would otherwise read its step,
Job and pod from the API server. Staleness is caught where it matters: a status write carries the
resourceVersion it was decided from, and a conflict drops the entry so the next read is
fresh; every other effect is idempotent under its deterministic name.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from goalkeeper.controller.api import Api, Conflict, NotFound
from goalkeeper.controller.manifests import (
    ANNOTATION_LAUNCH,
    ANNOTATION_LAUNCHED_AT,
    ANNOTATION_MONITOR,
    LABEL_SEQ,
)
from goalkeeper.core.permissions import Author, Permission

log = logging.getLogger("goalkeeper.cache")

Body = dict[str, Any]
Key = tuple[str, str]

# How long a ServiceAccount that was found counts as present; a launch whose pod cannot
# be made fails its Job and is reported, so a longer wait only delays that report.
ACCOUNT_TTL = 300.0

MONITOR, STEP, JOB, POD = "Monitor", "MonitorStep", "Job", "Pod"
MODEL_CONFIG = "ModelConfig"
# The kinds listed at a start that a resumed monitor reads (run.py's own watches).
LISTED_KINDS = (STEP, JOB, POD)
# How long a read that misses one of them waits for those lists: a bound for a list that
# cannot be made (refused, or the API server away), after which reads go past the cache.
LISTS_WAIT = 5.0

STEP_ANNOTATIONS = (ANNOTATION_LAUNCH, ANNOTATION_LAUNCHED_AT)


# Bodies past this size are kept zlib-compressed: a waiting Monitor's status is mostly
# repeated keys and prose, a third of its size compressed, and read once a check.
COMPRESS_OVER = 512


class Entry:
    """One cached object: its resourceVersion, and its body as compact JSON (compressed
    when large), without `managedFields`, which nothing here reads. `partial` when part of
    what the reconciler reads was left out (an older step's status beyond its phase)."""

    __slots__ = ("data", "partial", "version")

    def __init__(self, body: Body, partial: bool = False) -> None:
        meta = body.get("metadata") or {}
        self.partial = partial
        self.version = str(meta.get("resourceVersion", ""))
        if "managedFields" in meta:
            body = {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        data = json.dumps(body, separators=(",", ":")).encode()
        self.data = zlib.compress(data, 1) if len(data) > COMPRESS_OVER else data

    def body(self) -> Body:
        data = self.data
        # Compact JSON of an object starts with "{"; a zlib stream never does.
        loaded: Body = json.loads(data if data[:1] == b"{" else zlib.decompress(data))
        return loaded


def _newer_or_same(new: Body, old: Entry | None) -> bool:
    """True unless `old` is known to be newer (etcd resourceVersions are integers; one
    that is not is compared as unknown, and the newcomer wins)."""
    if old is None:
        return True
    try:
        return int(new["metadata"]["resourceVersion"]) >= int(old.version)
    except (KeyError, TypeError, ValueError):
        return True


def _meta(body: Body, *keys: str) -> Body:
    meta = body.get("metadata") or {}
    return {key: meta[key] for key in keys if key in meta}


def _owner_uid(body: Body) -> str | None:
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def slim_step(step: Body, keep_status: bool) -> Body:
    """The fields the reconciler reads of a MonitorStep; of its input (large) only the
    action an act or repair step runs, which the reconciler checks against status."""
    spec = step.get("spec") or {}
    status = step.get("status") or {}
    slim: Body = {
        "metadata": _meta(
            step, "name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences"
        ),
        "spec": {key: spec[key] for key in ("monitor", "kind", "check", "seq") if key in spec},
    }
    action = (spec.get("input") or {}).get("action")
    if action is not None:
        slim["spec"]["input"] = {"action": action}
    # The launch's own annotations: its token and time (see reconciler._launch).
    annotations = (step.get("metadata") or {}).get("annotations") or {}
    launch = {key: annotations[key] for key in STEP_ANNOTATIONS if key in annotations}
    if launch:
        slim["metadata"]["annotations"] = launch
    if keep_status:
        slim["status"] = status
    elif "phase" in status:
        slim["status"] = {"phase": status["phase"]}
    return slim


def _more(step: Body) -> bool:
    """Whether a step's status holds more than its phase (what a slim copy keeps)."""
    return any(key != "phase" for key in step.get("status") or {})


def slim_job(job: Body) -> Body:
    slim = {
        "metadata": _meta(job, "name", "namespace", "uid", "resourceVersion", "ownerReferences"),
        "status": {"conditions": (job.get("status") or {}).get("conditions") or []},
    }
    # Its monitor and step, for a deletion a list finds after a gap, which names neither.
    meta = job.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if ANNOTATION_MONITOR in annotations:
        slim["metadata"]["annotations"] = {ANNOTATION_MONITOR: annotations[ANNOTATION_MONITOR]}
    labels = meta.get("labels") or {}
    if LABEL_SEQ in labels:
        slim["metadata"]["labels"] = {LABEL_SEQ: labels[LABEL_SEQ]}
    return slim


def slim_pod(pod: Body) -> Body:
    return {
        "metadata": _meta(pod, "name", "namespace", "uid", "resourceVersion", "ownerReferences")
    }


class WatchCache:
    """One entry per live object of ours, fed by the watches and by our own writes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, listed: bool = True) -> None:
        """`listed`: whether the lists of `LISTED_KINDS` count as in already; the
        operator starts with False and calls `lists_in` once they are."""
        self._listed = asyncio.Event()
        if listed:
            self._listed.set()
        self._objects: dict[str, dict[Key, Entry]] = {
            MONITOR: {},
            STEP: {},
            JOB: {},
            POD: {},
            MODEL_CONFIG: {},
        }
        # ModelConfig names the API server said are absent, and when: most namespaces have
        # none, and the watch shows one as soon as it is made.
        self._absent_configs: dict[Key, float] = {}
        # monitor uid -> seq -> step name: the history a prune works from.
        self._history: dict[str, dict[int, str]] = defaultdict(dict)
        self._accounts: dict[Key, float] = {}
        self._clock = clock
        # Namespaces whose Monitors or ModelConfigs changed since the configs' statuses were
        # last brought up to date (controller/configs.py): a pass reads only those.
        self._configs_due: set[str] = set()

    # --- fed by the watches and the writes ---

    def put(self, kind: str, body: Body) -> None:
        """Keep `body`, unless the cache holds a newer version: then the copy is in doubt
        and is dropped, so the next read asks the API server. An older version arrives
        when the watch lags behind our own write (the next event restores the entry), and
        when the store went back (etcd restarted without its last writes): a cache that
        kept its newer copy then would never look again."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if kind in (MONITOR, MODEL_CONFIG):
            self._configs_due.add(key[0])
        store = self._objects[kind]
        if not _newer_or_same(body, store.get(key)):
            self.drop(kind, *key)
            return
        if kind == MODEL_CONFIG:
            self._absent_configs.pop(key, None)
        if kind == STEP:
            self._put_step(key, body)
        elif kind == JOB:
            store[key] = Entry(slim_job(body))
        elif kind == POD:
            store[key] = Entry(slim_pod(body))
        else:
            store[key] = Entry(body)

    def drop(self, kind: str, namespace: str, name: str, body: Body | None = None) -> None:
        """Forget an object (deleted, or possibly stale); a deletion older than what is
        cached is ignored."""
        store = self._objects[kind]
        key = (namespace, name)
        if body is not None and not _newer_or_same(body, store.get(key)):
            return
        if kind in (MONITOR, MODEL_CONFIG):
            self._configs_due.add(namespace)
        gone = store.pop(key, None)
        if kind == STEP and gone is not None:
            self._forget_history(gone.body())

    def _put_step(self, key: Key, step: Body) -> None:
        owner = _owner_uid(step)
        seq = (step.get("spec") or {}).get("seq")
        store = self._objects[STEP]
        if owner is None or not isinstance(seq, int):
            store[key] = Entry(slim_step(step, keep_status=True))
            return
        history = self._history[owner]
        newest = max(history, default=None)
        history[seq] = key[1]
        keep = newest is None or seq >= newest
        store[key] = Entry(slim_step(step, keep_status=keep), partial=not keep and _more(step))
        if newest is not None and seq > newest:
            older = store.get((key[0], history[newest]))
            if older is not None:
                body = older.body()
                store[(key[0], history[newest])] = Entry(
                    slim_step(body, False), partial=older.partial or _more(body)
                )

    def _forget_history(self, step: Body) -> None:
        owner = _owner_uid(step)
        seq = (step.get("spec") or {}).get("seq")
        if owner is None or owner not in self._history:
            return
        self._history[owner].pop(seq, None)  # type: ignore[arg-type]
        if not self._history[owner]:
            del self._history[owner]

    def remember_history(self, monitor_uid: str, steps: dict[int, str]) -> None:
        """Step names listed from the API server, outside this operator's watch."""
        if steps:
            self._history[monitor_uid].update(steps)

    def forget_monitor(self, namespace: str, name: str, uid: str | None) -> None:
        self._objects[MONITOR].pop((namespace, name), None)
        if uid is not None:
            for step in self._history.pop(uid, {}).values():
                self._objects[STEP].pop((namespace, step), None)

    def lists_in(self) -> None:
        self._listed.set()

    def lists_are_in(self) -> bool:
        return self._listed.is_set()

    async def wait_for_lists(self) -> None:
        """Return once the lists of `LISTED_KINDS` are in, or after `LISTS_WAIT`."""
        if self.lists_are_in():
            return
        try:
            await asyncio.wait_for(self._listed.wait(), LISTS_WAIT)
        except TimeoutError:
            if not self._listed.is_set():
                log.info("no step, Job or pod listed in %.0f s: reading past the cache", LISTS_WAIT)
                self._listed.set()

    # --- read by CachedApi ---

    def get(self, kind: str, namespace: str, name: str, whole: bool = False) -> Body | None:
        """The cached object; with `whole`, None when its entry is partial, so a step
        whose result the reconciler must read is read from the API server: a newer step
        that a killed operator launched before it recorded it makes the one in flight an
        older step, kept with its phase only."""
        entry = self._objects[kind].get((namespace, name))
        if entry is None or (whole and entry.partial):
            return None
        return entry.body()

    def keys(self, kind: str) -> list[Key]:
        return list(self._objects[kind])

    def history(self, monitor_uid: str) -> dict[int, str]:
        """The MonitorSteps of one monitor incarnation that the watch has shown, by seq."""
        return dict(self._history.get(monitor_uid, {}))

    def account_known(self, namespace: str, name: str) -> bool:
        seen = self._accounts.get((namespace, name))
        return seen is not None and self._clock() - seen < ACCOUNT_TTL

    def account_seen(self, namespace: str, name: str) -> None:
        self._accounts[(namespace, name)] = self._clock()

    def config_due(self, namespace: str) -> None:
        self._configs_due.add(namespace)

    def take_configs_due(self) -> set[str]:
        """The namespaces whose ModelConfig statuses may have changed since the last call."""
        due, self._configs_due = self._configs_due, set()
        return due

    def config_absent(self, namespace: str, name: str) -> bool:
        seen = self._absent_configs.get((namespace, name))
        return seen is not None and self._clock() - seen < ACCOUNT_TTL

    def config_missing(self, namespace: str, name: str) -> None:
        self._absent_configs[(namespace, name)] = self._clock()

    def sizes(self) -> dict[str, int]:
        return {kind: len(store) for kind, store in self._objects.items()}


class CachedApi:
    """`Api` whose reads come from the watch cache, falling through to `api` on a miss."""

    def __init__(self, api: Api, cache: WatchCache) -> None:
        self.api = api
        self.cache = cache
        # A ModelConfig read in flight, which the reconciles of one namespace that miss at
        # the same time (a start, a resync) wait for instead of asking again.
        self._config_reads: dict[Key, asyncio.Future[Body]] = {}

    async def _read(
        self, kind: str, namespace: str, name: str, read: Callable[[str, str], Any], fresh: bool
    ) -> Body:
        if not fresh:
            whole = kind == STEP
            cached = self.cache.get(kind, namespace, name, whole=whole)
            if cached is None and kind in LISTED_KINDS:
                await self.cache.wait_for_lists()
                cached = self.cache.get(kind, namespace, name, whole=whole)
            if cached is not None:
                return cached
        try:
            found: Body = await read(namespace, name)
        except NotFound:
            self.cache.drop(kind, namespace, name)
            raise
        self.cache.put(kind, found)
        return found

    async def get_monitor(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._read(MONITOR, namespace, name, self.api.get_monitor, fresh)

    async def patch_monitor_status(
        self, namespace: str, name: str, resource_version: str, status: Body
    ) -> Body:
        try:
            written = await self.api.patch_monitor_status(namespace, name, resource_version, status)
        except (Conflict, NotFound):
            self.cache.drop(MONITOR, namespace, name)
            raise
        self.cache.put(MONITOR, written)
        return written

    async def get_step(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._read(STEP, namespace, name, self.api.get_step, fresh)

    async def create_step(self, namespace: str, body: Body) -> Body:
        made = await self.api.create_step(namespace, body)
        self.cache.put(STEP, made)
        return made

    async def annotate_step(self, namespace: str, name: str, annotations: dict[str, str]) -> Body:
        # Kept slim like any step: a report is read back from the API server
        # (`goalkeeper history`), never from here.
        written = await self.api.annotate_step(namespace, name, annotations)
        self.cache.put(STEP, written)
        return written

    async def label_step(self, namespace: str, name: str, labels: dict[str, str | None]) -> Body:
        written = await self.api.label_step(namespace, name, labels)
        self.cache.put(STEP, written)
        return written

    async def step_history(
        self, namespace: str, monitor: str, uid: str, fresh: bool = False
    ) -> dict[int, str]:
        # The watch lists every step before it streams, so what it has not shown yet is
        # at most a step too few to prune now; the next launch prunes it. `fresh` lists the
        # steps another shard's watch saw, and the cache keeps their names from then on.
        if fresh:
            self.cache.remember_history(uid, await self.api.step_history(namespace, monitor, uid))
        return self.cache.history(uid)

    async def delete_steps(self, namespace: str, monitor: str, uid: str, seqs: list[int]) -> None:
        await self.api.delete_steps(namespace, monitor, uid, seqs)
        history = self.cache.history(uid)
        for seq in seqs:
            if seq in history:
                self.cache.drop(STEP, namespace, history[seq])

    async def get_job(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._read(JOB, namespace, name, self.api.get_job, fresh)

    async def create_job(self, namespace: str, body: Body) -> Body:
        made = await self.api.create_job(namespace, body)
        self.cache.put(JOB, made)
        return made

    async def get_pod(self, namespace: str, name: str, fresh: bool = False) -> Body:
        return await self._read(POD, namespace, name, self.api.get_pod, fresh)

    async def list_job_pods(self, namespace: str, job_uid: str) -> list[Body]:
        # The cache keeps a pod's metadata only: how it ended comes from the API server.
        return await self.api.list_job_pods(namespace, job_uid)

    async def get_event(self, namespace: str, name: str) -> Body:
        return await self.api.get_event(namespace, name)

    async def create_event(self, namespace: str, body: Body) -> Body:
        return await self.api.create_event(namespace, body)

    async def get_service_account(self, namespace: str, name: str) -> Body:
        if self.cache.account_known(namespace, name):
            return {"metadata": {"namespace": namespace, "name": name}}
        found = await self.api.get_service_account(namespace, name)
        self.cache.account_seen(namespace, name)
        return found

    async def get_config_map(self, namespace: str, name: str) -> Body:
        # Read once per spec generation, when its task is read: not worth a watch.
        return await self.api.get_config_map(namespace, name)

    async def get_model_config(self, namespace: str, name: str) -> Body:
        cached = self.cache.get(MODEL_CONFIG, namespace, name)
        if cached is not None:
            return cached
        if self.cache.config_absent(namespace, name):
            raise NotFound(f"ModelConfig {namespace}/{name} not found (cached)", 404)
        key = (namespace, name)
        reading = self._config_reads.get(key)
        if reading is None:
            reading = asyncio.ensure_future(self._read_model_config(namespace, name))
            self._config_reads[key] = reading
            reading.add_done_callback(lambda _: self._config_reads.pop(key, None))
        # Shielded: one reconcile cancelled leaves the read to the others.
        return copy.deepcopy(await asyncio.shield(reading))

    async def _read_model_config(self, namespace: str, name: str) -> Body:
        try:
            return await self.api.get_model_config(namespace, name)
        except NotFound:
            self.cache.config_missing(namespace, name)
            raise

    async def patch_model_config_status(self, namespace: str, name: str, status: Body) -> Body:
        written = await self.api.patch_model_config_status(namespace, name, status)
        self.cache.put(MODEL_CONFIG, written)
        return written

    async def list_approvals(self, namespace: str) -> list[Body]:
        return await self.api.list_approvals(namespace)

    async def review_access(self, author: Author, permission: Permission) -> bool:
        return await self.api.review_access(author, permission)
