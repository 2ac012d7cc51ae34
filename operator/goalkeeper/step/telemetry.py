"""The step's traces: when an OTLP endpoint is configured (the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), one span for the step,
a child of the check's root span that the operator names in `TRACEPARENT`, and under it
pydantic-ai's `invoke_agent`, `chat` and `execute_tool` spans with the GenAI conventions'
attributes (`gen_ai.usage.input_tokens`, ...). Prompts, answers and tool arguments are left
out unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (the conventions' own
switch). The exporter's errors are its own: a collector that is down costs the step at most
the flush timeout, never its result.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from goalkeeper.core.traces import trace_of, tracing_configured

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
FLUSH_MILLIS = 5000
# Attributes pydantic-ai sets whatever `include_content` says, which carry the words of the
# task: the tools' and the answer's definitions (action ids and descriptions read from it).
CONTENT_ATTRIBUTES = frozenset({"gen_ai.tool.definitions", "model_request_parameters"})


def configured(environ: Mapping[str, str] | None = None) -> bool:
    return tracing_configured(os.environ if environ is None else environ)


def capture_content(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(CAPTURE_CONTENT, "").strip().lower() == "true"


@contextlib.contextmanager
def traced(kind: str, namespace: str, name: str) -> Iterator[str | None]:
    """Trace what runs inside as step `name` of `kind`; yields the trace id (None when
    tracing is off or `TRACEPARENT` names no trace)."""
    traceparent = os.environ.get("TRACEPARENT")
    if not configured():
        yield trace_of(traceparent)
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    from pydantic_ai import Agent, InstrumentationSettings

    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "goalkeeper-step",
            "k8s.namespace.name": namespace,
            "k8s.pod.name": os.environ.get("HOSTNAME", ""),
        }
    )
    content = capture_content()
    exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(exporter if content else _without_content(exporter))
    )
    Agent.instrument_all(
        InstrumentationSettings(
            tracer_provider=provider,
            include_content=content,
            include_model_request_parameters=content,
        )
    )
    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent or ""})
    tracer = provider.get_tracer("goalkeeper.step")
    try:
        with tracer.start_as_current_span(
            f"goalkeeper.step {kind}",
            context=parent,
            attributes={"goalkeeper.step.kind": kind, "goalkeeper.step.name": name},
        ) as span:
            yield format(span.get_span_context().trace_id, "032x")
    finally:
        Agent.instrument_all(False)
        provider.force_flush(FLUSH_MILLIS)
        provider.shutdown()


def _without_content(exporter: Any) -> Any:
    """`exporter`, handed each span without `CONTENT_ATTRIBUTES`."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

    def stripped(span: ReadableSpan) -> ReadableSpan:
        attributes = dict(span.attributes or {})
        if not CONTENT_ATTRIBUTES & attributes.keys():
            return span
        return ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes={k: v for k, v in attributes.items() if k not in CONTENT_ATTRIBUTES},
            events=span.events,
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    class WithoutContent(SpanExporter):
        def export(self, spans: Any) -> Any:
            return exporter.export([stripped(span) for span in spans])

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            flushed: bool = exporter.force_flush(timeout_millis)
            return flushed

    return WithoutContent()
