"""The operator's traces: one root span per check, exported over OTLP/HTTP when the
standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set.

Every step of a check runs with `TRACEPARENT` naming the check's trace and root span
(core/traces.py), so its spans hang under the root span this module emits once the check is
accepted, with the ids both sides derive from the Monitor's uid, generation and check
number. Nothing of a task, a report or a prompt is exported: names, numbers and outcomes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from goalkeeper.core.traces import ENDPOINTS, CheckTrace, check_trace, tracing_configured

log = logging.getLogger("goalkeeper.telemetry")

# What the steps get of the operator's tracing settings. Exporter headers are left out: a
# Job spec is readable by many and they may hold a collector's token.
STEP_SETTINGS = (
    *ENDPOINTS,
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)
FLUSH_MILLIS = 5000


def configured(environ: Mapping[str, str] | None = None) -> bool:
    return tracing_configured(os.environ if environ is None else environ)


def step_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tracing settings a step runs with: none unless the operator traces."""
    env = os.environ if environ is None else environ
    if not configured(env):
        return {}
    return {name: env[name] for name in STEP_SETTINGS if env.get(name, "").strip()}


class CheckSpans:
    """Emits each check's root span; does nothing when tracing is off."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.enabled = configured(environ)
        self.step_env = step_settings(environ)
        self._processor: Any = None
        self._resource: Any = None
        if not self.enabled:
            return
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        env = os.environ if environ is None else environ
        self._resource = Resource.create(
            {"service.name": env.get("OTEL_SERVICE_NAME") or "goalkeeper-operator"}
        )
        self._processor = BatchSpanProcessor(OTLPSpanExporter())

    def trace(self, monitor_uid: str, generation: int | None, check: int) -> CheckTrace | None:
        return check_trace(monitor_uid, generation or 0, check) if self.enabled else None

    def check(
        self,
        trace: CheckTrace,
        *,
        namespace: str,
        monitor: str,
        check: int,
        started: datetime,
        ended: datetime,
        attributes: Mapping[str, str | int],
    ) -> None:
        """The check's root span, with the ids its steps' spans name as their parent."""
        if self._processor is None:
            return
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        context = SpanContext(
            trace_id=int(trace.trace_id, 16),
            span_id=int(trace.root_span_id, 16),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        start = int(started.timestamp() * 1e9)
        span = ReadableSpan(
            name=f"goalkeeper.check {check}",
            context=context,
            parent=None,
            resource=self._resource,
            attributes={
                "k8s.namespace.name": namespace,
                "goalkeeper.monitor": monitor,
                "goalkeeper.check": check,
                **attributes,
            },
            kind=SpanKind.INTERNAL,
            status=Status(StatusCode.OK),
            start_time=start,
            end_time=max(start, int(ended.timestamp() * 1e9)),
            instrumentation_scope=InstrumentationScope("goalkeeper.operator"),
        )
        self._processor.on_end(span)

    def close(self) -> None:
        if self._processor is not None:
            self._processor.force_flush(FLUSH_MILLIS)
            self._processor.shutdown()
