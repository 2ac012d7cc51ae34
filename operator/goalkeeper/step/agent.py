"""The pure core of the agent step: run one observe or act with a given model and tools.

No Kubernetes here: the tools are injected (`StepTools` with any backend), the model is any
pydantic-ai model (a `StepModel` for real runs, a `FunctionModel` in tests). The result is a
`StepOutcome`: the validated output as a JSON dict, or an error with its kind, and the usage.
The writes an act step's tools refused are reported in its outcome whatever the model says:
a `refused writes: ...` line ends the evidence (or the error).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage, UsageLimits

from goalkeeper.core.authority import by_code
from goalkeeper.core.facts import (
    contradiction,
    goal_print,
)
from goalkeeper.core.goals import settled_complete, settled_given_up
from goalkeeper.core.guards import named_action
from goalkeeper.core.models import (
    ActionResult,
    CostSource,
    ObjectFacts,
    Observation,
    Route,
    StepErrorKind,
    StepInput,
    StepKind,
    StepUsage,
)
from goalkeeper.core.moves import settled_move
from goalkeeper.step import facts, prompts
from goalkeeper.step.credentials import KEY_SOURCE_VAR
from goalkeeper.step.errors import ERROR_MAX, RunFacts, explain, limit_hit
from goalkeeper.step.model import StepModel
from goalkeeper.step.repeats import RepeatGuard
from goalkeeper.step.routed import (
    REFUTED_ACT,
    RoutedOutput,
    pinned_action_ids,
    pinned_resources,
)
from goalkeeper.step.steplog import RunLog, StepLog
from goalkeeper.step.tools import StepTools, act_toolset, observe_toolset

EVIDENCE_MAX = 4000
REFUSALS_MAX = 1000


@dataclass(frozen=True)
class RunLimits:
    request_limit: int = 30
    tool_calls_limit: int = 60
    total_tokens_limit: int = 500_000
    cost_limit_usd: Decimal | None = None
    output_retries: int = 3

    def usage_limits(self) -> UsageLimits:
        return UsageLimits(
            request_limit=self.request_limit,
            tool_calls_limit=self.tool_calls_limit,
            total_tokens_limit=self.total_tokens_limit,
            cost_limit=self.cost_limit_usd,
        )


@dataclass
class StepOutcome:
    result: dict[str, Any] | None
    usage: StepUsage
    error: str | None = None
    error_kind: StepErrorKind | None = None
    # What the step's code read of the named objects after the model answered.
    facts: list[ObjectFacts] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error_kind is None


def step_usage(usage: RunUsage, model: Model | None) -> StepUsage:
    """Usage for the MonitorStep status; the cost only when every request was priced."""
    cost: Decimal | None
    source: CostSource
    if isinstance(model, StepModel):
        cost, source = model.ledger.total()
    elif usage.cost is not None:
        cost, source = usage.cost, CostSource.genaiPrices
    else:
        cost, source = None, CostSource.unknown
    if usage.requests == 0 and cost == 0:
        cost, source = None, CostSource.unknown  # nothing was answered: nothing to price
    return StepUsage(
        requests=usage.requests,
        toolCalls=usage.tool_calls,
        inputTokens=usage.input_tokens,
        outputTokens=usage.output_tokens,
        costUsd=float(cost) if cost is not None else None,
        costSource=source if cost is not None else CostSource.unknown,
    )


def run_facts(
    *,
    model: Model | None,
    limits: RunLimits,
    model_settings: ModelSettings | None,
    usage: RunUsage,
) -> RunFacts:
    """What an error message may say about this run's settings and what it did."""
    settings = model_settings or {}
    step_model = model if isinstance(model, StepModel) else None
    return RunFacts(
        request_limit=limits.request_limit,
        tool_calls_limit=limits.tool_calls_limit,
        total_tokens_limit=limits.total_tokens_limit,
        cost_limit_usd=limits.cost_limit_usd,
        output_retries=limits.output_retries,
        max_output_tokens=settings.get("max_tokens"),
        http_timeout_seconds=settings.get("timeout"),
        provider_retries=step_model.retries if step_model else 0,
        attempts=max(1, step_model.last_attempts) if step_model else 1,
        model=f"{model.system}:{model.model_name}" if model is not None else "",
        base_url=((model.base_url or "").rstrip("/") or None) if model is not None else None,
        requests=usage.requests,
        tool_calls=usage.tool_calls,
        total_tokens=usage.total_tokens,
        key_source=os.environ.get(KEY_SOURCE_VAR, ""),
    )


def classify(
    exc: BaseException,
    model: Model | None = None,
    *,
    limits: RunLimits | None = None,
    model_settings: ModelSettings | None = None,
    usage: RunUsage | None = None,
) -> tuple[StepErrorKind, str]:
    """The error kind and a plain message, naming the setting to change, for a run's error."""
    facts = run_facts(
        model=model,
        limits=limits or RunLimits(),
        model_settings=model_settings,
        usage=usage or RunUsage(),
    )
    return explain(exc, facts)


