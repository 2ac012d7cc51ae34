"""Metrics derived from the engine's before/after statuses: the engine itself makes the
statuses, as the reconciler would, and each test reads its own registry."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.observations import (
    TASK,
    action,
    contract,
    extraction,
    granting,
    observation,
    result,
)

from goalkeeper.controller.metrics import Metrics, serve
from goalkeeper.core.engine import (
    AuthorityExtracted,
    Event,
    ObservationAccepted,
    ObservationRejected,
    Started,
    StepFailed,
    StepFinished,
    TimerDue,
    decide,
)
from goalkeeper.core.models import (
    AuthorityExtraction,
    MonitorSpec,
    MonitorStatus,
    MonitorStepStatus,
    Observation,
    StepKind,
    StepUsage,
)

T0 = datetime(2026, 8, 16, 10, 0, 0, tzinfo=UTC)
NS = "team-a"


class Loop:
    """The engine driven as the reconciler drives it, one record_decision per decision."""

    def __init__(self, metrics: Metrics, **spec: Any) -> None:
        self.metrics = metrics
        self.spec = MonitorSpec.model_validate({"task": TASK, **spec})
        self.status = MonitorStatus()
        self.now = T0

    def send(self, event: Event, step: MonitorStepStatus | None = None) -> MonitorStatus:
        before = self.status
        self.status = decide(self.spec, before, event, self.now).status
        self.metrics.record_decision(NS, before, self.status, step)
        return self.status

    @property
    def seq(self) -> int:
        assert self.status.step is not None
        return self.status.step.seq

    def start(self, granted_by: Observation | None = None) -> MonitorStatus:
        """Started, and the task's reading that precedes the first observation answered:
        with the standard grants of TASK, or as if the task granted exactly what
        `granted_by` states. The reading's step reports no usage or timing, so what the
        tests count of tokens and durations is the other steps' own."""
        self.send(Started(1))  # launches the task's reading: nothing settled yet
        assert self.status.step is not None and self.status.step.kind is StepKind.extract
        found = AuthorityExtraction.model_validate(extraction())
        if granted_by is not None:
            words, found = granting(granted_by)
            self.spec = self.spec.model_copy(update={"task": f"{self.spec.task} {words}"})
        read = MonitorStepStatus(phase="Succeeded")
        return self.send(AuthorityExtracted(self.seq, found), read)

    def observe(self, obs: Observation, step: MonitorStepStatus | None = None) -> MonitorStatus:
        return self.send(ObservationAccepted(self.seq, obs), step or succeeded())


def succeeded(
    seconds: float = 12.0, tokens: tuple[int, int] = (1000, 200), cost: float | None = 0.01
) -> MonitorStepStatus:
    return MonitorStepStatus(
        phase="Succeeded",
        startedAt=T0,
        finishedAt=T0 + timedelta(seconds=seconds),
        usage=StepUsage(inputTokens=tokens[0], outputTokens=tokens[1], costUsd=cost),
    )


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.value(name, **labels)


def checks(metrics: Metrics, route: str, result: str) -> float:
    return value(metrics, "goalkeeper_checks_total", namespace=NS, route=route, result=result)


def steps(metrics: Metrics, kind: str, outcome: str) -> float:
    return value(metrics, "goalkeeper_steps_total", namespace=NS, kind=kind, outcome=outcome)


def test_accepted_check_counts_its_route_step_duration_and_tokens() -> None:
    metrics = Metrics()
    loop = Loop(metrics)
    loop.start()  # the task's reading settled and launched the first observation
    assert checks(metrics, "wait", "accepted") == 0
    assert steps(metrics, "extract", "succeeded") == 1, "a step, and no check"
    assert sum(checks(metrics, r, "accepted") for r in ("wait", "act", "stop", "unknown")) == 0
    loop.observe(observation("wait"))
    assert checks(metrics, "wait", "accepted") == 1
    assert steps(metrics, "observe", "succeeded") == 1
    assert value(metrics, "goalkeeper_step_duration_seconds_count", kind="observe") == 1
    assert value(metrics, "goalkeeper_step_duration_seconds_sum", kind="observe") == 12.0
    assert value(metrics, "goalkeeper_step_duration_seconds_bucket", kind="observe", le="30.0") == 1
    assert value(metrics, "goalkeeper_step_duration_seconds_bucket", kind="observe", le="10.0") == 0
    tokens = "goalkeeper_model_tokens_total"
    assert value(metrics, tokens, namespace=NS, direction="input") == 1000
    assert value(metrics, tokens, namespace=NS, direction="output") == 200
    assert value(metrics, "goalkeeper_model_cost_usd_total", namespace=NS) == 0.01


