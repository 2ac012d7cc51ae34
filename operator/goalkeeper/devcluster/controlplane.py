"""etcd + kube-apiserver + kube-controller-manager on loopback, as child processes.

The controller manager runs its default controllers; there is no scheduler or kubelet:
`PodRunner` registers a Node, binds pods to it and runs them.

    with ControlPlane() as cp:
        api = cp.api_client()
        ...

Everything lives in a fresh temp folder (certificates, etcd data, kubeconfig, one log
per component). With `audit_log`, the API server also writes every request's metadata
there as JSON lines (off by default). Ports are picked free on 127.0.0.1, so several
instances can run side by side. Children are stopped by `stop()`, at interpreter exit, and (through
PR_SET_PDEATHSIG) by the kernel if the process that started them dies.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from goalkeeper.devcluster import binaries, procs
from goalkeeper.devcluster.pki import Pki, write_pki

# Every default controller; csrsigning (no signing CA key) and nodeipam (no pod CIDRs) idle.
CONTROLLERS = (
    "*",
    # Pods' IP is 127.0.0.1, which Endpoints and EndpointSlices refuse: they would fail forever.
    "-endpoints-controller",
    "-endpointslice-controller",
)

# Who did what and when, without bodies; RequestReceived is left out because
# ResponseComplete (ResponseStarted for a watch) carries the same timestamps and more.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}

_live: weakref.WeakSet[ControlPlane] = weakref.WeakSet()
_live_lock = threading.Lock()


def _stop_all_at_exit() -> None:
    with _live_lock:
        planes = list(_live)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop()


atexit.register(_stop_all_at_exit)


class ControlPlaneError(RuntimeError):
    """A component failed to start or become ready (the message has its log tail)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _repo_dir(name: str) -> Path | None:
    try:
        return binaries.repo_root() / name
    except binaries.BuildError:
        return None


def default_crds_dir() -> Path | None:
    return _repo_dir("crds")


def default_policies_dir() -> Path | None:
    """The admission policies goalkeeper ships: step results bound to their pods."""
    return _repo_dir("config/admission")


