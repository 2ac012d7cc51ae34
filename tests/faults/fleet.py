"""The fleet under fault: Monitors, each with a scripted target (a Job and a ConfigMap named
after it), one scripted model that answers every monitor's steps, and the invariants read
back from the cluster afterwards.

Every monitor's script is the same four checks, chosen by the check number in the step's
prompt so that faults change the timing only, never the decisions:

    check 1  act: resume the suspended Job          (an act step)
    check 2  wait: the Job is running               (the wait timer)
    check 3  act: repair the build configuration    (the repair workflow)
    check 4  stop: goalComplete

The model still tells the truth about the Job it read, as the engine holds it to: a Job a
fault left suspended (its resume lost with a killed act step) is resumed at that check.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.e2e.harness import GROUP, VERSION, _is_observe, _results_since_user, is_reading
from tests.support.model_server import Final, Reply, ToolCalls, call
from tests.support.observations import action, contract, extraction, observation_dict

CHECKS = 4  # accepted checks each monitor makes before it stops goalComplete
# The StepFailed event of an act or repair step: its kind and seq.
UNMADE = re.compile(r"^The (act|repair) step (\d+) ")
EVERY_MINUTES = 1
MONITOR = re.compile(r"Monitor (fleet-[a-z0-9-]+) of the fault suite")
OBSERVE_CHECK = re.compile(r"^Check (\d+) of at most", re.M)
ACT_CHECK = re.compile(r"^Check: (\d+)$", re.M)


def task(name: str) -> str:
    return (
        f"Monitor {name} of the fault suite: Job {name} in this namespace must complete. You "
        f"may resume Job {name} (spec.suspend=false). You may fix a configuration defect "
        "through the repair workflow. Do not change anything else."
    )


def reading(name: str, namespace: str) -> dict[str, Any]:
    """What the task reading finds in `task(name)`: the grants `FleetModel` acts on."""
    first, grant, fix = task(name).split(". ")[:3]
    grant, fix = f"{grant}.", f"{fix}."
    return extraction(
        allowedSystems=[{"entry": f"Job {name} in namespace {namespace}", "quote": first}],
        allowedResources=[{"entry": f"jobs/{name}", "quote": grant}],
        allowedRecoveryActions=[{"entry": "resume the build Job", "quote": grant}],
        authorizedActions=[
            {"id": "resume-build", "description": f"Resume Job {name}.", "quote": grant},
            {
                "id": "fix-config",
                "description": f"Hand a configuration defect of Job {name} to the repair workflow.",
                "quote": fix,
            },
        ],
    )


def monitor(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "task": task(name),
            "stopWhen": f"Stop when Job {name} has succeeded and its configuration is repaired.",
            "everyMinutes": EVERY_MINUTES,
            "maxChecks": 20,
        },
    }


def target_job(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"fleet": name}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"fleet": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "work",
                            "image": "python:3.11",
                            "command": ["python", "-c", "import time; time.sleep(2)"],
                        }
                    ],
                },
            },
        },
    }


def target_map(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"done": "0", "total": "4"},
    }


# --- the scripted model ----------------------------------------------------------------------


def _user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


@dataclass
class FleetModel:
    """One responder for every monitor: it finds the monitor and check in the step's prompt.
    It records each act step's start keyed by (monitor, check): two would be a doubled act."""

    namespace: str
    acts: Counter[tuple[str, int]] = field(default_factory=Counter)
    observes: Counter[tuple[str, int]] = field(default_factory=Counter)
    # Whether the Job was suspended when a monitor's check read it (the latest read).
    suspended: dict[tuple[str, int], bool] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        prompt = _user_text(body)
        found = MONITOR.search(prompt)
        if found is not None and is_reading(body):
            return Final(reading(found.group(1), self.namespace))
        observe = _is_observe(body)
        check = (OBSERVE_CHECK if observe else ACT_CHECK).search(prompt)
        if found is None or check is None:
            with self.lock:
                self.unknown.append(prompt[:300])
            raise AssertionError(f"a step prompt names no fleet monitor or check: {prompt[:300]}")
        name, n = found.group(1), int(check.group(1))
        results = _results_since_user(body)
        if observe:
            if not results:
                return ToolCalls([call("k8s_get", kind="Job", name=name, namespace=self.namespace)])
            suspended = re.search(r"^\s+suspend: true", "\n".join(results), re.M) is not None
            with self.lock:
                self.observes[name, n] += 1
                self.suspended[name, n] = suspended
            return Final(self.observation(name, n, suspended=suspended))
        if not results:
            with self.lock:
                self.acts[name, n] += 1
            return ToolCalls(
                [
                    call(
                        "k8s_patch",
                        kind="Job",
                        name=name,
                        namespace=self.namespace,
                        patch={"spec": {"suspend": False}},
                    )
                ]
            )
        said = "\n".join(results)
        outcome = "failed" if "ERROR" in said or "REFUSED" in said else "succeeded"
        return Final(
            {
                "outcome": outcome,
                "evidence": f"Tool said: {said[-300:]}",
                "changed": [f"jobs/{name}"],
            }
        )

    def observation(self, name: str, n: int, *, suspended: bool) -> dict[str, Any]:
        authority = {
            "contract": contract(
                allowedSystems=[f"Job {name} in namespace {self.namespace}"],
                allowedResources=[f"jobs/{name}"],
            )
        }
        common = {"observation": f"Check {n} of Job {name}.", "report": f"{name} check {n}."}
        if n == 1 or suspended:
            return observation_dict(
                "act",
                work="idle",
                # Under a grant the act step carries out with the model: each act step's
                # model request is what counts a doubled act (a typed resume asks none).
                action=action(
                    action=f"Resume Job {name} (set spec.suspend=false).",
                    authorizedActionId="fix-config",
                    mutationSet=[f"jobs/{name}"],
                    failureId=f"{name}-suspended",
                    targetStateId=f"{name}-check-{n}",
                ),
                **authority,
                **common,
            )
        if n == 2:
            return observation_dict("wait", **authority, **common)
        if n == 3:
            return observation_dict(
                "act",
                work="failed",
                action=action(
                    kind="repair",
                    authorizedActionId="fix-config",
                    action=f"Fix the configuration of Job {name}.",
                    mutationSet=[f"jobs/{name}"],
                    failureId=f"{name}-bad-flag",
                    targetStateId=f"{name}-check-3",
                ),
                **authority,
                **common,
            )
        return observation_dict("stop", **authority, **common)