def test_the_same_result_handled_twice_is_counted_once() -> None:
    metrics = Metrics()
    loop = Loop(metrics)
    loop.start()
    seq = loop.seq
    loop.observe(observation("wait"))
    # The result's event arrives again (a resync, a restart): the engine ignores it.
    loop.send(ObservationAccepted(seq, observation("wait")), succeeded())
    assert checks(metrics, "wait", "accepted") == 1
    assert steps(metrics, "observe", "succeeded") == 1
    assert value(metrics, "goalkeeper_model_tokens_total", namespace=NS, direction="input") == 1000


def test_rejected_observation_is_counted_as_rejected_not_as_a_check() -> None:
    metrics = Metrics()
    loop = Loop(metrics)
    loop.start()
    failed = MonitorStepStatus(phase="Succeeded", result={"route": "delete-everything"})
    after = loop.send(ObservationRejected(loop.seq, "route: not a route"), failed)
    assert after.checks == 0 and after.invalidStreak == 1
    assert checks(metrics, "unknown", "rejected") == 1
    assert sum(checks(metrics, r, "accepted") for r in ("wait", "act", "stop", "unknown")) == 0
    # Succeeded as a step (it wrote a result); no timestamps, so no duration.
    assert steps(metrics, "observe", "succeeded") == 1
    assert value(metrics, "goalkeeper_step_duration_seconds_count", kind="observe") == 0


def test_act_route_and_a_step_that_ends_without_a_result() -> None:
    metrics = Metrics()
    loop = Loop(metrics)
    loop.start()
    loop.observe(observation("act"))
    assert checks(metrics, "act", "accepted") == 1
    # The act step's Job failed before the step wrote anything.
    loop.send(StepFailed(loop.seq, "Job failed"), MonitorStepStatus(phase="Running"))
    assert steps(metrics, "act", "noResult") == 1


def test_failed_step_counts_failed_without_tokens_when_it_reported_none() -> None:
    metrics = Metrics()
    loop = Loop(metrics)
    loop.start()
    failed = MonitorStepStatus(
        phase="Failed", error="provider down", errorKind="provider", startedAt=T0, finishedAt=T0
    )
    loop.send(StepFailed(loop.seq, "provider down"), failed)
    assert steps(metrics, "observe", "failed") == 1
    assert value(metrics, "goalkeeper_model_tokens_total", namespace=NS, direction="input") == 0
    assert value(metrics, "goalkeeper_step_duration_seconds_count", kind="observe") == 1


def test_stop_counts_its_reason_once() -> None:
    metrics = Metrics()
    loop = Loop(metrics)
    loop.start()
    loop.observe(observation("stop"))
    reason = {"namespace": NS, "reason": "goalComplete"}
    assert value(metrics, "goalkeeper_stops_total", **reason) == 1
    assert checks(metrics, "stop", "accepted") == 1
    loop.send(TimerDue())  # stopped: nothing changes
    assert value(metrics, "goalkeeper_stops_total", **reason) == 1


