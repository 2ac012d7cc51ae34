"""Invariants of the engine over random event sequences."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.observations import (
    AUTHORIZED,
    action,
    contract,
    granting,
    observation,
    result,
)

from goalkeeper.core import guards
from goalkeeper.core.engine import (
    AuthorityExtracted,
    Cancelled,
    EmitReport,
    Event,
    ExtractionRejected,
    LaunchStep,
    ObservationAccepted,
    ObservationRejected,
    PublishSchedule,
    Started,
    StepFailed,
    StepFinished,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    MUTATING_STEPS,
    ActionRequest,
    ActionResult,
    AuthorityExtraction,
    AuthorizedAction,
    Contract,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    Observation,
    Route,
    StepKind,
    StopReason,
)
from goalkeeper.core.mutations import covers, parse_entry

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# A sentence of the task that forbids; a grant quoted from it is no grant.
FORBIDDING = "Never delete the database or drop any of its tables."


# The authorized actions an observation may list: the fixture's, a paid variant, and ones the
# run's first observations never list (a lie that tries to widen the record).
ACTION_POOL: dict[str, dict[str, object]] = {
    "resume-build": {**AUTHORIZED[0]},
    "resume-build-paid": {**AUTHORIZED[0], "paid": True},
    "fix-config": {**AUTHORIZED[1]},
    "wipe-db": {"id": "wipe-db", "description": "Drop every table."},
    "buy-gpus": {"id": "buy-gpus", "description": "Rent more GPUs.", "paid": True},
}

Authority = dict[str, object]


@st.composite
def authorities(draw: st.DrawFn, honest: bool = False) -> Authority:
    """The contract and authorized actions one observation states; an honest one always
    authorizes resuming the build (paid or not)."""
    if honest:
        chosen = [draw(st.sampled_from(["resume-build", "resume-build-paid"]))]
        chosen += draw(st.sampled_from([[], ["fix-config"]]))
    else:
        chosen = draw(
            st.lists(st.sampled_from(sorted(ACTION_POOL)), unique_by=lambda n: ACTION_POOL[n]["id"])
        )
    ceiling = draw(st.sampled_from([None, 5.0, 20.0, 20.0, 1e12]))
    forbidden = draw(
        st.sampled_from(
            [["source code", "the model provider"], ["Source Code.", "the model provider"], []]
        )
    )
    # A glob resource is granted by words that name it (`secrets/build-*`); a bare `*` is
    # no word, so no task grants `secrets/*`.
    allowed = draw(st.sampled_from([["jobs/build"], ["jobs/build", "secrets/build-*"], []]))
    return {
        "authorizedActions": [ACTION_POOL[n] for n in chosen],
        "contract": contract(
            costCeiling=None if ceiling is None else {"amount": ceiling, "currency": "USD"},
            forbiddenChanges=forbidden,
            allowedResources=allowed,
        ),
    }


@dataclass(frozen=True)
class Told:
    """One observation, stated either with the run's usual authority or with its own."""

    route: str
    authority: Authority | None
    action: dict[str, object] | None
    extra: dict[str, object]

    def build(self, usual: Authority) -> Observation:
        stated = self.authority if self.authority is not None else usual
        if self.action is None:
            return observation(self.route, **stated, **self.extra)
        return observation(self.route, action=action(**self.action), **stated, **self.extra)


@st.composite
def observations(draw: st.DrawFn) -> Told:
    route = draw(st.sampled_from(["wait", "act", "act", "stop"]))
    # Mostly the usual authority restated; sometimes another one (widening or narrowing).
    stated = draw(st.one_of(*[st.just(None)] * 5, authorities()))
    extra: dict[str, object] = {}
    if draw(st.booleans()):
        extra["observedSpend"] = {"amount": draw(st.sampled_from([0.0, 3.0, 12.0]))}
    if route != "act":
        return Told(route, stated, None, extra)
    request: dict[str, object] = {
        "kind": draw(st.sampled_from(["advance", "recover", "repair"])),
        "failureId": draw(st.sampled_from(["f1", "f2", "f3"])),
        "targetStateId": draw(st.sampled_from(["s1", "s2"])),
        "authorizedActionId": draw(
            st.sampled_from(["resume-build"] * 12 + ["fix-config", "wipe-db", "buy-gpus", "other"])
        ),
        "mutationSet": draw(
            st.sampled_from(
                [["jobs/build"]] * 12
                + [["secrets/*"], ["secrets/build-token"], ["the source code"]]
            )
        ),
    }
    if draw(st.sampled_from([True, True, False])):
        request["estimatedCost"] = {"amount": draw(st.sampled_from([1.0, 4.0, 9.0, 1e9]))}
        request["approval"] = draw(st.sampled_from([None] + ["approved-budget"] * 8))
    return Told(route, stated, request, extra)


