"""When the next check starts: the timer of the wait route, a retry after a failed or
invalid check, a watched target's change, and the person's pause, resume and check-now."""

from __future__ import annotations

from datetime import datetime, timedelta
from hashlib import sha256

from goalkeeper.core import wakes
from goalkeeper.core.events import LaunchStep, PublishSchedule
from goalkeeper.core.models import Schedule, StepKind, WatchTarget
from goalkeeper.core.progress import clip
from goalkeeper.core.turn.launches import Launching

CHECK_NOW_WOKEN = "a check asked for with goalkeeper.dev/check-now"
RESUMED_WOKEN = "the monitor resumed (goalkeeper.dev/paused removed)"
# A retry waits between this share of its delay and the whole of it, so that monitors
# failing together do not retry together.
JITTER_LOW = 0.75


def retry_delay(first: timedelta, failures: int, cap: timedelta, seed: int) -> timedelta:
    """How long the `failures`-th failure in a row waits before its retry: `first`,
    doubling with each failure, at most `cap`, jittered by `seed` (the same seed, the same
    delay: the engine has no randomness of its own)."""
    raw = first * (2 ** min(max(failures - 1, 0), 32))
    digest = sha256(str(seed).encode()).digest()
    share = JITTER_LOW + (1 - JITTER_LOW) * int.from_bytes(digest[:4]) / 2**32
    delay: timedelta = min(raw, cap) * share
    return delay


class Scheduling(Launching):
    def publish_schedule(
        self, last_check: datetime | None = None, watch: list[WatchTarget] | None = None
    ) -> None:
        """The next check, `everyMinutes` after the last one (by default: now), and the
        objects whose change may start it sooner."""
        if self.paused:
            self.pause()
            return
        last = self.now if last_check is None else last_check
        watched, left = wakes.wakeable(watch or ())
        next_at = last + self.spec.everyMinutes * self.policy.minute
        schedule = Schedule(
            lastCheckAt=last,
            nextCheckAt=next_at,
            everyMinutes=self.spec.everyMinutes,
            watch=watched,
            description=wakes.schedule_text(next_at, watched, left),
        )
        self.status.schedule = schedule
        self.effects.append(PublishSchedule(schedule))

    def retry_later(self, failures: int, why: str) -> None:
        """Check again after a growing, jittered delay: a failed or invalid check never
        ends the run by itself, and never retries back to back."""
        if self.paused:
            self.pause()
            return
        cap = self.spec.everyMinutes * self.policy.minute
        delay = retry_delay(self.policy.retry_first, failures, cap, self.status.stepSeq)
        next_at = self.now + delay
        schedule = Schedule(
            lastCheckAt=self.now,
            nextCheckAt=next_at,
            everyMinutes=self.spec.everyMinutes,
            description=clip(
                f"Retrying at {next_at.isoformat()} (after {delay.total_seconds():.0f} s): {why}",
                1000,
            ),
        )
        self.status.schedule = schedule
        self.effects.append(PublishSchedule(schedule))

    def edited_while_waiting(self, schedule: Schedule) -> None:
        """A spec edit takes effect at once: a lowered limit stops now, a new interval
        moves the pending check (counted from the last check)."""
        if self.limit_reached():
            self.stop_at_limit()
            return
        if schedule.everyMinutes != self.spec.everyMinutes:
            self.publish_schedule(last_check=schedule.lastCheckAt, watch=schedule.watch)

    def timer_fired(self) -> None:
        schedule = self.status.schedule
        if self.status.step is not None or schedule is None or self.status.pausedAt:
            return
        if self.now >= schedule.nextCheckAt:
            config = self.status.modelConfig
            self.launch_observe()
            # Nothing but an observe step's launch (no stop at a limit or a cap, no reading
            # of an edited task first, the same model config): no write is needed.
            self.unrecorded = [
                effect.kind if isinstance(effect, LaunchStep) else None for effect in self.effects
            ] == [StepKind.observe] and self.status.modelConfig == config
        elif schedule.wakeAt is not None and self.now >= schedule.wakeAt:
            self.wake(schedule.wokenBy)

    def woken(self, target: WatchTarget, change: str) -> None:
        """A watched target changed: check now, or once the wake interval since the last
        early check has passed. Only a waiting monitor wakes, and only for what it watches."""
        st = self.status
        schedule = st.schedule
        if st.step is not None or schedule is None or target not in schedule.watch:
            return
        if st.pausedAt is not None:
            return
        what = wakes.wake_text(target, change)
        interval = self.policy.wake_interval
        earliest = st.lastWakeAt + interval if st.lastWakeAt is not None else None
        if earliest is None or self.now >= earliest:
            self.wake(what)
        elif schedule.wakeAt is None:
            schedule.wakeAt = earliest
            schedule.wokenBy = what

    def wake(self, what: str) -> None:
        # Recorded, unlike a timer's launch: nothing else would find why it started.
        self.status.lastWakeAt = self.now
        self.launch_observe(woken_by=what)

    def controls_changed(self) -> None:
        """Take the person's pause, resume or check-now, as the annotations set them now."""
        st = self.status
        controls = self.context.controls
        idle = st.step is None and st.approval is None
        asked = bool(controls.check_now) and controls.check_now != st.checkNowHandled
        if asked:
            st.checkNowHandled = controls.check_now
        if controls.paused:
            self.pause()
            return
        if st.pausedAt is not None:
            if st.approval is not None:
                # The person's window does not run while paused.
                st.approval.expiresAt += self.now - st.pausedAt
            st.pausedAt = None
            self.notify(
                f"resumed-{st.stepSeq}",
                "Resumed",
                "Resumed: goalkeeper.dev/paused was removed; checking now."
                if idle
                else "Resumed: goalkeeper.dev/paused was removed.",
            )
            if idle:
                self.launch_observe(woken_by=RESUMED_WOKEN)
            return
        if asked and idle and st.schedule is not None:
            self.launch_observe(woken_by=CHECK_NOW_WOKEN)