def repairs(log: Path) -> Counter[tuple[str, int]]:
    """Repair workflow runs keyed by (monitor, check), from the workflow's own log."""
    runs: Counter[tuple[str, int]] = Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            runs[entry["monitor"], int(entry["check"])] += 1
    return runs


# --- invariants --------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What the cluster shows after the run; each list holds one line per violation.

    What matters: every monitor ends (goalComplete); no accepted check is lost or doubled;
    every act's recorded outcome agrees with what the cluster showed (`mismatched`); and a
    check beyond the script's CHECKS has a cause, an act or repair whose outcome was not
    succeeded, or that was recorded but never made (`unexplained`). Such an extra check is
    the engine verifying by observing, not a monitor stuck; `extra` counts them."""

    checks: int = 0
    extra: int = 0
    unknown: list[str] = field(default_factory=list)  # steps recorded with outcome unknown
    stuck: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(
            self.stuck
            or self.lost
            or self.duplicates
            or self.orphans
            or self.mismatched
            or self.unexplained
        )

    def lines(self) -> list[str]:
        return [
            *(f"stuck: {x}" for x in self.stuck),
            *(f"lost: {x}" for x in self.lost),
            *(f"duplicate: {x}" for x in self.duplicates),
            *(f"orphan: {x}" for x in self.orphans),
            *(f"mismatched: {x}" for x in self.mismatched),
            *(f"unexplained: {x}" for x in self.unexplained),
        ]

    def failing_monitors(self) -> list[str]:
        listed = self.stuck + self.lost + self.duplicates + self.mismatched + self.unexplained
        return sorted({line.split(":", 1)[0] for line in listed})


def at_end(status: dict[str, Any]) -> bool:
    """The monitor has ended as it should: stopped with its goal complete, after at least
    the script's checks (more when a fault made an act's outcome unknown or failed)."""
    return (
        status.get("monitor") == "stopped"
        and (status.get("stop") or {}).get("reason") == "goalComplete"
        and int(status.get("checks") or 0) >= CHECKS
    )


def recorded_outcomes(
    steps: list[dict[str, Any]], failures: dict[str, str]
) -> list[tuple[dict[str, Any], str]]:
    """Each act and repair step of one monitor with the outcome the monitor recorded for
    it: its StepFailed event's (`unknown` when it ended without a result, else `failed`),
    else its own result's; steps not ended yet are left out."""
    found = []
    for step in steps:
        if step["spec"]["kind"] not in ("act", "repair"):
            continue
        status = step.get("status") or {}
        told = failures.get(f"step-{step['spec']['seq']}-failed")
        if told is not None:
            found.append((step, "unknown" if "ended without a result" in told else "failed"))
        elif status.get("phase") == "Succeeded":
            found.append((step, str((status.get("result") or {}).get("outcome"))))
    return found


