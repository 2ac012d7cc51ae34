"""What one observe check sends to the model, and how much of it a provider can cache.

The real observe step (its prompts, tools, redaction and fencing) runs in-process against
FakeKube and talks over real HTTP on loopback to the scripted model server, which plays the
model of the end-to-end scenario (tests/e2e/harness.py): read Job `build` and ConfigMap
`build-progress`, then answer route wait. The engine builds every check's input, so check 2
carries what a real check 2 carries: the previous accepted observation, the pinned contract
and authorized actions, and the progress summary. The target objects are shaped as
kube-apiserver serves them after `kubectl apply`: managed fields, the last-applied
annotation and every defaulted field.

Every request body the server receives is split into its parts (tool definitions, system
prompt, user message, tool results, assistant turns) and each request counts in full, as a
provider bills it. The cacheable prefix is the longest common prefix of consecutive requests
serialized in the order providers cache (tools, system, messages): within one check, and from
one check's first request to the next check's. Output is what the scripted model answered.

Run from the repository root: `.venv/bin/python -m bench.model_cost`.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from hashlib import sha256
from typing import Any

from tests.e2e.harness import TASK, Facts, Scenario, build_job, observation, progress_map
from tests.support.model_server import Final, ModelServer, Reply, Text, ToolCalls
from tests.support.observations import extraction
from tests.support.step_fakes import FakeKube

from goalkeeper.core.engine import (
    AuthorityExtracted,
    Decision,
    LaunchStep,
    ObservationAccepted,
    Started,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    AuthorityExtraction,
    MonitorSpec,
    MonitorStatus,
    Observation,
    StepInput,
)
from goalkeeper.step.agent import RunLimits, run_observe
from goalkeeper.step.model import build_model, model_settings
from goalkeeper.step.redact import LAST_APPLIED
from goalkeeper.step.settings import load_settings
from goalkeeper.step.steplog import StepLog
from goalkeeper.step.tools import StepTools, ToolConfig

NAMESPACE = "nightly"
CHECKS = 3
TOTAL_MODULES = 27
EVERY = timedelta(minutes=15)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# As a user writes it: the task names where progress is kept, so the step shows it first.
SPEC = MonitorSpec(
    task=f"{TASK} Its progress is in ConfigMap build-progress (keys done and total).",
    stopWhen="Stop when Job build has succeeded.",
    everyMinutes=15,
)
JOB_UID = "6f1c2f0e-8d3b-4c55-9a7e-2b1d5c0e9f31"
CREATED = "2026-01-01T00:00:00Z"
STARTED = "2026-01-01T00:00:05Z"
PARTS = ("tools", "system", "user", "tool results", "assistant turns")


# --- counting ----------------------------------------------------------------------------


def _token_counter() -> tuple[str, Callable[[str], int]]:
    """A real BPE count when bpe-openai (its wheel ships the vocabularies) is installed."""
    with warnings.catch_warnings():
        # bpe-openai 0.1.4 loads its bundled vocabularies with a deprecated importlib call.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import bpe_openai
        except ImportError:
            return "est. tokens = bytes/4", lambda text: (len(text.encode()) + 3) // 4
        encoding = bpe_openai.get_encoding("o200k_base")
    return "tokens (o200k_base via bpe-openai)", lambda text: len(encoding.encode(text))


TOKEN_UNIT, count_tokens = _token_counter()


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _call_text(name: str, arguments: str) -> str:
    return f"{name}({arguments})"


def _arguments(value: dict[str, Any] | str) -> str:
    """Tool-call arguments as the model server sends them."""
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class Segment:
    """One part of a request as the provider reads it: what kind of part, and its text."""

    part: str
    text: str


def segments(body: dict[str, Any]) -> list[Segment]:
    """A request body in the order providers cache it: tools, system, then the messages."""
    found = [Segment("tools", _compact(body.get("tools", [])))]
    messages = body.get("messages", [])
    for message in messages:
        if message.get("role") in ("system", "developer"):
            found.append(Segment("system", str(message.get("content") or "")))
    for message in messages:
        role = message.get("role")
        if role == "user":
            found.append(Segment("user", str(message.get("content") or "")))
        elif role == "tool":
            found.append(Segment("tool results", str(message.get("content") or "")))
        elif role == "assistant":
            calls = [
                _call_text(c["function"]["name"], c["function"]["arguments"])
                for c in message.get("tool_calls") or []
            ]
            found.append(
                Segment("assistant turns", str(message.get("content") or "") + "".join(calls))
            )
    return found


def common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def reply_text(reply: Reply) -> str:
    """What the model generated in one reply; an HTTP error generated nothing."""
    if isinstance(reply, ToolCalls):
        return "".join(_call_text(c.name, _arguments(c.arguments)) for c in reply.calls)
    if isinstance(reply, Final):
        return _call_text(reply.tool_name, _arguments(reply.answer))
    if isinstance(reply, Text):
        return reply.content
    return ""


# --- the target, as the API server serves it ------------------------------------------


_JOB_SPEC_FIELDS: dict[str, Any] = {
    "f:metadata": {
        "f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}},
        "f:labels": {".": {}, "f:app": {}},
    },
    "f:spec": {
        "f:backoffLimit": {},
        "f:completionMode": {},
        "f:completions": {},
        "f:manualSelector": {},
        "f:parallelism": {},
        "f:podReplacementPolicy": {},
        "f:suspend": {},
        "f:template": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:containers": {
                    'k:{"name":"build"}': {
                        ".": {},
                        "f:command": {},
                        "f:image": {},
                        "f:imagePullPolicy": {},
                        "f:name": {},
                        "f:resources": {},
                        "f:terminationMessagePath": {},
                        "f:terminationMessagePolicy": {},
                    }
                },
                "f:dnsPolicy": {},
                "f:restartPolicy": {},
                "f:schedulerName": {},
                "f:securityContext": {},
                "f:terminationGracePeriodSeconds": {},
            },
        },
    },
}
_JOB_STATUS_FIELDS: dict[str, Any] = {
    "f:status": {
        "f:active": {},
        "f:ready": {},
        "f:startTime": {},
        "f:terminating": {},
        "f:uncountedTerminatedPods": {},
    }
}


def _managed(
    api_version: str, manager: str, at: str, fields: dict[str, Any], *, status: bool = False
) -> dict[str, Any]:
    """One managedFields entry, as the API server records a manager's write."""
    entry: dict[str, Any] = {
        "apiVersion": api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": "Update",
        "time": at,
    }
    if status:
        entry["subresource"] = "status"
    return entry


