"""Which trace a step's spans belong to: one trace per check, its id derived from the
Monitor's uid, its run and the check, so the operator and every step of that check name
the same trace without telling each other anything but the W3C `traceparent`. Pure."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$")
# Where the standard OpenTelemetry variables say traces go.
ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_configured(environ: Mapping[str, str]) -> bool:
    """Whether `environ` names an OTLP endpoint and does not turn the SDK off."""
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return not disabled and any(environ.get(name, "").strip() for name in ENDPOINTS)


@dataclass(frozen=True)
class CheckTrace:
    """A check's trace id and the id of its root span (the operator's), both in hex."""

    trace_id: str
    root_span_id: str

    @property
    def traceparent(self) -> str:
        """The W3C header that makes a step's spans children of the check's root span."""
        return f"00-{self.trace_id}-{self.root_span_id}-01"


def check_trace(monitor_uid: str, run: int, check: int) -> CheckTrace:
    """The trace of check `check` of run `run` (1 for a Monitor's first) of a Monitor."""
    digest = hashlib.sha256(f"goalkeeper/{monitor_uid}/run{run}/check{check}".encode()).digest()
    trace_id, span_id = digest[:16].hex(), digest[16:24].hex()
    # All-zero ids are invalid in W3C trace context; a digest of zeros is not to be met.
    return CheckTrace(trace_id, span_id)


def trace_of(traceparent: str | None) -> str | None:
    """The trace id a `traceparent` header names, or None for none or a malformed one."""
    found = TRACEPARENT.match((traceparent or "").strip())
    if found is None or set(found.group(1)) == {"0"} or set(found.group(2)) == {"0"}:
        return None
    return found.group(1)
