"""End-to-end harness: the operator as a real process, steps as real `goalkeeper-step`
processes run by the pod runner, and a scripted model that reads the real target.

The target of every scenario is plain Kubernetes: a Job `build` and a ConfigMap
`build-progress` holding `done` and `total`. Nothing on the target knows goalkeeper.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.model_server import Final, ModelServer, Reply, ToolCalls, call
from tests.support.observations import AUTHORIZED, TASK, contract, extraction

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GROUP, VERSION = "goalkeeper.dev", "v1alpha1"


# --- the target ----------------------------------------------------------------------------


def build_job(
    namespace: str,
    *,
    suspended: bool = True,
    seconds: float = 1.0,
    exit_code: int = 0,
    gate: Path | None = None,
) -> dict[str, Any]:
    """The target Job; with `gate` it runs until that file exists, so a test decides when
    the target finishes instead of racing a timer against the step."""
    wait = f"time.sleep({seconds})"
    if gate is not None:
        wait = f"import os\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    command = f"import time, sys\n{wait}\nsys.exit({exit_code})"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "build", "namespace": namespace, "labels": {"app": "build"}},
        "spec": {
            "suspend": suspended,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "build"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "build",
                            "image": "python:3.11",
                            "command": ["python", "-c", command],
                        }
                    ],
                },
            },
        },
    }


def progress_map(namespace: str, done: int, total: int = 27) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "build-progress", "namespace": namespace},
        "data": {"done": str(done), "total": str(total)},
    }


# --- what the scripted model reads ---------------------------------------------------------


@dataclass
class Facts:
    """The target's state as the model read it through the step's tools."""

    job_found: bool = False
    suspended: bool = False
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    done: int | None = None
    total: int | None = None
    raw: str = ""

    @classmethod
    def parse(cls, texts: list[str]) -> Facts:
        joined = "\n".join(texts)
        facts = cls(raw=joined)
        job = next((t for t in texts if "Job " in t and "/build" in t), "")
        line = re.search(
            r"^- Job \S+/build: (\w+); active (\d+), succeeded (\d+), failed (\d+)", job, re.M
        )
        if line:  # the step's fact sheet: one state line, no YAML
            facts.job_found, facts.suspended = True, line.group(1) == "suspended"
            facts.active, facts.succeeded, facts.failed = map(int, line.group(2, 3, 4))
        elif job and "ERROR" not in job.split("\n", 3)[0]:
            facts.job_found = True
            facts.suspended = bool(re.search(r"^\s+suspend: true", job, re.M))
            for name in ("active", "succeeded", "failed"):
                found = re.search(rf"^\s+{name}: (\d+)", job, re.M)
                setattr(facts, name, int(found.group(1)) if found else 0)
        for name in ("done", "total"):
            found = re.search(rf"^\s+{name}: '(\d+)'", joined, re.M)
            if found:
                setattr(facts, name, int(found.group(1)))
        return facts


def observation(
    route: str, goal: str, work: str, facts: Facts, report: str, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "route": route,
        "goal": goal,
        "work": work,
        "observation": f"Job build: suspended={facts.suspended} active={facts.active} "
        f"succeeded={facts.succeeded} failed={facts.failed}; progress "
        f"{facts.done}/{facts.total}.",
        "report": report,
        "reason": f"Route {route}: {report}",
        "contract": contract(),
        "authorizedActions": AUTHORIZED,
    }
    if facts.done is not None and facts.total is not None:
        body["progress"] = [
            {
                "key": "modules",
                "label": "modules",
                "status": "complete" if goal == "complete" else "running",
                "completed": facts.done,
                "total": facts.total,
                "unit": "modules",
                "observedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ]
    body.update(extra)
    return body


Observe = Callable[[Facts, int], dict[str, Any]]


@dataclass
class Scenario:
    """A scripted model. Observe steps read the Job and ConfigMap through the step's tools,
    then answer with `observe(facts, n)`; act steps make `act_calls(n)` and answer with the
    n-th of `act_outcomes` (default succeeded), quoting what the tool said as evidence."""

    namespace: str
    observe: Observe
    act_calls: Callable[[int], list[Any]] | None = None
    # What the task reading finds in `TASK`, before the first observation of a generation.
    reading: dict[str, Any] = field(default_factory=extraction)
    readings: int = 0
    act_outcomes: list[str] = field(default_factory=list)
    # Observe answers wait for this, so a test decides when a step may finish.
    gate: threading.Event | None = None
    # Answer at once when the step's fact sheet already shows the Job and its progress.
    from_sheet: bool = False
    observed: list[Facts] = field(default_factory=list)
    acts: int = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        results = _results_since_user(body)
        if is_reading(body):
            self.readings += 1
            return Final(self.reading)
        if _is_observe(body):
            sheet = Facts.parse([_user_text(body)]) if self.from_sheet and not results else None
            if sheet is not None and sheet.job_found and sheet.done is not None:
                results = [sheet.raw]
            if not results:
                return ToolCalls(
                    [
                        call("k8s_get", kind="Job", name="build", namespace=self.namespace),
                        call(
                            "k8s_get",
                            kind="ConfigMap",
                            name="build-progress",
                            namespace=self.namespace,
                        ),
                    ]
                )
            facts = Facts.parse(results)
            self.observed.append(facts)
            answer = self.observe(facts, len(self.observed))
            if self.gate is not None:
                assert self.gate.wait(180), "the test never let the observe step answer"
            return Final(answer)
        # `act_calls(n)` gives one turn of tool calls, or a list of turns when one call must
        # finish before the next starts (tool calls of one turn run concurrently).
        if not results:
            self.acts += 1
        planned = (self.act_calls or self.resume)(self.acts)
        turns = planned if planned and isinstance(planned[0], list) else [planned]
        taken = _turns_since_user(body)
        if taken < len(turns):
            return ToolCalls(turns[taken])
        n = self.acts
        said = "\n".join(results)
        # Unless scripted otherwise, the outcome follows what the tools said.
        default = "failed" if "ERROR" in said or "REFUSED" in said else "succeeded"
        outcome = self.act_outcomes[n - 1] if n <= len(self.act_outcomes) else default
        return Final(
            {
                "outcome": outcome,
                "evidence": f"Tool said: {results[-1][-300:]}",
                "changed": ["jobs/build"],
            }
        )

    def resume(self, _: int) -> list[Any]:
        return [
            call(
                "k8s_patch",
                kind="Job",
                name="build",
                namespace=self.namespace,
                patch={"spec": {"suspend": False}},
            )
        ]


def is_reading(body: dict[str, Any]) -> bool:
    """Whether a model request comes from the extract step: its only tool is the output
    tool of an authority extraction, whose grants quote the task."""
    tools = [tool.get("function", {}) for tool in body.get("tools", [])]
    return [t.get("name") for t in tools] == ["final_result"] and "quote" in json.dumps(
        tools[0].get("parameters", {})
    )


def _is_observe(body: dict[str, Any]) -> bool:
    for tool in body.get("tools", []):
        function = tool.get("function", {})
        if function.get("name") == "final_result":
            return "route" in json.dumps(function.get("parameters", {}))
    raise AssertionError("the step offered no final_result tool")


def _user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return content if isinstance(content, str) else json.dumps(content)


def _turns_since_user(body: dict[str, Any]) -> int:
    """How many tool-calling turns the model has taken since the step's prompt."""
    messages = body.get("messages", [])
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return sum(1 for m in messages[last_user + 1 :] if m.get("tool_calls"))


