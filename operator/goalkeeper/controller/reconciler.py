"""One level-based reconcile per Monitor: read the current state, ask the core what it
stands for and what to do, carry that out, write the status. Decides nothing itself.

Any trigger only names the monitor (see workqueue.py), so a missed or failed event is
healed by the next one. Effects come before the status write and are idempotent
(deterministic names; an object found under its name is used only when it is ours), so
a failure or a crash between them and the write is repaired by reconciling again: the
same state leads to the same decision, the same names, and nothing doubles.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from goalkeeper.controller import manifests, metrics
from goalkeeper.controller.api import (
    AlreadyExists,
    Api,
    ApiError,
    Conflict,
    NotFound,
    Transient,
    denied_permissions,
)
from goalkeeper.controller.settings import OperatorSettings
from goalkeeper.controller.telemetry import CheckSpans
from goalkeeper.core import authority, migrate, modelconfig, notices, permissions
from goalkeeper.core.controls import Controls, controls_of
from goalkeeper.core.engine import (
    ApprovalAnswered,
    Decision,
    EmitReport,
    Event,
    LaunchStep,
    Notify,
    PublishSchedule,
    StepFailed,
    StopMonitor,
    TargetChanged,
    TimerDue,
    api_recovered,
    api_refused,
    decide,
    halt,
    reject_spec,
    timer_launched,
    timer_step_needs_its_job,
    unreadable,
)
from goalkeeper.core.modelconfig import ModelChoice
from goalkeeper.core.models import (
    INSTRUCTIONS_CONFIGMAP,
    MUTATING_STEPS,
    ActionRequest,
    Instructions,
    MonitorApprovalSpec,
    MonitorSpec,
    MonitorStatus,
    MonitorStepStatus,
    StepInFlight,
    StepKind,
    StopReason,
    WatchTarget,
)
from goalkeeper.core.notices import SinkWants
from goalkeeper.core.permissions import Author, Permission
from goalkeeper.core.policy import Context
from goalkeeper.core.steps import (
    TERMINAL_PHASES,
    StepFacts,
    describe_errors,
    job_failure,
    may_still_be_made,
    next_event,
)

log = logging.getLogger("goalkeeper.reconciler")
# How long an access review of a ModelConfig's writer or reader is taken as answered.
REVIEW_TTL = 60.0

POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# A reconcile goes on while each round changes the status (a launched step may already
# have finished); this bounds one pass, the next trigger carries on.
MAX_ROUNDS = 8

Body = dict[str, Any]
Key = tuple[str, str]


def _step_status(facts: StepFacts | None) -> MonitorStepStatus | None:
    """The step's own account (usage, timing) for the metrics, when it is readable."""
    if facts is None or facts.status is None:
        return None
    try:
        return MonitorStepStatus.model_validate(dict(facts.status))
    except ValidationError:
        return None


class Wakes(Protocol):
    """Changes of watched targets held for their monitors (see targets.py)."""

    def take(self, key: Key) -> tuple[WatchTarget, str] | None: ...
    def restore(self, key: Key, change: tuple[WatchTarget, str]) -> None: ...


class _NoWakes:
    def take(self, key: Key) -> tuple[WatchTarget, str] | None:
        return None

    def restore(self, key: Key, change: tuple[WatchTarget, str]) -> None:
        return None


class Sinks(Protocol):
    """Where each Monitor's messages go (controller/notify.py)."""

    def wants(self, namespace: str) -> tuple[SinkWants, ...] | None: ...
    def poke(self, namespace: str, name: str) -> None: ...


class _NoSinks:
    def wants(self, namespace: str) -> tuple[SinkWants, ...] | None:
        return ()

    def poke(self, namespace: str, name: str) -> None:
        return None


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


def _not_launched(step: Body) -> str:
    meta = step.get("metadata") or {}
    return (
        f"MonitorStep {meta.get('name')} is not the step goalkeeper launches under that name: "
        "its spec differs from the one goalkeeper builds (someone else made or replaced it, "
        "or the MonitorStep CRD is older than the operator and dropped fields); goalkeeper "
        "used nothing of it and changed nothing of it."
    )


def _is_recorded_step(found: Body, step: StepInFlight) -> bool:
    """Whether MonitorStep `found` is the step status records: its kind, seq and check,
    and for an act or repair step the very action recorded (none for any other)."""
    spec = found.get("spec") or {}
    try:
        raw = (spec.get("input") or {}).get("action")
        action = ActionRequest.model_validate(raw) if raw is not None else None
    except ValidationError:
        return False
    return (spec.get("kind"), spec.get("seq"), spec.get("check"), action) == (
        step.kind.value,
        step.seq,
        step.check,
        step.action,
    )


def read_status(monitor: Body) -> migrate.Read:
    """The monitor's status in this version's layout (core/migrate.py reads every layout
    an earlier version wrote); logged when something had to be given up, or nothing helps."""
    read = migrate.read(monitor.get("status"), describe_errors)
    meta = monitor.get("metadata") or {}
    if read.newer:
        log.error("%s/%s: %s", meta.get("namespace"), meta.get("name"), read.error)
    elif read.status is None:
        log.error(
            "%s/%s: status is unreadable; stopping the monitor with the reason: %s",
            meta.get("namespace"),
            meta.get("name"),
            read.error,
        )
    elif read.salvaged:
        log.warning(
            "%s/%s: status read without %s, which no layout this version knows could read",
            meta.get("namespace"),
            meta.get("name"),
            ", ".join(read.salvaged),
        )
    return read