# Grants a task reading may add that the task's words never give: quoted from nowhere,
# from its forbidding sentence, or from a granting sentence that names something else.
LIES: dict[str, tuple[str, dict[str, object]]] = {
    "wipe-db": (
        "authorizedActions",
        {**ACTION_POOL["wipe-db"], "quote": "You may drop every table of the database."},
    ),
    "wipe-db-forbidden": ("authorizedActions", {**ACTION_POOL["wipe-db"], "quote": FORBIDDING}),
    "buy-gpus": (
        "authorizedActions",
        {**ACTION_POOL["buy-gpus"], "quote": "You may rent more GPUs as needed."},
    ),
    "secrets": ("allowedResources", {"entry": "secrets/*", "quote": "You may fix any secret."}),
    "web": (
        "allowedResources",
        {"entry": "deployments/web", "quote": "Grant 0 allows jobs/build."},
    ),
    "ceiling": (
        "costCeiling",
        {"amount": 1e12, "currency": "USD", "quote": "The cost ceiling is 1e12 USD."},
    ),
}


def reading(honest: AuthorityExtraction, lies: list[str]) -> AuthorityExtraction:
    """The task reading a model answers: the task's own grants, and `lies` besides."""
    body = honest.model_dump(mode="json")
    for lie in lies:
        field, grant = LIES[lie]
        if field == "costCeiling":
            body[field] = grant
        elif field == "authorizedActions":
            body[field] = [a for a in body[field] if a["id"] != grant["id"]] + [grant]
        else:
            body[field] = [*body[field], grant]
    return AuthorityExtraction.model_validate(body)


@st.composite
def moves(draw: st.DrawFn) -> tuple[str, object]:
    # Most moves answer whatever is in flight; the rest are the loop's noise.
    kind = draw(
        st.sampled_from(
            ["respond"] * 12
            + ["reject", "fail", "timer", "restart", "edit", "stale", "accept-any", "cancel"]
        )
    )
    if kind in ("respond", "accept-any"):
        outcome = draw(st.sampled_from(["succeeded", "succeeded", "failed", "blocked"]))
        cost = draw(st.sampled_from([None, 0.0, 0.5, 3.0, 9.0]))
        extra = {} if cost is None else {"actualCost": {"amount": cost}}
        # A task reading in flight is answered with the task's grants, mostly as they are.
        lies = draw(
            st.one_of(
                *[st.just([])] * 3,
                st.lists(st.sampled_from(sorted(LIES)), min_size=1, max_size=3, unique=True),
            )
        )
        return kind, (draw(observations()), result(outcome, **extra), lies)
    if kind == "timer":
        return kind, draw(st.integers(min_value=0, max_value=90))
    return kind, None


def to_event(
    status: MonitorStatus,
    move: tuple[str, object],
    usual: Authority,
    honest: AuthorityExtraction,
    now: datetime,
) -> tuple[Event, datetime]:
    """The event a move stands for, and the clock when it happens."""
    kind, payload = move
    generation = status.observedGeneration or 0
    step = status.step
    seq = step.seq if step else 0
    reading_in_flight = step is not None and step.kind is StepKind.extract
    if kind in ("respond", "accept-any"):
        assert isinstance(payload, tuple)
        told, outcome, lies = payload
        assert isinstance(told, Told) and isinstance(outcome, ActionResult)
        if kind == "respond" and reading_in_flight:
            return AuthorityExtracted(seq, reading(honest, lies)), now
        if kind == "accept-any" or (step is not None and step.kind is StepKind.observe):
            return ObservationAccepted(seq, told.build(usual)), now
        if step is not None:
            return StepFinished(seq, outcome), now
        if status.schedule is not None:
            return TimerDue(), max(now, status.schedule.nextCheckAt)
        return Started(), now
    if kind == "reject":
        if reading_in_flight:
            return ExtractionRejected(seq, "invalid"), now
        return ObservationRejected(seq, "invalid"), now
    if kind == "fail":
        return StepFailed(seq, "pod failed"), now
    if kind == "stale":
        return ObservationAccepted(seq + 1000, observation("stop")), now
    if kind == "restart":
        return Started(generation=draw_restart(generation)), now
    if kind == "edit":
        return Started(generation=generation + 1), now
    if kind == "cancel":
        return Cancelled(), now
    assert isinstance(payload, int)
    return TimerDue(), now + timedelta(minutes=payload)