class ControlPlane:
    """A loopback control plane. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        crds_dir: Path | str | None = None,
        install_crds: bool = True,
        policies_dir: Path | str | None = None,
        ready_timeout: float = 90.0,
        build: bool = True,
        base_dir: Path | str | None = None,
        keep_dir: bool = False,
        audit_log: Path | str | None = None,
    ) -> None:
        self.crds_dir = Path(crds_dir) if crds_dir is not None else default_crds_dir()
        self.install_crds = install_crds
        self.policies_dir = (
            Path(policies_dir) if policies_dir is not None else default_policies_dir()
        )
        self.ready_timeout = ready_timeout
        self.build = build
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self.keep_dir = keep_dir
        self.audit_log = Path(audit_log) if audit_log is not None else None
        self.dir: Path | None = None
        self.pki: Pki | None = None
        self.bins: dict[str, Path] = {}
        self.etcd_port = 0
        self.etcd_peer_port = 0
        self.port = 0
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.startup_seconds: float | None = None
        self.installed_crds: list[str] = []
        self._owner_pid = os.getpid()

    # -- public surface -------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        if self.dir is None:
            raise ControlPlaneError("control plane not started")
        return self.dir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        if self.pki is None:
            raise ControlPlaneError("control plane not started")
        return self.pki.ca_cert

    @property
    def kubectl_path(self) -> Path:
        return self.bins["kubectl"]

    def api_client(self) -> Any:
        """A fresh `kubernetes.client.ApiClient` authenticated as the admin."""
        from kubernetes import config

        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = False, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this control plane."""
        return subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.processes.items()}

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def apply_policies(self) -> None:
        """Install the admission policies from `policies_dir`, as a cluster admin would."""
        if self.policies_dir is None or not self.policies_dir.is_dir():
            return
        done = self.kubectl("apply", "--server-side", "-f", str(self.policies_dir))
        if done.returncode != 0:
            raise ControlPlaneError(f"admission policies not installed: {done.stderr.strip()}")
        if (self.policies_dir / "monitor-author.yaml").is_file():
            self._wait_author_stamped()

    def _wait_author_stamped(self, timeout: float = 60) -> None:
        """Wait until the API server stamps a Monitor's author: policies take effect a
        moment after they are created, and a Monitor made before would record none."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        probe = {
            "apiVersion": "goalkeeper.dev/v1alpha1",
            "kind": "Monitor",
            "metadata": {"name": "author-probe"},
            "spec": {"task": "A dry run that checks the author is stamped."},
        }
        deadline = time.monotonic() + timeout
        with self.api_client() as api_client:
            custom: Any = client.CustomObjectsApi(api_client)
            while True:
                try:
                    made = custom.create_namespaced_custom_object(
                        "goalkeeper.dev", "v1alpha1", "default", "monitors", probe, dry_run="All"
                    )
                    if "goalkeeper.dev/author" in (made["metadata"].get("annotations") or {}):
                        return
                except ApiException as exc:
                    if exc.status not in (403, 404, 422, 500, 503):
                        raise
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"the monitor-author admission policy took no effect in {timeout} s"
                    )
                time.sleep(0.2)

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> ControlPlane:
        if self.processes:
            raise ControlPlaneError("control plane already started")
        begin = time.monotonic()
        self.bins = binaries.ensure_binaries(build=self.build)
        self.dir = Path(tempfile.mkdtemp(prefix="goalkeeper-cp-", dir=self.base_dir))
        with _live_lock:
            _live.add(self)
        try:
            self.pki = write_pki(self.dir / "pki")
            self._start_etcd()
            self._start_apiserver()
            self._wait_ready(begin)
            self._write_kubeconfig()
            self._start_controller_manager()
            self._wait_controller_manager(begin)
            if self.install_crds:
                self.installed_crds = self.apply_crds()
                self.apply_policies()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - begin
        return self

    def stop(self) -> None:
        """Stop every child (SIGTERM, then SIGKILL), reap them, remove the temp folder."""
        if os.getpid() != self._owner_pid:  # a forked child must not kill our processes
            return
        # Reverse start order: controller-manager, apiserver, etcd.
        for name in reversed(list(self.processes)):
            procs.terminate(self.processes[name], grace=10.0)
        self.processes.clear()
        with _live_lock:
            _live.discard(self)
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- components -------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.dir is not None
        log = self.dir / f"{name}.log"
        self.logs[name] = log
        log.write_text(f"# {' '.join(argv)}\n")
        self.processes[name] = procs.spawn(argv, log=log, cwd=self.dir)

    def _start_etcd(self) -> None:
        assert self.dir is not None
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._spawn(
            "etcd",
            [
                str(self.bins["etcd"]),
                "--name=default",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        assert self.dir is not None and self.pki is not None
        self.port = free_port()
        p = self.pki
        audit: list[str] = []
        if self.audit_log is not None:
            policy = self.dir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
            audit = [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
            ]
        self._spawn(
            "kube-apiserver",
            [
                str(self.bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The lease reconciler refuses a loopback advertise address; nothing here
                # uses the `kubernetes` Service's endpoints anyway.
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.port}",
                f"--cert-dir={self.dir / 'apiserver-certs'}",
                f"--tls-cert-file={p.serving_cert}",
                f"--tls-private-key-file={p.serving_key}",
                f"--client-ca-file={p.client_ca_cert}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                f"--service-account-issuer=https://127.0.0.1:{self.port}",
                f"--service-account-key-file={p.sa_pub}",
                f"--service-account-signing-key-file={p.sa_key}",
                # Default is on; the serviceaccount controller creates `default` accounts.
                "--enable-admission-plugins=ServiceAccount",
                "--profiling=false",
                "--v=1",
                *audit,
            ],
        )

    def _write_kubeconfig(self) -> None:
        assert self.pki is not None

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "goalkeeper-dev",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self.pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(self.pki.admin_cert),
                        "client-key-data": b64(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "goalkeeper-dev",
                    "context": {"cluster": "goalkeeper-dev", "user": "admin"},
                }
            ],
            "current-context": "goalkeeper-dev",
        }
        self.kubeconfig.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _start_controller_manager(self) -> None:
        assert self.pki is not None
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bins["kube-controller-manager"]),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--controllers={','.join(CONTROLLERS)}",
                "--use-service-account-credentials=false",
                # The root-ca-cert-publisher puts it in each namespace's kube-root-ca.crt.
                f"--root-ca-file={self.pki.ca_cert}",
                # The token controller fills legacy ServiceAccount token Secrets with it.
                f"--service-account-private-key-file={self.pki.sa_key}",
                "--concurrent-job-syncs=5",
                "--v=1",
            ],
        )

    # -- readiness --------------------------------------------------------------------

    def _check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with code {proc.returncode}; log {self.logs[name]}:\n"
                    + procs.log_tail(self.logs[name])
                )

    def _ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return ctx

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        # No proxies: this only ever talks to 127.0.0.1.
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=self._ssl_context()),
        )
        try:
            with opener.open(self.server + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def _wait_ready(self, begin: float) -> None:
        deadline = begin + self.ready_timeout
        last = "no answer yet"
        while True:
            self._check_alive()
            try:
                status, body = self._get("/readyz")
                if status == 200:
                    return
                last = f"HTTP {status}: {body.decode(errors='replace')[-2000:]}"
            except (OSError, ssl.SSLError) as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-apiserver not ready after {self.ready_timeout:.0f} s ({last}); "
                    f"log tail:\n{procs.log_tail(self.logs['kube-apiserver'])}\n"
                    f"etcd log tail:\n{procs.log_tail(self.logs['etcd'], 2000)}"
                )
            time.sleep(0.25)

    def _wait_controller_manager(self, begin: float) -> None:
        """Ready once the serviceaccount controller has made `default/default`."""
        deadline = max(begin + self.ready_timeout, time.monotonic() + 30)
        while True:
            self._check_alive()
            with contextlib.suppress(OSError, ssl.SSLError):
                status, _ = self._get("/api/v1/namespaces/default/serviceaccounts/default")
                if status == 200:
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    "kube-controller-manager did not create the default ServiceAccount in "
                    f"time; log tail:\n{procs.log_tail(self.logs['kube-controller-manager'])}"
                )
            time.sleep(0.25)

    # -- CRDs -------------------------------------------------------------------------

    def crd_files(self) -> list[Path]:
        if self.crds_dir is None or not self.crds_dir.is_dir():
            return []
        return sorted(
            p for p in self.crds_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
        )

    def apply_crds(self, files: Iterable[Path] | None = None, timeout: float = 60) -> list[str]:
        """Create or replace every CustomResourceDefinition in `files` (default: the repo's
        crds/ folder) and wait until each is Established. Returns their names."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        docs: list[dict[str, Any]] = []
        for path in self.crd_files() if files is None else files:
            for doc in yaml.safe_load_all(Path(path).read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    docs.append(doc)
        if not docs:
            return []
        with self.api_client() as api_client:
            ext: Any = client.ApiextensionsV1Api(api_client)
            names = []
            for doc in docs:
                name = doc["metadata"]["name"]
                names.append(name)
                try:
                    ext.create_custom_resource_definition(doc)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    current = ext.read_custom_resource_definition(name)
                    doc.setdefault("metadata", {})["resourceVersion"] = (
                        current.metadata.resource_version
                    )
                    ext.replace_custom_resource_definition(name, doc)
            deadline = time.monotonic() + timeout
            pending = set(names)
            while pending:
                for name in sorted(pending):
                    crd = ext.read_custom_resource_definition(name)
                    conds = (crd.status.conditions if crd.status else None) or []
                    if any(c.type == "Established" and c.status == "True" for c in conds):
                        pending.discard(name)
                if pending and time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRDs not Established after {timeout} s: {pending}")
                if pending:
                    time.sleep(0.2)
            self._wait_served(docs, deadline)
        return names

    def _wait_served(self, crds: list[dict[str, Any]], deadline: float) -> None:
        """Wait until the API server serves a watch of each CRD: just after Established its
        watch cache may still be initializing, and a watch is refused (429), which a
        controller that starts then logs as a failed request. Each probe is a watch of one
        second, the CRDs probed at once."""

        def served(doc: dict[str, Any]) -> None:
            spec = doc["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("served", True))
            path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
            while self._get(f"{path}?watch=true&resourceVersion=0&timeoutSeconds=1")[0] == 429:
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"{path} still initializing after Established")
                time.sleep(0.2)

        with ThreadPoolExecutor(len(crds)) as pool:
            list(pool.map(served, crds))