def test_paid_actions_add_their_booked_spend() -> None:
    metrics = Metrics()
    loop = Loop(metrics)
    paid = observation(
        "act",
        contract=contract(costCeiling={"amount": 10.0, "currency": "USD"}),
        action=action(estimatedCost={"amount": 3.0, "currency": "USD"}, approval="budget-42"),
    )
    loop.start(granted_by=paid)  # the task sets the ceiling the observation restates
    loop.observe(paid)
    spend = {"namespace": NS, "currency": "USD"}
    assert value(metrics, "goalkeeper_action_spend_total", **spend) == 0  # not run yet
    finished = result("succeeded", actualCost={"amount": 3.5, "currency": "USD"})
    loop.send(StepFinished(loop.seq, finished), succeeded(cost=None))
    assert value(metrics, "goalkeeper_action_spend_total", **spend) == 3.5
    assert value(metrics, "goalkeeper_model_cost_usd_total", namespace=NS) == 0.01  # observe only
    loop.observe(paid)
    loop.send(StepFinished(loop.seq, result("succeeded")), succeeded())
    assert value(metrics, "goalkeeper_action_spend_total", **spend) == 6.5


def test_monitors_gauge_follows_the_last_status_of_each_monitor() -> None:
    metrics = Metrics()
    waiting = MonitorStatus(goal="incomplete", work="running")
    done = MonitorStatus(monitor="stopped", goal="complete", work="complete")
    metrics.set_monitor(NS, "a", waiting)
    metrics.set_monitor(NS, "b", waiting)
    metrics.set_monitor("other", "a", waiting)

    def gauge(monitor_state: str, goal: str, work: str) -> float:
        labels = {"monitor_state": monitor_state, "goal": goal, "work": work}
        return value(metrics, "goalkeeper_monitors", **labels)

    assert gauge("active", "incomplete", "running") == 3
    metrics.set_monitor(NS, "b", done)
    assert gauge("active", "incomplete", "running") == 2
    assert gauge("stopped", "complete", "complete") == 1
    metrics.forget_monitor(NS, "b")
    metrics.forget_monitor(NS, "never-seen")
    assert gauge("stopped", "complete", "complete") == 0
    assert gauge("active", "incomplete", "running") == 2


def test_active_monitors_gauge_counts_health_and_activity_for_alerting() -> None:
    from goalkeeper.core.models import HealthState

    metrics = Metrics()
    failing = MonitorStatus(
        health=HealthState(state="Failing", failedSteps=2), activity="waiting", checks=3
    )
    metrics.set_monitor(NS, "a", failing)
    metrics.set_monitor(NS, "b", failing)
    metrics.set_monitor(NS, "c", MonitorStatus(health=HealthState(state="Healthy")))

    def gauge(health: str, activity: str) -> float:
        labels = {"namespace": NS, "health": health, "activity": activity}
        return value(metrics, "goalkeeper_active_monitors", **labels)

    assert gauge("Failing", "waiting") == 2 and gauge("Healthy", "starting") == 1
    # Recovered, and stopped: neither is failing any more.
    metrics.set_monitor(NS, "a", MonitorStatus(health=HealthState(state="Healthy")))
    stopped = MonitorStatus.model_validate(
        {**failing.model_dump(), "monitor": "stopped", "activity": "stopped"}
    )
    metrics.set_monitor(NS, "b", stopped)
    assert gauge("Failing", "waiting") == 0 and gauge("Healthy", "starting") == 2
    metrics.forget_monitor(NS, "a")
    assert gauge("Healthy", "starting") == 1


def test_errors_retries_and_leadership() -> None:
    metrics = Metrics()
    metrics.record_error("transient")
    metrics.record_error("transient")
    metrics.record_retry()
    metrics.set_leader(True)
    assert value(metrics, "goalkeeper_reconcile_errors_total", kind="transient") == 2
    assert value(metrics, "goalkeeper_reconcile_retries_total") == 1
    assert value(metrics, "goalkeeper_leader") == 1


def test_metrics_are_served_over_http(unused_tcp_port: int) -> None:
    metrics = Metrics()
    metrics.set_monitor(NS, "a", MonitorStatus())
    metrics.record_error("internal")
    server = serve(unused_tcp_port, "127.0.0.1", metrics)
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'goalkeeper_monitors{goal="unknown",monitor_state="active",work="unknown"} 1.0' in text
    assert 'goalkeeper_reconcile_errors_total{kind="internal"} 1.0' in text
    assert "# TYPE goalkeeper_step_duration_seconds histogram" in text