def outcome_mismatch(
    name: str,
    step: dict[str, Any],
    outcome: str,
    model: FleetModel,
    repairs_run: Counter[tuple[str, int]],
) -> str | None:
    """Why the recorded `outcome` of `step` disagrees with what the cluster showed, or None.

    An act resumes the Job: the checks before and after it show whether it did (only an act
    resumes it, and nothing suspends it again). A repair runs the workflow, which logs it.
    An unknown outcome claims nothing."""
    check = int(step["spec"]["check"])
    label = f"{name}: {step['spec']['kind']} step {step['metadata']['name']} (check {check})"
    if outcome == "unknown":
        return None
    if step["spec"]["kind"] == "repair":
        ran = repairs_run[name, check] > 0
        if (outcome == "succeeded") != ran:
            return f"{label} recorded {outcome}, but the workflow ran {repairs_run[name, check]}x"
        return None
    before = model.suspended.get((name, check))
    after = model.suspended.get((name, check + 1))
    if after is None:
        return None  # no later check read the Job
    if outcome == "succeeded" and after:
        return f"{label} recorded succeeded, but check {check + 1} read the Job suspended"
    if outcome != "succeeded" and before and not after:
        return f"{label} recorded {outcome}, but it resumed the Job (check {check + 1})"
    return None


def progress(status: dict[str, Any]) -> tuple[Any, ...]:
    """What changes whenever a monitor moves on: a check, a step, a stop."""
    step = status.get("step") or {}
    return (status.get("checks"), status.get("stepSeq"), step.get("seq"), status.get("monitor"))


def summary(status: dict[str, Any]) -> str:
    conditions = {c.get("type"): c.get("reason") for c in status.get("conditions") or []}
    step = status.get("step") or {}
    return (
        f"monitor={status.get('monitor')} stop={(status.get('stop') or {}).get('reason')} "
        f"checks={status.get('checks')} reportedCheck={status.get('reportedCheck')} "
        f"stepSeq={status.get('stepSeq')} step={step.get('kind')}#{step.get('seq')} "
        f"ready={conditions.get('Ready')} lastRejection={status.get('lastRejection')!r} "
        f"stopMessage={(status.get('stop') or {}).get('message')!r}"
    )


def step_lines(api: Any, namespace: str, name: str) -> list[str]:
    """One line per MonitorStep of a monitor: seq, kind, check, phase and error."""
    steps = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "monitorsteps"
    )["items"]
    mine = sorted(
        (s for s in steps if (s.get("spec") or {}).get("monitor") == name),
        key=lambda s: int(s["spec"]["seq"]),
    )
    return [
        f"  {s['metadata']['name']} check={s['spec']['check']} "
        f"phase={(s.get('status') or {}).get('phase')} "
        f"error={((s.get('status') or {}).get('error') or '')[:200]!r}"
        for s in mine
    ]


