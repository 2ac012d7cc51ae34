"""What waits for a person: a paid action, a stall that came back, the brake on repeated
acts, the first act of a generation; and the person's answer, or its expiry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from goalkeeper.core import authority, guards, health, moves, reading
from goalkeeper.core.models import (
    APPROVALS_KEPT,
    FACTS_MAX,
    ActionRequest,
    ApprovalDecision,
    ApprovalKind,
    ApprovalRecord,
    ApprovalRequest,
    Money,
    MonitorApprovalSpec,
    Observation,
    StopReason,
)
from goalkeeper.core.turn.schedule import Scheduling

# How long a reading with unclear words waits for its person where approvals are off.
CONFIRM_WINDOW = timedelta(days=7)


class Asking(Scheduling):
    def needs_confirmation(self) -> bool:
        """Whether an act waits for a person to confirm the reading: words it left unclear,
        or the operator's setting (with approvals on) for every first act; never at the
        safety limit."""
        record = self.status.authority
        setting = self.policy.confirm_authority and self.policy.approvals
        if record is None or record.confirmedBy or not self.person_can_answer():
            return False
        return setting or bool(record.unclear)

    def await_confirmation(
        self,
        observation: Observation,
        action: ActionRequest | None,
        *,
        held: moves.Move | None = None,
        offered: str = "",
    ) -> None:
        """Pause the act (or, with no action, a stop the observation saw no grant to avoid,
        or a wait on a false leaf that only a `held` back grant moves) until a person
        confirms what was read from the task (`goalkeeper authority NAME --confirm`, or an
        approval of the request). An act `offered` (saying why) is one the model did not ask
        for, under a grant of theirs that may be what the goal needs."""
        assert self.status.authority is not None
        read = "; ".join(authority.describe(self.status.authority))
        if offered:
            why = (
                f"{offered}, while your grant applies now to an object the stop rule names, "
                "and only you can say whether it moves the goal"
            )
        elif self.status.authority.unclear:
            why = "goalkeeper could not read every sentence of the task with certainty"
        else:
            why = "the operator asks a person to confirm each reading"
        then = (
            f"runs '{action.action}'"
            if action is not None
            else "checks again with it (the observation found nothing the reading allows)"
        )
        needed = ""
        if held is not None:
            needed = (
                f' "{held.leaf.quote}" does not hold ({held.value.reason}); the words give '
                f"{reading.grant_line(held.grant)}, which would make it hold, but unclear words "
                f"may take that grant back, so it is not acted on unless a person grants it "
                f"(--grant {held.grant.id}=WORDS)."
            )
        request = self.open_request(
            ApprovalKind.authority,
            f"Before it acts this monitor waits until a person confirms what goalkeeper read "
            f"from the task ({why}): {read}.{needed} Confirming (goalkeeper authority NAME "
            f"--confirm, or approving) applies that reading and {then}; rejecting stops the "
            "monitor.",
            action=action,
            facts=list(self.facts[:FACTS_MAX]),
        )
        next_action = "a fresh check" if action is None else action.action
        self.report(observation, next_action=f"awaiting confirmation, then: {next_action}")
        self.announce(request)

    def await_approval(
        self, observation: Observation, action: ActionRequest, why: str, need: guards.ApprovalNeed
    ) -> None:
        """Pause with a durable request for a person's decision on a paid action."""

        def money(value: Money) -> str:
            return f"{float(value.amount):.2f} {value.currency}"

        amount = money(need.amount)
        ceiling = f"the ceiling is {money(need.ceiling)}" if need.ceiling else "no ceiling is set"
        request = self.open_request(
            ApprovalKind.paidAction,
            f"The paid action '{action.action}' needs approval ({why.rstrip('.')}): it is "
            f"estimated at {money(need.estimate)}, {money(need.spent)} is spent and "
            f"{ceiling}. Approving adds {amount} to the cost ceiling for this action only.",
            action=action,
            estimatedCost=need.estimate,
            ceiling=need.ceiling,
            spent=need.spent,
            amount=need.amount,
        )
        self.report(observation, next_action=f"awaiting approval of {amount}: {action.action}")
        self.announce(request)

    def await_stall_decision(self, observation: Observation) -> None:
        """A stall that came back after its one recovery: a person decides whether the run
        goes on (with one more recovery) or stops."""
        request = self.open_request(
            ApprovalKind.stalled,
            f"{self.status.health.message} It stalled again in the same state after its one "
            "automatic recovery. Approving lets the run go on with one more recovery; "
            "rejecting stops it.",
        )
        self.report(observation, next_action="awaiting a person's decision on the stall")
        self.announce(request)

    def open_request(self, kind: ApprovalKind, message: str, **details: Any) -> ApprovalRequest:
        st = self.status
        st.approval = ApprovalRequest(
            id=f"req-{st.stepSeq}",
            kind=kind,
            check=st.checks,
            message=message[:2000],
            requestedAt=self.now,
            expiresAt=self.now + self.window(kind),
            **details,
        )
        self.judge_health(health.awaiting(st.health, message, self.now))
        return st.approval

    def reading_answered(self, name: str, answer: MonitorApprovalSpec, *, owned: bool) -> None:
        """A person's confirmation or correction of the reading before any act asked for it
        (`goalkeeper authority NAME --confirm`): recorded once, with who; nothing launches."""
        st = self.status
        record = st.authority
        if not owned or not answer.approver or record is None or st.contract is None:
            return
        if answer.decision is ApprovalDecision.reject:
            return  # a reading is corrected with --deny, not rejected before it is used
        who = f"{answer.approver} (MonitorApproval {name})"
        added, refused = authority.person_grants(answer.grants)
        changed = authority.confirm(st, who, grants=added, denied=answer.denied)
        changed += [f"refused {line}" for line in refused]
        st.approvals = [
            *st.approvals,
            ApprovalRecord(
                requestId=answer.requestId,
                name=name,
                decision=answer.decision,
                approver=answer.approver,
                reason=answer.reason,
                at=self.now,
            ),
        ][-APPROVALS_KEPT:]
        self.notify(
            f"confirmed-{name}",
            "AuthorityConfirmed",
            f"{who} confirmed the reading" + (": " + "; ".join(changed) if changed else "."),
        )

    def confirmed(self, request: ApprovalRequest, answer: MonitorApprovalSpec, who: str) -> None:
        """Apply a person's confirmation or correction of the reading, and say what changed."""
        added, refused = authority.person_grants(answer.grants)
        changed = authority.confirm(self.status, who, grants=added, denied=answer.denied)
        changed += [f"refused {line}" for line in refused]
        self.notify(
            f"confirmed-{request.id}",
            "AuthorityConfirmed",
            f"{who} confirmed the reading" + (": " + "; ".join(changed) if changed else "."),
        )

    def refusal_after_confirmation(self, action: ActionRequest) -> tuple[StopReason, str] | None:
        """The authority guards again, once a person confirmed or corrected the reading."""
        st = self.status
        found = guards.authority_violation(st, action)
        if found is not None:
            return StopReason.outsideAuthority, found
        namespace = self.context.namespace
        forbidden = guards.forbidden_mutation(st, action, namespace)
        if forbidden is not None:
            return forbidden
        uncovered = guards.mutation_outside_contract(st.contract, action, namespace)
        if uncovered is not None:
            return uncovered
        synced = self.synced_refusal(action)
        return None if synced is None else (StopReason.blocked, synced)

    def window(self, kind: ApprovalKind) -> timedelta:
        """How long a request stays open; a reading waits for its person even where the
        operator asks no approvals."""
        if kind is ApprovalKind.authority and not self.policy.approvals:
            return CONFIRM_WINDOW
        return self.policy.approval_window

    def announce(self, request: ApprovalRequest) -> None:
        text = (
            f"{request.message} Answer request {request.id} with `goalkeeper approve` or "
            "`goalkeeper reject` and the Monitor's name, or a MonitorApproval owned by the "
            f"Monitor; without an answer by {request.expiresAt.isoformat()} the monitor stops."
        )
        self.notify(f"approval-{request.id}", "ApprovalRequested", text, warning=True)

    def approval_answered(self, name: str, answer: MonitorApprovalSpec, *, owned: bool) -> None:
        """Take a person's answer to the pending request, given for this Monitor (`owned`);
        anything else is ignored, once, and says why. While paused an answer waits: what it
        would launch runs once the monitor is resumed, within the request's window."""
        st = self.status
        request = st.approval
        if any(r.name == name for r in st.approvals):
            return
        if answer.requestId == authority.READING_REQUEST and (
            request is None or request.kind is not ApprovalKind.authority
        ):
            self.reading_answered(name, answer, owned=owned)
            return
        if request is None or name in request.ignored:
            return
        if self.paused:
            return
        problem = None
        if not owned:
            # Request ids restart with a recreated Monitor: only the owner tells them apart.
            problem = (
                "it is not owned by this Monitor (no ownerReference names its uid), so it may "
                "answer an earlier Monitor of the same name; answer with `goalkeeper approve` "
                "or `goalkeeper reject`, which make it owned"
            )
        elif answer.requestId != request.id:
            problem = f"it answers request {answer.requestId}; the pending request is {request.id}"
        elif not answer.approver:
            problem = "it names no approver (the goalkeeper-approvals admission policy sets it)"
        if problem is not None:
            request.ignored = [*request.ignored, name][-16:]
            self.notify(
                f"approval-ignored-{name}",
                "ApprovalIgnored",
                f"MonitorApproval {name} was ignored: {problem}.",
                warning=True,
            )
            return
        approve = answer.decision is ApprovalDecision.approve
        granted = None
        if approve and request.amount is not None:
            amount = request.amount.amount if answer.amount is None else answer.amount
            granted = Money(amount=amount, currency=request.amount.currency)
        record = ApprovalRecord(
            requestId=request.id,
            name=name,
            decision=answer.decision,
            approver=answer.approver,
            amount=granted,
            reason=answer.reason,
            at=self.now,
        )
        st.approvals = [*st.approvals, record][-APPROVALS_KEPT:]
        st.approval = None
        if request.kind is ApprovalKind.stalled and approve:
            # One more recovery for this stall; the same stall after it asks again.
            st.health.recoveredStall = ""
        self.judge_health(self.health_answered())
        who = f"{answer.approver} (MonitorApproval {name})"
        said = f": {answer.reason}" if answer.reason.strip() else "."
        if request.kind is ApprovalKind.stalled:
            if approve:
                self.launch_observe()
            else:
                self.final_stop(StopReason.userRequested, f"{who} stopped the stalled run{said}")
            return
        if request.kind is ApprovalKind.repeatedActs:
            assert request.action is not None
            if approve:
                # The brake is released: the asked act runs, and the next row counts anew.
                st.health = st.health.model_copy(update={"brakeActs": []})
                self.launch_action(request.action)
            else:
                self.final_stop(StopReason.userRequested, f"{who} stopped the repeated acts{said}")
            return
        if request.kind is ApprovalKind.authority:
            assert st.authority is not None
            if approve and request.action is None:
                self.confirmed(request, answer, who)
                self.launch_observe()
            elif approve and request.action is not None:
                self.confirmed(request, answer, who)
                # The act is checked on the facts of the check that asked for it.
                self.facts = tuple(request.facts)
                after = self.refusal_after_confirmation(request.action)
                if after is not None:
                    # Even as the person confirmed or corrected it, the reading does not
                    # cover this act.
                    self.final_stop(*after)
                    return
                if self.condition_unmet(request.action) or self.precondition_unmet(request.action):
                    # The grant does not apply yet, or the act would change nothing: the
                    # next check decides on facts read now.
                    self.launch_observe()
                    return
                self.launch_action(request.action)
            else:
                self.final_stop(
                    StopReason.outsideAuthority,
                    f"{who} did not confirm the authority read from the task{said}",
                )
            return
        assert request.action is not None and request.amount is not None
        if not approve:
            self.final_stop(
                StopReason.paidActionNotApproved,
                f"{who} rejected the paid action '{request.action.action}'{said}",
            )
            return
        assert granted is not None
        short = guards.approved_short(request.amount, float(granted.amount))
        if short is not None:
            self.final_stop(StopReason.paidActionNotApproved, f"{who} approved too little: {short}")
            return
        grant = f"{float(granted.amount):.2f} {granted.currency}"
        action = request.action.model_copy(
            update={"approval": f"{who} added {grant} to the cost ceiling for this action."}
        )
        self.notify(
            f"approval-{request.id}-accepted",
            "ApprovalAccepted",
            f"{who} approved request {request.id}: {grant} for '{action.action}'.",
        )
        self.launch_action(action)

    def await_brake_decision(
        self, observation: Observation, action: ActionRequest, target: str
    ) -> None:
        """Acts on `target` in a row left what the checks see unchanged: a person decides
        whether the asked act may run (the brake is then released) or the run stops."""
        request = self.open_request(
            ApprovalKind.repeatedActs,
            f"{health.brake_text(self.status.health, target)} The next check asks for "
            f"'{action.action}' again. Approving runs it and releases the brake; rejecting "
            "stops the monitor.",
            action=action,
        )
        self.report(observation, next_action=f"awaiting a person's decision: {action.action}")
        self.announce(request)

    def approval_expired(self) -> bool:
        """Stop when the pending request is past its window; False when none is pending."""
        request = self.status.approval
        if request is None:
            return False
        if self.status.pausedAt is not None:
            return True  # a pause never ends a run: the window resumes with the monitor
        if self.now >= request.expiresAt:
            self.status.approval = None
            self.judge_health(self.health_answered())
            paid = request.kind is ApprovalKind.paidAction
            self.final_stop(
                StopReason.paidActionNotApproved if paid else StopReason.blocked,
                f"No answer came to approval request {request.id} by "
                f"{request.expiresAt.isoformat()}: {request.message}",
            )
        return True