def _results_since_user(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages", [])
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [
        m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        for m in messages[last_user + 1 :]
        if m.get("role") == "tool"
    ]


# How an operator runs from another checkout's code (`code`): its first log line says where
# goalkeeper was imported from, so a test can prove which code ran.
RUN_FROM_CODE = (
    "import sys, goalkeeper\n"
    "print(f'goalkeeper {goalkeeper.__version__} from {goalkeeper.__file__}', flush=True)\n"
    "from goalkeeper.cli import main\n"
    "sys.exit(main())"
)


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        model: ModelServer,
        log_dir: Path,
        *,
        code: Path | None = None,
        **env: str,
    ) -> None:
        """`code`: the operator/ folder of another checkout (an earlier release's) to run
        instead of this tree's, first on PYTHONPATH, ahead of the venv's editable install."""
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.model = model
        self.log_dir = log_dir
        self.code = code
        self.extra_env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> OperatorProcess:
        self.starts += 1
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "GOALKEEPER_MODEL": "openai:scripted-model",
            "GOALKEEPER_MODEL_BASE_URL": self.model.base_url,
            "GOALKEEPER_MODEL_API_KEY_SECRET": "model-api",
            "GOALKEEPER_NAMESPACES": self.namespace,
            "GOALKEEPER_TIME_SCALE": "1",  # tests only: one `everyMinutes` minute is 1 s
            "GOALKEEPER_LISTEN_ADDRESS": "127.0.0.1",
            "GOALKEEPER_STEP_DEADLINE_SECONDS": "120",
            "GOALKEEPER_RETRY_BACKOFF_SECONDS": "0.1",
            # A failed or rejected step is retried after this, doubling (capped at the
            # monitor's interval): small here, so a test rides out failures in seconds.
            "GOALKEEPER_STEP_RETRY_SECONDS": "0.5",
            **self.extra_env,
        }
        command, cwd = [str(BIN / "goalkeeper"), "run", "-v"], ROOT
        if self.code is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(self.code), os.environ.get("PYTHONPATH", "")) if p
            )
            command, cwd = [sys.executable, "-c", RUN_FROM_CODE, "run", "-v"], self.code.parent
        log = (self.log_dir / f"operator-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )
        return self

    def restart_with(self, **env: str) -> None:
        """Stop, change the operator's environment, and start again."""
        self.stop()
        self.extra_env.update(env)
        self.start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob("operator-*.log"))
        )


