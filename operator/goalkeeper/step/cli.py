"""`goalkeeper-step observe | act | repair`: the thin entry of the agent step.

Parse the kind, load the settings, read the MonitorStep, run the step, write its status.
Exit codes: 0 the step ran and wrote its result; 1 the step failed and the failure is
recorded in the MonitorStep status; 2 the step could not even report (no identity, no
Kubernetes access, or the status could not be written).

An API server that restarts, sheds load (429, 5xx) or drops connections does not lose a
result, nor does one that refuses with RBAC's 403 for a moment after it started (20 s at
most): the MonitorStep is read and its final status written again after a growing pause,
until the step's own deadline (its Job's `activeDeadlineSeconds`, from
`GOALKEEPER_STEP_DEADLINE_SECONDS`, less a margin for the pod's start and its exit). Only
then does the step exit 2, its termination message saying what it did and why its result
was not written, for the operator to record.

Every status patch names the step's pod (`status.pod`, from `GOALKEEPER_POD_NAME` and
`GOALKEEPER_POD_UID`) when the environment gives it. The model credentials never appear in
what the step writes: the status, the termination message and its log lines are scrubbed.
Before anything else the step makes itself non-dumpable and takes the model key out of its
environment (`credentials`), so no child it starts can read the key.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from goalkeeper.core.models import (
    MonitorStepStatus,
    StepErrorKind,
    StepInput,
    StepKind,
    StepPhase,
    StepPod,
    StepUsage,
)
from goalkeeper.core.traces import trace_of
from goalkeeper.step.agent import RunLimits, StepOutcome, run_act, run_observe
from goalkeeper.step.confine import landlock_abi, make_undumpable
from goalkeeper.step.credentials import model_key, settings_environment, take_model_key
from goalkeeper.step.fence import new_fence_id
from goalkeeper.step.processes import hidden_files, model_credentials
from goalkeeper.step.redact import scrub
from goalkeeper.step.settings import (
    SettingsError,
    StepIdentity,
    StepSettings,
    load_identity,
    load_settings,
)
from goalkeeper.step.steplog import StepLog, step_end
from goalkeeper.step.telemetry import traced

TERMINATION_LOG = "/dev/termination-log"
TERMINATION_MAX = 4000
# How long the result write is tried when the Job's deadline is not given.
DEFAULT_DEADLINE_SECONDS = 600


def write_window(deadline_seconds: int | None) -> float:
    """Seconds from the step's start during which its reads and its result write are tried
    again: the Job's deadline less a margin (a tenth, from 5 s to 30 s) for the time its pod
    took to start and the time it needs to exit before the Job controller kills it."""
    seconds = deadline_seconds or DEFAULT_DEADLINE_SECONDS
    return max(seconds - min(max(seconds / 10, 5.0), 30.0), 1.0)


def _now() -> datetime:
    return datetime.now(UTC)


def _say(message: str) -> None:
    print(f"goalkeeper-step: {scrub(message, model_credentials())}", file=sys.stderr, flush=True)


def summary(kind: StepKind, outcome: StepOutcome) -> str:
    if not outcome.ok:
        return f"{kind.value} Failed ({outcome.error_kind}): {outcome.error}"
    result = outcome.result or {}
    if kind is StepKind.extract:
        actions = [a.get("id") for a in result.get("authorizedActions") or []]
        return f"extract Succeeded: authorized actions proposed: {actions or 'none'}"
    if kind is StepKind.observe:
        return (
            f"observe Succeeded: route={result.get('route')} goal={result.get('goal')} "
            f"work={result.get('work')}"
        )
    return f"{kind.value} Succeeded: outcome={result.get('outcome')}: {result.get('evidence')}"


def write_termination_message(text: str) -> None:
    path = os.environ.get("GOALKEEPER_TERMINATION_MESSAGE_PATH", "").strip()
    if not path:
        if not os.path.exists(TERMINATION_LOG):
            return
        path = TERMINATION_LOG
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(scrub(text, model_credentials())[:TERMINATION_MAX])
    except OSError as exc:
        _say(f"could not write the termination message to {path}: {exc}")


def step_pod(identity: StepIdentity) -> StepPod | None:
    """The pod this step runs in, when the environment names it validly."""
    if not identity.pod_name or not identity.pod_uid:
        return None
    try:
        return StepPod(name=identity.pod_name, uid=identity.pod_uid)
    except ValidationError as exc:
        _say(f"GOALKEEPER_POD_NAME/GOALKEEPER_POD_UID are invalid: {_validation_text(exc)}")
        return None


def running_status(started: datetime, pod: StepPod | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": StepPhase.Running.value, "startedAt": started.isoformat()}
    if pod is not None:
        status["pod"] = pod.model_dump(mode="json")
    return status


def final_status(
    outcome: StepOutcome,
    started: datetime,
    finished: datetime,
    pod: StepPod | None = None,
    trace_id: str | None = None,
) -> dict[str, Any]:
    status = MonitorStepStatus(
        phase=StepPhase.Succeeded if outcome.ok else StepPhase.Failed,
        pod=pod,
        result=outcome.result if outcome.ok else None,
        error=None if outcome.ok else (outcome.error or "")[:4000],
        errorKind=outcome.error_kind,
        usage=outcome.usage,
        facts=outcome.facts,
        startedAt=started,
        finishedAt=finished,
        traceId=trace_id,
    )
    # Nulls are kept: in a merge patch they clear what an earlier attempt left behind. A
    # missing pod is left out instead: the step writes no pod it cannot name.
    doc = status.model_dump(mode="json", exclude={"pod"} if pod is None else None)
    return dict(scrub(doc, model_credentials()))


def failed(kind: StepErrorKind, message: str) -> StepOutcome:
    return StepOutcome(None, StepUsage(), message, kind)


def parse_input(doc: dict[str, Any], kind: StepKind) -> StepInput:
    spec = doc.get("spec") or {}
    raw = spec.get("input")
    if raw is None:
        raise ValueError("the MonitorStep has no spec.input")
    step_input = StepInput.model_validate(raw)
    if step_input.kind is not kind:
        raise ValueError(
            f"this is a {kind.value} step but spec.input.kind is {step_input.kind.value!r}"
        )
    if kind in (StepKind.act, StepKind.repair) and step_input.action is None:
        raise ValueError(f"a {kind.value} step needs spec.input.action")
    return step_input


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}")
    return "; ".join(parts)


def run_step(
    kind: StepKind,
    step_input: StepInput,
    settings: StepSettings,
    namespace: str,
    *,
    kube: Any,
    log: StepLog | None = None,
) -> StepOutcome:
    """Run one step with real model and tools."""
    if kind is StepKind.repair:
        from goalkeeper.step.repair import run_repair

        return run_repair(
            step_input, settings.repair_argv, timeout_seconds=settings.repair_timeout_seconds
        )

    from goalkeeper.step.model import build_model, http_client, model_settings
    from goalkeeper.step.tools import StepTools, ToolConfig

    if kind is StepKind.extract:
        return asyncio.run(_extract(step_input, settings, log))

    writes = step_input.action.mutationSet if kind is StepKind.act and step_input.action else []
    tools = StepTools(
        kube,
        ToolConfig(
            fence_id=new_fence_id(),
            namespace=namespace,
            mutation_set=tuple(writes),
            http_allowed_hosts=settings.http_allowed_hosts,
            file_roots=settings.file_roots,
            withheld_files=(*hidden_files(), *kubeconfig_files()),
            allow_commands=settings.allow_commands,
            extra_verbs=settings.act_extra_verbs,
        ),
    )
    limits = RunLimits(
        request_limit=settings.request_limit,
        tool_calls_limit=settings.tool_calls_limit,
        total_tokens_limit=settings.total_tokens_limit,
        cost_limit_usd=settings.cost_limit_usd,
        output_retries=settings.output_retries,
    )

    async def go() -> StepOutcome:
        client = http_client(settings)
        model = build_model(settings, client=client)
        runner: Callable[..., Any] = run_observe if kind is StepKind.observe else run_act
        options: dict[str, bool] = {"worked_example": settings.worked_examples}
        if kind is StepKind.observe:
            options["routed_output"] = settings.routed_output
        try:
            outcome: StepOutcome = await runner(
                step_input,
                model,
                tools,
                limits=limits,
                model_settings=model_settings(settings),
                log=log,
                **options,
            )
            return outcome
        finally:
            with contextlib.suppress(Exception):
                tools.http.close()
            with contextlib.suppress(Exception):
                await client.aclose()

    return asyncio.run(go())


async def _extract(
    step_input: StepInput, settings: StepSettings, log: StepLog | None
) -> StepOutcome:
    """Read the task: the model gets no tools and nothing of the target."""
    from goalkeeper.step.extract import run_extract
    from goalkeeper.step.model import build_model, http_client, model_settings

    client = http_client(settings)
    try:
        return await run_extract(
            step_input,
            build_model(settings, client=client),
            limits=RunLimits(
                request_limit=settings.request_limit,
                total_tokens_limit=settings.total_tokens_limit,
                cost_limit_usd=settings.cost_limit_usd,
                output_retries=settings.output_retries,
            ),
            model_settings=model_settings(settings),
            log=log,
            worked_example=settings.worked_examples,
        )
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()


def kubeconfig_files() -> list[str]:
    """The kubeconfig files of this step (its token in a local run)."""
    return [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]


def main(argv: Sequence[str] | None = None) -> int:
    # First of all, before any other code runs: nothing of this user may read this process's
    # memory or its environment, and the key leaves the environment.
    make_undumpable()
    take_model_key()
    parser = argparse.ArgumentParser(
        prog="goalkeeper-step", description="Run one goalkeeper agent step."
    )
    parser.add_argument("kind", choices=[k.value for k in StepKind])
    args = parser.parse_args(argv)
    kind = StepKind(args.kind)

    try:
        identity = load_identity()
    except SettingsError as exc:
        _say(f"cannot tell which MonitorStep to run: {exc}")
        return 2

    from goalkeeper.step.kube import (
        KubeBackend,
        KubeError,
        load_api_client,
        patch_step_status,
        retrying,
        write_step_status,
    )
    from goalkeeper.step.kube import read_step as read_monitor_step

    try:
        backend = KubeBackend(load_api_client())
    except Exception as exc:
        _say(f"no Kubernetes access (KUBECONFIG or in-cluster config): {exc}")
        return 2

    started = _now()
    clock = time.monotonic()
    deadline = clock + write_window(identity.deadline_seconds)
    pod = step_pod(identity)
    log = StepLog()
    trace_id = trace_of(os.environ.get("TRACEPARENT"))

    def tried_again(what: str) -> Callable[[int, KubeError, float], None]:
        def note(attempt: int, exc: KubeError, pause: float) -> None:
            left = max(deadline - time.monotonic(), 0.0)
            _say(
                f"{what} failed ({exc}); trying again in {pause:.2f} s "
                f"(try {attempt + 1}, {left:.0f} s left before the step's deadline)"
            )
            log.emit("api_retry", what=what, attempt=attempt, status=exc.status, delay_s=pause)

        return note

    def finish(outcome: StepOutcome) -> int:
        step_end(log, kind.value, outcome, time.monotonic() - clock)
        message = summary(kind, outcome)
        try:
            write_step_status(
                backend,
                identity.namespace,
                identity.name,
                final_status(outcome, started, _now(), pod, trace_id),
                deadline=deadline,
                on_retry=tried_again("writing the MonitorStep status"),
            )
        except KubeError as exc:
            unwritten = f"{message} | the result was not written: {exc}"
            _say(f"could not write the MonitorStep status: {exc}")
            _say(message)
            write_termination_message(unwritten)
            return 2
        write_termination_message(message)
        _say(message)
        return 0 if outcome.ok else 1

    try:
        settings = load_settings(settings_environment(), require_model=kind is not StepKind.repair)
    except SettingsError as exc:
        return finish(failed(StepErrorKind.configuration, f"invalid step settings: {exc}"))
    if model_key().file and landlock_abi() < 1:
        _say(
            "no Landlock on this node: a command or repair workflow this step runs could read "
            "the model key's file"
        )

    try:
        doc = retrying(
            lambda: read_monitor_step(backend, identity.namespace, identity.name),
            deadline=deadline,
            on_retry=tried_again("reading the MonitorStep"),
        )
    except KubeError as exc:
        _say(f"cannot read MonitorStep {identity.namespace}/{identity.name}: {exc}")
        if exc.status == 404:
            return 2
        return finish(failed(StepErrorKind.internal, f"cannot read the MonitorStep: {exc}"))

    try:
        step_input = parse_input(doc, kind)
    except ValidationError as exc:
        return finish(
            failed(StepErrorKind.configuration, f"invalid spec.input: {_validation_text(exc)}")
        )
    except ValueError as exc:
        return finish(failed(StepErrorKind.configuration, str(exc)))

    try:
        patch_step_status(
            backend,
            identity.namespace,
            identity.name,
            running_status(started, pod),
        )
    except KubeError as exc:
        _say(f"could not mark the MonitorStep running: {exc}")

    log.emit(
        "step_start",
        kind=kind.value,
        step=f"{identity.namespace}/{identity.name}",
        model=str(settings.model) if settings.model else None,
        check=step_input.check,
    )
    with traced(kind.value, identity.namespace, identity.name) as traced_id:
        trace_id = traced_id or trace_id
        try:
            outcome = run_step(
                kind, step_input, settings, identity.namespace, kube=backend, log=log
            )
        except Exception as exc:  # the step must report, never crash without a status
            outcome = failed(StepErrorKind.internal, f"{type(exc).__name__}: {exc}")
    return finish(outcome)


if __name__ == "__main__":
    raise SystemExit(main())
