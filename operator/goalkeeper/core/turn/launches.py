"""Which step runs next: the task reading, an observation or an action, each recorded as
the step in flight; nothing while the person's pause holds."""

from __future__ import annotations

from goalkeeper.core import authority, guards, health
from goalkeeper.core.events import LaunchStep
from goalkeeper.core.models import (
    ActionKind,
    ActionOutcome,
    ActionRequest,
    LastAction,
    Money,
    SpendEntry,
    StepInFlight,
    StepInput,
    StepKind,
    StopReason,
)
from goalkeeper.core.progress import prompt_summary
from goalkeeper.core.turn.base import TurnBase

# The spend ledger keeps this many entries; the total always covers all of them.
LEDGER_ENTRIES = 100


class Launching(TurnBase):
    @property
    def paused(self) -> bool:
        return self.context.controls.paused

    def pause(self) -> None:
        """Hold: the step in flight, if any, runs to its end; nothing starts after it."""
        st = self.status
        if st.step is None:
            st.schedule = None
        if st.pausedAt is not None:
            return
        st.pausedAt = self.now
        running = f" {st.step.kind} step {st.step.seq} finishes first;" if st.step else ""
        self.notify(
            f"paused-{st.stepSeq}",
            "Paused",
            f"Paused by goalkeeper.dev/paused:{running} nothing launches until the "
            "annotation is removed (`goalkeeper resume`), which checks at once.",
        )

    def launch_observe(self, woken_by: str = "") -> None:
        """Observe the target; first read the task for its authority when this spec
        generation has none recorded yet."""
        if self.limit_reached():
            # Reachable only when maxChecks was lowered below the checks already made.
            self.stop_at_limit()
            return
        if not self.authority_is_current():
            self.launch(StepKind.extract, self.status.checks, None)
            return
        self.launch(StepKind.observe, self.status.checks + 1, None, woken_by=woken_by)

    def launch_action(self, action: ActionRequest) -> None:
        if self.paused:
            # The act waits for no one: resuming observes again, and that check asks anew.
            self.pause()
            return
        st = self.status
        kind = StepKind.repair if action.kind is ActionKind.repair else StepKind.act
        st.attempts = guards.record_attempt(st.attempts, action)
        st.health = health.acted(st.health, action, st.checks, self.context.namespace)
        st.lastAction = LastAction(
            kind=action.kind,
            action=action.action,
            failureId=action.failureId,
            targetStateId=action.targetStateId,
            check=st.checks,
            at=self.now,
        )
        self.launch(kind, st.checks, action)

    def launch(
        self, kind: StepKind, check: int, action: ActionRequest | None, woken_by: str = ""
    ) -> None:
        st = self.status
        if self.paused:
            self.pause()
            return
        cap = self.policy.model_spend_cap_usd
        if cap is not None and float(st.modelUsage.costUsd) >= cap:
            self.stop(
                StopReason.blocked,
                f"The model cost of this monitor reached {float(st.modelUsage.costUsd):.4f} "
                f"USD, the GOALKEEPER_MODEL_SPEND_CAP_USD cap of {cap} USD; no further step "
                "runs.",
            )
            return
        model = self.context.model
        if model.cap_reached:
            cap = model.spec.spendCapUsd if model.spec is not None else None
            self.stop(
                StopReason.blocked,
                f"The Monitors that use ModelConfig {model.name} have spent "
                f"{model.spent_usd:.4f} USD through it, its spendCapUsd of {cap} USD; no "
                "further step runs.",
            )
            return
        if self.context.author_denied and kind is not StepKind.observe:
            # The author may not make these writes, or read what the observer reads.
            self.final_stop(StopReason.outsideAuthority, self.context.author_denied)
            return
        self.record_launch(kind, check, action, woken_by)
        if kind is StepKind.extract:
            # The operators' instructions as they stand now hold for this generation.
            st.instructions = self.context.instructions
            # The person's words alone (and the operators'): nothing the target or a model wrote.
            step_input = StepInput(
                kind=kind,
                check=check,
                maxChecks=self.spec.maxChecks,
                task=self.spec.task,
                stopWhen=self.spec.stopWhen,
                instructions=st.instructions,
            )
        else:
            note = health.note_for_observe(st.health) if kind is StepKind.observe else ""
            step_input = StepInput(
                kind=kind,
                check=check,
                maxChecks=self.spec.maxChecks,
                task=self.spec.task,
                stopWhen=self.spec.stopWhen,
                previousObservation=st.lastObservation and st.lastObservation.without_authority(),
                factsPrint=st.health.factsPrint,
                factsSince=st.health.factsSince,
                progressSummary=prompt_summary(st.progress, self.now),
                contract=st.contract,
                authorizedActions=st.authorizedActions,
                action=action,
                grant=(
                    authority.grant_named(st.authority, action.authorizedActionId)
                    if action is not None and kind is StepKind.act
                    else None
                ),
                health=note,
                wokenBy=woken_by,
                approvals=self.policy.approvals,
                lastRejection=(st.lastRejection or "") if kind is StepKind.observe else "",
                instructions=st.instructions,
                goal=(
                    st.authority.goal
                    if st.authority is not None and kind is StepKind.observe
                    else None
                ),
                grants=(
                    st.authority.typedGrants
                    if st.authority is not None and kind is StepKind.observe
                    else []
                ),
            )
        self.effects.append(LaunchStep(st.stepSeq, kind, step_input, self.now))
        if kind in (StepKind.observe, StepKind.extract):
            return  # reading changes nothing; each observation is reported when it ends
        self.notify(
            f"step-{st.stepSeq}",
            "StepStarted",
            f"{kind} step {st.stepSeq} started for check {check} of {self.spec.maxChecks}.",
        )

    def record_launch(
        self, kind: StepKind, check: int, action: ActionRequest | None, woken_by: str = ""
    ) -> None:
        st = self.status
        st.stepSeq += 1
        st.schedule = None  # no check is pending while a step runs
        st.step = StepInFlight(
            seq=st.stepSeq,
            kind=kind,
            check=check,
            startedAt=self.now,
            generation=st.observedGeneration,
            action=action,
            wokenBy=woken_by,
            modelConfig=self.context.model.name,
        )
        st.modelConfig = self.context.model.name

    def close_action(
        self,
        step: StepInFlight,
        outcome: ActionOutcome,
        evidence: str,
        actual_cost: Money | None,
    ) -> None:
        st = self.status
        action = step.action
        assert action is not None
        if st.lastAction is not None:
            st.lastAction = st.lastAction.model_copy(
                update={"outcome": outcome, "evidence": evidence[:4000]}
            )
        if not guards.is_paid(st, action):
            return
        booked = guards.booked_cost(action.estimatedCost, actual_cost)
        if booked is None:
            return
        cost, estimated = booked
        entry = SpendEntry(check=step.check, action=action.action, cost=cost, estimated=estimated)
        st.spend.total = guards.add_spend(st.spend, entry.cost)
        st.spend.entries = [*st.spend.entries, entry][-LEDGER_ENTRIES:]