def write_token_kubeconfig(
    api: Any, admin_kubeconfig: Path, namespace: str, account: str, path: Path
) -> None:
    """A kubeconfig holding a TokenRequest token of one ServiceAccount."""
    import yaml

    wait_until(lambda: _account_exists(api, namespace, account), 30, f"ServiceAccount {account}")
    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 7200}}
        )
        .status.token
    )
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [
                    {"name": account, "context": {"cluster": cluster["name"], "user": account}}
                ],
                "current-context": account,
            }
        )
    )
    path.chmod(0o600)


def _account_exists(api: Any, namespace: str, account: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespaced_service_account(account, namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


# --- reading the cluster -------------------------------------------------------------------


class Cluster:
    def __init__(self, api: Any, namespace: str) -> None:
        self.api = api
        self.ns = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)

    def monitor(self, name: str = "build") -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.ns, "monitors", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def status(self, name: str = "build") -> dict[str, Any]:
        return (self.monitor(name) or {}).get("status") or {}

    def steps(self, monitor: str = "build") -> list[dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.ns, "monitorsteps", label_selector=f"{GROUP}/monitor={monitor}"
        )["items"]
        return sorted(items, key=lambda s: s["spec"]["seq"])

    def step_kinds(self, monitor: str = "build") -> list[str]:
        return [s["spec"]["kind"] for s in self.steps(monitor)]

    def step_jobs(self) -> list[Any]:
        return self.batch.list_namespaced_job(self.ns, label_selector=f"{GROUP}/step").items

    def events(self, reason: str | None = None) -> list[Any]:
        items = self.core.list_namespaced_event(self.ns).items
        return [
            e
            for e in items
            if e.involved_object.kind == "Monitor" and (reason is None or e.reason == reason)
        ]

    def posted(
        self, reason: str, count: int = 1, monitor: str | None = None, within: float = 30
    ) -> list[Any]:
        """The `reason` Events (of `monitor`, or of every Monitor) once there are `count` or
        more: the operator posts each just after the status write a test waits on, so a
        read at once may miss the newest."""

        def of_monitor() -> list[Any]:
            items = self.events(reason)
            return [e for e in items if monitor is None or e.involved_object.name == monitor]

        found = wait_until(
            lambda: items if len(items := of_monitor()) >= count else None,
            within,
            f"{count} {reason} Event(s)",
            lambda: str(sorted(e.metadata.name for e in of_monitor())),
        )
        return list(found)

    def reports(self, count: int, monitor: str | None = None) -> list[Any]:
        """The Report Events once there are `count` or more (`posted`)."""
        return self.posted("Report", count, monitor)

    def target(self, *, done: int = 21, **job: Any) -> None:
        """The scenario's target: Job build and its progress ConfigMap."""
        self.batch.create_namespaced_job(self.ns, build_job(self.ns, **job))
        self.core.create_namespaced_config_map(self.ns, progress_map(self.ns, done))

    def step_phase(self, step: str) -> str | None:
        found = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, "monitorsteps", step
        )
        phase: str | None = (found.get("status") or {}).get("phase")
        return phase

    def create_monitor(self, name: str = "build", **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Monitor",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"task": TASK, "stopWhen": "Stop when Job build has succeeded.", **spec},
        }
        return self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, "monitors", body
        )

    def stopped(self, name: str = "build") -> dict[str, Any] | None:
        status = self.status(name)
        return status if status.get("monitor") == "stopped" else None


def report_names(cluster: Cluster) -> list[str]:
    """What each Report Event of the namespace reports, sorted: `check-1`, `check-2`, ..."""
    return sorted(e.metadata.name.rsplit(".", 1)[-1] for e in cluster.events("Report"))


def report_text(event: Any) -> str:
    """The full report a Report Event carries (its message is the one-line summary)."""
    return str((event.metadata.annotations or {}).get("goalkeeper.dev/report", ""))


def start_dev(tmp_path: Path, **env: str) -> tuple[subprocess.Popen[str], Path]:
    """`goalkeeper dev` as a user starts it: no GOALKEEPER_ setting but `env` (and
    GOALKEEPER_MODELS_DIR, where the local model's weights are kept). Its output goes to
    the returned dev.log."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GOALKEEPER_") or k == "GOALKEEPER_MODELS_DIR"
    }
    inherited.update(PYTHONUNBUFFERED="1", GOALKEEPER_DEV_LOGS=str(tmp_path / "dev-logs"))
    log_path = tmp_path / "dev.log"
    dev = subprocess.Popen(
        [str(BIN / "goalkeeper"), "dev"],
        cwd=ROOT,
        env={**inherited, **env},
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    return dev, log_path


def dev_kubectl(log_path: Path) -> list[str] | None:
    """The kubectl command the export lines `goalkeeper dev` printed name, once printed."""
    text = log_path.read_text()
    config = re.search(r"^export KUBECONFIG=(\S+)$", text, re.M)
    path = re.search(r"^export PATH=(\S+):\$PATH$", text, re.M)
    if config is None or path is None:
        return None
    return [str(Path(path.group(1)) / "kubectl"), "--kubeconfig", config.group(1)]


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    on_timeout: Callable[[], str] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = on_timeout() if on_timeout else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{detail}")
        time.sleep(0.25)
