"""Carries the engine's decisions out in a cluster. Decides nothing itself.

One `apply` per engine event: read the Monitor, ask the engine, carry out the effects,
then write the status with an optimistic lock. Effects come first and are idempotent
(deterministic names, AlreadyExists is success), so a crash between them and the status
write is repaired by the same event arriving again: nothing is lost, nothing is doubled.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from goalkeeper.controller import manifests
from goalkeeper.controller.manifests import GROUP, LABEL_MONITOR, VERSION
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.core.engine import (
    Decision,
    EmitReport,
    Event,
    LaunchStep,
    PublishSchedule,
    StepFailed,
    StopMonitor,
    TimerDue,
    decide,
    halt,
    reject_spec,
)
from goalkeeper.core.models import (
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    StepKind,
    StepPhase,
    StopReason,
)
from goalkeeper.core.steps import describe_errors, step_event

log = logging.getLogger("goalkeeper.reconciler")

TERMINAL_PHASES = frozenset({StepPhase.Succeeded.value, StepPhase.Failed.value})
POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")

Body = dict[str, Any]
# Finds the event from the monitor as just read; None when there is nothing to decide.
EventFinder = Callable[[Body, MonitorStatus], Awaitable["Event | None"]]
CONFLICT_RETRIES = 5


class ForeignObject(Exception):
    """An object found by its deterministic name belongs to another owner."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def _foreign(kind: str, found: Body, ours: str) -> str:
    meta = found.get("metadata") or {}
    return (
        f"{kind} {meta.get('name')} already exists and does not belong to {ours}; "
        "goalkeeper used nothing of it and changed nothing of it."
    )


