"""Fault injection: a fleet of Monitors runs to its end while the operator is SIGKILLed and
restarted, kube-apiserver and etcd are restarted in place, a proxy between the operator
and the API server answers 500/429, resets connections, delays answers and cuts watches,
and step processes are killed mid-run or their Jobs deleted by hand. Afterwards every
Monitor must have reached its end (goalComplete), with exactly one report per accepted
check, no act or repair run twice, every act's and repair's recorded outcome agreeing with
what the cluster showed, a cause for every check beyond the script's (an act whose
outcome was not succeeded), and no step or Job that status and owners do not account for.

The faults are drawn from a seed printed at the start; `GOALKEEPER_FAULT_SEED=N` replays
it, `GOALKEEPER_FAULTS_LONG=1` runs ten rounds (ten times the faults).
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from goalkeeper.devcluster import PodRunner
from tests.e2e.harness import (
    GROUP,
    ROOT,
    VERSION,
    OperatorProcess,
    write_token_kubeconfig,
)
from tests.faults import fleet
from tests.faults.chaos import Budget, Chaos, schedule
from tests.faults.cluster import RestartableControlPlane
from tests.support.fault_proxy import FaultProxy, Faults
from tests.support.model_server import ModelServer

pytestmark = [pytest.mark.faults, pytest.mark.cluster]

MONITORS = 10
WINDOW = 150.0  # seconds over which one round's faults are spread
# After the last fault every monitor must reach its end. A slow machine gets the time it
# needs: the round fails when no monitor's status moved for STALL seconds (longer than any
# step may run), or after SETTLE_CAP in all.
STALL = 180.0
SETTLE_CAP = 1800.0
NAMESPACE = "fleet"
API_FAULTS = Faults(
    error500=0.03,
    error429=0.01,
    reset=0.03,
    delay=0.05,
    delay_seconds=(0.05, 1.0),
    cut_watch=0.3,
    watch_cut_after=(0.5, 10.0),
)


def _prepare_namespace(plane: RestartableControlPlane, api: Any) -> None:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    plane.kubectl("apply", "-f", str(ROOT / "config" / "rbac" / "operator.yaml"), check=True)
    plane.kubectl(
        "apply", "-n", NAMESPACE, "-f", str(ROOT / "config" / "rbac" / "steps.yaml"), check=True
    )
    plane.kubectl(
        "create",
        "secret",
        "generic",
        "model-api",
        "-n",
        NAMESPACE,
        "--from-literal=api-key=test-key-not-secret",
        check=True,
    )


def _proxied_kubeconfig(plane: RestartableControlPlane, api: Any, proxy: FaultProxy, path: Path):
    """The operator's own token, but its server is the fault proxy (plain HTTP on loopback)."""
    write_token_kubeconfig(api, plane.kubeconfig, "goalkeeper-system", "goalkeeper-operator", path)
    doc = yaml.safe_load(path.read_text())
    doc["clusters"][0]["cluster"] = {"server": proxy.url}
    path.write_text(yaml.safe_dump(doc))


def _create_fleet(api: Any, names: list[str]) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    for name in names:
        batch.create_namespaced_job(NAMESPACE, fleet.target_job(name, NAMESPACE))
        core.create_namespaced_config_map(NAMESPACE, fleet.target_map(name, NAMESPACE))
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "monitors", fleet.monitor(name, NAMESPACE)
        )


def _statuses(api: Any) -> dict[str, dict[str, Any]]:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "monitors"
    )["items"]
    return {m["metadata"]["name"]: m.get("status") or {} for m in items}


def _settled(api: Any) -> bool:
    """Whether every monitor reaches its end before the fleet stops moving."""
    begin = last_move = time.monotonic()
    seen: dict[str, tuple[Any, ...]] | None = None
    while time.monotonic() - begin < SETTLE_CAP:
        try:
            statuses = _statuses(api)
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            statuses = None  # a read that failed shows no progress either way
        if statuses is not None:
            if all(fleet.at_end(s) for s in statuses.values()):
                return True
            moves = {name: fleet.progress(s) for name, s in statuses.items()}
            if moves != seen:
                seen, last_move = moves, time.monotonic()
        if time.monotonic() - last_move > STALL:
            return False
        time.sleep(1.0)
    return False


def _operator_lines(log_dir: Path, names: set[str], limit: int = 40) -> str:
    """The operator's log lines about the given monitors, and its errors, oldest first."""
    logs = sorted(log_dir.glob("operator-*.log"), key=lambda p: int(re.sub(r"\D", "", p.name)))
    picked = []
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            if " DEBUG urllib3" in line or " DEBUG kopf" in line:
                continue  # request-level noise: the reconciler's own lines tell the story
            if any(n in line for n in names) or "Traceback" in line or "ERROR" in line:
                picked.append(f"[{path.stem}] {line[:400]}")
    return "\n".join(picked[-limit * max(len(names), 1) :])