def _last_applied(obj: dict[str, Any]) -> str:
    """The annotation `kubectl apply` leaves: the applied manifest as one JSON line."""
    applied = json.loads(json.dumps(obj))
    applied["metadata"]["annotations"] = {}
    return _compact(applied) + "\n"


def served_job() -> dict[str, Any]:
    """Job build, resumed and running, with what kube-apiserver and the Job controller add."""
    job = build_job(NAMESPACE, suspended=False, seconds=600)
    applied = _last_applied(job)
    selector = {"batch.kubernetes.io/controller-uid": JOB_UID}
    labels = {
        "app": "build",
        "batch.kubernetes.io/controller-uid": JOB_UID,
        "batch.kubernetes.io/job-name": "build",
        "controller-uid": JOB_UID,
        "job-name": "build",
    }
    container = job["spec"]["template"]["spec"]["containers"][0]
    container.update(
        imagePullPolicy="IfNotPresent",
        resources={},
        terminationMessagePath="/dev/termination-log",
        terminationMessagePolicy="File",
    )
    job["metadata"].update(
        annotations={LAST_APPLIED: applied},
        creationTimestamp=CREATED,
        generation=2,
        managedFields=[
            _managed("batch/v1", "kubectl-client-side-apply", CREATED, _JOB_SPEC_FIELDS),
            _managed(
                "batch/v1", "kube-controller-manager", STARTED, _JOB_STATUS_FIELDS, status=True
            ),
        ],
        resourceVersion="4817",
        uid=JOB_UID,
    )
    job["spec"].update(
        completionMode="NonIndexed",
        completions=1,
        manualSelector=False,
        parallelism=1,
        podReplacementPolicy="TerminatingOrFailed",
        selector={"matchLabels": selector},
    )
    job["spec"]["template"]["metadata"] = {"creationTimestamp": None, "labels": labels}
    job["spec"]["template"]["spec"].update(
        dnsPolicy="ClusterFirst",
        schedulerName="default-scheduler",
        securityContext={},
        terminationGracePeriodSeconds=30,
    )
    job["status"] = {
        "active": 1,
        "ready": 1,
        "startTime": STARTED,
        "terminating": 0,
        "uncountedTerminatedPods": {},
    }
    return job