async def run_agent(
    *,
    output_type: type[BaseModel],
    system_prompt: str,
    user_prompt: str,
    model: Model,
    toolset: Any,
    limits: RunLimits,
    model_settings: ModelSettings | None,
    log: StepLog | None,
    capability: AbstractCapability[Any] | None = None,
    validate: Callable[..., Any] | None = None,
) -> StepOutcome:
    """One agent run to a validated `output_type`, with its usage; errors are explained.
    `validate` may refuse an answer with `ModelRetry`, which the model gets to correct
    within the output retries."""
    run_log = RunLog(log or StepLog())
    if isinstance(model, StepModel):
        model.on_retry = run_log.on_retry
    agent: Agent[None, Any] = Agent(
        model,
        output_type=output_type,
        instructions=system_prompt,
        toolsets=[toolset],
        retries={"tools": 2, "output": limits.output_retries},
        model_settings=model_settings,
        defer_model_check=True,
        capabilities=[run_log, RepeatGuard(), *([capability] if capability else [])],
    )
    if validate is not None:
        agent.output_validator(validate)
    usage = RunUsage()
    try:
        run = await agent.run(user_prompt, usage=usage, usage_limits=limits.usage_limits())
    except Exception as exc:
        facts = run_facts(model=model, limits=limits, model_settings=model_settings, usage=usage)
        kind, message = explain(exc, facts)
        hit = limit_hit(exc, facts)
        if hit is not None:
            run_log.log.emit("limit", setting=hit[0], value=hit[1])
        return StepOutcome(None, step_usage(usage, model), message, kind)
    output = run.output
    return StepOutcome(output.model_dump(mode="json", exclude_none=True), step_usage(usage, model))


def _now(clock: Callable[[], datetime] | None) -> datetime:
    return (clock or (lambda: datetime.now(UTC)))()


async def run_observe(
    step_input: StepInput,
    model: Model,
    tools: StepTools,
    *,
    limits: RunLimits | None = None,
    model_settings: ModelSettings | None = None,
    clock: Callable[[], datetime] | None = None,
    log: StepLog | None = None,
    routed_output: bool = False,
    worked_example: bool = False,
) -> StepOutcome:
    """One read-only observation; the result validates as an `Observation`. With
    `routed_output` the model is given the route-keyed schema (step/routed.py), with
    `worked_example` a worked check at the end of its system prompt."""
    toolset = observe_toolset(tools)
    refusals = Refusals(step_input, tools, worked_example, log)
    read = _named_objects(step_input, tools)
    named = facts.facts_of(read, step_input.goal)
    settled = settled_complete(step_input.goal, named, checks=step_input.check) or settled_given_up(
        step_input.goal, named, checks=step_input.check
    )
    if settled is not None:
        if log is not None:
            log.emit("settled", by="facts", report=settled.report)
        return StepOutcome(
            settled.model_dump(mode="json", exclude_none=True), StepUsage(), facts=named
        )
    sheet = facts.sheet(read, tools.k8s_get, tools.fenced) + unchanged(step_input, named)
    user = prompts.observe_user_prompt(
        step_input,
        fence_id=tools.config.fence_id,
        namespace=tools.config.namespace,
        now=_now(clock),
        facts=sheet,
    )
    # A model that was shown the named objects has read the target: it may answer at once.
    read_first = () if sheet else tuple(toolset.tools)
    outcome = await run_agent(
        output_type=Observation,
        system_prompt=prompts.observe_system_prompt(worked_example),
        user_prompt=user,
        model=model,
        toolset=toolset,
        limits=limits or RunLimits(),
        model_settings=model_settings,
        log=log,
        capability=RoutedOutput(
            pinned_action_ids(step_input),
            read_first,
            pinned_resources(step_input),
            refuted=lambda: refusals.refuted,
            id_names=lambda: refusals.id_names,
            copied=lambda: refusals.copied,
            said=lambda: refusals.said,
        )
        if routed_output
        else None,
        validate=refusals.check,
    )
    if outcome.error_kind is StepErrorKind.invalidOutput and refusals.last:
        # What the model was last told, for the record and the next check's prompt.
        outcome.error = f"{outcome.error} Its last answer: {refusals.last}"[:ERROR_MAX]
    if outcome.error_kind is StepErrorKind.invalidOutput:
        named = facts.facts_of(_named_objects(step_input, tools), step_input.goal)
        told = refusals.last or outcome.error or "no answer"
        moved = settled_move(
            step_input.goal, step_input.grants, named, checks=step_input.check, unanswered=told
        )
        if moved is not None:
            if log is not None:
                log.emit("settled", by="grant", report=moved.report)
            result = moved.model_dump(mode="json", exclude_none=True)
            return StepOutcome(result, outcome.usage, facts=named)
    if outcome.result is not None:
        # Read again now: the claims are held against the state they were made in.
        action = outcome.result.get("action") or {}
        mutation_set = action.get("mutationSet") if isinstance(action, dict) else None
        read = _named_objects(step_input, tools, mutation_set or [])
        outcome.facts = facts.facts_of(read, step_input.goal)
    return outcome