def judge(
    api: Any,
    namespace: str,
    names: list[str],
    model: FleetModel,
    repair_log: Path,
    faulted_steps: set[str],
) -> Verdict:
    """Read every Monitor, MonitorStep, Job and Event of the namespace and check them."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    batch = client.BatchV1Api(api)
    monitors = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "monitors")["items"]
    by_name = {m["metadata"]["name"]: m for m in monitors}
    live_uids = {m["metadata"]["uid"] for m in monitors}
    steps = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "monitorsteps")["items"]
    step_uids = {s["metadata"]["uid"] for s in steps}
    events = core.list_namespaced_event(namespace).items
    jobs = batch.list_namespaced_job(namespace, label_selector=f"{GROUP}/step").items
    ran_repairs = repairs(repair_log)
    verdict = Verdict()

    for name in names:
        found = by_name.get(name)
        if found is None:
            verdict.stuck.append(f"{name}: the Monitor is gone")
            continue
        uid = found["metadata"]["uid"]
        status = found.get("status") or {}
        checks = int(status.get("checks") or 0)
        verdict.checks += checks
        if not at_end(status):
            verdict.stuck.append(f"{name}: {summary(status)}")

        reports = Counter()
        rejected = set()  # step seqs whose answer the engine refused (the facts contradict it)
        for event in events:
            if event.involved_object.uid == uid and event.reason == "ObservationRejected":
                rejected.add(event.metadata.name.rsplit(".", 1)[-1])
            if event.involved_object.uid != uid or event.reason != "Report":
                continue
            what = event.metadata.name.rsplit(".", 1)[-1]
            check = int(what.removeprefix("check-")) if what.startswith("check-") else -1
            reports[check] += max(int(event.count or 1), 1)
        for check in range(1, checks + 1):
            if reports[check] == 0:
                verdict.lost.append(f"{name}: no Report Event for accepted check {check}")
        for check, count in sorted(reports.items()):
            if count > 1:
                verdict.duplicates.append(f"{name}: {count} Report Events for check {check}")
            if not 1 <= check <= checks:
                verdict.duplicates.append(
                    f"{name}: a Report Event for check {check}, but status has {checks} checks"
                )
        if int(status.get("reportedCheck") or 0) != checks:
            verdict.lost.append(
                f"{name}: status.reportedCheck={status.get('reportedCheck')} but checks={checks}"
            )

        for (monitor_name, check), count in sorted(model.acts.items()):
            if monitor_name == name and count > 1:
                verdict.duplicates.append(
                    f"{name}: the act step ran {count} times for check {check}"
                )
        for (monitor_name, check), count in sorted(ran_repairs.items()):
            if monitor_name == name and count > 1:
                verdict.duplicates.append(f"{name}: the repair ran {count} times for check {check}")

        mine = [s for s in steps if (s.get("spec") or {}).get("monitor") == name]
        failures = {
            event.metadata.name.rsplit(".", 1)[-1]: event.message or ""
            for event in events
            if event.involved_object.uid == uid and event.reason == "StepFailed"
        }
        outcomes = recorded_outcomes(mine, failures)
        for step, outcome in outcomes:
            wrong = outcome_mismatch(name, step, outcome, model, ran_repairs)
            if wrong is not None:
                verdict.mismatched.append(wrong)
        verdict.unknown += [s["metadata"]["name"] for s, told in outcomes if told == "unknown"]
        extra = max(checks - CHECKS, 0)
        verdict.extra += extra
        causes = [s["metadata"]["name"] for s, outcome in outcomes if outcome != "succeeded"]
        # An act or repair step recorded but never made (its create failed, and a recorded
        # mutation is never started later) leaves no MonitorStep: its event tells of it.
        made = {int(s["spec"]["seq"]) for s in mine}
        for told in failures.values():
            unmade = UNMADE.match(told)
            if unmade is not None and int(unmade.group(2)) not in made:
                causes.append(f"{unmade.group(1)} step {unmade.group(2)} (never made)")
                if "ended without a result" in told:
                    verdict.unknown.append(f"{name}-{unmade.group(2)}-{unmade.group(1)}")
        if extra > len(causes):
            verdict.unexplained.append(
                f"{name}: {checks} checks, {extra} beyond the script's {CHECKS}, but only "
                f"{len(causes)} act or repair outcomes not succeeded ({causes})"
            )
        step_seq = int(status.get("stepSeq") or 0)
        seqs = Counter(int(s["spec"]["seq"]) for s in mine)
        for seq, count in sorted(seqs.items()):
            if count > 1:
                verdict.duplicates.append(f"{name}: {count} MonitorSteps with seq {seq}")
            if seq > step_seq:
                verdict.duplicates.append(
                    f"{name}: MonitorStep seq {seq} launched but status.stepSeq is {step_seq}"
                )
        accepted = Counter(
            int(s["spec"]["check"])
            for s in mine
            if s["spec"]["kind"] == "observe"
            and (s.get("status") or {}).get("phase") == "Succeeded"
            and s["metadata"]["name"] not in faulted_steps
            and f"step-{s['spec']['seq']}-rejected" not in rejected
        )
        for check, count in sorted(accepted.items()):
            if count > 1:
                verdict.duplicates.append(
                    f"{name}: {count} observe steps succeeded for check {check}"
                )

    for step in steps:
        refs = step["metadata"].get("ownerReferences") or []
        if not any(r.get("uid") in live_uids and r.get("controller") for r in refs):
            verdict.orphans.append(f"MonitorStep {step['metadata']['name']} has no live Monitor")
    for job in jobs:
        refs = job.metadata.owner_references or []
        if not any(r.uid in step_uids and r.controller for r in refs):
            verdict.orphans.append(f"Job {job.metadata.name} has no live MonitorStep")
    return verdict