def served_progress(done: int, at: datetime) -> dict[str, Any]:
    config_map = progress_map(NAMESPACE, done, TOTAL_MODULES)
    applied = _last_applied(config_map)
    config_map["metadata"].update(
        annotations={LAST_APPLIED: applied},
        creationTimestamp=CREATED,
        managedFields=[
            _managed(
                "v1",
                "kubectl-client-side-apply",
                at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                {
                    "f:data": {".": {}, "f:done": {}, "f:total": {}},
                    "f:metadata": {
                        "f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}},
                    },
                },
            )
        ],
        resourceVersion=str(5000 + done),
        uid="0b7e4c1a-5f2d-4e8b-b3c6-9d1a2e7f4c08",
    )
    return config_map


def modules_done(check: int) -> int:
    """The target's progress at each check: two more modules every 15 minutes."""
    return 17 + 2 * check


# --- the checks --------------------------------------------------------------------------


@dataclass
class Check:
    """One observe check: the requests the model server received and what it answered."""

    number: int
    bodies: list[dict[str, Any]]
    replies: list[Reply]


@dataclass
class RecordingModel:
    """The e2e scenario's model, keeping every reply so output can be measured."""

    scenario: Scenario
    replies: list[Reply] = field(default_factory=list)

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = self.scenario(body)
        self.replies.append(reply)
        return reply


def _answer(at: datetime) -> Callable[[Facts, int], dict[str, Any]]:
    def observe(facts: Facts, _: int) -> dict[str, Any]:
        answer = observation("wait", "incomplete", "running", facts, "Job build is running.")
        for track in answer.get("progress") or []:
            track["observedAt"] = at.isoformat()  # the check's own clock, not the wall clock
        return answer

    return observe


def _fixed(at: datetime) -> Callable[[], datetime]:
    return lambda: at


def _launched(decision: Decision) -> StepInput:
    return next(e.input for e in decision.effects if isinstance(e, LaunchStep))


async def run_checks(count: int = CHECKS) -> list[Check]:
    """`count` consecutive checks of one monitor, each input built by the engine."""
    checks: list[Check] = []
    with ModelServer() as server:
        settings = load_settings(
            {
                "GOALKEEPER_MODEL": "openai:scripted-model",
                "GOALKEEPER_MODEL_BASE_URL": server.base_url,
                "GOALKEEPER_MODEL_API_KEY": "bench-key",
            }
        )
        decision = decide(SPEC, MonitorStatus(), Started(1), T0)
        # The task is read for its authority first: TASK's own grants, as the engine pins them.
        reading = decision.status.step
        assert reading is not None
        found = AuthorityExtraction.model_validate(extraction())
        decision = decide(SPEC, decision.status, AuthorityExtracted(reading.seq, found), T0)
        for number in range(1, count + 1):
            at = T0 + EVERY * (number - 1)
            step_input = _launched(decision)
            model = RecordingModel(Scenario(NAMESPACE, _answer(at), from_sheet=True))
            server.default = model
            seen = len(server.requests)
            kube = FakeKube([served_job(), served_progress(modules_done(number), at)])
            fence_id = sha256(f"check-{number}".encode()).hexdigest()[:16]
            clock = _fixed(at)
            tools = StepTools(kube, ToolConfig(fence_id=fence_id, namespace=NAMESPACE), clock=clock)
            outcome = await run_observe(
                step_input,
                build_model(settings),
                tools,
                limits=RunLimits(),
                model_settings=model_settings(settings),
                clock=clock,
                log=StepLog(io.StringIO()),  # the step's own event lines are not the table
            )
            if outcome.result is None:
                raise RuntimeError(f"check {number} failed: {outcome.error}")
            checks.append(Check(number, [r.body for r in server.requests[seen:]], model.replies))
            assert decision.status.step is not None
            accepted = ObservationAccepted(
                decision.status.step.seq, Observation.model_validate(outcome.result)
            )
            decision = decide(SPEC, decision.status, accepted, at)
            decision = decide(SPEC, decision.status, TimerDue(), at + EVERY)
    return checks


