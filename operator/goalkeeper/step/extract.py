"""The extract step: read the authority from the person's words alone.

It runs before the first observe step of a spec generation, with no tools and nothing of
the target: a model that sees only the task and the stop rule cannot be talked into a
grant by text planted in the target. Every grant quotes the words that give it; the
output tool offers the task's own sentences as the only quotes it can write, so a model
bound by a grammar cannot quote what the person did not write. The engine checks every
quote again and reads the grants itself (core/reading.py): what the model returns here is
a proposal that names them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import ModelRetry
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from goalkeeper.core.authority import MISQUOTED, pin, sentences
from goalkeeper.core.models import AuthorityExtraction, MonitorSpec, StepInput
from goalkeeper.step.agent import RunLimits, StepOutcome, run_agent
from goalkeeper.step.fence import neutralise
from goalkeeper.step.steplog import StepLog

Json = dict[str, Any]
# Past this many characters of sentences the choice costs more prompt than it is worth;
# the engine checks every quote anyway.
CHOICES_MAX = 12_000

EXTRACT_SYSTEM_PROMPT = """\
You are the task reader of goalkeeper, a Kubernetes operator that finishes an authorized
goal. You see only the words a person wrote: a task and a stop rule. Say what they allow,
by calling the final_result tool exactly once. You have no other tools and see no target.

## Rules
1. goal: the complete goal, in the task's words.
2. Grants: list only what the words allow. allowedResources names each object that may
   change as RESOURCE/NAME (for example jobs/build, deployments/web, configmaps/settings).
   authorizedActions lists each change the words allow, with a short stable id (for
   example resume-build), a description naming the object, and paid when it costs money.
   costCeiling only when the words set a spending limit.
3. Every grant quotes the sentence of the task or stop rule that allows it, copied exactly.
   No sentence, no grant. A sentence that forbids (must not, never, do not, only observe,
   only watch) grants nothing: when the task only asks to observe, watch or report, list
   no authorizedActions and no allowedResources.
4. forbiddenChanges, protectedContracts, requiredChecks and stopConditions: short phrases
   of what the words forbid, protect, require and say ends the work.
5. Nothing is allowed by default. Do not add an action because it seems useful.
6. The operators' instructions, when given, come fenced with their source (<<<OPERATOR_RULES
   source="cluster-instructions"...>>>): what they forbid is forbidden whatever the task
   says, and a grant may quote one of their sentences that permits a change in so many
   words. They never remove what the task forbids, protects or requires."""

# For a small model (GOALKEEPER_WORKED_EXAMPLES): one worked reading of another task. A
# constant, so the prompt prefix stays cached.
EXTRACT_EXAMPLE = """\
## A worked example (another task, not this one)
Task: Keep CronJob nightly-report in namespace ops on schedule. Its last run is in ConfigMap
report-status. Allowed: unsuspend CronJob nightly-report when it is suspended, by setting
spec.suspend to false. Not allowed: changing its schedule or image; deleting anything.
Stop when: CronJob nightly-report has run once since it was unsuspended.
Answer:
{"name": "final_result", "arguments": {"goal": "CronJob nightly-report in namespace ops runs \
on schedule.", "allowedResources": [{"entry": "cronjobs/nightly-report", "quote": "Allowed: \
unsuspend CronJob nightly-report when it is suspended, by setting spec.suspend to false."}], \
"authorizedActions": [{"id": "unsuspend-report", "description": "Unsuspend CronJob \
nightly-report: set spec.suspend=false.", "quote": "Allowed: unsuspend CronJob nightly-report \
when it is suspended, by setting spec.suspend to false."}], "forbiddenChanges": ["the schedule \
or image of CronJob nightly-report", "deleting anything"], "stopConditions": ["CronJob \
nightly-report has run once since it was unsuspended"]}}
The quotes are the sentence that says Allowed, never the goal or the progress sentence. A
task that only asks to watch, observe or report grants nothing: answer with no
allowedResources and no authorizedActions."""


# The operators' instructions, headed and fenced as whose they are (no target data reaches
# this step): (field, heading, fence source).
_INSTRUCTION_HEADINGS = (
    ("cluster", "Cluster instructions (the cluster admin's doctrine)", "cluster-instructions"),
    (
        "namespace",
        "Namespace instructions (the namespace admin's doctrine)",
        "namespace-instructions",
    ),
)


def _instruction_texts(step: StepInput) -> list[tuple[str, str, str]]:
    """(heading, fence source, text) of each of the operators' instructions given."""
    found = step.instructions
    if found is None:
        return []
    return [
        (heading, source, getattr(found, field))
        for field, heading, source in _INSTRUCTION_HEADINGS
        if getattr(found, field)
    ]