def unchanged(step_input: StepInput, read: Sequence[ObjectFacts]) -> str:
    """The fact sheet's line saying that the goal's objects read the same as at the checks
    before, for how many in a row; '' when they changed or none was read. Seen: a task's
    "no completion for 2 checks in a row" never noticed, each check waiting again."""
    since = step_input.factsSince
    if not since or since >= step_input.check or goal_print(read) != step_input.factsPrint:
        return ""
    row = step_input.check - since + 1
    return (
        f"\n- Unchanged: the objects the goal names read exactly the same at every check "
        f"since check {since}: {row} checks in a row, this one included."
    )


# A refusal by the facts of a goal or work state or a route ("... goal 'complete' contradicts").
REFUTED_CLAIM = re.compile(r"^Contradicted by the facts: (goal|work|route) '([a-z]+)' contradicts")
COPIED = re.compile(r"^The answer repeats the worked example's (\w+) ")
BORROWED = re.compile(r"^The action names the worked example's ")


@dataclass
class Refusals:
    """The in-step check of each answer (`sound`), keeping the last refusal and logging
    each one."""

    step_input: StepInput
    tools: StepTools
    worked_example: bool
    log: StepLog | None = None
    last: str = ""
    # goal / work -> the values the facts refuted (a grammar-bound model is held to the rest)
    refuted: dict[str, set[str]] = field(default_factory=dict)
    # The named objects' names, once an answer copied the example's ids
    id_names: list[str] = field(default_factory=list)
    # The example's fields, once an answer copied one of them
    copied: list[str] = field(default_factory=list)
    # The recorded actions' words, once an action named the example's change (seen: its
    # maxReplicas, refused again and again in the same step, for a Deployment's scale)
    said: list[str] = field(default_factory=list)

    def check(self, ctx: RunContext[Any], observation: Observation) -> Any:
        try:
            sound(observation, self.step_input, self.tools, self.worked_example)
            return observation
        except ModelRetry as refused:
            self.last = str(refused)
            if isinstance(refused, ActRefuted):
                self.refuted.setdefault(REFUTED_ACT, set()).add(refused.action_id)
            claim = REFUTED_CLAIM.match(self.last)
            if claim is not None:
                self.refuted.setdefault(claim.group(1), set()).add(claim.group(2))
            copy = COPIED.match(self.last)
            if copy is not None:
                read = _named_objects(self.step_input, self.tools)
                self.id_names = [o["metadata"]["name"] for o in read if o.get("metadata")]
                self.copied = list(prompts.EXAMPLE_FIELDS)
            if BORROWED.match(self.last):
                self.said = [a.description for a in self.step_input.authorizedActions]
            if self.log is not None:
                self.log.emit("answer_refused", reason=self.last[:500])
            raise


def sound(
    observation: Observation, step_input: StepInput, tools: StepTools, worked_example: bool
) -> list[ObjectFacts]:
    """The facts of the named objects, read now, unless `observation` copies the worked
    example or they refute it: then the model is told why and answers again (the engine
    would refuse it alike)."""
    unanswerable = observation.unanswerable_stop()
    if unanswerable is not None:
        raise ModelRetry(f"{unanswerable}.")
    if worked_example:
        copied = prompts.copied_from_example(observation.model_dump(mode="json"))
        if copied is not None:
            raise ModelRetry(
                f"The answer repeats the worked example's {copied} word for word; that "
                "example is about another target. Answer from this task's named objects."
            )
        action = observation.action
        own = " ".join([step_input.task, *(a.description for a in step_input.authorizedActions)])
        borrowed = None if action is None else prompts.example_change_in(action.action, own)
        if action is not None and borrowed is not None:
            # Seen: "Set spec.maxReplicas=1 on Deployment pricing-worker" for a restart.
            recorded = named_action(step_input.authorizedActions, action)
            what = f"'{recorded.description}'" if recorded else "one of the recorded actions"
            raise ModelRetry(
                f"The action names the worked example's {borrowed}, which this task never "
                f"does; that example is about another target. The task allows {what}: "
                "describe that change, on this task's objects."
            )
    return against_facts(observation, step_input, tools)


def _listed(step_input: StepInput) -> str:
    return "; ".join(f"{a.id} ({a.description.rstrip('.')})" for a in step_input.authorizedActions)


