"""Prometheus metrics of the operator, derived from what the engine decided.

The reconciler makes one call per written decision, `record_decision(namespace, before,
after, step_status)`; every count comes from comparing the two statuses, so a decision that
changed nothing counts nothing and a result handled twice is counted once. Label values are
closed sets (routes, step kinds, stop reasons, currencies) plus the namespace.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from goalkeeper.core.models import MonitorState, MonitorStatus, MonitorStepStatus, StepPhase

# Agent steps take seconds to many minutes; the step deadline is at most a day.
STEP_BUCKETS = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)


class _MonitorsCollector(Collector):
    """goalkeeper_monitors, counted at scrape time from the last status of each monitor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the scrape runs in the metrics server's thread
        self._states: dict[tuple[str, str], tuple[str, str, str]] = {}
        self._health: dict[tuple[str, str], tuple[str, str, str]] = {}

    def set(self, key: tuple[str, str], status: MonitorStatus) -> None:
        with self._lock:
            self._states[key] = (status.monitor.value, status.goal.value, status.work.value)
            # A stopped monitor's last health is history, not something to alert on.
            if status.monitor is MonitorState.active:
                self._health[key] = (key[0], status.health.state.value, status.activity.value)
            else:
                self._health.pop(key, None)

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._states.pop(key, None)
            self._health.pop(key, None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            counts = Tally(self._states.values())
            health = Tally(self._health.values())
        family = GaugeMetricFamily(
            "goalkeeper_monitors",
            "Monitors known to this operator, by monitor state, goal and work.",
            labels=["monitor_state", "goal", "work"],
        )
        for labels, count in sorted(counts.items()):
            family.add_metric(list(labels), count)
        yield family
        active = GaugeMetricFamily(
            "goalkeeper_active_monitors",
            "Active monitors by namespace, health (Failing: steps keep failing to run, "
            "Stalled, RunawayLoop, AwaitingHuman, ...) and activity (paused, waiting, ...).",
            labels=["namespace", "health", "activity"],
        )
        for labels, count in sorted(health.items()):
            active.add_metric(list(labels), count)
        yield active


class Metrics:
    """One registry with goalkeeper's metrics; the module's functions use `METRICS`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.checks = Counter(
            "goalkeeper_checks_total",
            "Observations, accepted (a check) or rejected (invalid or forged).",
            ["namespace", "route", "result"],
            registry=r,
        )
        self.steps = Counter(
            "goalkeeper_steps_total",
            "Steps settled, by kind and outcome (succeeded, failed, or noResult).",
            ["namespace", "kind", "outcome"],
            registry=r,
        )
        self.step_duration = Histogram(
            "goalkeeper_step_duration_seconds",
            "Run time of settled steps, from the step's startedAt to its finishedAt.",
            ["kind"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "goalkeeper_model_tokens_total",
            "Model tokens the steps used.",
            ["namespace", "direction"],
            registry=r,
        )
        self.cost = Counter(
            "goalkeeper_model_cost_usd_total",
            "Model cost of the steps in US dollars, where the step could price it.",
            ["namespace"],
            registry=r,
        )
        self.spend = Counter(
            "goalkeeper_action_spend_total",
            "Spend of paid actions booked in the monitors' ledgers.",
            ["namespace", "currency"],
            registry=r,
        )
        self.stops = Counter(
            "goalkeeper_stops_total",
            "Monitors stopped, by reason.",
            ["namespace", "reason"],
            registry=r,
        )
        self.errors = Counter(
            "goalkeeper_reconcile_errors_total",
            "Reconciles that failed, by kind of failure (transient, permanent, internal).",
            ["kind"],
            registry=r,
        )
        self.retries = Counter(
            "goalkeeper_reconcile_retries_total",
            "Reconciles retried after a failure.",
            registry=r,
        )
        self.leader = Gauge(
            "goalkeeper_leader", "1 while this replica reconciles, 0 while it waits.", registry=r
        )
        self.monitors = _MonitorsCollector()
        r.register(self.monitors)

    def record_decision(
        self,
        namespace: str,
        before: MonitorStatus,
        after: MonitorStatus,
        step_status: MonitorStepStatus | None = None,
    ) -> None:
        accepted = after.checks - before.checks
        if accepted > 0:
            observed = after.lastObservation
            route = observed.route.value if observed is not None else "unknown"
            self.checks.labels(namespace, route, "accepted").inc(accepted)
        rejected = after.invalidStreak - before.invalidStreak
        if rejected > 0:
            # A rejected result has no trustworthy route.
            self.checks.labels(namespace, "unknown", "rejected").inc(rejected)
        if before.monitor is not MonitorState.stopped and after.monitor is MonitorState.stopped:
            reason = after.stop.reason.value if after.stop is not None else "unknown"
            self.stops.labels(namespace, reason).inc()
        for currency, amount in _new_spend(before, after):
            self.spend.labels(namespace, currency).inc(amount)
        settled = before.step is not None and (
            after.step is None or after.step.seq != before.step.seq
        )
        if settled:
            assert before.step is not None
            self._record_step(namespace, before.step.kind.value, step_status)

    def _record_step(self, namespace: str, kind: str, step: MonitorStepStatus | None) -> None:
        if step is None or step.phase not in (StepPhase.Succeeded, StepPhase.Failed):
            # Settled without a result: its Job failed or vanished, or the spec changed.
            self.steps.labels(namespace, kind, "noResult").inc()
            return
        self.steps.labels(namespace, kind, step.phase.value.lower()).inc()
        if step.startedAt is not None and step.finishedAt is not None:
            seconds = (step.finishedAt - step.startedAt).total_seconds()
            self.step_duration.labels(kind).observe(max(seconds, 0.0))
        if step.usage is not None:
            self.tokens.labels(namespace, "input").inc(step.usage.inputTokens)
            self.tokens.labels(namespace, "output").inc(step.usage.outputTokens)
            if step.usage.costUsd is not None and step.usage.costUsd > 0:
                self.cost.labels(namespace).inc(float(step.usage.costUsd))

    def record_error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

    def record_retry(self) -> None:
        self.retries.inc()

    def set_monitor(self, namespace: str, name: str, status: MonitorStatus) -> None:
        self.monitors.set((namespace, name), status)

    def forget_monitor(self, namespace: str, name: str) -> None:
        self.monitors.forget((namespace, name))

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def value(self, name: str, **labels: str) -> float:
        """One sample's value (0 when absent): for tests and the command line."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found


def _new_spend(before: MonitorStatus, after: MonitorStatus) -> Iterator[tuple[str, float]]:
    """Ledger entries booked by this decision. Entries are never edited and the oldest are
    dropped first, so the new ones are exactly those the earlier ledger lacks."""
    for entry in after.spend.entries:
        if entry not in before.spend.entries and entry.cost.amount > 0:
            yield entry.cost.currency, float(entry.cost.amount)


METRICS = Metrics()


def record_decision(
    namespace: str,
    before: MonitorStatus,
    after: MonitorStatus,
    step_status: MonitorStepStatus | None = None,
) -> None:
    """Count one written decision: checks, rejections, stops, spend and a settled step."""
    METRICS.record_decision(namespace, before, after, step_status)


def record_error(kind: str) -> None:
    """A reconcile failed; `kind` is `transient` (worth a retry: 5xx, 429, timeouts),
    `permanent` (the API refused the request) or `internal` (a bug: any other exception)."""
    METRICS.record_error(kind)


def record_retry() -> None:
    """A failed reconcile is scheduled again (after its backoff)."""
    METRICS.record_retry()


def set_monitor(namespace: str, name: str, status: MonitorStatus) -> None:
    METRICS.set_monitor(namespace, name, status)


def forget_monitor(namespace: str, name: str) -> None:
    METRICS.forget_monitor(namespace, name)


def set_leader(leading: bool) -> None:
    METRICS.set_leader(leading)


def serve(port: int, host: str, metrics: Metrics | None = None) -> Any:
    """Serve /metrics on host:port from a thread; returns the server (`.shutdown()`)."""
    server, _ = start_http_server(port, host, registry=(metrics or METRICS).registry)
    return server
