"""An OTLP/HTTP trace receiver on 127.0.0.1: what a collector would get, decoded."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.raw: list[bytes] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver._take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            service=str(attrs.get("service.name", "")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self._lock:
            self.raw.append(body)
            self.spans.extend(found)

    def received(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def all_bytes(self) -> bytes:
        with self._lock:
            return b"".join(self.raw)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
