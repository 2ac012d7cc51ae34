"""What the parts of the benchmark share: a control plane with an audit log, the operator as
its own process under its own ServiceAccount, watches, process clocks, the invariants and
the tables.

Progress goes to stderr; only the tables go to stdout, so they paste into RESULTS.md.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from tests.e2e.harness import write_token_kubeconfig

# The standard task: the fake step answers its reading with the standard extraction.
from tests.support.observations import TASK
from urllib3.exceptions import HTTPError

from goalkeeper.controller.manifests import GROUP, VERSION
from goalkeeper.devcluster import ControlPlane, procs
from goalkeeper.devcluster.binaries import K8S_VERSION

ROOT = Path(__file__).resolve().parents[1]
OPERATOR_NAMESPACE, OPERATOR_ACCOUNT = "goalkeeper-system", "goalkeeper-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """The benchmark could not measure (a timeout, a component that died)."""


class InvariantError(RuntimeError):
    """What the cluster shows breaks an invariant; `violations` has one line each."""

    def __init__(self, part: str, violations: list[str]) -> None:
        super().__init__(f"{part}: {len(violations)} invariant violation(s)")
        self.part = part
        self.violations = violations


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the machine -----------------------------------------------------------------------------


def _proc_field(path: str, key: str) -> str:
    for line in Path(path).read_text().splitlines():
        if line.startswith(key):
            return line.split(":", 1)[1].strip()
    return "unknown"


def machine_header(server_version: str) -> list[str]:
    mem_kib = int(_proc_field("/proc/meminfo", "MemTotal").split()[0])
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return [
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {os.cpu_count()} CPUs ({_proc_field('/proc/cpuinfo', 'model name')}), "
        f"{mem_kib / 2**20:.1f} GiB RAM, load average at start {load}",
        f"- Python {platform.python_version()}, kopf {version('kopf')}, "
        f"kubernetes client {version('kubernetes')}, Kubernetes {server_version} "
        f"(etcd, kube-apiserver, kube-controller-manager on 127.0.0.1; no kubelet)",
    ]


# --- process clocks --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its threads, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    return int(_proc_field(f"/proc/{pid}/status", "VmRSS").split()[0]) * 1024


# --- the audit log ---------------------------------------------------------------------------


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


@dataclass(frozen=True)
class Request:
    """One API request as the audit log saw it at one stage (timestamps in epoch seconds)."""

    audit_id: str
    stage: str
    user: str
    verb: str
    resource: str  # "monitors/status", "jobs", or the path of a non-resource request
    uri: str  # path and query, e.g. a list's ?limit=500&continue=...
    namespace: str
    name: str
    code: int
    received: float
    at: float  # when this stage was reached

    @property
    def by_operator(self) -> bool:
        return self.user == OPERATOR_USER

    @property
    def ok(self) -> bool:
        return 200 <= self.code < 300


def _request(entry: dict[str, Any]) -> Request:
    ref = entry.get("objectRef") or {}
    resource = ref.get("resource") or entry.get("requestURI", "").split("?", 1)[0]
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return Request(
        audit_id=entry["auditID"],
        stage=entry["stage"],
        user=(entry.get("user") or {}).get("username", ""),
        verb=entry.get("verb", ""),
        resource=resource,
        uri=entry.get("requestURI", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        code=int((entry.get("responseStatus") or {}).get("code") or 0),
        received=_epoch(entry["requestReceivedTimestamp"]),
        at=_epoch(entry["stageTimestamp"]),
    )


class AuditTail:
    """The requests the audit log records from the moment this is made: the operator's
    (by its identity) and every MonitorStep request (the fake step's and the floor's)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb")
        self._file.seek(0, os.SEEK_END)
        self._rest = b""
        self.requests: list[Request] = []

    def poll(self) -> list[Request]:
        data = self._rest + self._file.read()
        lines = data.split(b"\n")
        self._rest = lines.pop()
        new = [
            _request(json.loads(line))
            for line in lines
            if OPERATOR_USER.encode() in line or b'"monitorsteps"' in line
        ]
        self.requests.extend(new)
        return new

    def wait_for(self, wanted: Callable[[Request], bool], timeout: float, what: str) -> Request:
        deadline = time.monotonic() + timeout
        for seen in self.requests:
            if wanted(seen):
                return seen
        while time.monotonic() < deadline:
            for seen in self.poll():
                if wanted(seen):
                    return seen
            time.sleep(0.05)
        raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")

    def operator_requests(self, begin: float, end: float) -> list[Request]:
        """The operator's requests received in [begin, end], one entry each (a watch
        appears when it starts, every other request when it completes)."""
        self.poll()
        return [
            r
            for r in self.requests
            if r.by_operator
            and begin <= r.received <= end
            and r.stage == ("ResponseStarted" if r.verb == "watch" else "ResponseComplete")
        ]

    def close(self) -> None:
        self._file.close()


