"""The engine's knobs, as one frozen value, and what each decision knows of its Monitor.

`Policy` comes from the operator's settings, built in one place
(`OperatorSettings.policy()`); tests build their own. `Context` is what a decision knows of
one Monitor beyond its spec and status: where it lives, who wrote it, what they lack, and
the controls its annotations set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from goalkeeper.core.controls import Controls
from goalkeeper.core.modelconfig import OPERATOR_SETTINGS, ModelChoice
from goalkeeper.core.models import Instructions

STALL_CHECKS = 3
WAKE_INTERVAL = timedelta(minutes=1)
RETRY_FIRST = timedelta(seconds=30)
FAILURE_WINDOW = timedelta(hours=24)
INVALID_ANSWERS = 5
BRAKE_ACTS = 3


@dataclass(frozen=True)
class Policy:
    """How the engine decides, the same for every Monitor of one operator.

    `minute`: the length of one `everyMinutes` minute; only tests shorten it.
    `model_spend_cap_usd`: the model cost after which no step of a monitor runs.
    `stall_checks`: checks in a row with a frozen progress signal that make work stalled.
    `wake_interval`: the least time between two checks a target change starts early.
    `approval_window`: how long a request waits for a person; zero means no approvals,
    so what would ask stops instead.
    `confirm_authority`: with approvals on, the first act of a spec generation waits until a
    person confirms what was read from the task.
    `retry_first`: the delay before retrying a failed or invalid check; it doubles with
    each failure in a row, up to the monitor's interval.
    `failure_window`: how long steps may fail to run in a row before the run ends.
    `invalid_answers`: invalid model answers in a row that end the run.
    `brake_acts`: acts in a row that leave what the observations see unchanged before the
    monitor stops (or asks a person).
    """

    minute: timedelta = timedelta(minutes=1)
    model_spend_cap_usd: float | None = None
    stall_checks: int = STALL_CHECKS
    wake_interval: timedelta = WAKE_INTERVAL
    approval_window: timedelta = timedelta(0)
    confirm_authority: bool = False
    retry_first: timedelta = RETRY_FIRST
    failure_window: timedelta = FAILURE_WINDOW
    invalid_answers: int = INVALID_ANSWERS
    brake_acts: int = BRAKE_ACTS

    @property
    def approvals(self) -> bool:
        return self.approval_window > timedelta(0)


@dataclass(frozen=True)
class Context:
    """What one decision knows of its Monitor besides spec and status.

    `namespace`: the Monitor's, where a mutation-set entry without one lies.
    `author`: who wrote the spec generation, as the API server recorded it.
    `author_denied`: which permissions the step this decision launches needs that the
    author lacks (the caller asks the API server, see core/permissions.py): that step does
    not launch and the monitor stops as outside authority.
    `controls`: pause and check-now, from the Monitor's annotations.
    `instructions`: the operators' instructions as they stand now; the caller reads them
    when `instructions_needed` says this decision may read the task, and they are pinned
    then (None: not read, none).
    `model`: the ModelConfig (or the operator's settings) a step launched now runs with.
    """

    namespace: str = "default"
    author: str = ""
    author_denied: str = ""
    controls: Controls = field(default_factory=Controls)
    instructions: Instructions | None = None
    model: ModelChoice = OPERATOR_SETTINGS
