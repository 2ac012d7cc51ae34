"""What a step's end means: a check accepted (and the route it takes), an invalid or
failed one retried, an act done and verified; and the brake on acts that change nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from pydantic import ValidationError

from goalkeeper.core import authority, goals, guards, health, moves, reading, wakes
from goalkeeper.core.models import (
    LIST_ENTRY_MAX,
    ActionKind,
    ActionOutcome,
    ActionRequest,
    ActionResult,
    AuthorityExtraction,
    AuthorityRecord,
    MonitorState,
    ObjectFacts,
    Observation,
    ObservedStopReason,
    Outcome,
    Route,
    StepKind,
    StopInfo,
    StopReason,
    TypedGrant,
    WorkState,
)
from goalkeeper.core.progress import clip, summary_line, update_tracks
from goalkeeper.core.turn.approvals import Asking
from goalkeeper.core.turn.base import safety_limit_message

# Checks in a row that read the goal's objects the same before a wait's grant is offered.
OFFER_AFTER_UNCHANGED = 3


class Turn(Asking):
    def started(self, generation: int | None) -> None:
        edited = generation is not None and generation != self.status.observedGeneration
        if generation is not None:
            self.status.observedGeneration = generation
        if self.status.step is not None:
            return  # a step is in flight: its result drives the next decision
        if self.status.approval is not None:
            if edited:  # the request answered the old task: observe the new one
                self.status.approval = None
                self.judge_health(self.health_answered())
                self.launch_observe()
            return  # awaiting a person: their answer or the window drives it
        if self.status.schedule is not None:
            if edited:
                self.edited_while_waiting(self.status.schedule)
            return  # waiting: the timer drives the next decision
        self.launch_observe()

    def accept(
        self, observation: Observation, facts_print: str = "", facts: Sequence[ObjectFacts] = ()
    ) -> None:
        self.facts = tuple(facts)
        st = self.status
        step = st.step
        assert step is not None  # owns() checked it
        st.step = None
        if not self.current_step(step) or not self.authority_is_current():
            # Made under a spec that has since been edited, or before this generation's
            # authority was read from the task: not a check; read and observe again.
            self.launch_observe()
            return
        self.woken_by = step.wokenBy
        self.failures_over()
        st.checks += 1
        st.goal = observation.goal
        st.work = observation.work
        st.lastObservation = observation
        st.progress = update_tracks(st.progress, observation.progress, self.now)
        st.progressSummary = summary_line(st.progress)
        self.judge_health(
            health.checked(st.health, observation, self.now, self.policy, self.context.namespace)
        )
        st.health = health.read_same(st.health, facts_print, st.checks)

        widening = self.record_authority(observation)
        rule = st.authority.goal if st.authority is not None else None
        recorded = st.authority.recordedAt if st.authority is not None else None
        given_up = goals.given_up(
            rule,
            self.facts,
            checks=st.checks,
            unchanged=self.unchanged_row(),
            minutes=int((self.now - recorded).total_seconds() // 60) if recorded else None,
        )
        met = goals.settled_complete(rule, self.facts, checks=st.checks)
        if (
            widening is None
            and (given_up is None or given_up[0] is StopReason.safetyLimit)
            and met is not None
            and observation.stopReason is not ObservedStopReason.goalComplete
        ):
            # Every typed leaf of a done group holds by the facts read after the answer: the
            # person's own words say the goal is met, whatever route the model chose. A limit
            # never holds back a completion; a give-up about an object (pods crashing while
            # ready, a Job that failed) that holds as well keeps its precedence.
            observation = met
            st.lastObservation, st.goal, st.work = met, met.goal, met.work
        if widening is None and given_up is None:
            coming = self.waits_for_condition(observation)
            if coming is not None:
                observation = coming
                st.lastObservation, st.work = coming, coming.work
        if widening is not None:
            self.report_and_stop(observation, *widening)
        elif given_up is not None and observation.stopReason is not ObservedStopReason.goalComplete:
            # The person's own words end the run here, whatever route the model chose.
            self.report_and_stop(observation, *given_up)
        elif (moved := self.own_move(observation) or self.paid_move(observation)) is not None:
            # The person's grant makes a false leaf of their stop rule true: that act, not
            # the model's wait or stop short; a paid one goes through the cost guards, which
            # decide whether it needs a person's approval.
            assert moved.action is not None
            st.lastObservation, st.work = moved, moved.work
            self.route_act(moved, moved.action)
        elif (
            observation.route is Route.stop
            and self.stop_reason(observation)[0] is StopReason.outsideAuthority
            and self.needs_confirmation()
        ):
            # The model saw no grant for what the goal needs, while words that may give one
            # wait for a person: that person decides, not the model.
            self.await_confirmation(observation, None)
        elif (offered := self.offered_act(observation)) is not None:
            # The model saw no grant for what the goal needs, or waits on objects that do not
            # move, while one of the person's grants applies now to an object their stop rule
            # names: they say whether it is what the goal needs.
            said = (
                "the model found no grant for what the goal needs"
                if observation.route is Route.stop
                else f"the model waits while the goal's objects read the same for "
                f"{self.unchanged_row()} checks"
            )
            self.await_confirmation(observation, offered, offered=said)
        elif (held := self.held_back_move(observation)) is not None:
            # The act the stop rule needs is a grant unclear words hold back: waiting on
            # would only reach the safety limit, so the person who wrote them is asked now.
            self.await_confirmation(observation, None, held=held)
        elif observation.route is Route.stop:
            self.report_and_stop(observation, *self.stop_reason(observation))
        elif health.stalled_again(st.health) and self.policy.approvals and self.person_can_answer():
            self.await_stall_decision(observation)
        elif health.stalled_again(st.health):
            self.report_and_stop(
                observation,
                StopReason.blocked,
                f"{st.health.message} It stalled again in the same state after its one "
                "automatic recovery.",
            )
        elif observation.route is Route.wait:
            if self.limit_reached():
                self.report_and_stop(
                    observation, StopReason.safetyLimit, safety_limit_message(self.spec.maxChecks)
                )
            elif self.paused:
                self.report(observation)
                self.pause()
            else:
                watch, _ = wakes.wakeable(observation.watch)
                self.report(observation, next_check_minutes=self.spec.everyMinutes, wakes_on=watch)
                self.publish_schedule(watch=observation.watch)
        else:
            assert observation.action is not None  # guaranteed by the model
            self.route_act(observation, observation.action)

    def own_move(self, observation: Observation) -> Observation | None:
        """The observation routed to a typed grant whose act makes a false leaf of the stop
        rule true, when the model waited or stopped short (a blocker, or no authority it
        saw): the first such grant in the order the person wrote them, since each moves the
        goal and the next check finds the rest; else None."""
        if not self.waits_or_stops_short(observation) or self.status.authority is None:
            return None
        found = self.moves_over(self.status.authority.typedGrants)
        return self.routed(observation, found[0]) if found else None

    def unchanged_row(self) -> int:
        """How many checks in a row, this one included, read the goal's objects the same."""
        since = self.status.health.factsSince
        return self.status.checks - since + 1 if since else 0

    def offered_act(self, observation: Observation) -> ActionRequest | None:
        """The act to offer the person under a stop rule no typed leaf decides, while a grant
        of theirs applies now to an object the rule names (`moves.offered_acts`), once a
        run: when the model stopped for want of authority, or waited while the goal's
        objects read the same for `OFFER_AFTER_UNCHANGED` checks (a wait that leads only to
        the safety limit). Else None."""
        record = self.status.authority
        if record is None or not self.person_can_answer():
            return None
        if observation.route is Route.stop:
            if self.stop_reason(observation)[0] is not StopReason.outsideAuthority:
                return None
        elif observation.route is not Route.wait or self.unchanged_row() < OFFER_AFTER_UNCHANGED:
            return None
        tried = {a.failureId for a in self.status.attempts}
        for action in moves.offered_acts(record.goal, record.typedGrants, self.facts):
            priced = self.priced(action)
            # Only an act every guard lets through is offered: cost, sync, repetition too.
            if action.failureId not in tried and self.refusal(observation, priced) is None:
                return priced
        return None

    def waits_or_stops_short(self, observation: Observation) -> bool:
        """Whether the model waited, stopped short of the goal (a blocker, or no authority
        it saw, as the engine reads its reason), or asked for an act its grant does not
        allow yet or that would change nothing: the answers a move of the person's grants
        may overrule."""
        if observation.route is Route.wait:
            return True
        if observation.action is not None:
            action = observation.action
            return (self.condition_unmet(action) or self.precondition_unmet(action)) is not None
        short = (StopReason.materialBlocker, StopReason.outsideAuthority)
        return observation.route is Route.stop and self.stop_reason(observation)[0] in short

    def moves_over(self, grants: Sequence[TypedGrant], *, paid: bool = False) -> list[moves.Move]:
        """The moves `grants` make toward the recorded stop rule on this check's facts."""
        record = self.status.authority
        assert record is not None  # every caller checked it
        return moves.applicable_moves(
            record.goal, grants, self.facts, checks=self.status.checks, paid=paid
        )

    def stop_reason(self, observation: Observation) -> tuple[StopReason, str]:
        """Why a model's stop ends the run, and the message: as it says, but where the
        record decides: a stop for a paid act's approval while no recorded action costs
        money is for want of a grant."""
        assert observation.stopReason is not None  # guaranteed by the model
        said = StopReason(observation.stopReason.value)
        paid = any(a.paid for a in self.status.authorizedActions)
        if said is StopReason.paidActionNotApproved and not paid:
            return StopReason.outsideAuthority, clip(
                "No action the words authorize costs money, so no approval is missing: the "
                f"goal needs a change no grant gives. {observation.reason}",
                LIST_ENTRY_MAX,
            )
        return said, observation.reason

    def paid_move(self, observation: Observation) -> Observation | None:
        """A stop for want of a paid act's approval routed to that act, when exactly one
        paid grant's act makes a false leaf true: whether it is over its ceiling or needs
        approval is the cost guards' to say, not the model's."""
        record = self.status.authority
        paid_stop = observation.stopReason is ObservedStopReason.paidActionNotApproved
        if not paid_stop or record is None:
            return None
        found = self.moves_over(record.typedGrants, paid=True)
        return self.routed(observation, found[0]) if len(found) == 1 else None

    def routed(self, observation: Observation, move: moves.Move) -> Observation | None:
        """The observation routed to the move's act; None if that does not validate."""
        action = move.action()
        said = (
            f"{action.incomplete}; grant {move.grant.id} ({action.action}) makes it hold, "
            "so the check acts on it."
        )
        try:
            return Observation.model_validate(
                {
                    **observation.model_dump(mode="json", exclude_none=True),
                    "route": Route.act.value,
                    "work": WorkState.idle.value
                    if action.kind is ActionKind.advance
                    else observation.work.value,
                    "action": action.model_dump(mode="json", exclude_none=True),
                    "stopReason": None,
                    "watch": [],
                    "reason": clip(said, LIST_ENTRY_MAX),
                }
            )
        except ValidationError:
            return None

    def waits_for_condition(self, observation: Observation) -> Observation | None:
        """The model's stop short as a wait, when what the goal needs is on its way with no
        act: a stop for want of authority while a false leaf's own object moves toward it
        (the Job runs; no act is needed, so none is missing), or any stop short while a
        grant whose act makes a false leaf true waits only for a condition that does (the
        Job it names runs). A blocker the model read stands against the first: a running
        Job may be stuck in a way only its log tells. Else None."""
        record = self.status.authority
        if observation.route is not Route.stop or not self.waits_or_stops_short(observation):
            return None
        if record is None:
            return None
        checks = self.status.checks
        unauthorized = self.stop_reason(observation)[0] is StopReason.outsideAuthority
        coming = moves.coming_leaves(record.goal, self.facts, checks=checks) if unauthorized else []
        found = moves.coming_moves(record.goal, record.typedGrants, self.facts, checks=checks)
        if coming:
            leaf, value, on_its_way = coming[0]
            said = f'"{leaf.quote}" does not hold yet ({value.reason}), and it is on its way'
        elif found:
            move = found[0]
            assert move.grant.condition is not None  # coming_moves pairs conditional grants
            on_its_way = move.grant.condition.object
            said = (
                f'"{move.leaf.quote}" does not hold ({move.value.reason}); grant '
                f"{move.grant.id} makes it hold once {move.grant.condition} holds, which is on "
                "its way"
            )
        else:
            return None
        try:
            return Observation.model_validate(
                {
                    **observation.model_dump(mode="json", exclude_none=True),
                    "route": Route.wait.value,
                    "work": WorkState.running.value,
                    "stopReason": None,
                    "watch": [w.model_dump(mode="json") for w in wakes.watch_of(on_its_way)],
                    "reason": clip(f"{said}, so the check waits.", LIST_ENTRY_MAX),
                }
            )
        except ValidationError:
            return None

    def held_back_move(self, observation: Observation) -> moves.Move | None:
        """The move a held-back grant would make, when the model waited or stopped short
        while the reading waits for a person; else None."""
        record = self.status.authority
        if not self.waits_or_stops_short(observation) or record is None:
            return None
        if not record.heldBack or not self.needs_confirmation():
            return None
        found = self.moves_over(record.heldBack)
        return found[0] if found else None

    def record_authority(self, observation: Observation) -> tuple[StopReason, str] | None:
        """Record what an observation's restatement of the pinned authority narrows, and
        return the refusal of any attempted widening. The forbidden changes the engine
        found in the task itself stay whatever an observation restates."""
        st = self.status
        assert st.contract is not None
        if observation.contract is None:
            return None  # no restatement: the recorded authority stands as it is
        recorded = st.contract
        review = guards.review_authority(
            authority.without_found(recorded, st.authority),
            st.authorizedActions,
            observation.contract,
            observation.authorizedActions or [],
        )
        refusal = review.refusal()
        if refusal is None:
            st.contract = authority.with_found(review.contract, recorded)
            st.authorizedActions = review.actions
        return refusal

    def extracted(self, extraction: AuthorityExtraction) -> None:
        """Pin the grants the person's words give, then observe the target."""
        st = self.status
        step = st.step
        assert step is not None  # owns() checked it
        st.step = None
        if self.current_step(step):
            self.failures_over()
            pinned = authority.pin(
                self.spec,
                extraction,
                generation=st.observedGeneration,
                author=self.context.author,
                instructions=st.instructions,
            )
            st.contract = pinned.contract
            st.authorizedActions = pinned.actions
            record = pinned.record
            st.authority = record.model_copy(
                update={
                    "check": st.checks,
                    "recordedAt": self.now,
                    "goal": goals.since_run_start(record.goal, self.now),
                }
            )
            st.authorityGeneration = st.observedGeneration
            self.authority_notice(pinned.record)
        self.launch_observe()

    def authority_notice(self, record: AuthorityRecord) -> None:
        kept = [f"{g.id} ({reading.grant_line(g)})" for g in record.typedGrants]
        kept += [f"costCeiling {g.entry}" for g in record.grants if g.field == "costCeiling"]
        read_with = authority.instructions_line(self.status.instructions)
        text = f"Authority read from the task{read_with}: " + (
            "; ".join(kept) or "no grant, observe only"
        )
        if record.unclear:
            text += ". Unclear, so no act before a person confirms (goalkeeper authority): "
            text += "; ".join(f'"{u.sentence}"' for u in record.unclear)
        if record.dropped:
            text += ". Refused: " + "; ".join(record.dropped)
        self.notify(
            f"authority-{self.status.stepSeq}",
            "AuthorityRecorded",
            text,
            warning=bool(record.dropped or record.unclear),
        )

    def route_act(self, observation: Observation, action: ActionRequest) -> None:
        action = self.priced(action)
        refusal = self.refusal(observation, action)
        need = None
        if refusal is not None and refusal[0] is StopReason.paidActionNotApproved:
            need = guards.approval_need(self.status, action, observation.observedSpend)
        approvable = need is not None and self.policy.approvals
        # An act the reading does not cover, while words of it wait for a person: that
        # person may correct the reading (goalkeeper authority --grant) before it stops.
        correctable = (
            refusal is not None
            and refusal[0] is StopReason.outsideAuthority
            and not self.context.author_denied
            and self.needs_confirmation()
        )
        target = health.acted_on(action, self.context.namespace)
        braked = refusal is None and health.braked(self.status.health, self.policy, target)
        if correctable:
            self.await_confirmation(observation, action)
        elif refusal is not None and not approvable:
            self.report_and_stop(observation, *refusal)
        elif self.limit_reached():
            # No check is left to verify the action: not worth asking a person either.
            self.report_and_stop(
                observation, StopReason.safetyLimit, safety_limit_message(self.spec.maxChecks)
            )
        elif refusal is not None:
            assert need is not None
            self.await_approval(observation, action, refusal[1], need)
        elif (unmet := self.condition_unmet(action)) is not None:
            # The grant applies once its condition holds: the run waits for it, as on a wait.
            self.report(observation, next_action=f"waiting: {unmet}")
            self.publish_schedule()
        elif (needless := self.precondition_unmet(action)) is not None:
            # The act would change nothing the facts show: a wait, not an act the brake counts.
            self.report(observation, next_action=f"not acting: {needless}")
            self.publish_schedule()
        elif braked and not self.policy.approvals:
            message = health.brake_text(self.status.health, target)
            self.report_and_stop(observation, StopReason.blocked, message)
        elif braked:
            self.await_brake_decision(observation, action, target)
        elif self.needs_confirmation():
            self.await_confirmation(observation, action)
        elif self.paused:
            self.report(
                observation,
                next_action=f"paused; once resumed, a check decides on: {action.action}",
            )
            self.pause()
        else:
            if health.is_stall_recovery(self.status.health, observation):
                self.status.health.recoveredStall = self.status.health.fingerprint
            self.report(observation, next_action=action.action)
            self.launch_action(action)

    def priced(self, action: ActionRequest) -> ActionRequest:
        """`action` with the person's stated price as its estimate when it names a recorded
        paid action and gives none: a paid action without one can be neither checked against
        the ceiling nor approved."""
        if action.estimatedCost is not None:
            return action
        recorded = guards.named_action(self.status.authorizedActions, action)
        if recorded is None or not recorded.paid:
            return action
        price = authority.stated_price(self.spec, recorded)
        return action if price is None else action.model_copy(update={"estimatedCost": price})

    def refusal(
        self, observation: Observation, action: ActionRequest
    ) -> tuple[StopReason, str] | None:
        """The first guard the action fails, as a stop reason and message. Every guard
        reads the recorded authority in status, never the observation's own."""
        outside = guards.authority_violation(self.status, action)
        if outside is not None:
            return StopReason.outsideAuthority, outside
        # A forbidden or protected entry is named as such before any coverage question.
        forbidden = guards.forbidden_mutation(self.status, action, self.context.namespace)
        if forbidden is not None:
            return forbidden
        namespace = self.context.namespace
        uncovered = guards.mutation_outside_contract(self.status.contract, action, namespace)
        if uncovered is not None:
            return uncovered
        synced = self.synced_refusal(action)
        if synced is not None:
            return StopReason.blocked, synced
        if guards.repeats_repair(self.status.repairsDone, action):
            return StopReason.repairRepeated, (
                f"Failure '{action.failureId}' in target state '{action.targetStateId}' "
                "returned after a completed repair; the same repair cycle does not run twice."
            )
        spend = guards.spend_violation(self.status, action, observation.observedSpend)
        if spend is not None:
            return StopReason.paidActionNotApproved, spend
        repetition = guards.repetition_violation(self.status.attempts, action)
        if repetition is not None:
            return StopReason.blocked, repetition
        if self.context.author_denied:
            return StopReason.outsideAuthority, self.context.author_denied
        return None

    def reject(self, error: str) -> None:
        """An invalid answer: not a check; retried after a growing delay, and the run ends
        only after `invalid_answers` of them in a row."""
        st = self.status
        assert st.step is not None  # owns() checked it
        kind = st.step.kind
        st.step = None
        st.invalidStreak += 1
        st.lastRejection = error[:4000]
        seq = st.stepSeq
        what = "observation" if kind is StepKind.observe else "task reading"
        self.notify(
            f"step-{seq}-rejected",
            "ObservationRejected",
            f"The {what} of step {seq} was invalid and not counted: {error}",
            warning=True,
        )
        limit = self.policy.invalid_answers
        if st.invalidStreak >= limit:
            self.stop(
                StopReason.blocked,
                f"The {what} was invalid {st.invalidStreak} times in a row (the limit is "
                f"{limit}, GOALKEEPER_INVALID_ANSWERS_LIMIT): {error}",
            )
            return
        self.retry_later(
            self.failures_in_a_row(),
            f"the {what} of step {seq} was invalid ({st.invalidStreak} in a row, "
            f"{limit} end the run): {error}",
        )

    def finished(self, result: ActionResult) -> None:
        step = self.status.step
        assert step is not None and step.action is not None
        self.status.step = None
        outcome = ActionOutcome(result.outcome.value)
        self.close_action(step, outcome, result.evidence, result.actualCost)
        if step.kind is StepKind.repair:
            if result.outcome is Outcome.blocked:
                self.stop(StopReason.blocked, f"The repair could not run: {result.evidence}")
                return
            if result.outcome is Outcome.succeeded:
                self.status.repairsDone = guards.record_repair(
                    self.status.repairsDone, step.action, step.check
                )
        self.launch_observe()

    def failed(self, message: str, permanent: bool, *, effect_unknown: bool = False) -> None:
        """A step ended without a result. A reading step is retried after a growing delay;
        the run ends only when steps have failed for the whole failure window. An act or
        repair step that left no result to take (`effect_unknown`) has an unknown outcome,
        not a failed one: its action may have taken effect, and the next observation
        decides."""
        st = self.status
        step = st.step
        assert step is not None
        st.step = None
        acted = step.kind in (StepKind.act, StepKind.repair)
        unknown = effect_unknown and acted
        told = (
            f"The {step.kind} step {step.seq} ended without a result to take, so whether its "
            f"action took effect is unknown; the next observation decides: {message}"
            if unknown
            else f"The {step.kind} step {step.seq} failed: {message}"
        )
        self.notify(f"step-{step.seq}-failed", "StepFailed", told, warning=True)
        self.judge_health(health.step_failed(st.health, self.now, self.policy))
        if permanent:
            self.stop(StopReason.blocked, f"The {step.kind} step cannot run: {message}")
            return
        if st.failingSince is None:
            st.failingSince = self.now
        failing_for = self.now - st.failingSince
        if step.kind in (StepKind.observe, StepKind.extract):
            st.stepFailureStreak += 1
            window = self.policy.failure_window
            if failing_for >= window:
                self.stop(
                    StopReason.blocked,
                    f"Steps have failed to run for {_hours(failing_for)} (since "
                    f"{st.failingSince.isoformat()}, the GOALKEEPER_FAILURE_WINDOW_SECONDS "
                    f"window is {_hours(window)}); the last, {step.kind} step {step.seq}: "
                    f"{message}",
                )
                return
            self.retry_later(
                self.failures_in_a_row(),
                f"the {step.kind} step {step.seq} failed ({st.stepFailureStreak} in a row, "
                f"failing since {st.failingSince.isoformat()}): {message}",
            )
            return
        # Either way what the action changed is read by observing at once.
        st.health = health.act_failed_to_run(st.health, step.check)
        if unknown:
            self.close_action(
                step,
                ActionOutcome.unknown,
                "Whether the action took effect is unknown; the next observation decides. "
                f"The step ended without a result to take: {message}",
                None,
            )
        else:
            self.close_action(
                step, ActionOutcome.failed, f"The step failed to run: {message}", None
            )
        self.launch_observe()

    def failures_in_a_row(self) -> int:
        return self.status.stepFailureStreak + self.status.invalidStreak

    def failures_over(self) -> None:
        """A step answered validly: whatever failed before is over."""
        st = self.status
        st.invalidStreak = 0
        st.stepFailureStreak = 0
        st.failingSince = None
        st.lastRejection = None

    def timer_due(self) -> None:
        if not self.approval_expired():
            self.timer_fired()

    def cancel(self) -> None:
        # The resource is gone: record why, and emit nothing more.
        self.status.monitor = MonitorState.stopped
        self.status.step = None
        self.status.schedule = None
        self.status.pausedAt = None
        self.status.stop = StopInfo(
            reason=StopReason.cancelled, message="The monitor was deleted.", at=self.now
        )
        self.quiet = True


def _hours(span: timedelta) -> str:
    hours = span.total_seconds() / 3600
    return f"{hours:.1f} h" if hours >= 1 else f"{span.total_seconds() / 60:.0f} min"