def test_fleet_survives_faults(
    plane: RestartableControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("GOALKEEPER_FAULT_SEED") or random.SystemRandom().randrange(10**9))
    rounds = 10 if os.environ.get("GOALKEEPER_FAULTS_LONG") == "1" else 1
    with capsys.disabled():
        print(f"\nfault seed {seed} (replay: GOALKEEPER_FAULT_SEED={seed}), {rounds} round(s)")
    rng = random.Random(seed)  # noqa: S311 - fault timing, not secrets
    begin = time.monotonic()
    repair_log = tmp_path / "repairs.jsonl"
    operator_logs = tmp_path / "operator"
    operator_logs.mkdir()

    with plane.api_client() as api:
        _prepare_namespace(plane, api)
        model = fleet.FleetModel(NAMESPACE)
        # The proxy draws from a stream of its own: request timing must not shift the schedule.
        proxy = FaultProxy(plane.server, plane.ca_file, random.Random(rng.random())).start()  # noqa: S311
        runner = PodRunner(
            plane.kubeconfig, label_selector=None, namespace=NAMESPACE, log_dir=tmp_path / "pods"
        )
        with ModelServer(default=model) as server:
            kubeconfig = tmp_path / "operator.kubeconfig"
            _proxied_kubeconfig(plane, api, proxy, kubeconfig)
            operator = OperatorProcess(
                kubeconfig,
                NAMESPACE,
                server,
                operator_logs,
                GOALKEEPER_TIME_SCALE="3",
                # A lost event heals within this; the default (60 s) is for production.
                GOALKEEPER_RESYNC_SECONDS="10",
                GOALKEEPER_STEP_DEADLINE_SECONDS="60",
                GOALKEEPER_STEP_HISTORY="1000",
                GOALKEEPER_REPAIR_COMMAND=(
                    f"{sys.executable} {ROOT / 'tests' / 'faults' / 'repair_workflow.py'} "
                    f"{repair_log}"
                ),
            )
            runner.start()
            operator.start()
            chaos = Chaos(rng, plane, operator, runner, api, NAMESPACE)
            names: list[str] = []
            try:
                for n in range(rounds):
                    batch = [f"fleet-{n}-{i:02d}" for i in range(MONITORS)]
                    names += batch
                    proxy.faults = API_FAULTS
                    _create_fleet(api, batch)
                    chaos.run(schedule(rng, Budget(), WINDOW))
                    if not _settled(api):
                        break  # the verdict below names what is stuck
                proxy.faults = Faults()
                # A check's Report Event is posted just after its status write: a report
                # missing at the first read is lost only if it is still missing later.
                lost_by = time.monotonic() + 30
                while True:
                    verdict = fleet.judge(
                        api, NAMESPACE, names, model, repair_log, chaos.faulted_steps
                    )
                    if not verdict.lost or time.monotonic() > lost_by:
                        break
                    time.sleep(1.0)
                failing = verdict.failing_monitors()
                steps = {name: fleet.step_lines(api, NAMESPACE, name) for name in failing[:8]}
            finally:
                operator.stop()
                runner.stop()
                proxy.stop()

    restarts = chaos.done["apiserver"] + chaos.done["etcd"]
    figures = (
        f"monitors={len(names)} checks={verdict.checks} kills={chaos.done['kill']} "
        f"api_faults={proxy.injected} restarts={restarts} "
        f"duplicates={len(verdict.duplicates)} lost={len(verdict.lost)} "
        f"stuck={len(verdict.stuck)} mismatched={len(verdict.mismatched)} "
        f"unexplained={len(verdict.unexplained)} extra_checks={verdict.extra} "
        f"unknown_outcomes={len(verdict.unknown)}"
    )
    detail = (
        f"seed={seed} seconds={time.monotonic() - begin:.0f} "
        + " ".join(f"{k}={v}" for k, v in sorted(proxy.counts.items()))
        + " "
        + " ".join(f"{k}={v}" for k, v in sorted(chaos.done.items()))
        + f" operator_self_exits={len(chaos.self_exits)} orphans={len(verdict.orphans)}"
        + f" unknown={','.join(verdict.unknown) or '-'}"
    )
    with capsys.disabled():
        print(figures)
        print(detail)
    if verdict.failed or chaos.self_exits or model.unknown:
        shown = failing[:5]
        pytest.fail(
            f"{figures}\n{detail}\n"
            + "\n".join(verdict.lines() + chaos.self_exits + model.unknown[:3])
            + "\nsteps of the first failing monitors:\n"
            + "\n".join(f"{name}:\n" + "\n".join(lines) for name, lines in steps.items())
            + "\nfaults:\n"
            + "\n".join(chaos.log)
            + f"\n---- operator log about {shown} ----\n"
            + _operator_lines(operator_logs, set(shown))
            + f"\n(whole logs in {operator_logs})",
            pytrace=False,
        )