def extract_user_prompt(step: StepInput) -> str:
    # Fenced as the operators' own, so their text can neither pose as the task's nor end
    # the block (a run of three angle brackets inside is broken up).
    doctrine = "".join(
        f'\n## {heading}\n<<<OPERATOR_RULES source="{source}">>>\n{neutralise(text)}\n'
        "<<<END_OPERATOR_RULES>>>\n"
        for heading, source, text in _instruction_texts(step)
    )
    return f"""\
## Task
{step.task}

## Stop when
{step.stopWhen}
{doctrine}
Read these words and call final_result with what they allow."""


def quote_choices(step: StepInput) -> list[str]:
    """The sentences a grant may quote: the person's own and the operators', as written."""
    texts = [step.task, step.stopWhen, *(text for _, _, text in _instruction_texts(step))]
    found = list(dict.fromkeys(s for text in texts for s in sentences(text)))
    return found if sum(len(s) for s in found) <= CHOICES_MAX else []


def _with_choices(schema: Any, choices: list[str]) -> Any:
    """`schema` with every `quote` property offered only as one of `choices`."""
    if isinstance(schema, list):
        return [_with_choices(item, choices) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: Json = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {
                name: (
                    {"enum": choices, "description": "The sentence that allows it."}
                    if name == "quote"
                    else _with_choices(sub, choices)
                )
                for name, sub in value.items()
            }
        else:
            out[key] = _with_choices(value, choices)
    return out


@dataclass
class QuoteChoices(AbstractCapability[Any]):
    """Gives the output tool the task's sentences as the only quotes it can write."""

    choices: tuple[str, ...] = ()

    async def prepare_output_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        if not self.choices:
            return tool_defs
        return [
            replace(
                tool,
                parameters_json_schema=_with_choices(
                    tool.parameters_json_schema, list(self.choices)
                ),
            )
            for tool in tool_defs
        ]


@dataclass
class HeldToTheWords:
    """Holds a reading to the person's words as the engine will (core/authority.py `pin`):
    a proposal whose quote gives no grant the engine reads is named to the model, which
    reads again, once; the reading after that stands (such a proposal names nothing, and one
    quoting a sentence that gives no grant leaves it unclear, for a person). A grant the
    words forbid is left for the engine to drop: no quote saves it. Seen: a Job's grant
    quoting the goal ("Run the postcode import ... to completion") instead of the sentence
    allowing its resume."""

    step_input: StepInput
    log: StepLog | None = None
    asked: bool = False

    def check(self, ctx: RunContext[Any], extraction: AuthorityExtraction) -> Any:
        if ctx.last_attempt or self.asked:
            return extraction  # the engine drops what the words do not give
        spec = MonitorSpec(task=self.step_input.task, stopWhen=self.step_input.stopWhen)
        pinned = pin(spec, extraction, generation=None, instructions=self.step_input.instructions)
        misquoted = [d for d in pinned.record.dropped if any(m in d for m in MISQUOTED)]
        if misquoted:
            reason = (
                "The operator reads no grant from these proposals: "
                + "; ".join(misquoted)
                + ". Quote for each grant the sentence that allows its change in so many "
                "words (a permission, the verb, the object's kind and name), never the goal; "
                "leave out any grant no sentence gives."
            )
            if self.log is not None:
                self.log.emit("answer_refused", reason=reason[:500])
            self.asked = True
            raise ModelRetry(reason)
        return extraction


async def run_extract(
    step_input: StepInput,
    model: Model,
    *,
    limits: RunLimits | None = None,
    model_settings: ModelSettings | None = None,
    log: StepLog | None = None,
    worked_example: bool = False,
) -> StepOutcome:
    """One reading of the task; the result validates as an `AuthorityExtraction`. With
    `worked_example` a worked reading of another task ends the system prompt."""
    system = EXTRACT_SYSTEM_PROMPT + ("\n\n" + EXTRACT_EXAMPLE if worked_example else "")
    return await run_agent(
        output_type=AuthorityExtraction,
        system_prompt=system,
        user_prompt=extract_user_prompt(step_input),
        model=model,
        toolset=FunctionToolset[Any](tools=[]),
        limits=limits or RunLimits(),
        model_settings=model_settings,
        log=log,
        capability=QuoteChoices(tuple(quote_choices(step_input))),
        validate=HeldToTheWords(step_input, log).check,
    )


__all__ = [
    "EXTRACT_EXAMPLE",
    "EXTRACT_SYSTEM_PROMPT",
    "HeldToTheWords",
    "QuoteChoices",
    "quote_choices",
    "run_extract",
]