def status_patch(monitor: Body, status: MonitorStatus) -> Body:
    """`status` as the merge patch that leaves exactly it stored (see migrate.merge_patch)."""
    return migrate.merge_patch(monitor.get("status"), status.model_dump(mode="json"))


class Reconciler:
    def __init__(
        self,
        api: Api,
        settings: OperatorSettings,
        clock: Callable[[], datetime] = utcnow,
        wakes: Wakes | None = None,
        sinks: Sinks | None = None,
        spans: CheckSpans | None = None,
    ) -> None:
        self.api = api
        self.sinks: Sinks = sinks or _NoSinks()
        self.spans = spans or CheckSpans({})
        self.settings = settings
        self.policy = settings.policy()
        self.shard = settings.shard
        # Monitors (uids) whose step history another shard launched, outside this one's
        # watch: listed from the API server once, at the next prune, then kept in the cache.
        self._histories_due: set[str] = set()
        self._histories_listed: set[str] = set()
        self.clock = clock
        self.wakes: Wakes = wakes or _NoWakes()
        # A target change a round took, until the decision made from it is written.
        self._taken: dict[Key, tuple[WatchTarget, str]] = {}
        # The resourceVersion each monitor settled at, so the watch event of our own
        # status write needs no second reconcile.
        self.settled: dict[Key, str] = {}
        # The uid of each monitor's newest MonitorStep known to hold the spec its launch
        # builds: a step's spec never changes (the CRD refuses it), so it is compared once.
        self._checked_steps: dict[Key, str] = {}
        # The operators' instructions read this round for a monitor whose task may be read
        # (or why the namespace's cannot be used); absent when the round reads no task.
        self._instructions: dict[Key, Instructions | str] = {}
        # The model each monitor's steps run with, found this round.
        self._models: dict[Key, ModelChoice] = {}
        # Access reviews of ModelConfig writers and readers, with when they were answered.
        self._reviews: dict[tuple[Author, Permission], tuple[bool, float]] = {}

    # --- the reconcile ---

    async def reconcile(
        self, namespace: str, name: str, fresh: bool = False
    ) -> MonitorStatus | None:
        """Bring one monitor forward from its current state; with `fresh`, the monitor and
        its step in flight are read from the API server, never from a cache.

        Returns the status it settled at, or None when the monitor is gone or unreadable.
        API failures raise the typed errors of `api`; the work queue retries them.
        """
        key = (namespace, name)
        try:
            return await self._reconcile(key, fresh)
        finally:
            self._give_back(key)

    def _give_back(self, key: Key) -> None:
        """A target change whose decision was not written stays held for the next round."""
        change = self._taken.pop(key, None)
        if change is not None:
            self.wakes.restore(key, change)

    async def _reconcile(self, key: Key, fresh: bool) -> MonitorStatus | None:
        namespace, name = key
        monitor = await self._read_monitor(namespace, name, fresh=fresh)
        status: MonitorStatus | None = None
        for _ in range(MAX_ROUNDS):
            if monitor is None:
                self.settled.pop(key, None)
                self._checked_steps.pop(key, None)
                self._instructions.pop(key, None)
                self._models.pop(key, None)
                metrics.forget_monitor(namespace, name)
                return None
            read = read_status(monitor)
            if read.newer:
                await self._event(
                    monitor,
                    f"newer-layout-{read.newer}",
                    "NewerStatus",
                    f"Left untouched: {read.error}. Run the later version again to carry on.",
                    warning=True,
                )
                return None
            decision: Decision | None
            if read.status is None:
                # Nothing of it can be trusted: stop it, saying why, rather than go silent.
                status = MonitorStatus()
                generation = monitor["metadata"].get("generation")
                stopped = unreadable(monitor.get("status"), read, generation, self.clock())
                decision, facts = await self._carry_out(monitor, None, stopped), None
            else:
                decision, facts, status = await self._round(monitor, read.status, fresh)
            # Getting this far means the API answers again: an earlier refusal is over.
            target = api_recovered(decision.status if decision is not None else status)
            if target == status:
                self._taken.pop(key, None)  # the change moved nothing
                self.settled[key] = monitor["metadata"]["resourceVersion"]
                metrics.set_monitor(namespace, name, status)
                return status
            if decision is not None and decision.unrecorded and target == decision.status:
                continue  # the next round finds the launched step under its name
            try:
                monitor = await self.api.patch_monitor_status(
                    namespace,
                    name,
                    monitor["metadata"]["resourceVersion"],
                    status_patch(monitor, target),
                )
            except Conflict:
                # Someone wrote in between, or what we read was stale: decide again from
                # what the API server has now.
                self._give_back(key)
                monitor = await self._read_monitor(namespace, name, fresh=True)
            except NotFound:
                monitor = None
            else:
                self._taken.pop(key, None)
                metrics.record_decision(namespace, status, target, _step_status(facts))
                metrics.set_monitor(namespace, name, target)
                if target.notices is not None and target.notices.items:
                    self.sinks.poke(namespace, name)
                if decision is not None:
                    monitor = await self._launch_recorded(monitor, decision)
                    await self._keep_reports(monitor, status, decision)
        log.info("%s/%s: still moving after %d rounds; continuing", namespace, name, MAX_ROUNDS)
        return status

    async def _launch_recorded(self, monitor: Body, decision: Decision) -> Body:
        """Start the act or repair step the status write just recorded.

        A mutation starts only once status names it: a crash or a failure before the
        write leaves no step behind that a later decision, made from facts that changed
        meanwhile (a Job deleted by hand, a spec edit), could not know of; one after it
        leaves a recorded step without its MonitorStep or Job, which the next round
        reports as failed and never starts again.
        """
        for effect in decision.effects:
            if isinstance(effect, LaunchStep) and effect.kind in MUTATING_STEPS:
                try:
                    await self._launch(monitor, effect)
                except ForeignObject as foreign:
                    halted = await self._carry_out(
                        monitor, None, halt(decision.status, str(foreign), self.clock())
                    )
                    meta = monitor["metadata"]
                    written: Body = await self.api.patch_monitor_status(
                        meta["namespace"],
                        meta["name"],
                        meta["resourceVersion"],
                        status_patch(monitor, halted.status),
                    )
                    return written
        return monitor

    async def _keep_reports(self, monitor: Body, status: MonitorStatus, decision: Decision) -> None:
        """Keep the report of the check the status write just accepted on the observe step
        whose observation made it, where the step history keeps it (`goalkeeper history`):
        the Event expires and status.report holds only the latest. Written after the status,
        off the check's path, and only for a decision that was written. A final stop report,
        made between checks, stays in status alone. A failed write is only logged: the
        report is in status and its Event."""
        step = status.step
        if step is None or step.kind is not StepKind.observe:
            return
        meta = monitor["metadata"]
        name = manifests.step_name(meta["name"], meta["uid"], step.seq, step.kind)
        for effect in decision.effects:
            if not isinstance(effect, EmitReport) or effect.final or effect.check != step.check:
                continue
            self._check_span(monitor, step, decision.status)
            annotations = manifests.report_annotations(effect.check, effect.text)
            try:
                await self.api.annotate_step(meta["namespace"], name, annotations)
            except ApiError as error:
                log.warning(
                    "%s/%s: check %d's report is not kept in the step history (%s); it is "
                    "in status.report and its Event",
                    meta["namespace"],
                    meta["name"],
                    effect.check,
                    error,
                )

    def _check_span(self, monitor: Body, step: StepInFlight, after: MonitorStatus) -> None:
        """The accepted check's root span, from its observe step's start to now."""
        meta = monitor["metadata"]
        trace = self.spans.trace(meta["uid"], meta.get("generation"), step.check)
        if trace is None:
            return
        observed = after.lastObservation
        self.spans.check(
            trace,
            namespace=meta["namespace"],
            monitor=meta["name"],
            check=step.check,
            started=step.startedAt,
            ended=self.clock(),
            attributes={
                "goalkeeper.route": observed.route.value if observed else "",
                "goalkeeper.goal": after.goal.value,
                "goalkeeper.work": after.work.value,
                "goalkeeper.monitor.state": after.monitor.value,
            },
        )

    async def record_refusal(self, namespace: str, name: str, message: str) -> None:
        """Show a refusal that retrying cannot fix on the Monitor, once per message; the
        API may refuse this write too, so a failure here is only logged."""
        try:
            monitor = await self._read_monitor(namespace, name)
            status = read_status(monitor).status if monitor is not None else None
            if monitor is None or status is None:
                return
            refused = api_refused(status, message, self.clock())
            if refused != status:
                await self.api.patch_monitor_status(
                    namespace,
                    name,
                    monitor["metadata"]["resourceVersion"],
                    status_patch(monitor, refused),
                )
        except ApiError as error:
            log.warning(
                "%s/%s: could not record the refusal on the Monitor: %s", namespace, name, error
            )

    async def _read_monitor(self, namespace: str, name: str, fresh: bool = False) -> Body | None:
        """The monitor, or None when it is gone or another shard's: a read that falls
        through to the API server (a trigger by name, a resync) may find one relabelled."""
        try:
            monitor = await self.api.get_monitor(namespace, name, fresh=fresh)
        except NotFound:
            return None
        if not self.shard.matches(monitor["metadata"].get("labels")):
            log.info("%s/%s: another shard's now (%s); let go", namespace, name, self.shard.text)
            # Should it come back, the history the other shard adds is listed again.
            self._histories_listed.discard(str(monitor["metadata"].get("uid")))
            return None
        return monitor

    async def _round(
        self, monitor: Body, status: MonitorStatus, fresh: bool = False
    ) -> tuple[Decision | None, StepFacts | None, MonitorStatus]:
        """One decision, with the facts it was made from and the status it was made on:
        the written status, or that status with the step its timer launched unrecorded."""
        now = self.clock()
        try:
            spec = MonitorSpec.model_validate(monitor.get("spec") or {})
        except ValidationError as error:
            rejected = reject_spec(status, describe_errors(error), now)
            return await self._carry_out(monitor, None, rejected), None, status
        try:
            status = await self._timer_step(monitor, spec, status)
        except ForeignObject as foreign:
            halted = halt(status, str(foreign), now)
            return await self._carry_out(monitor, spec, halted), None, status
        facts = await self._step_facts(monitor, status, fresh) if status.step is not None else None
        meta = monitor["metadata"]
        controls = controls_of(meta.get("annotations"))
        event = next_event(status, meta.get("generation"), facts, now, controls)
        if event is None and status.schedule is not None and status.schedule.watch:
            key = (meta["namespace"], meta["name"])
            change = self.wakes.take(key)
            if change is not None:
                self._taken[key] = change
                event = TargetChanged(*change)
        if event is None and authority.awaits_answer(status):
            event = await self._approval_answer(monitor, status)
        if event is None:
            log.debug("%s/%s: nothing to do", meta["namespace"], meta["name"])
            return None, facts, status
        await self._read_instructions(monitor, status)
        await self._choose_model(monitor)
        decision = await self._author_reviewed(monitor, spec, status, event, now)
        log.debug("%s/%s: %s -> %s", meta["namespace"], meta["name"], event, decision.effects)
        return await self._carry_out(monitor, spec, decision), facts, status

    async def _read_instructions(self, monitor: Body, status: MonitorStatus) -> None:
        """Read the operators' instructions when this round may read the monitor's task:
        they are pinned with its authority then, and not read again until the next
        generation."""
        meta = monitor["metadata"]
        key = (meta["namespace"], meta["name"])
        self._instructions.pop(key, None)
        if not authority.instructions_needed(status, meta.get("generation")):
            return
        found = await self._get(self.api.get_config_map, meta["namespace"], INSTRUCTIONS_CONFIGMAP)
        self._instructions[key] = authority.instructions_of(
            self.settings.instructions,
            None if found is None else dict(found.get("data") or {}),
            "" if found is None else str(found["metadata"].get("resourceVersion") or ""),
        )

    async def _choose_model(self, monitor: Body) -> None:
        """The ModelConfig this monitor's next step runs with (the operator's settings when
        its namespace has none and it names none); a config edit counts from the next step."""
        meta = monitor["metadata"]
        namespace = meta["namespace"]
        name, named = modelconfig.config_name(meta.get("annotations"))
        found = await self._get(self.api.get_model_config, namespace, name)
        choice = modelconfig.choose(name, named, namespace, found)
        needed = permissions.model_config_readers(choice, namespace, found, meta.get("annotations"))
        for author, permission, why in needed:
            if author is None or not await self._may(author, permission):
                choice = permissions.model_config_refused(choice, author, permission, why)
                break
        self._models[(namespace, meta["name"])] = choice

    async def _may(self, author: Author, permission: Permission) -> bool:
        """The API server's answer, kept a while: a config is checked at every step."""
        key = (author, permission)
        now = time.monotonic()
        kept = self._reviews.get(key)
        if kept is not None and now - kept[1] < REVIEW_TTL:
            return kept[0]
        allowed = await self.api.review_access(author, permission)
        self._reviews[key] = (allowed, now)
        return allowed

    def _model(self, monitor: Body) -> ModelChoice:
        meta = monitor["metadata"]
        return self._models.get((meta["namespace"], meta["name"]), modelconfig.OPERATOR_SETTINGS)

    async def _timer_step(
        self, monitor: Body, spec: MonitorSpec, status: MonitorStatus
    ) -> MonitorStatus:
        """`status` with the observe step its timer launched in flight, when that step is
        found under its name; the status write that accepts its result records it.
        Raises ForeignObject when the step found there is not the one the timer launched."""
        if status.step is not None or status.schedule is None:
            return status
        meta = monitor["metadata"]
        namespace, seq = meta["namespace"], status.stepSeq + 1
        name = manifests.step_name(meta["name"], meta["uid"], seq, StepKind.observe)
        history = await self.api.step_history(namespace, meta["name"], meta["uid"])
        if history.get(seq) != name:
            return status
        step = await self._get(self.api.get_step, namespace, name)
        at = manifests.launched_at(step) if step is not None else None
        if step is None or at is None or not manifests.owned_by(step, meta["uid"]):
            return status
        finished = (step.get("status") or {}).get("phase") in TERMINAL_PHASES
        job_missing = (
            timer_step_needs_its_job(at, self.clock(), finished=finished)
            and await self._get(self.api.get_job, namespace, name) is None
        )
        launched = timer_launched(status, seq, at, job_missing=job_missing)
        if launched is None:
            return status
        key = (namespace, meta["name"])
        if self._checked_steps.get(key) != step["metadata"].get("uid"):
            # The cache keeps no step input: compare the step as the API server has it.
            step = await self._get(self.api.get_step, namespace, name, fresh=True)
            if step is None:
                return status
            if not self._timer_launched_it(monitor, spec, status, step, at):
                raise ForeignObject(_not_launched(step))
            self._checked_steps[key] = step["metadata"]["uid"]
        return launched

    def _timer_launched_it(
        self, monitor: Body, spec: MonitorSpec, status: MonitorStatus, step: Body, at: datetime
    ) -> bool:
        """Whether `step` is what the timer launched at `at`: the same decision, made again
        from the same status at that time, builds the same step."""
        found = manifests.step_spec(step)
        if found is None:
            return False
        if monitor["metadata"].get("generation") != status.observedGeneration:
            # Launched before a spec edit the engine has yet to see, from the spec before it,
            # which only the step still names; the engine discards an old generation's result.
            launched_from = {
                "task": found.input.task,
                "stopWhen": found.input.stopWhen,
                "maxChecks": found.input.maxChecks,
            }
            spec = spec.model_copy(update=launched_from)
        # As launched: a launch its author was denied would not have been made at all, and
        # a pause set since then stops what follows the step, not the step itself.
        decision = self._decide(monitor, spec, status, TimerDue(), at, as_launched=True)
        launches = [e for e in decision.effects if isinstance(e, LaunchStep)]
        return (
            decision.unrecorded
            and len(launches) == 1
            and manifests.same_step(
                step, manifests.monitor_step(monitor, launches[0], self.shard.keys), reading=True
            )
        )

    async def _approval_answer(self, monitor: Body, status: MonitorStatus) -> Event | None:
        """The oldest MonitorApproval for this monitor that the engine has not taken yet."""
        meta = monitor["metadata"]
        request = status.approval
        ignored = set(request.ignored) if request is not None else set()
        taken = {record.name for record in status.approvals} | ignored
        listed = await self.api.list_approvals(meta["namespace"])
        mine = [
            a
            for a in listed
            if (a.get("spec") or {}).get("monitor") == meta["name"]
            and (a.get("metadata") or {}).get("name") not in taken
        ]
        mine.sort(
            key=lambda a: (a["metadata"].get("creationTimestamp") or "", a["metadata"]["name"])
        )
        for approval in mine:
            name = approval["metadata"]["name"]
            try:
                answer = MonitorApprovalSpec.model_validate(approval.get("spec") or {})
            except ValidationError as error:
                log.warning(
                    "%s/%s: MonitorApproval %s is invalid: %s",
                    meta["namespace"],
                    meta["name"],
                    name,
                    describe_errors(error),
                )
                continue
            refs = approval["metadata"].get("ownerReferences") or []
            owners = tuple(str(ref.get("uid")) for ref in refs)
            return ApprovalAnswered(name, answer, owners, meta["uid"])
        return None

    async def _author_reviewed(
        self, monitor: Body, spec: MonitorSpec, status: MonitorStatus, event: Event, now: datetime
    ) -> Decision:
        """The decision, made again with what its author lacks when the step it launches
        needs a permission the API server says they do not hold (core/permissions.py
        names what each launch needs; the engine decides what a denial means)."""
        decision = self._decide(monitor, spec, status, event, now)
        meta = monitor["metadata"]
        launches = [e for e in decision.effects if isinstance(e, LaunchStep)]
        needed = permissions.needed_for(launches, meta["namespace"], self.settings.act_extra_verbs)
        if not needed:
            return decision
        author = permissions.author_of(meta.get("annotations"))
        if author is None:
            denied = (
                f"Monitor {meta['name']} records no author (annotation {permissions.AUTHOR}, "
                "set by the API server through the goalkeeper-monitor-author admission "
                "policy), so nothing can be checked against its author's own rights."
            )
        else:
            lacking = await denied_permissions(self.api, author, needed)
            if not lacking:
                return decision
            denied = permissions.denied_text(author, lacking) + (
                "; goalkeeper does nothing its author could not do themselves."
            )
        log.info("%s/%s: %s", meta["namespace"], meta["name"], denied)
        return self._decide(monitor, spec, status, event, now, author_denied=denied)

    def _decide(
        self,
        monitor: Body,
        spec: MonitorSpec,
        status: MonitorStatus,
        event: Event,
        now: datetime,
        author_denied: str = "",
        *,
        as_launched: bool = False,
    ) -> Decision:
        """The engine's decision for this monitor; `as_launched` leaves out the person's
        controls, to make again a launch that was made before them."""
        meta = monitor["metadata"]
        annotations = meta.get("annotations")
        author = permissions.author_of(annotations)
        instructions = self._instructions.get((meta["namespace"], meta["name"]))
        context = Context(
            namespace=meta["namespace"],
            author=author.user if author is not None else "",
            author_denied=author_denied,
            controls=Controls() if as_launched else controls_of(annotations),
            instructions=instructions if isinstance(instructions, Instructions) else None,
            # A launch made again is made with the config it recorded (a restarted operator
            # has not chosen one yet).
            model=ModelChoice(status.modelConfig) if as_launched else self._model(monitor),
        )
        return decide(spec, status, event, now, self.policy, context)

    # --- the facts of the step in flight ---

    async def _step_facts(self, monitor: Body, status: MonitorStatus, fresh: bool) -> StepFacts:
        meta = monitor["metadata"]
        namespace = meta["namespace"]
        step = status.step
        assert step is not None
        name = manifests.step_name(meta["name"], meta["uid"], step.seq, step.kind)
        found = await self._get(self.api.get_step, namespace, name, fresh=fresh)
        if found is None and self.shard and may_still_be_made(step, self.clock()):
            raise Transient(
                f"{step.kind} step {name} is recorded but not there yet: the shard that "
                "recorded it may still be making it",
                None,
            )
        if found is None:
            return StepFacts(name, found=False)
        if not manifests.owned_by(found, meta["uid"]):
            return StepFacts(
                name, True, foreign=_foreign("MonitorStep", found, f"Monitor {meta['name']}")
            )
        if not _is_recorded_step(found, step):
            return StepFacts(name, True, foreign=_not_launched(found))
        if (found.get("status") or {}).get("phase") not in TERMINAL_PHASES:
            found = await self._adopt(monitor, found)
            ended = await self._job_ended(namespace, found, fresh)
            if ended is None:
                return StepFacts(name, True, status=found.get("status"))
            # The pod writes its result before it exits: look once more, at the API server
            # itself, before calling a Job that just ended a step without a result.
            found = await self._get(self.api.get_step, namespace, name, fresh=True)
            if found is None:
                return StepFacts(name, found=False)
            if (found.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                return StepFacts(name, True, status=found.get("status"), job_ended=ended)
        forged, gone = await self._provenance(namespace, found)
        return StepFacts(name, True, status=found.get("status"), forged=forged, unverifiable=gone)

    async def _adopt(self, monitor: Body, step: Body) -> Body:
        """The step in flight, relabelled as its monitor is when another shard launched it
        (the monitor was moved meanwhile), so this shard's watch sees it end. Its Job keeps
        the old labels: a Job that fails without a result is found by the resync."""
        keys = self.shard.keys
        want = manifests.shard_labels(monitor["metadata"].get("labels"), keys)
        has = manifests.shard_labels(step["metadata"].get("labels"), keys)
        if want == has:
            return step
        meta = step["metadata"]
        # A cached copy may be stale: the monitor may have left this shard since, and a
        # relabel then would take the step back from the shard it moved to.
        current = await self._read_monitor(meta["namespace"], monitor["metadata"]["name"], True)
        if current is None or current["metadata"].get("uid") != monitor["metadata"].get("uid"):
            return step
        want = manifests.shard_labels(current["metadata"].get("labels"), keys)
        if want == has:
            return step
        self._histories_due.add(monitor["metadata"]["uid"])
        log.info("%s: adopting step %s from another shard", meta["namespace"], meta["name"])
        labels: dict[str, str | None] = {key: want.get(key) for key in keys}
        try:
            return await self.api.label_step(meta["namespace"], meta["name"], labels)
        except NotFound:
            return step  # gone meanwhile: the next read says so

    async def _job_ended(self, namespace: str, step: Body, fresh: bool) -> str | None:
        """Why the step's Job ended without a result, or None while it may still write one."""
        name = step["metadata"]["name"]
        job = await self._get(self.api.get_job, namespace, name, fresh=fresh)
        if job is None:
            return f"Job {name} was deleted before the step wrote a result."
        if not manifests.owned_by(job, step["metadata"]["uid"]):
            return f"Job {name} does not belong to the step."
        if job_failure(name, job, []) is None:
            return None
        # How its pod ended says why: the step's own last words are its termination message.
        uid = str(job["metadata"].get("uid") or "")
        try:
            pods = await self.api.list_job_pods(namespace, uid) if uid else []
        except ApiError as exc:
            log.info("%s: the pods of Job %s not read: %s", namespace, name, exc)
            pods = []
        return job_failure(name, job, pods)

    async def _provenance(self, namespace: str, step: Body) -> tuple[str | None, bool]:
        """Why the step's result was not written by the step's own pod (None when it was),
        and whether that is only because the pod or the Job it names is gone.

        The admission policy already refuses other writers; this is the operator's own
        check that the pod named in the result is its Job's, and the Job the step's. A Job
        deleted after its step wrote the result takes its pod along: the result can no
        longer be verified, which is no sign of a forgery either.
        """
        step_name = step["metadata"]["name"]
        pod_ref = (step.get("status") or {}).get("pod") or {}
        pod_name, pod_uid = pod_ref.get("name"), pod_ref.get("uid")
        if not isinstance(pod_name, str) or not POD_NAME.fullmatch(pod_name):
            return "the result names no valid pod", False
        pod = await self._get(self.api.get_pod, namespace, pod_name)
        if pod is None:
            return f"pod {pod_name} that the result names is gone", True
        if pod["metadata"].get("uid") != pod_uid:
            return f"pod {pod_name} with the uid the result names does not exist", False
        job = await self._get(self.api.get_job, namespace, step_name)
        if job is None:
            return f"Job {step_name} is gone", True
        if not manifests.owned_by(job, step["metadata"]["uid"]):
            return f"Job {step_name} does not belong to the step", False
        if not manifests.owned_by(pod, job["metadata"]["uid"]):
            return f"pod {pod_name} is not a pod of Job {step_name}", False
        return None, False

    @staticmethod
    async def _get(
        read: Callable[..., Any], namespace: str, name: str, fresh: bool = False
    ) -> Body | None:
        try:
            found: Body = await (
                read(namespace, name, fresh=True) if fresh else read(namespace, name)
            )
        except NotFound:
            return None
        return found

    # --- effects ---

    async def _carry_out(
        self, monitor: Body, spec: MonitorSpec | None, decision: Decision
    ) -> Decision:
        try:
            done = await self._carry_out_effects(monitor, spec, decision)
        except ForeignObject as foreign:
            # Someone else's object holds a name that is ours to use: stop, touch nothing.
            halted = halt(decision.status, str(foreign), self.clock())
            return await self._carry_out(monitor, spec, halted)
        # The sinks' messages go into the status that records the decision.
        meta = monitor["metadata"]
        wants = self.sinks.wants(meta["namespace"])
        return notices.record(done, wants, str(meta.get("uid", "")), self.clock())

    async def _carry_out_effects(
        self, monitor: Body, spec: MonitorSpec | None, decision: Decision
    ) -> Decision:
        meta = monitor["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        run = notices.run_prefix(decision.status)
        for effect in decision.effects:
            match effect:
                case LaunchStep():
                    assert spec is not None
                    problem = await self._preflight(monitor, effect.kind)
                    # A missing account or model is fixed outside the run: it waits, within
                    # the failure window; someone else's object under our name stops it.
                    foreign = False
                    # An observe step starts now and is found again under its name; a
                    # mutation waits for the status write that records it.
                    if problem is None and effect.kind not in MUTATING_STEPS:
                        try:
                            await self._launch(monitor, effect)
                        except ForeignObject as found:
                            problem, foreign = str(found), True
                    if problem is not None:
                        event = StepFailed(effect.seq, problem, permanent=foreign)
                        followup = self._decide(monitor, spec, decision.status, event, self.clock())
                        return await self._carry_out(monitor, spec, followup)
                case EmitReport():
                    log.info("%s check %d:\n%s", where, effect.check, effect.text)
                    what = f"{run}check-{effect.check}" + ("-final" if effect.final else "")
                    message = effect.summary or effect.text
                    trace = self.spans.trace(meta["uid"], meta.get("generation"), effect.check)
                    if trace is not None:  # from `kubectl describe` to the check's trace
                        message = f"{message} (trace {trace.trace_id})"
                    await self._event(monitor, what, "Report", message, report=effect.text)
                case PublishSchedule():
                    log.info("%s next check at %s", where, effect.schedule.nextCheckAt.isoformat())
                case StopMonitor():
                    log.info("%s stopped (%s): %s", where, effect.reason, effect.message)
                    await self._event(
                        monitor,
                        f"{run}stopped",
                        "Stopped",
                        f"{effect.reason.value}: {effect.message} What to do: {effect.hint}",
                        warning=effect.reason is not StopReason.goalComplete,
                    )
                case Notify():
                    await self._event(
                        monitor, effect.what, effect.reason, effect.message, warning=effect.warning
                    )
        return decision

    async def _preflight(self, monitor: Body, kind: StepKind) -> str | None:
        """A missing dependency the step cannot run without, named for the user."""
        meta = monitor["metadata"]
        namespace = meta["namespace"]
        model = self._model(monitor)
        if model.problem:
            return model.problem
        if not self.settings.model and model.spec is None:
            return "No model is configured: set GOALKEEPER_MODEL (openai:NAME or anthropic:NAME)."
        instructions = self._instructions.get((namespace, meta["name"]))
        if kind is StepKind.extract and isinstance(instructions, str):
            return f"The namespace's instructions cannot be read with the task: {instructions}"
        account = (
            self.settings.actorServiceAccount
            if kind in MUTATING_STEPS
            else self.settings.observerServiceAccount
        )
        if await self._get(self.api.get_service_account, namespace, account) is None:
            return (
                f"ServiceAccount {account} is missing in namespace {namespace}; "
                f"the {kind} step runs as it."
            )
        return None

    async def _launch(self, monitor: Body, launch: LaunchStep) -> None:
        """Create the MonitorStep and its Job; an existing one is used only when it is ours."""
        meta = monitor["metadata"]
        namespace = meta["namespace"]
        step = manifests.monitor_step(monitor, launch, self.shard.keys)
        token = uuid.uuid4().hex
        annotations = step["metadata"].setdefault("annotations", {})
        annotations[manifests.ANNOTATION_LAUNCH] = token
        annotations[manifests.ANNOTATION_LAUNCHED_AT] = launch.at.isoformat()
        await self._clear_seq(monitor, launch.seq, step["metadata"]["name"])
        try:
            created = await self.api.create_step(namespace, step)
            fresh = True
        except AlreadyExists:
            created = await self.api.get_step(namespace, step["metadata"]["name"], fresh=True)
            # A create retried in place after its answer was lost finds its own step,
            # which has no Job yet: this call makes the Job after the step.
            annotations = created["metadata"].get("annotations") or {}
            fresh = annotations.get(manifests.ANNOTATION_LAUNCH) == token
        if not manifests.owned_by(created, meta["uid"]):
            raise ForeignObject(_foreign("MonitorStep", created, f"Monitor {meta['name']}"))
        # Whoever may create MonitorSteps may name this Monitor their owner: the step is ours
        # only when it runs what this launch builds. A read-only launch retried by a later
        # pass finds the notes of its first try; a mutation launches only once.
        reading = launch.kind not in MUTATING_STEPS
        if not manifests.same_step(created, step, reading=reading):
            raise ForeignObject(_not_launched(created))
        self._checked_steps[(namespace, meta["name"])] = created["metadata"]["uid"]
        trace = self.spans.trace(meta["uid"], meta.get("generation"), launch.input.check)
        tracing = dict(self.spans.step_env)
        if trace is not None:
            tracing["TRACEPARENT"] = trace.traceparent
        job = manifests.step_job(created, self.settings, self._model(monitor), tracing)
        # A step made just now has no Job yet: create it without looking first.
        found = (
            None if fresh else await self._get(self.api.get_job, namespace, job["metadata"]["name"])
        )
        if found is None and not fresh and launch.kind in MUTATING_STEPS:
            # An earlier attempt made this step; its Job may have run and been deleted.
            # A mutation runs at most once: the next round finds the Job gone and
            # verifies by observing instead.
            log.warning(
                "%s/%s: %s step %s has no Job; not starting its action a second time",
                namespace,
                meta["name"],
                launch.kind,
                job["metadata"]["name"],
            )
            return
        if found is None:
            found = await self._create(self.api.create_job, self.api.get_job, namespace, job)
        if not manifests.owned_by(found, created["metadata"]["uid"]):
            raise ForeignObject(_foreign("Job", found, f"MonitorStep {step['metadata']['name']}"))
        log.info(
            "%s/%s launched %s step %s",
            namespace,
            meta["name"],
            launch.kind,
            step["metadata"]["name"],
        )
        await self._prune(monitor, keep_seq=launch.seq)

    async def _clear_seq(self, monitor: Body, seq: int, name: str) -> None:
        """Make `seq` free for the step named `name`: a reading step an earlier pass
        launched under it, whose status write was lost, is deleted (it reads, nothing
        more); an unrecorded act or repair step cannot exist (see `_launch_recorded`)
        and would stop the monitor rather than run beside another."""
        meta = monitor["metadata"]
        history = await self.api.step_history(meta["namespace"], meta["name"], meta["uid"])
        other = history.get(seq)
        if other is None or other == name:
            return
        readings = {
            manifests.step_name(meta["name"], meta["uid"], seq, kind)
            for kind in StepKind
            if kind not in MUTATING_STEPS
        }
        if other not in readings:
            raise ForeignObject(
                f"MonitorStep {other} holds step {seq}, which the status does not record; "
                "goalkeeper started nothing beside it."
            )
        log.info(
            "%s/%s: deleting unrecorded observe step %s", meta["namespace"], meta["name"], other
        )
        with contextlib.suppress(NotFound):
            await self.api.delete_steps(meta["namespace"], meta["name"], meta["uid"], [seq])

    @staticmethod
    async def _create(
        create: Callable[[str, Body], Any],
        read: Callable[[str, str], Any],
        namespace: str,
        body: Body,
    ) -> Body:
        """The created object, or the one that already had its name: the caller checks
        that an existing one is really its own."""
        try:
            made: Body = await create(namespace, body)
        except AlreadyExists:
            made = await read(namespace, body["metadata"]["name"])
        return made

    async def _event(
        self,
        monitor: Body,
        what: str,
        reason: str,
        message: str,
        warning: bool = False,
        report: str | None = None,
    ) -> None:
        meta = monitor["metadata"]
        body = manifests.monitor_event(
            monitor,
            name=manifests.event_name(meta["name"], meta["uid"], what),
            reason=reason,
            message=message,
            warning=warning,
            now=self.clock(),
            report=report,
        )
        found = await self._create(
            self.api.create_event, self.api.get_event, meta["namespace"], body
        )
        if (found.get("involvedObject") or {}).get("uid") != meta["uid"]:
            raise ForeignObject(_foreign("Event", found, f"Monitor {meta['name']}"))

    async def _prune(self, monitor: Body, keep_seq: int) -> None:
        """Keep the newest `stepHistory` MonitorSteps; GC takes their Jobs and pods.

        Deleted in batches of half the history, one request each, so a monitor checking
        all the time deletes once every few checks instead of once per check."""
        meta = monitor["metadata"]
        history = await self.api.step_history(meta["namespace"], meta["name"], meta["uid"])
        uid = meta["uid"]
        # Adopted from another shard, or the step before this one is missing: launched by
        # the shard it came from, outside this one's watch. Listed once, then cached.
        handed_over = uid in self._histories_due or (keep_seq > 1 and keep_seq - 1 not in history)
        if self.shard and handed_over and uid not in self._histories_listed:
            self._histories_due.discard(uid)
            self._histories_listed.add(uid)
            history = await self.api.step_history(
                meta["namespace"], meta["name"], meta["uid"], fresh=True
            )
        seqs = sorted(history)
        excess = len(seqs) - self.settings.stepHistory
        if excess < prune_batch(self.settings.stepHistory):
            return
        old = [seq for seq in seqs[:excess] if seq != keep_seq]
        if old:
            with contextlib.suppress(NotFound):
                await self.api.delete_steps(meta["namespace"], meta["name"], meta["uid"], old)


def prune_batch(history: int) -> int:
    """How many excess MonitorSteps make a prune worth a request."""
    return max(1, (history + 1) // 2)