# --- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    bytes: int = 0
    tokens: int = 0

    @classmethod
    def of(cls, text: str) -> Size:
        return cls(len(text.encode()), count_tokens(text))

    def __add__(self, other: Size) -> Size:
        return Size(self.bytes + other.bytes, self.tokens + other.tokens)

    def __sub__(self, other: Size) -> Size:
        return Size(self.bytes - other.bytes, self.tokens - other.tokens)


def input_by_part(check: Check) -> dict[str, Size]:
    sizes = dict.fromkeys(PARTS, Size())
    for body in check.bodies:
        for segment in segments(body):
            sizes[segment.part] += Size.of(segment.text)
    return sizes


def cached_prefix(earlier: dict[str, Any], later: dict[str, Any]) -> Size:
    """The longest common prefix of two requests in cache order: what `later` can read from
    the cache `earlier` wrote."""
    size = Size()
    for a, b in zip(segments(earlier), segments(later), strict=False):
        if a != b:
            if a.part == b.part:
                size += Size.of(common_prefix(a.text, b.text))
            break
        size += Size.of(a.text)
    return size


def prefix_within(check: Check) -> Size:
    """What the requests after the first read from the cache their predecessor wrote."""
    return sum((cached_prefix(a, b) for a, b in itertools.pairwise(check.bodies)), Size())


def prefix_across(earlier: Check, later: Check) -> Size:
    """What the next check's first request shares with the previous check's first request."""
    return cached_prefix(earlier.bodies[0], later.bodies[0])


def output(check: Check) -> Size:
    return sum((Size.of(reply_text(r)) for r in check.replies), Size())


def _rows(checks: list[Check]) -> Iterator[tuple[str, list[Size | int | str]]]:
    parts = [input_by_part(c) for c in checks]
    totals = [sum(p.values(), Size()) for p in parts]
    within = [prefix_within(c) for c in checks]
    across = [Size(), *(prefix_across(a, b) for a, b in itertools.pairwise(checks))]
    yield "requests per check", [len(c.bodies) for c in checks]
    for part in PARTS:
        yield f"input: {part}", [p[part] for p in parts]
    yield "input: total", list(totals)
    yield "cacheable within the check", list(within)
    yield "cacheable from the previous check", ["-", *across[1:]]
    # What a provider bills at the full input price: with a cold cache, and with the
    # previous check's cache still warm (a provider keeps it for minutes, not hours).
    yield "uncached input, cold cache", [t - w for t, w in zip(totals, within, strict=True)]
    yield (
        "uncached input, warm cache",
        [t - w - a for t, w, a in zip(totals, within, across, strict=True)],
    )
    yield "output", [output(c) for c in checks]


def _cell(value: Size | int | str) -> str:
    if isinstance(value, Size):
        return f"{value.bytes:>7} B {value.tokens:>6}"
    return f"{value:>16}"


def run() -> str:
    """The table for `CHECKS` consecutive checks of the standard scenario."""
    checks = asyncio.run(run_checks())
    label_width = 34
    header = f"{'one observe check':<{label_width}}" + "".join(
        f"{'check ' + str(c.number):>18}" for c in checks
    )
    lines = [
        f"What each observe check sends to the model: bytes and {TOKEN_UNIT}",
        "(check 1 is a monitor's first; later checks carry the previous observation and the "
        "pinned contract)",
        header,
        "-" * len(header),
    ]
    for label, values in _rows(checks):
        lines.append(f"{label:<{label_width}}" + "".join(f"  {_cell(v)}" for v in values))
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