DISCOVERY = "(discovery: /api, /apis/...)"


def by_verb_and_resource(requests: Iterable[Request]) -> Counter[tuple[str, str]]:
    """Counts by verb and resource; non-resource requests (discovery) count as one kind."""
    return Counter((r.verb, DISCOVERY if r.resource[:1] == "/" else r.resource) for r in requests)


# --- watching --------------------------------------------------------------------------------


def new_api(kubeconfig: Path) -> Any:
    return config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]


def _lister(api: Any, plural: str, namespace: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    if plural == "pods":
        return client.CoreV1Api(api).list_namespaced_pod, (namespace,)
    return client.CustomObjectsApi(api).list_namespaced_custom_object, (
        GROUP,
        VERSION,
        namespace,
        plural,
    )


def list_all(
    api: Any, plural: str, namespace: str, **selectors: str
) -> tuple[list[dict[str, Any]], str]:
    """Every object of a kind in a namespace as plain dicts, a page at a time, and the
    resourceVersion the listing is consistent at."""
    if plural == "events":
        func: Callable[..., Any] = client.CoreV1Api(api).list_namespaced_event
        args: tuple[Any, ...] = (namespace,)
    else:
        func, args = _lister(api, plural, namespace)
    items: list[dict[str, Any]] = []
    token, version = None, ""
    while True:
        page = json.loads(
            func(*args, limit=1000, _continue=token, _preload_content=False, **selectors).data
        )
        items.extend(page["items"])
        version = version or page["metadata"]["resourceVersion"]
        token = page["metadata"].get("continue")
        if not token:
            return items, version


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class Watch:
    """Lists one kind in one namespace, then watches it; `on_event(type, object)` sees
    every object (the list as ADDED) as a plain dict, on the watch's own thread."""

    def __init__(
        self,
        kubeconfig: Path,
        plural: str,
        namespace: str,
        on_event: Callable[[str, dict[str, Any]], None],
        label_selector: str = "",
    ) -> None:
        self._kubeconfig = kubeconfig
        self._plural = plural
        self._namespace = namespace
        self._on_event = on_event
        self._selectors = {"label_selector": label_selector} if label_selector else {}
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{plural}", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        if not self.ready.wait(60):
            raise BenchError(f"the watch on {self._plural} in {self._namespace} did not start")
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(15)

    def _run(self) -> None:
        api = new_api(self._kubeconfig)
        func, args = _lister(api, self._plural, self._namespace)
        while not self._stopping.is_set():
            try:
                items, version = list_all(api, self._plural, self._namespace, **self._selectors)
                for item in items:
                    self._on_event("ADDED", item)
                self.ready.set()
                while not self._stopping.is_set():
                    version = self._stream(func, args, version)
            except _Gone:
                continue
            except (ApiException, HTTPError, OSError) as error:
                if not self._stopping.is_set():
                    say(f"watch on {self._plural} failed, listing again: {error}")
                    self._stopping.wait(0.5)  # a pause before retrying, not a wait for state
        api.close()

    def _stream(self, func: Callable[..., Any], args: tuple[Any, ...], version: str) -> str:
        response = func(
            *args,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=10,
            _preload_content=False,
            **self._selectors,
        )
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self._on_event(event["type"], obj)
                if self._stopping.is_set():
                    break
        finally:
            response.release_conn()
        return version


# --- the monitors as a separate client sees them ----------------------------------------------


@dataclass
class MonitorSeen:
    uid: str
    checks: int = 0
    waiting: bool = False
    in_flight: bool = False
    # check number -> when this watch first saw it accepted (epoch seconds)
    accepted_at: dict[int, float] = field(default_factory=dict)
    # accepted checks -> the nextCheckAt then published (epoch seconds)
    next_check_at: dict[int, float] = field(default_factory=dict)


def is_waiting(status: dict[str, Any]) -> bool:
    """An active monitor with no step in flight and a published next check."""
    return (
        status.get("monitor") == "active"
        and status.get("activity") == "waiting"
        and not status.get("step")
        and (status.get("schedule") or {}).get("nextCheckAt") is not None
    )


def waiting_after(checks: int) -> Callable[[MonitorSeen], bool]:
    return lambda m: m.waiting and m.checks == checks


class MonitorWatch:
    """Every Monitor of a namespace, with the times its checks arrive on a watch."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.seen: dict[str, MonitorSeen] = {}
        self._changed = threading.Condition()
        self._watch = Watch(kubeconfig, "monitors", namespace, self._on_event)

    def __enter__(self) -> MonitorWatch:
        self._watch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._watch.stop()

    def _on_event(self, kind: str, monitor: dict[str, Any]) -> None:
        now = time.time()
        meta, status = monitor["metadata"], monitor.get("status") or {}
        with self._changed:
            if kind == "DELETED":
                self.seen.pop(meta["name"], None)
            else:
                seen = self.seen.setdefault(meta["name"], MonitorSeen(meta["uid"]))
                seen.checks = int(status.get("checks") or 0)
                seen.in_flight = bool(status.get("step"))
                next_check = (status.get("schedule") or {}).get("nextCheckAt")
                seen.waiting = is_waiting(status)
                seen.accepted_at.setdefault(seen.checks, now)
                if next_check is not None:
                    seen.next_check_at.setdefault(seen.checks, _epoch(next_check))
            self._changed.notify_all()

    def accepted(self) -> int:
        with self._changed:
            return sum(m.checks for m in self.seen.values())

    def wait_all(
        self, names: list[str], wanted: Callable[[MonitorSeen], bool], timeout: float, what: str
    ) -> float:
        """Block until every named monitor is `wanted`; the time it first was (epoch)."""

        def ready() -> int:
            return sum(1 for name in names if name in self.seen and wanted(self.seen[name]))

        try:
            return self.wait(lambda: ready() == len(names), timeout, what)
        except BenchError as error:
            raise BenchError(f"{error} ({ready()} of {len(names)} monitors)") from None

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> float:
        """Block until `done()` holds (called under the watch's lock, and at least every
        half second, as it may read state other than the watch's); the time (epoch)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
                self._changed.wait(min(left, 0.5))
            return time.time()


# --- the operator ----------------------------------------------------------------------------


class Operator:
    """`goalkeeper run` as its own process, under the operator's ServiceAccount, watching
    one namespace. The model is never called: the fake step answers every step."""

    def __init__(self, bench: Bench, namespace: str, name: str = "", **settings: str) -> None:
        """`name` tells apart the logs of operators sharing a namespace (shards)."""
        self.bench = bench
        self.name = name
        self.env = {
            **os.environ,
            "KUBECONFIG": str(bench.operator_kubeconfig),
            "NO_PROXY": "127.0.0.1",
            "GOALKEEPER_MODEL": "openai:bench-fake-step",
            "GOALKEEPER_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
            "GOALKEEPER_NAMESPACES": namespace,
            "GOALKEEPER_LISTEN_ADDRESS": "127.0.0.1",
            # Step Jobs never finish here (no kubelet); no deadline may end one mid-run.
            "GOALKEEPER_STEP_DEADLINE_SECONDS": "86400",
            **{f"GOALKEEPER_{key.upper()}": value for key, value in settings.items()},
        }
        self.namespace = namespace
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.started_at = 0.0  # epoch, just before the last start

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Operator:
        self.starts += 1
        named = f"{self.namespace}-{self.name}" if self.name else self.namespace
        log = self.bench.dir / f"operator-{named}-{self.starts}.log"
        self.started_at = time.time()
        self.process = procs.spawn(
            [str(Path(sys.executable).parent / "goalkeeper"), "run"], log=log, env=self.env
        )
        return self

    def alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            raise BenchError(f"the operator exited; log in {self.bench.dir}")

    def kill(self) -> None:
        assert self.process is not None
        procs.kill_group(self.process, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None:
            procs.terminate(self.process, grace=15)

    def __enter__(self) -> Operator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- the cluster -----------------------------------------------------------------------------


class Bench:
    """One control plane with an audit log, the operator's identity (config/rbac), and
    namespaces with the step accounts. Its folder keeps the audit log and operator logs."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.audit_log = folder / "audit.log"
        self.operator_kubeconfig = folder / "operator.kubeconfig"
        self.control_plane = ControlPlane(base_dir=folder, audit_log=self.audit_log)
        self.api: Any = None

    def __enter__(self) -> Bench:
        started = time.monotonic()
        self.control_plane.start()
        self.api = self.control_plane.api_client()
        self.control_plane.kubectl(
            "apply", "-f", str(ROOT / "config" / "rbac" / "operator.yaml"), check=True
        )
        write_token_kubeconfig(
            self.api,
            self.control_plane.kubeconfig,
            OPERATOR_NAMESPACE,
            OPERATOR_ACCOUNT,
            self.operator_kubeconfig,
        )
        say(f"control plane ready in {time.monotonic() - started:.0f} s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.api is not None:
            self.api.close()
        self.control_plane.stop()

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def server_version(self) -> str:
        return str(client.VersionApi(self.api).get_code().git_version or K8S_VERSION)

    def pid(self, component: str) -> int:
        return self.control_plane.pids()[component]

    def namespace(self, name: str) -> str:
        core: Any = client.CoreV1Api(self.api)
        core.create_namespace({"metadata": {"name": name}})
        self.control_plane.kubectl(
            "apply", "-n", name, "-f", str(ROOT / "config" / "rbac" / "steps.yaml"), check=True
        )
        return name

    def audit(self) -> AuditTail:
        return AuditTail(self.audit_log)

    def operator(self, namespace: str, name: str = "", **settings: str) -> Operator:
        return Operator(self, namespace, name, **settings)

    def create_monitors(
        self,
        namespace: str,
        names: list[str],
        every_minutes: int,
        labels: dict[str, str] | None = None,
    ) -> None:
        def create(custom: Any, name: str) -> None:
            body = monitor_body(namespace, name, every_minutes, labels)
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "monitors", body)

        in_parallel(self.kubeconfig, create, names)


def monitor_spec(every_minutes: int) -> dict[str, Any]:
    return {"task": TASK, "everyMinutes": every_minutes, "maxChecks": 1000}


def monitor_body(
    namespace: str, name: str, every_minutes: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": meta,
        "spec": monitor_spec(every_minutes),
    }


T = TypeVar("T")
R = TypeVar("R")


def in_parallel(
    kubeconfig: Path, work: Callable[[Any, T], R], items: Iterable[T], workers: int = 4
) -> list[R]:
    """`work(custom, item)` for every item, on `workers` threads with a client each (a
    CustomObjectsApi); the results in the order of `items`."""
    local = threading.local()

    def run(item: T) -> R:
        if not hasattr(local, "custom"):
            local.custom = client.CustomObjectsApi(new_api(kubeconfig))
        return work(local.custom, item)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, items))


def monitor_names(count: int) -> list[str]:
    return [f"m-{i:05d}" for i in range(count)]


def poll_until(done: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `done` until it holds; the time it did (epoch)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return time.time()


def settle_timeout(monitors: int) -> float:
    """Deadline for work proportional to the fleet: generous, so a slow machine still ends."""
    return 120 + 0.5 * monitors


# --- numbers and tables ----------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def table(headers: list[str], rows: Iterable[Iterable[object]]) -> list[str]:
    """A markdown table, padded so it also reads as plain text."""
    cells = [headers, *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    return [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [
        line(row) for row in cells[1:]
    ]


def ratio(measured: float, floor: float) -> str:
    return f"{measured / floor:.2f}x" if floor > 0 else "—"


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


@dataclass
class Clocks:
    """CPU seconds of named processes between two moments."""

    pids: dict[str, int]
    start: dict[str, float] = field(default_factory=dict)

    def begin(self) -> Clocks:
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def spent(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) - self.start[name] for name, pid in self.pids.items()}