class ActRefuted(ModelRetry):
    """The facts refute the act itself, not the rest of the answer: its grant leaves the
    step's output grammar (step/routed.py), so a model that repeats the act cannot."""

    def __init__(self, message: str, action_id: str):
        super().__init__(message)
        self.action_id = action_id


def against_facts(
    observation: Observation, step_input: StepInput, tools: StepTools
) -> list[ObjectFacts]:
    """What the named objects hold now, unless it contradicts `observation`: then the model
    is told which claim and why (the engine would refuse the answer for the same reason, as
    an invalid answer) and, where the task authorized actions, which."""
    mutation_set = observation.action.mutationSet if observation.action else []
    read = facts.facts_of(_named_objects(step_input, tools, list(mutation_set)), step_input.goal)
    found = contradiction(
        observation, read, step_input.goal, step_input.check, step_input.authorizedActions
    )
    if found is None:
        return read
    hint = "Answer again from these facts."
    action = observation.action
    if action is not None and action.authorizedActionId:
        without = observation.model_copy(update={"action": None})
        if contradiction(without, read, step_input.goal, step_input.check) is None:
            raise ActRefuted(
                f"Contradicted by the facts: {found} {hint} The action "
                f"{action.authorizedActionId} is not offered again in this check.",
                action.authorizedActionId,
            )
    if step_input.authorizedActions and observation.route is not Route.act:
        hint += (
            f" The task authorizes these actions: {_listed(step_input)}. If one of them "
            "moves the goal forward, answer route act with it; else wait or stop, as the "
            "facts say."
        )
    raise ModelRetry(f"Contradicted by the facts: {found} {hint}")


def _named_objects(
    step_input: StepInput, tools: StepTools, mutation_set: list[str] | None = None
) -> list[dict[str, Any]]:
    """The objects the task, the stop rule and the mutation set name, read now."""
    if mutation_set is None:
        mutation_set = list(step_input.action.mutationSet) if step_input.action else []
    return facts.read(
        tools.kube,
        tools.config.namespace,
        task=step_input.task,
        stop_when=step_input.stopWhen,
        mutation_set=[m for m in mutation_set if isinstance(m, str)],
    )


async def run_act(
    step_input: StepInput,
    model: Model,
    tools: StepTools,
    *,
    limits: RunLimits | None = None,
    model_settings: ModelSettings | None = None,
    clock: Callable[[], datetime] | None = None,
    log: StepLog | None = None,
    worked_example: bool = False,
) -> StepOutcome:
    """One action and its verification; the result validates as an `ActionResult`; with
    `worked_example` a worked action ends its system prompt."""
    if step_input.action is None:
        return StepOutcome(
            None,
            StepUsage(),
            "the act step input has no action request (spec.input.action)",
            StepErrorKind.configuration,
        )
    if tools.config.mutation_set != tuple(step_input.action.mutationSet):
        return StepOutcome(
            None,
            StepUsage(),
            "the act step's tools are not limited to the action's mutation set",
            StepErrorKind.internal,
        )
    from goalkeeper.step import typedact  # it builds on this module's outcome

    if step_input.grant is not None and by_code(step_input.grant):
        return with_refusals(typedact.run_typed(step_input.grant, tools), tools.refusals)
    user = prompts.act_user_prompt(
        step_input,
        fence_id=tools.config.fence_id,
        namespace=tools.config.namespace,
        now=_now(clock),
        facts=facts.sheet(_named_objects(step_input, tools), tools.k8s_get, tools.fenced),
    )
    outcome = await run_agent(
        output_type=ActionResult,
        system_prompt=prompts.act_system_prompt(worked_example),
        user_prompt=user,
        model=model,
        toolset=act_toolset(tools),
        limits=limits or RunLimits(),
        model_settings=model_settings,
        log=log,
    )
    return with_refusals(outcome, tools.refusals)


def with_refusals(outcome: StepOutcome, refusals: list[str]) -> StepOutcome:
    """The outcome with a last line naming the refused writes, within the length bounds."""
    if not refusals:
        return outcome
    line = ("refused writes: " + "; ".join(refusals))[:REFUSALS_MAX]
    if outcome.result is not None:
        evidence = str(outcome.result.get("evidence", ""))[: EVIDENCE_MAX - len(line) - 1]
        result = {**outcome.result, "evidence": f"{evidence}\n{line}"}
        return StepOutcome(result, outcome.usage, outcome.error, outcome.error_kind)
    error = (outcome.error or "")[: ERROR_MAX - len(line) - 2]
    return StepOutcome(None, outcome.usage, f"{error}; {line}", outcome.error_kind)


__all__ = [
    "RunLimits",
    "StepKind",
    "StepOutcome",
    "classify",
    "run_act",
    "run_agent",
    "run_observe",
    "step_usage",
    "with_refusals",
]