class Reconciler:
    def __init__(
        self,
        api_client: Any,
        settings: OperatorSettings,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.api_client = api_client
        # Plain dicts in and out: the typed models of the client add nothing here.
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._timers: dict[tuple[str, str], tuple[datetime, asyncio.Task[None]]] = {}

    # --- the one way state changes ---

    async def apply(self, namespace: str, name: str, event: Event) -> None:
        """Decide on one event for one monitor and carry the decision out.

        A result from a step that is no longer in flight needs no filtering here: the
        engine ignores it, the status stays as it was, and nothing is written.
        """

        async def given(_: Body, __: MonitorStatus) -> Event:
            return event

        await self._apply(namespace, name, given)

    async def _apply(self, namespace: str, name: str, find: EventFinder) -> None:
        key = (namespace, name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            for _ in range(CONFLICT_RETRIES):
                monitor = await self._get_monitor(namespace, name)
                if monitor is None:
                    return
                try:
                    status = MonitorStatus.model_validate(monitor.get("status") or {})
                except ValidationError as error:
                    log.error("%s/%s: status is unreadable, not touching it: %s", *key, error)
                    return
                event = await find(monitor, status)
                if event is None:
                    return
                decision = await self._decide(monitor, status, event)
                if decision.status == status:
                    return
                if await self._write_status(monitor, decision.status):
                    self.arm_timer(namespace, name, decision.status)
                    return
            log.warning("%s/%s: status kept changing; the next event retries", *key)

    async def _decide(self, monitor: Body, status: MonitorStatus, event: Event) -> Decision:
        now = self.clock()
        try:
            spec = MonitorSpec.model_validate(monitor.get("spec") or {})
        except ValidationError as error:
            decision = reject_spec(status, describe_errors(error), now)
            return await self._carry_out(monitor, None, decision)
        decision = decide(spec, status, event, now, minute=self.settings.minute)
        name = monitor["metadata"]["name"]
        log.debug("%s: %s -> %s", name, type(event).__name__, decision.effects)
        return await self._carry_out(monitor, spec, decision)

    async def _carry_out(
        self, monitor: Body, spec: MonitorSpec | None, decision: Decision
    ) -> Decision:
        try:
            return await self._carry_out_effects(monitor, spec, decision)
        except ForeignObject as foreign:
            # Someone else's object holds a name that is ours to use: stop, touch nothing.
            halted = halt(decision.status, str(foreign), self.clock())
            return await self._carry_out(monitor, spec, halted)

    async def _carry_out_effects(
        self, monitor: Body, spec: MonitorSpec | None, decision: Decision
    ) -> Decision:
        meta = monitor["metadata"]
        for effect in decision.effects:
            match effect:
                case LaunchStep():
                    assert spec is not None
                    problem = await self._preflight(meta["namespace"], effect.kind)
                    if problem is None:
                        try:
                            await self._launch(monitor, effect)
                        except ForeignObject as foreign:
                            problem = str(foreign)
                    if problem is not None:
                        event = StepFailed(effect.seq, problem, permanent=True)
                        followup = decide(
                            spec, decision.status, event, self.clock(), minute=self.settings.minute
                        )
                        return await self._carry_out(monitor, spec, followup)
                case EmitReport():
                    log.info(
                        "%s/%s check %d:\n%s",
                        meta["namespace"],
                        meta["name"],
                        effect.check,
                        effect.text,
                    )
                    await self._event(monitor, f"check-{effect.check}", "Report", effect.text)
                case PublishSchedule():
                    log.info(
                        "%s/%s next check at %s",
                        meta["namespace"],
                        meta["name"],
                        effect.schedule.nextCheckAt.isoformat(),
                    )
                case StopMonitor():
                    log.info(
                        "%s/%s stopped (%s): %s",
                        meta["namespace"],
                        meta["name"],
                        effect.reason,
                        effect.message,
                    )
                    await self._event(
                        monitor,
                        "stopped",
                        "Stopped",
                        effect.message,
                        warning=effect.reason is not StopReason.goalComplete,
                    )
        return decision

    # --- effects ---

    async def _preflight(self, namespace: str, kind: StepKind) -> str | None:
        """A missing dependency that no retry can fix, named for the user."""
        if not self.settings.model:
            return "No model is configured: set GOALKEEPER_MODEL (openai:NAME or anthropic:NAME)."
        account = (
            self.settings.observerServiceAccount
            if kind is StepKind.observe
            else self.settings.actorServiceAccount
        )
        try:
            await asyncio.to_thread(self.core.read_namespaced_service_account, account, namespace)
        except ApiException as error:
            if error.status == 404:
                return (
                    f"ServiceAccount {account} is missing in namespace {namespace}; "
                    f"the {kind} step runs as it."
                )
            raise
        return None

    async def _launch(self, monitor: Body, launch: LaunchStep) -> None:
        """Create the MonitorStep and its Job; an existing one is used only when it is ours."""
        meta = monitor["metadata"]
        namespace = meta["namespace"]
        step = manifests.monitor_step(monitor, launch)
        created = await self._create(
            lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "monitorsteps", step
            ),
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "monitorsteps", step["metadata"]["name"]
            ),
        )
        if not manifests.owned_by(created, meta["uid"]):
            raise ForeignObject(_foreign("MonitorStep", created, f"Monitor {meta['name']}"))
        job = manifests.step_job(created, self.settings)
        job["metadata"]["labels"][manifests.LABEL_SEQ] = str(launch.seq)
        found = await self._create(
            lambda: self.batch.create_namespaced_job(namespace, job),
            lambda: self.batch.read_namespaced_job(job["metadata"]["name"], namespace),
        )
        if not manifests.owned_by(found, created["metadata"]["uid"]):
            raise ForeignObject(_foreign("Job", found, f"MonitorStep {step['metadata']['name']}"))
        log.info(
            "%s/%s launched %s step %s",
            namespace,
            monitor["metadata"]["name"],
            launch.kind,
            step["metadata"]["name"],
        )
        await self._prune(monitor, keep_seq=launch.seq)

    async def _create(self, create: Callable[[], Any], read: Callable[[], Any]) -> Body:
        """The created object, or the one that already had its name (AlreadyExists), as
        the API's own JSON: the caller checks that an existing one is really its own."""
        try:
            result = await asyncio.to_thread(create)
        except ApiException as error:
            if error.status != 409:
                raise
            result = await asyncio.to_thread(read)
        found: Body = self.api_client.sanitize_for_serialization(result)
        return found

    async def _event(
        self, monitor: Body, what: str, reason: str, message: str, warning: bool = False
    ) -> None:
        meta = monitor["metadata"]
        body = manifests.monitor_event(
            monitor,
            name=manifests.event_name(meta["name"], meta["uid"], what),
            reason=reason,
            message=message,
            warning=warning,
            now=self.clock(),
        )
        found = await self._create(
            lambda: self.core.create_namespaced_event(meta["namespace"], body),
            lambda: self.core.read_namespaced_event(body["metadata"]["name"], meta["namespace"]),
        )
        if (found.get("involvedObject") or {}).get("uid") != meta["uid"]:
            raise ForeignObject(_foreign("Event", found, f"Monitor {meta['name']}"))

    async def _prune(self, monitor: Body, keep_seq: int) -> None:
        """Keep the newest `stepHistory` MonitorSteps; GC takes their Jobs and pods."""
        meta = monitor["metadata"]
        listed = await asyncio.to_thread(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            meta["namespace"],
            "monitorsteps",
            label_selector=f"{LABEL_MONITOR}={manifests.label_value(meta['name'])}",
        )
        steps = [
            s for s in listed.get("items", []) if s.get("spec", {}).get("monitor") == meta["name"]
        ]
        steps.sort(key=lambda s: int(s["spec"]["seq"]))
        excess = len(steps) - self.settings.stepHistory
        for old in steps[: max(excess, 0)]:
            if int(old["spec"]["seq"]) == keep_seq:
                continue
            try:
                await asyncio.to_thread(
                    self.custom.delete_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    meta["namespace"],
                    "monitorsteps",
                    old["metadata"]["name"],
                    propagation_policy="Background",
                )
            except ApiException as error:
                if error.status != 404:
                    raise

    # --- reads and the status write ---

    async def _get_monitor(self, namespace: str, name: str) -> Body | None:
        return await self._get("monitors", namespace, name)

    async def get_step(self, namespace: str, name: str) -> Body | None:
        return await self._get("monitorsteps", namespace, name)

    async def _get(self, plural: str, namespace: str, name: str) -> Body | None:
        try:
            return await asyncio.to_thread(
                self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, plural, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def _write_status(self, monitor: Body, status: MonitorStatus) -> bool:
        meta = monitor["metadata"]
        body = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": status.model_dump(mode="json"),
        }
        try:
            await asyncio.to_thread(
                self.custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                meta["namespace"],
                "monitors",
                meta["name"],
                body,
                _content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    # --- the wait timer ---

    def arm_timer(self, namespace: str, name: str, status: MonitorStatus) -> None:
        """Sleep until `nextCheckAt` when the monitor waits; nothing polls meanwhile."""
        key = (namespace, name)
        waiting = (
            status.monitor is MonitorState.active
            and status.step is None
            and status.schedule is not None
        )
        current = self._timers.get(key)
        if not waiting:
            self.disarm(namespace, name)
            return
        assert status.schedule is not None
        due = status.schedule.nextCheckAt
        if current is not None and current[0] == due and not current[1].done():
            return
        self.disarm(namespace, name)
        self._timers[key] = (due, asyncio.get_running_loop().create_task(self._fire(key, due)))

    def disarm(self, namespace: str, name: str) -> None:
        entry = self._timers.pop((namespace, name), None)
        if entry is not None and entry[1] is not asyncio.current_task():
            entry[1].cancel()

    def forget(self, namespace: str, name: str) -> None:
        self.disarm(namespace, name)
        self._locks.pop((namespace, name), None)

    async def _fire(self, key: tuple[str, str], due: datetime) -> None:
        delay = (due - self.clock()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)
        log.info("%s/%s timer due", *key)
        try:
            await self.apply(*key, TimerDue())
        except Exception:
            log.exception("%s/%s: timer failed; it fires again on the next monitor event", *key)
            self._timers.pop(key, None)

    # --- step results, accepted only from the step's own pod ---

    async def step_result(self, namespace: str, step: Body) -> None:
        """A MonitorStep reached a terminal phase: decide on its result."""
        spec = step.get("spec") or {}
        try:
            kind, seq, monitor = StepKind(spec["kind"]), int(spec["seq"]), str(spec["monitor"])
        except (KeyError, ValueError, TypeError):
            return

        async def find(body: Body, status: MonitorStatus) -> Event | None:
            if not manifests.owned_by(step, body["metadata"]["uid"]):
                log.info(
                    "%s/%s: ignored MonitorStep %s, which belongs to another incarnation",
                    namespace,
                    monitor,
                    step["metadata"]["name"],
                )
                return None  # garbage collection takes it with its own monitor
            if status.step is None or status.step.seq != seq:
                return None  # not in flight: the engine would ignore it, so nothing to read
            forged = await self._provenance(namespace, step)
            return step_event(kind, seq, step.get("status"), forged=forged)

        await self._apply(namespace, monitor, find)

    async def job_ended(self, namespace: str, job: Body, message: str) -> None:
        """A step's Job failed or vanished: the step failed unless it wrote a result."""
        step = await self.get_step(namespace, job["metadata"]["labels"][manifests.LABEL_STEP])
        if step is None or not manifests.owned_by(job, step["metadata"]["uid"]):
            return  # pruned, garbage-collected with its monitor, or not this step's Job
        if (step.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return  # the step wrote its result; that result decides
        seq = int(step["spec"]["seq"])

        async def find(body: Body, _: MonitorStatus) -> Event | None:
            if not manifests.owned_by(step, body["metadata"]["uid"]):
                return None
            return StepFailed(seq, message)

        await self._apply(namespace, step["spec"]["monitor"], find)

    async def _provenance(self, namespace: str, step: Body) -> str | None:
        """Why the step's result was not written by the step's own pod; None when it was.

        The admission policy already refuses other writers; this is the operator's own
        check that the pod named in the result is its Job's, and the Job the step's.
        """
        step_name = step["metadata"]["name"]
        pod_ref = (step.get("status") or {}).get("pod") or {}
        pod_name, pod_uid = pod_ref.get("name"), pod_ref.get("uid")
        if not isinstance(pod_name, str) or not POD_NAME.fullmatch(pod_name):
            return "the result names no valid pod"
        pod = await self._read(lambda: self.core.read_namespaced_pod(pod_name, namespace))
        if pod is None or pod["metadata"].get("uid") != pod_uid:
            return f"pod {pod_name} with the uid the result names does not exist"
        job = await self._read(lambda: self.batch.read_namespaced_job(step_name, namespace))
        if job is None or not manifests.owned_by(job, step["metadata"]["uid"]):
            return f"Job {step_name} is missing or does not belong to the step"
        if not manifests.owned_by(pod, job["metadata"]["uid"]):
            return f"pod {pod_name} is not a pod of Job {step_name}"
        return None

    async def _read(self, read: Callable[[], Any]) -> Body | None:
        try:
            found: Body = self.api_client.sanitize_for_serialization(await asyncio.to_thread(read))
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    # --- finding lost steps after a restart ---

    async def verify_step_in_flight(self, namespace: str, monitor: Body) -> None:
        """After a restart: a step whose result or object was missed is settled now."""
        meta = monitor["metadata"]
        try:
            step = MonitorStatus.model_validate(monitor.get("status") or {}).step
        except ValidationError:
            return
        if step is None:
            return
        step_name = manifests.step_name(meta["name"], meta["uid"], step.seq, step.kind)
        found = await self.get_step(namespace, step_name)
        if found is None:
            message = f"MonitorStep {step_name} vanished before it wrote a result."
            await self.apply(namespace, meta["name"], StepFailed(step.seq, message))
        elif not manifests.owned_by(found, meta["uid"]):
            message = _foreign("MonitorStep", found, f"Monitor {meta['name']}")
            await self.apply(namespace, meta["name"], StepFailed(step.seq, message, permanent=True))
        elif (found.get("status") or {}).get("phase") in TERMINAL_PHASES:
            await self.step_result(namespace, found)
