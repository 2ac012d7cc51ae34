"""Progress tracks: a per-track rate and ETA estimator, and the lines that show them.

Each track key has its own estimator; nothing here ever combines tracks. An estimate uses
the last `MAX_INTERVALS` usable intervals between samples (so at most `MAX_SAMPLES`
samples). Pure: every function that needs the time takes `now`.

Rules, in short:

- A sample whose time is before the track's last accepted observation is stale: the whole
  observed track is ignored and the track keeps its state.
- A sample at the same time as the last accepted one adds no sample, and its value stays
  that of its time; its status, label and source ETA are taken, so a status the target
  reports without a new time still shows.
- A reset (completed going down, total or unit changing) restarts that track's samples.
- A track absent from an observation keeps its last state, marked stale, unless it had
  already reached a terminal status (`complete`, `failed`, `unknown`).
- The ETA is projected from the latest sample's time: earliest = remaining / high rate,
  latest = remaining / low rate (open-ended when the low rate is zero).
- Confidence: low with 1-2 intervals, a zero low rate, or high > 2 x low; high with >= 5
  intervals and high <= 1.5 x low; medium otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from goalkeeper.core.models import (
    TERMINAL_TRACK_STATUSES,
    TRACKS_MAX,
    Confidence,
    ProgressEstimate,
    ProgressSample,
    ProgressTrack,
    TrackState,
    TrackStatus,
)

MAX_INTERVALS = 8
MAX_SAMPLES = MAX_INTERVALS + 1
MAX_TRACKS = TRACKS_MAX  # the status keeps as many tracks as one observation may list
SUMMARY_LINE_MAX = 200
PROMPT_SUMMARY_MAX = 4000

# The model caps stored numbers at 1e15; an ETA further out than this is not an estimate.
_NUMBER_MAX = 1e15
_ETA_HORIZON = timedelta(days=3650)

# Statuses for which a measured ETA makes sense; the others say why there is none.
_ETA_STATUSES = frozenset({TrackStatus.running, TrackStatus.waiting})
_NO_ETA_REASON: dict[TrackStatus, str] = {
    TrackStatus.idle: "track is idle",
    TrackStatus.paused: "track is paused",
    TrackStatus.blocked: "track is blocked",
    TrackStatus.failed: "track failed",
    TrackStatus.complete: "track is complete",
    TrackStatus.unknown: "track state unknown",
}

REASON_NO_VALUE = "no completed value reported"
REASON_NO_TOTAL = "no total reported"
REASON_NEED_SAMPLES = "no rate yet, needs two samples"
REASON_TOTAL_REACHED = "total reached"
REASON_NO_PROGRESS = "no progress since last check"
REASON_TOO_SLOW = "rate too low for an estimate"

ETA_PASSED = "ETA passed; awaiting next check"
OVERALL_KEY = "overall"

# Display priority when not every track fits: overall, failed/blocked, active, the rest.
_PROBLEM_STATUSES = frozenset({TrackStatus.failed, TrackStatus.blocked})
_ACTIVE_STATUSES = frozenset({TrackStatus.running, TrackStatus.waiting})

_EN_DASH = "\u2013"
_ELLIPSIS = "\u2026"


# --- the estimator -----------------------------------------------------------------------


def update_tracks(
    previous: Sequence[TrackState],
    observed: Sequence[ProgressTrack] | None,
    now: datetime,
) -> list[TrackState]:
    """Fold one observation's progress tracks into the remembered ones.

    `observed=None` means the observation reported no progress: every remembered track
    that had not reached a terminal status goes stale. Order is first-seen order.
    """
    now = as_utc(now)
    seen: dict[str, ProgressTrack] = {}
    for track in observed or ():
        seen.setdefault(track.key, track)

    result: list[TrackState] = []
    known: set[str] = set()
    for prev in previous:
        if prev.key in known:
            continue
        known.add(prev.key)
        obs = seen.get(prev.key)
        if obs is None:
            result.append(_missing(prev))
        else:
            result.append(_advance(prev, obs, now))
    for key, obs in seen.items():
        if key not in known:
            known.add(key)
            result.append(_first(obs, now))
    return _bounded(result, set(seen))


def _missing(prev: TrackState) -> TrackState:
    if prev.status in TERMINAL_TRACK_STATUSES or prev.stale:
        return prev
    return prev.model_copy(update={"stale": True})


def _sample_time(obs: ProgressTrack, now: datetime) -> datetime:
    # A time after `now` cannot have been observed yet; clamping it keeps one bad
    # timestamp from making every later real sample look stale.
    return min(as_utc(obs.observedAt), now)


def _first(obs: ProgressTrack, now: datetime) -> TrackState:
    at = _sample_time(obs, now)
    samples = [] if obs.completed is None else [ProgressSample(at=at, completed=obs.completed)]
    return _with_estimate(obs, at, samples)


def _advance(prev: TrackState, obs: ProgressTrack, now: datetime) -> TrackState:
    at = _sample_time(obs, now)
    last_at = as_utc(prev.observedAt)
    if prev.samples:
        last_at = max(last_at, as_utc(prev.samples[-1].at))
    if at < last_at:
        return prev  # stale sample: ignored, the track keeps its state
    if at == last_at:
        return _restated(prev, obs)
    samples = [] if _is_reset(prev, obs) else list(prev.samples)
    if obs.completed is not None:
        samples.append(ProgressSample(at=at, completed=obs.completed))
    return _with_estimate(obs, at, samples[-MAX_SAMPLES:])


def _restated(prev: TrackState, obs: ProgressTrack) -> TrackState:
    """`prev` with what an observation at its own time says now: the status, label and
    source ETA. A rate needs time to pass, so the value and samples stay as they were."""
    held = obs.model_copy(
        update={"completed": prev.completed, "total": prev.total, "unit": prev.unit}
    )
    return _with_estimate(held, as_utc(prev.observedAt), list(prev.samples))


def _is_reset(prev: TrackState, obs: ProgressTrack) -> bool:
    if obs.unit != prev.unit or obs.total != prev.total:
        return True
    if obs.completed is not None and prev.samples:
        return obs.completed < prev.samples[-1].completed
    return False


def _with_estimate(obs: ProgressTrack, at: datetime, samples: list[ProgressSample]) -> TrackState:
    estimate, reason = _estimate(obs, samples)
    return TrackState(
        key=obs.key,
        label=obs.label,
        status=obs.status,
        completed=obs.completed,
        total=obs.total,
        unit=obs.unit,
        sourceEta=None if obs.sourceEta is None else as_utc(obs.sourceEta),
        observedAt=at,
        stale=False,
        samples=samples,
        estimate=estimate,
        etaUnavailable=reason,
    )


def _rates_per_second(samples: Sequence[ProgressSample]) -> list[float]:
    rates: list[float] = []
    for before, after in pairwise(samples):
        seconds = (as_utc(after.at) - as_utc(before.at)).total_seconds()
        if seconds <= 0:
            continue  # not a usable interval
        rates.append(max(0.0, float(after.completed) - float(before.completed)) / seconds)
    return rates[-MAX_INTERVALS:]


def _confidence(rates: Sequence[float]) -> Confidence:
    low, high = min(rates), max(rates)
    if len(rates) <= 2 or low <= 0 or high > 2 * low:
        return Confidence.low
    if len(rates) >= 5 and high <= 1.5 * low:
        return Confidence.high
    return Confidence.medium


def _rate_unit(high_per_second: float) -> tuple[str, float]:
    """The largest readable unit: per minute when at least 1/minute, else hour, else day."""
    if high_per_second * 60 >= 1:
        return "minute", 60.0
    if high_per_second * 3600 >= 1 or high_per_second == 0:
        return "hour", 3600.0
    return "day", 86400.0


def _estimate(
    obs: ProgressTrack, samples: Sequence[ProgressSample]
) -> tuple[ProgressEstimate | None, str | None]:
    rates = _rates_per_second(samples)
    estimate: ProgressEstimate | None = None
    if rates:
        low, high = min(rates), max(rates)
        per, seconds = _rate_unit(high)
        estimate = ProgressEstimate(
            rateLow=min(low * seconds, _NUMBER_MAX),
            rateHigh=min(high * seconds, _NUMBER_MAX),
            ratePer=per,
            confidence=_confidence(rates),
            intervals=len(rates),
        )

    if obs.status not in _ETA_STATUSES:
        return estimate, _NO_ETA_REASON[obs.status]
    if obs.completed is None:
        return estimate, REASON_NO_VALUE
    if obs.total is None:
        return estimate, REASON_NO_TOTAL
    if estimate is None:
        return None, REASON_NEED_SAMPLES
    remaining = float(obs.total) - float(obs.completed)
    if remaining <= 0:
        return estimate, REASON_TOTAL_REACHED
    if rates[-1] <= 0:
        return estimate, REASON_NO_PROGRESS
    low, high = min(rates), max(rates)
    horizon = _ETA_HORIZON.total_seconds()
    earliest_s = remaining / high
    if not math.isfinite(earliest_s) or earliest_s > horizon:
        return estimate, REASON_TOO_SLOW
    anchor = as_utc(samples[-1].at)
    earliest = anchor + timedelta(seconds=earliest_s)
    latest: datetime | None = None
    if low > 0 and remaining / low <= horizon:
        latest = anchor + timedelta(seconds=remaining / low)
    estimate = estimate.model_copy(update={"etaEarliest": earliest, "etaLatest": latest})
    return estimate, None


def _bounded(tracks: list[TrackState], observed_keys: set[str]) -> list[TrackState]:
    """Keep at most MAX_TRACKS, dropping settled then stale absent tracks, oldest first."""
    excess = len(tracks) - MAX_TRACKS
    if excess <= 0:
        return tracks
    absent = [t for t in tracks if t.key not in observed_keys]
    absent.sort(key=lambda t: (t.status not in TERMINAL_TRACK_STATUSES, as_utc(t.observedAt)))
    dropped = {t.key for t in absent[:excess]}
    kept = [t for t in tracks if t.key not in dropped]
    return kept[:MAX_TRACKS]


# --- display -----------------------------------------------------------------------------


def track_priority(track: TrackState) -> int:
    """Display rank when not all tracks fit: overall, failed/blocked, active, the rest."""
    if track.key == OVERALL_KEY:
        return 0
    if track.stale:
        return 4
    if track.status in _PROBLEM_STATUSES:
        return 1
    if track.status in _ACTIVE_STATUSES:
        return 2
    return 3


def by_priority(tracks: Sequence[TrackState]) -> list[TrackState]:
    """Tracks in display priority, first-seen order within a rank."""
    return sorted(tracks, key=track_priority)


def absolute_value(track: TrackState) -> str:
    """The observed value, e.g. `21/27 modules`; never a derived number."""
    unit = f" {one_line(track.unit)}" if track.unit.strip() else ""
    if track.completed is None:
        if track.total is None:
            return "value unavailable"
        return f"?/{format_number(track.total)}{unit}"
    if track.total is None:
        return f"{format_number(track.completed)}{unit}"
    return f"{format_number(track.completed)}/{format_number(track.total)}{unit}"


def summary_line(tracks: Sequence[TrackState]) -> str:
    """One short line for `kubectl get`, e.g. `21/27 modules (+2 tracks)`."""
    if not tracks:
        return ""
    lead = next((t for t in tracks if not t.stale), tracks[0])
    text = (
        absolute_value(lead)
        if lead.completed is not None
        else f"{one_line(lead.label)} {lead.status}"
    )
    if lead.stale:
        text += " (stale)"
    if len(tracks) > 1:
        others = len(tracks) - 1
        text += f" (+{others} track{'s' if others != 1 else ''})"
    return clip(text, SUMMARY_LINE_MAX)


def track_parts(track: TrackState, now: datetime) -> list[str]:
    """The pieces of a track line, in display order: absolute value first, then stale and
    status (ahead of any rate detail), delta, rate range, and the ETA or why there is none."""
    now = as_utc(now)
    parts = [absolute_value(track)]
    if track.stale:
        parts.append(f"stale: missing from the latest check, last seen {_when(track.observedAt)}")
    if track.status is not TrackStatus.running:
        parts.append(track.status.value)
    delta = _delta(track)
    if delta is not None:
        parts.append(f"+{format_number(delta)} since last check")
    if track.estimate is not None:
        parts.append(f"rate {_rate(track.estimate, track.unit)}")
    eta = _eta_text(track, now)
    if eta:
        parts.append(eta)
    return parts


def describe_track(track: TrackState, now: datetime) -> str:
    """One line: label, absolute value, state, delta, rate range, then the ETA."""
    return f"{one_line(track.label)}: " + "; ".join(track_parts(track, now))


def prompt_summary(tracks: Sequence[TrackState], now: datetime) -> str:
    """Previous progress and estimates for the next observe step, one line per track."""
    if not tracks:
        return ""
    lines = [f"- {describe_track(t, now)}" for t in tracks]
    text = "\n".join(lines)
    if len(text) <= PROMPT_SUMMARY_MAX:
        return text
    return fit_track_lines(by_priority(tracks), now, PROMPT_SUMMARY_MAX, prefix="- ")


def fit_track_lines(
    ordered: Sequence[TrackState], now: datetime, budget: int, *, prefix: str
) -> str:
    """As many track lines as fit in `budget`, in the given order, then the omitted count."""
    kept: list[str] = []
    used = 0
    for index, track in enumerate(ordered):
        line = clip(prefix + describe_track(track, now), max(budget, 1))
        remaining = len(ordered) - index - 1
        reserve = len(prefix) + len(omitted_line(remaining)) + 1 if remaining else 0
        cost = len(line) + (1 if kept else 0)
        if used + cost + reserve > budget:
            break
        kept.append(line)
        used += cost
    omitted = len(ordered) - len(kept)
    if omitted:
        kept.append(prefix + omitted_line(omitted))
    return clip("\n".join(kept), budget)


def omitted_line(count: int) -> str:
    return f"{_ELLIPSIS} {count} more track{'s' if count != 1 else ''} omitted"


def one_line(text: str) -> str:
    """Target-supplied text (labels, units) on one line: it never starts a line of its own."""
    return " ".join(text.split())


def _delta(track: TrackState) -> float | int | None:
    if track.completed is None or len(track.samples) < 2:
        return None
    last, before = track.samples[-1], track.samples[-2]
    if last.completed != track.completed:
        return None
    return max(0, last.completed - before.completed)


def _rate(estimate: ProgressEstimate, unit: str) -> str:
    low, high = format_rate(estimate.rateLow), format_rate(estimate.rateHigh)
    span = low if low == high else f"{low}{_EN_DASH}{high}"
    unit = one_line(unit)
    per = f"{unit}/{estimate.ratePer}" if unit else f"per {estimate.ratePer}"
    return f"{span} {per}"


def _eta_text(track: TrackState, now: datetime) -> str:
    pieces: list[str] = []
    estimate = track.estimate
    if estimate is not None and estimate.etaEarliest is not None:
        pieces.append(_measured_eta(estimate, now))
    if track.sourceEta is not None:
        source = as_utc(track.sourceEta)
        if now > source:
            pieces.append(f"source ETA {_when(source)} passed; awaiting next check")
        else:
            pieces.append(f"source ETA {_when(source)} (in {format_duration(source - now)})")
    if not pieces and track.status is not TrackStatus.complete:
        reason = track.etaUnavailable or REASON_NEED_SAMPLES
        pieces.append(f"ETA unavailable: {reason}")
    return "; ".join(pieces)


def _measured_eta(estimate: ProgressEstimate, now: datetime) -> str:
    assert estimate.etaEarliest is not None
    earliest = as_utc(estimate.etaEarliest)
    confidence = f"{estimate.confidence.value} confidence"
    if estimate.etaLatest is None:
        if now > earliest:
            return f"ETA after {_when(earliest)} (no upper bound, {confidence})"
        return (
            f"ETA after {_when(earliest)} "
            f"(at least {format_duration(earliest - now)}, no upper bound, {confidence})"
        )
    latest = as_utc(estimate.etaLatest)
    if now > latest:
        return ETA_PASSED
    when = _when_range(earliest, latest)
    if now >= earliest:
        countdown = f"within {format_duration(latest - now)}"
    elif earliest == latest:
        countdown = f"in {format_duration(earliest - now)}"
    else:
        countdown = f"in {format_duration(earliest - now)}{_EN_DASH}{format_duration(latest - now)}"
    return f"ETA {when} ({countdown}, {confidence})"


# --- formatting helpers ------------------------------------------------------------------


def format_number(value: float | int) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{int(value):,}"


def format_rate(value: float | int) -> str:
    v = float(value)
    if v == 0:
        return "0"
    if v < 0.01:
        return "<0.01"
    if v >= 100:
        return f"{v:,.0f}"
    digits = 1 if v >= 10 else 2
    return f"{v:,.{digits}f}".rstrip("0").rstrip(".")


def format_duration(delta: timedelta) -> str:
    """A non-negative duration, short: `<1m`, `45m`, `3h 10m`, `2d 4h`."""
    minutes = max(0, int(delta.total_seconds() // 60))
    if minutes < 1:
        return "<1m"
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {mins}m" if mins else f"{hours}h"
    return f"{mins}m"


def _when(moment: datetime) -> str:
    return as_utc(moment).strftime("%Y-%m-%d %H:%M UTC")


def _when_range(earliest: datetime, latest: datetime) -> str:
    a, b = as_utc(earliest), as_utc(latest)
    if a.strftime("%Y-%m-%d %H:%M") == b.strftime("%Y-%m-%d %H:%M"):
        return _when(a)
    if a.date() == b.date():
        return f"{a.strftime('%Y-%m-%d %H:%M')}{_EN_DASH}{b.strftime('%H:%M')} UTC"
    return f"{_when(a)} {_EN_DASH} {_when(b)}"


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC, the same instant; a naive time is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def clip(text: str, limit: int) -> str:
    """`text` within `limit` characters, an ellipsis marking a cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + _ELLIPSIS
