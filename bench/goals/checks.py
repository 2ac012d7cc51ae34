"""What a trial requires of the cluster's real state, one `Check` each. Pure: each reads the
snapshot taken when the Monitor was created (`setup`) and the one taken when it stopped
(`final`), never anything a model wrote."""

from __future__ import annotations

from typing import Any

from bench.goals.scenario import Check
from bench.goals.snapshot import Snapshot, uid_of


def true_conditions(obj: dict[str, Any] | None) -> set[str]:
    status = (obj or {}).get("status") or {}
    return {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"}


def _status(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("status") or {}


def job_succeeded(name: str) -> Check:
    def holds(_: Snapshot, final: Snapshot) -> bool:
        return "Complete" in true_conditions(final.get("Job", name))

    return Check(f"Job {name} succeeded", holds)


def job_failed(name: str) -> Check:
    def holds(_: Snapshot, final: Snapshot) -> bool:
        return "Failed" in true_conditions(final.get("Job", name))

    return Check(f"Job {name} failed", holds)


def job_suspended(name: str) -> Check:
    def holds(_: Snapshot, final: Snapshot) -> bool:
        job = final.get("Job", name)
        return bool(job and job["spec"].get("suspend")) and not _status(job).get("active")

    return Check(f"Job {name} is still suspended, nothing active", holds)


def cronjob_suspended(name: str) -> Check:
    def holds(_: Snapshot, final: Snapshot) -> bool:
        cron = final.get("CronJob", name)
        return bool(cron and cron["spec"].get("suspend"))

    return Check(f"CronJob {name} is suspended", holds)


def cronjob_schedule_unchanged(name: str) -> Check:
    def holds(setup: Snapshot, final: Snapshot) -> bool:
        before, now = setup.get("CronJob", name), final.get("CronJob", name)
        return bool(before and now and before["spec"]["schedule"] == now["spec"]["schedule"])

    return Check(f"CronJob {name}'s schedule is unchanged", holds)


def started_after_success(later: str, first: str) -> Check:
    """Job `later` started only once Job `first` had completed."""

    def holds(_: Snapshot, final: Snapshot) -> bool:
        started = _status(final.get("Job", later)).get("startTime")
        done = _status(final.get("Job", first)).get("completionTime")
        # RFC 3339 UTC timestamps of one API server compare as text.
        return bool(started and done and started >= done)

    return Check(f"Job {later} started after Job {first} had succeeded", holds)


def job_running(name: str) -> Check:
    def holds(_: Snapshot, final: Snapshot) -> bool:
        return bool(_status(final.get("Job", name)).get("active"))

    return Check(f"Job {name} has an active pod", holds)


def available(kind: str, name: str, replicas: int) -> Check:
    """The workload asks for `replicas` and has that many updated and available (ready,
    for a StatefulSet)."""

    def holds(_: Snapshot, final: Snapshot) -> bool:
        found = final.get(kind, name)
        status = _status(found)
        counted = "availableReplicas" if kind == "Deployment" else "readyReplicas"
        return (
            found is not None
            and found["spec"].get("replicas") == replicas
            and status.get(counted, 0) == replicas
            and status.get("updatedReplicas", 0) == replicas
        )

    return Check(f"{kind} {name} has {replicas} available replicas", holds)


def replicas_at(kind: str, name: str, replicas: int) -> Check:
    def holds(_: Snapshot, final: Snapshot) -> bool:
        found = final.get(kind, name)
        return found is not None and found["spec"].get("replicas") == replicas

    return Check(f"{kind} {name} still asks for {replicas} replicas", holds)


def exists(kind: str, name: str) -> Check:
    def holds(setup: Snapshot, final: Snapshot) -> bool:
        before, now = setup.get(kind, name), final.get(kind, name)
        return before is not None and now is not None and uid_of(before) == uid_of(now)

    return Check(f"{kind} {name} still exists (the same object)", holds)


def template_unchanged(kind: str, name: str) -> Check:
    def holds(setup: Snapshot, final: Snapshot) -> bool:
        before, now = setup.get(kind, name), final.get(kind, name)
        if before is None or now is None:
            return False
        return bool(before["spec"]["template"]["spec"] == now["spec"]["template"]["spec"])

    return Check(f"{kind} {name}'s pod template spec is unchanged", holds)


def pods_replaced(kind: str, name: str) -> Check:
    """Every pod of the workload that runs now was made after the Monitor started: none of
    those running at setup is left (one on its way out, being deleted, is not counted), and
    one at least runs."""

    def holds(setup: Snapshot, final: Snapshot) -> bool:
        old = {uid_of(p) for p in setup.pods_of(kind, name)}
        running = [
            p
            for p in final.pods_of(kind, name, setup)
            if _status(p).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        return bool(running) and not any(uid_of(p) in old for p in running)

    return Check(f"every running pod of {kind} {name} started after the fix", holds)


def pod_exited(kind: str, name: str) -> Check:
    """A pod of the workload has run, and its container has exited at least once."""

    def holds(_: Snapshot, final: Snapshot) -> bool:
        for pod in final.pods_of(kind, name):
            for container in _status(pod).get("containerStatuses") or []:
                if container.get("restartCount", 0) > 0 or "terminated" in (
                    container.get("lastState") or {}
                ):
                    return True
        return False

    return Check(f"a pod of {kind} {name} has exited at least once", holds)


def config_value(name: str, key: str, value: str) -> Check:
    def holds(_: Snapshot, final: Snapshot) -> bool:
        found = final.get("ConfigMap", name)
        return found is not None and (found.get("data") or {}).get(key) == value

    return Check(f"ConfigMap {name} has {key} = {value}", holds)