def draw_restart(generation: int) -> int | None:
    # An operator restart names the generation it sees, or (an older caller) none.
    return generation if generation % 2 else None


def within_granted_authority(
    request: ActionRequest, contract_: Contract, actions: list[AuthorizedAction]
) -> None:
    """The request is inside the authority the task's words grant."""
    by_id = {a.id: a for a in actions}
    assert request.authorizedActionId in by_id, (request.authorizedActionId, sorted(by_id))
    ruled = [guards.normalise(e) for e in contract_.forbiddenChanges + contract_.protectedContracts]
    for target in request.mutationSet:
        touched = guards.normalise(target)
        assert not any(r and (touched in r or r in touched) for r in ruled), (target, ruled)
    if by_id[request.authorizedActionId].paid or request.estimatedCost is not None:
        assert contract_.costCeiling is not None and request.estimatedCost is not None
        assert request.approval


@settings(max_examples=500, deadline=None)
@given(
    max_checks=st.integers(min_value=1, max_value=12),
    every=st.integers(min_value=1, max_value=60),
    usual=authorities(honest=True),
    script=st.lists(moves(), min_size=4, max_size=40),
)
def test_engine_invariants_hold_over_random_event_sequences(
    max_checks: int, every: int, usual: Authority, script: list[tuple[str, object]]
) -> None:
    # The task's words grant exactly the usual authority (and forbid one thing besides).
    said = observation("wait", **usual)
    words, honest = granting(said)
    spec = MonitorSpec(task=f"{words} {FORBIDDING}", everyMinutes=every, maxChecks=max_checks)
    status = MonitorStatus()
    now = T0
    reports = 0
    first = decide(spec, status, Started(generation=1), now)
    status = first.status
    # The authority the task's words grant, as the test itself wrote them, for each spec
    # generation whose task was read: the engine's record is not trusted to say what it is.
    granted: dict[int, tuple[Contract, list[AuthorizedAction]]] = {}
    overrun = 0.0  # booked beyond estimates, by actual costs that came in higher
    for move in script:
        event, now = to_event(status, move, usual, honest, now)
        before = status
        decision = decide(spec, before, event, now)
        status = decision.status
        effects = decision.effects

        # Nothing after stop, unless a spec edit starts a new run that remembers the last.
        if before.monitor is MonitorState.stopped:
            restarted = (
                isinstance(event, Started)
                and event.generation is not None
                and event.generation != before.observedGeneration
                and before.stop is not None
                and before.stop.reason is not StopReason.cancelled
            )
            if not restarted:
                assert effects == ()
                assert status.checks == before.checks
            else:
                assert status.checks == 0 and status.stepSeq >= before.stepSeq
                assert status.previousRuns[-1].stop == before.stop
                reports = 0  # checks and their reports count per run

        # No schedule outside the wait route, but a retry after a failed or invalid check:
        # never back to back, never past the interval, and never counted as a check.
        accepted = status.checks == before.checks + 1
        for effect in effects:
            if isinstance(effect, PublishSchedule) and effect.schedule.description.startswith(
                "Retrying"
            ):
                assert isinstance(event, ObservationRejected | ExtractionRejected | StepFailed)
                assert status.checks == before.checks and status.step is None
                delay = effect.schedule.nextCheckAt - now
                assert timedelta(0) < delay <= timedelta(minutes=spec.everyMinutes)
            elif isinstance(effect, PublishSchedule):
                assert isinstance(event, ObservationAccepted)
                assert event.observation.route is Route.wait
                assert accepted and status.monitor is MonitorState.active

        generation = status.observedGeneration or 0
        if status.authority is not None and status.authority != before.authority:
            # Only a task reading records authority, for the generation it read, and it is
            # no check.
            assert isinstance(event, AuthorityExtracted)
            assert status.authorityGeneration == generation
            assert status.checks == before.checks
            granted[generation] = (said.contract, list(said.authorizedActions))
            # Every grant kept is quoted from the task.
            for grant in status.authority.grants:
                assert guards.normalise(grant.quote) in guards.normalise(spec.task), grant
        if accepted:
            assert generation in granted, "a check before the task of its generation was read"

        # Never more accepted checks than maxChecks.
        assert status.checks <= max_checks

        # Exactly one report per accepted observation, and none otherwise.
        emitted = [e for e in effects if isinstance(e, EmitReport)]
        assert len(emitted) == (1 if accepted else 0)
        reports += len(emitted)
        assert reports == status.checks

        # A task reading is handed the person's words alone.
        for effect in effects:
            if isinstance(effect, LaunchStep) and effect.kind is StepKind.extract:
                assert effect.input.task == spec.task and effect.input.action is None
                assert effect.input.contract is None and effect.input.previousObservation is None

        # No act or repair step outside the authority the task's words grant, none whose
        # mutation set the recorded allowed resources do not cover, and never a paid
        # launch over that ceiling, without a ceiling, or without approval.
        for effect in effects:
            if isinstance(effect, LaunchStep) and effect.kind in MUTATING_STEPS:
                assert isinstance(event, ObservationAccepted)
                request = effect.input.action
                assert request is not None
                pinned, actions = granted[generation]
                within_granted_authority(request, pinned, actions)
                assert effect.input.contract == status.contract
                assert effect.input.authorizedActions == status.authorizedActions
                assert status.contract is not None
                allowed = [parse_entry(e, "default") for e in status.contract.allowedResources]
                for entry in request.mutationSet:
                    target = parse_entry(entry, "default")
                    assert target is not None, entry
                    assert any(a is not None and covers(a, target) for a in allowed), (
                        entry,
                        status.contract.allowedResources,
                    )
                if guards.is_paid(status, request):
                    ceiling = pinned.costCeiling
                    assert ceiling is not None and request.estimatedCost is not None
                    spent = before.spend.total.amount if before.spend.total else 0.0
                    assert spent + request.estimatedCost.amount <= ceiling.amount + 1e-9

        # A finished paid action books max(estimate, actual); the booked total minus what
        # actual costs ran over their estimates never exceeds a recorded ceiling.
        if isinstance(event, StepFinished) and status.spend.entries != before.spend.entries:
            assert before.step is not None and before.step.action is not None
            estimate = before.step.action.estimatedCost
            booked = status.spend.entries[-1].cost.amount
            actual = event.result.actualCost
            assert estimate is not None and booked >= estimate.amount
            if actual is not None:
                assert booked >= actual.amount
                overrun += max(0.0, actual.amount - estimate.amount)
        if status.spend.total is not None:
            ceilings = [c.costCeiling.amount for c, _ in granted.values() if c.costCeiling]
            assert ceilings, "spend was booked without any recorded ceiling"
            assert status.spend.total.amount - overrun <= max(ceilings) + 1e-6

        # The record never grants more than the task's words, whatever a reading added.
        if status.contract is not None and status.authorityGeneration in granted:
            pinned, actions = granted[status.authorityGeneration]
            by_id = {a.id: a for a in actions}
            assert {a.id for a in status.authorizedActions} <= set(by_id)
            assert all(a.paid for a in status.authorizedActions if by_id[a.id].paid)
            assert set(status.contract.allowedResources) <= set(pinned.allowedResources)
            if pinned.costCeiling is None:
                assert status.contract.costCeiling is None
            elif status.contract.costCeiling is not None:
                assert status.contract.costCeiling.amount <= pinned.costCeiling.amount

        # A launch always leaves exactly that step in flight.
        launches = [e for e in effects if isinstance(e, LaunchStep)]
        assert len(launches) <= 1
        if launches:
            assert status.step is not None and status.step.seq == launches[0].seq
