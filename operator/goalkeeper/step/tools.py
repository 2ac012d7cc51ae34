"""The agent's tools: read-only ones for observe, mutations added for act.

`StepTools` holds the methods; `observe_toolset` and `act_toolset` expose them to the model.
Everything a tool returns goes through `fence.fenced_result`: bounded to 16,000 characters
with a marker, and fenced as untrusted target data with the run's fence id. A refusal is the
step's own text and is returned unfenced, starting with `REFUSED:`.

The Kubernetes backend, the HTTP client and the command runner are injected, so the agent
can be tested without a cluster. Secrets never leave a tool with their values: `data`,
`stringData` and the last-applied annotation are replaced by the list of keys.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import httpx2
import yaml
from pydantic_ai.toolsets import FunctionToolset

from goalkeeper.step.fence import fenced_result

REFUSED = "REFUSED:"
READ_ONLY_REFUSAL = (
    f"{REFUSED} this is a read-only observe step; {{what}} is not allowed here. Report the "
    "needed change as an action request instead (route 'act'), naming the authorized action."
)
REDACTED = "<redacted by goalkeeper>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
READ_METHODS = frozenset({"GET", "HEAD"})

# apiVersion for common kinds, so the model may omit it.
COMMON_KINDS: dict[str, str] = {
    "pod": "v1",
    "service": "v1",
    "configmap": "v1",
    "secret": "v1",
    "event": "v1",
    "namespace": "v1",
    "node": "v1",
    "persistentvolumeclaim": "v1",
    "persistentvolume": "v1",
    "serviceaccount": "v1",
    "endpoints": "v1",
    "replicationcontroller": "v1",
    "deployment": "apps/v1",
    "statefulset": "apps/v1",
    "daemonset": "apps/v1",
    "replicaset": "apps/v1",
    "job": "batch/v1",
    "cronjob": "batch/v1",
    "ingress": "networking.k8s.io/v1",
    "horizontalpodautoscaler": "autoscaling/v2",
}


class Kube(Protocol):
    """What the tools need from Kubernetes; `kube.KubeBackend` is the real one."""

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> Any: ...
    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
    ) -> Any: ...
    def logs(
        self,
        name: str,
        namespace: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
        previous: bool = False,
    ) -> str: ...
    def events(self, namespace: str, *, kind: str | None, name: str) -> Any: ...
    def request_json(self, method: str, path: str, **kwargs: Any) -> Any: ...
    def apply(self, manifest: dict[str, Any], *, namespace: str | None, force: bool) -> Any: ...
    def create(self, manifest: dict[str, Any], *, namespace: str | None) -> Any: ...
    def replace(self, manifest: dict[str, Any], *, namespace: str | None) -> Any: ...
    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> Any: ...
    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> Any: ...


@dataclass(frozen=True)
class ToolConfig:
    fence_id: str
    namespace: str  # the monitor's namespace: the default for namespaced calls
    file_roots: tuple[str, ...] = ()
    http_timeout_seconds: float = 15.0
    http_max_bytes: int = 256 * 1024
    file_max_bytes: int = 256 * 1024
    log_max_bytes: int = 256 * 1024
    allow_commands: bool = False
    command_timeout_seconds: float = 300.0
    result_max_chars: int = 16_000


# --- redaction and formatting (pure) -----------------------------------------------------


def _redact_secret(obj: dict[str, Any]) -> dict[str, Any]:
    for key in ("data", "stringData"):
        if isinstance(obj.get(key), dict):
            obj[key] = {k: REDACTED for k in obj[key]}
        elif key in obj:
            obj[key] = REDACTED
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict) and LAST_APPLIED in annotations:
        annotations[LAST_APPLIED] = REDACTED
    return obj


def redact(doc: Any) -> Any:
    """A copy of `doc` with every Secret's values replaced; other objects are unchanged."""
    if not isinstance(doc, dict | list):
        return doc
    doc = copy.deepcopy(doc)
    _redact_in_place(doc, secret=False)
    return doc


def _redact_in_place(doc: Any, *, secret: bool) -> None:
    if isinstance(doc, list):
        for item in doc:
            _redact_in_place(item, secret=secret)
        return
    if not isinstance(doc, dict):
        return
    kind = doc.get("kind")
    is_secret = secret or kind == "Secret"
    if is_secret and ("data" in doc or "stringData" in doc or "metadata" in doc):
        _redact_secret(doc)
    items = doc.get("items")
    if isinstance(items, list):
        for item in items:
            _redact_in_place(item, secret=kind == "SecretList" or is_secret)
    for key in ("object", "oldObject"):  # watch events, admission-like shapes
        if isinstance(doc.get(key), dict):
            _redact_in_place(doc[key], secret=False)


def _strip_noise(obj: Any) -> Any:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        for item in obj.get("items") or []:
            _strip_noise(item)
    return obj


def to_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _age(ts: str | None, now: datetime) -> str:
    if not ts:
        return "?"
    try:
        then = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    seconds = int((now - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _item_state(item: dict[str, Any]) -> str:
    status = item.get("status") or {}
    spec = item.get("spec") or {}
    bits: list[str] = []
    if "replicas" in spec or "readyReplicas" in status:
        bits.append(f"ready={status.get('readyReplicas', 0)}/{spec.get('replicas', '?')}")
        if "updatedReplicas" in status:
            bits.append(f"updated={status['updatedReplicas']}")
    if status.get("phase"):
        bits.append(f"phase={status['phase']}")
    statuses = status.get("containerStatuses") or []
    if statuses:
        ready = sum(1 for c in statuses if c.get("ready"))
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
        bits.append(f"containers={ready}/{len(statuses)} restarts={restarts}")
        for c in statuses:
            waiting = (c.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                bits.append(f"{c.get('name')}:{waiting['reason']}")
    if "succeeded" in status or "failed" in status or "active" in status:
        bits.append(
            f"active={status.get('active', 0)} succeeded={status.get('succeeded', 0)} "
            f"failed={status.get('failed', 0)}"
        )
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Available", "Progressing", "Ready", "Complete", "Failed"):
            bits.append(f"{cond['type']}={cond.get('status')}")
    return " ".join(bits)


def summarize_list(doc: Any, *, now: datetime | None = None) -> str:
    """One line per item: namespace/name, age and a state summary."""
    if not isinstance(doc, dict):
        return str(doc)
    now = now or datetime.now(UTC)
    items = doc.get("items") or []
    kind = str(doc.get("kind", "List")).removesuffix("List") or "item"
    lines = [f"{len(items)} {kind} item(s)"]
    for item in items:
        meta = item.get("metadata") or {}
        ns = meta.get("namespace")
        name = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
        line = f"- {name} age={_age(meta.get('creationTimestamp'), now)}"
        state = _item_state(item)
        if state:
            line += f" {state}"
        if item.get("kind") == "Secret" or kind == "Secret":
            line += f" keys={sorted((item.get('data') or {}).keys())}"
        lines.append(line)
    remaining = (doc.get("metadata") or {}).get("remainingItemCount")
    if remaining or (doc.get("metadata") or {}).get("continue"):
        lines.append(f"(more items exist: {remaining or 'unknown'} not shown; narrow the query)")
    lines.append("Use k8s_get for one object's full state.")
    return "\n".join(lines)


def describe(obj: Any) -> str:
    """A describe-like view: a short header, then the object without managedFields."""
    if not isinstance(obj, dict):
        return str(obj)
    meta = obj.get("metadata") or {}
    header = [f"{obj.get('kind', '?')} {meta.get('namespace', '-')}/{meta.get('name', '?')}"]
    state = _item_state(obj)
    if state:
        header.append(f"state: {state}")
    return "\n".join(header) + "\n---\n" + to_yaml(obj)


def summarize_events(doc: Any) -> str:
    items = (doc or {}).get("items") or [] if isinstance(doc, dict) else []
    if not items:
        return "no events found for this object"

    def when(e: dict[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")

    lines = []
    for e in sorted(items, key=when):
        lines.append(
            f"{when(e)} {e.get('type', '')} {e.get('reason', '')} x{e.get('count') or 1}: "
            f"{e.get('message', '')}".strip()
        )
    return "\n".join(lines)


# --- the tools ---------------------------------------------------------------------------


Runner = Callable[[list[str], float], tuple[int, str]]


def run_command(argv: list[str], timeout: float) -> tuple[int, str]:
    """Run argv without a shell; combined output."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g}s"
    except OSError as exc:
        return 127, f"could not start: {exc}"
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    return proc.returncode, out + (f"\n[stderr]\n{err}" if err else "")


class StepTools:
    """The tool implementations. Each returns the string the model sees."""

    def __init__(
        self,
        kube: Kube | None,
        config: ToolConfig,
        *,
        http: httpx2.Client | None = None,
        runner: Runner = run_command,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.config = config
        self.http = http or httpx2.Client(
            timeout=config.http_timeout_seconds, follow_redirects=False
        )
        self.runner = runner
        self.clock = clock
        self.refusals: list[str] = []  # what was refused, for the audit trail and tests

    # --- helpers ---------------------------------------------------------------------------

    def _out(
        self, text: str, source: str, *, keep: Literal["head", "tail"] = "head", hint: str = ""
    ) -> str:
        kwargs: dict[str, Any] = {"keep": keep}
        if hint:
            kwargs["hint"] = hint
        return fenced_result(
            text, self.config.fence_id, source=source, limit=self.config.result_max_chars, **kwargs
        )

    def _refuse(self, what: str) -> str:
        message = READ_ONLY_REFUSAL.format(what=what)
        self.refusals.append(what)
        return message

    def _need_kube(self) -> Kube:
        if self.kube is None:
            raise _ToolProblem("no Kubernetes access is configured for this step")
        return self.kube

    def _ns(self, namespace: str | None) -> str:
        return (namespace or "").strip() or self.config.namespace

    @staticmethod
    def _api_version(kind: str, api_version: str | None) -> str:
        if api_version and api_version.strip():
            return api_version.strip()
        found = COMMON_KINDS.get(kind.strip().lower().removesuffix("s")) or COMMON_KINDS.get(
            kind.strip().lower()
        )
        if not found:
            raise _ToolProblem(f"api_version is required for kind {kind!r} (e.g. 'apps/v1')")
        return found

    def _call(self, source: str, fn: Callable[[], str], **out: Any) -> str:
        from goalkeeper.step.kube import KubeError

        try:
            return self._out(fn(), source, **out)
        except _ToolProblem as exc:
            return f"ERROR: {exc}"
        except KubeError as exc:
            return self._out(f"ERROR: Kubernetes API: {exc}", source)
        except httpx2.HTTPError as exc:
            return self._out(f"ERROR: HTTP: {type(exc).__name__}: {exc}", source)

    # --- read tools ------------------------------------------------------------------------

    def k8s_get(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        def go() -> str:
            av = self._api_version(kind, api_version)
            obj = self._need_kube().get(av, kind, name, self._ns(namespace))
            return describe(_strip_noise(redact(obj)))

        return self._call(f"k8s_get {kind} {name}", go)

    def k8s_list(
        self,
        kind: str,
        namespace: str | None = None,
        api_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        all_namespaces: bool = False,
        limit: int = 100,
    ) -> str:
        def go() -> str:
            av = self._api_version(kind, api_version)
            doc = self._need_kube().list(
                av,
                kind,
                None if all_namespaces else self._ns(namespace),
                label_selector=label_selector,
                field_selector=field_selector,
                limit=max(1, min(int(limit), 500)),
            )
            return summarize_list(_strip_noise(redact(doc)), now=self.clock())

        return self._call(f"k8s_list {kind}", go)

    def pod_logs(
        self,
        pod: str,
        namespace: str | None = None,
        container: str | None = None,
        tail_lines: int = 200,
        limit_bytes: int = 65536,
        previous: bool = False,
    ) -> str:
        def go() -> str:
            text = self._need_kube().logs(
                pod,
                self._ns(namespace),
                container=container or None,
                tail_lines=max(1, min(int(tail_lines), 10_000)),
                limit_bytes=max(1, min(int(limit_bytes), self.config.log_max_bytes)),
                previous=previous,
            )
            return text or "(no log lines)"

        return self._call(
            f"pod_logs {pod}",
            go,
            keep="tail",
            hint="use fewer tail_lines or a smaller limit_bytes, or pick one container",
        )

    def k8s_events(self, name: str, kind: str | None = None, namespace: str | None = None) -> str:
        def go() -> str:
            return summarize_events(
                self._need_kube().events(self._ns(namespace), kind=kind or None, name=name)
            )

        return self._call(f"k8s_events {kind or ''} {name}", go, keep="tail")

    def k8s_raw(
        self, path: str, method: str = "GET", body: dict[str, Any] | list[Any] | None = None
    ) -> str:
        verb = method.strip().upper()
        if verb not in READ_METHODS:
            return self._refuse(f"{verb} {path}")
        return self._raw(verb, path, None)

    def _raw(self, verb: str, path: str, body: Any) -> str:
        if not path.startswith("/"):
            return "ERROR: path must be an API path starting with '/', e.g. /api/v1/namespaces"
        if "watch=" in path or "/watch/" in path:
            return "ERROR: watches are not supported; read the current state instead"

        def go() -> str:
            doc = self._need_kube().request_json(verb, path, body=body)
            doc = _strip_noise(redact(doc))
            return to_yaml(doc) if isinstance(doc, dict | list) else str(doc)

        return self._call(f"k8s_raw {verb} {path}", go)

    def http_get(self, url: str, headers: dict[str, str] | None = None) -> str:
        return self._http("GET", url, headers=headers, body=None)

    def _http(
        self, verb: str, url: str, *, headers: dict[str, str] | None, body: str | None
    ) -> str:
        if not url.startswith(("http://", "https://")):
            return "ERROR: only http:// and https:// URLs are supported"

        def go() -> str:
            limit = self.config.http_max_bytes
            with self.http.stream(
                verb,
                url,
                headers=headers or None,
                content=body,
                timeout=self.config.http_timeout_seconds,
            ) as response:
                chunks: list[bytes] = []
                size = 0
                truncated = False
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        truncated = True
                        break
                data = b"".join(chunks)[:limit]
                ctype = response.headers.get("content-type", "")
                head = f"HTTP {response.status_code} {verb} {url}\ncontent-type: {ctype}\n"
                if truncated:
                    head += f"(body cut at {limit} bytes)\n"
                return head + "\n" + data.decode("utf-8", "replace")

        return self._call(f"http {verb} {url}", go)

    def read_file(self, path: str, offset: int = 0, max_bytes: int = 65536) -> str:
        roots = self.config.file_roots
        if not roots:
            return "ERROR: no mounted volumes are configured for file reads (GOALKEEPER_FILE_ROOTS)"
        real = os.path.realpath(path)
        if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            return f"ERROR: {path} is outside the readable volumes: {', '.join(roots)}"

        def go() -> str:
            if os.path.isdir(real):
                names = sorted(os.listdir(real))
                return f"directory {real} ({len(names)} entries)\n" + "\n".join(names)
            size = os.path.getsize(real)
            count = max(1, min(int(max_bytes), self.config.file_max_bytes))
            with open(real, "rb") as handle:
                handle.seek(max(0, int(offset)))
                data = handle.read(count)
            start = max(0, int(offset))
            head = f"file {real}: bytes {start}-{start + len(data)} of {size}\n"
            return head + data.decode("utf-8", "replace")

        try:
            return self._call(f"read_file {path}", go)
        except OSError as exc:
            return self._out(f"ERROR: {exc}", f"read_file {path}")

    # --- act tools -------------------------------------------------------------------------

    def k8s_apply(self, manifest: dict[str, Any], force: bool = False) -> str:
        def go() -> str:
            obj = self._need_kube().apply(
                _manifest(manifest), namespace=self.config.namespace, force=force
            )
            return "applied\n" + describe(_strip_noise(redact(obj)))

        return self._call("k8s_apply", go)

    def k8s_create(self, manifest: dict[str, Any]) -> str:
        def go() -> str:
            obj = self._need_kube().create(_manifest(manifest), namespace=self.config.namespace)
            return "created\n" + describe(_strip_noise(redact(obj)))

        return self._call("k8s_create", go)

    def k8s_replace(self, manifest: dict[str, Any]) -> str:
        def go() -> str:
            obj = self._need_kube().replace(_manifest(manifest), namespace=self.config.namespace)
            return "replaced\n" + describe(_strip_noise(redact(obj)))

        return self._call("k8s_replace", go)

    def k8s_patch(
        self,
        kind: str,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        api_version: str | None = None,
        patch_type: Literal["merge", "strategic", "json"] = "merge",
    ) -> str:
        def go() -> str:
            av = self._api_version(kind, api_version)
            obj = self._need_kube().patch(
                av, kind, name, self._ns(namespace), patch, patch_type=patch_type
            )
            return "patched\n" + describe(_strip_noise(redact(obj)))

        return self._call(f"k8s_patch {kind} {name}", go)

    def k8s_delete(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        def go() -> str:
            av = self._api_version(kind, api_version)
            obj = self._need_kube().delete(av, kind, name, self._ns(namespace))
            status = obj.get("status") if isinstance(obj, dict) else None
            return f"deleted {kind} {name} ({status or 'accepted'})"

        return self._call(f"k8s_delete {kind} {name}", go)

    def k8s_scale(
        self,
        kind: str,
        name: str,
        replicas: int,
        namespace: str | None = None,
        api_version: str | None = None,
    ) -> str:
        def go() -> str:
            if int(replicas) < 0:
                raise _ToolProblem("replicas must not be negative")
            av = self._api_version(kind, api_version)
            obj = self._need_kube().patch(
                av, kind, name, self._ns(namespace), {"spec": {"replicas": int(replicas)}}
            )
            spec = (obj or {}).get("spec", {}) if isinstance(obj, dict) else {}
            return f"scaled {kind} {name}: spec.replicas is now {spec.get('replicas')}"

        return self._call(f"k8s_scale {kind} {name}", go)

    def k8s_rollout_restart(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        def go() -> str:
            av = self._api_version(kind, api_version)
            at = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
            patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}}}
            self._need_kube().patch(av, kind, name, self._ns(namespace), patch)
            return f"restarted {kind} {name}: pod template annotation {RESTARTED_AT}={at}"

        return self._call(f"k8s_rollout_restart {kind} {name}", go)

    def k8s_raw_write(
        self, path: str, method: str = "GET", body: dict[str, Any] | list[Any] | None = None
    ) -> str:
        verb = method.strip().upper()
        if verb not in {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}:
            return f"ERROR: unsupported method {method!r}"
        return self._raw(verb, path, body)

    def http_request(
        self,
        url: str,
        method: str = "GET",
        body: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> str:
        verb = method.strip().upper()
        if verb not in {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}:
            return f"ERROR: unsupported method {method!r}"
        return self._http(verb, url, headers=headers, body=body)

    def run(self, argv: list[str], timeout_seconds: float = 120) -> str:
        if not self.config.allow_commands:
            return f"{REFUSED} running commands is disabled (GOALKEEPER_ALLOW_COMMANDS is off)"
        if not argv:
            return "ERROR: argv must not be empty"
        timeout = max(1.0, min(float(timeout_seconds), self.config.command_timeout_seconds))
        code, output = self.runner([str(a) for a in argv], timeout)
        return self._out(
            f"exit code {code}\n{output}",
            f"run {argv[0]}",
            keep="tail",
            hint="make the command print less (filter or tail its output)",
        )


class _ToolProblem(Exception):
    """A problem with the call itself, reported to the model as an error line."""


def _manifest(manifest: Any) -> dict[str, Any]:
    if isinstance(manifest, str):
        try:
            manifest = yaml.safe_load(manifest)
        except yaml.YAMLError as exc:
            raise _ToolProblem(f"manifest is not valid YAML/JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise _ToolProblem("manifest must be one object")
    meta = manifest.get("metadata")
    if not manifest.get("apiVersion") or not manifest.get("kind") or not isinstance(meta, dict):
        raise _ToolProblem("manifest needs apiVersion, kind and metadata.name")
    if not meta.get("name"):
        raise _ToolProblem("manifest needs metadata.name")
    return manifest


# --- toolsets ----------------------------------------------------------------------------

# The descriptions are fixed text: tool definitions must not change between checks.


def observe_toolset(tools: StepTools) -> FunctionToolset[Any]:
    """Read-only tools. There is no write tool; the generic ones refuse mutating verbs."""
    ts: FunctionToolset[Any] = FunctionToolset()

    @ts.tool_plain
    def k8s_get(
        kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        """Read one Kubernetes object (describe-like view). Secret values are never shown.

        Args:
            kind: The object kind, e.g. Deployment, Pod, Job, ConfigMap, or a custom kind.
            name: The object name.
            namespace: Defaults to the monitor's namespace.
            api_version: e.g. apps/v1; may be omitted for common built-in kinds.
        """
        return tools.k8s_get(kind, name, namespace, api_version)

    @ts.tool_plain
    def k8s_list(
        kind: str,
        namespace: str | None = None,
        api_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        all_namespaces: bool = False,
        limit: int = 100,
    ) -> str:
        """List Kubernetes objects of one kind, one summary line each.

        Args:
            kind: The object kind, e.g. Pod or Deployment.
            namespace: Defaults to the monitor's namespace.
            api_version: e.g. batch/v1; may be omitted for common built-in kinds.
            label_selector: e.g. app=web.
            field_selector: e.g. status.phase=Running.
            all_namespaces: List across namespaces instead of one.
            limit: At most this many items (1-500).
        """
        return tools.k8s_list(
            kind, namespace, api_version, label_selector, field_selector, all_namespaces, limit
        )

    @ts.tool_plain
    def pod_logs(
        pod: str,
        namespace: str | None = None,
        container: str | None = None,
        tail_lines: int = 200,
        limit_bytes: int = 65536,
        previous: bool = False,
    ) -> str:
        """Read the end of a pod's log.

        Args:
            pod: The pod name.
            namespace: Defaults to the monitor's namespace.
            container: Needed when the pod has several containers.
            tail_lines: How many lines from the end (1-10000).
            limit_bytes: At most this many bytes.
            previous: The previous (crashed) container instance.
        """
        return tools.pod_logs(pod, namespace, container, tail_lines, limit_bytes, previous)

    @ts.tool_plain
    def k8s_events(name: str, kind: str | None = None, namespace: str | None = None) -> str:
        """Read the events recorded for one object, oldest first.

        Args:
            name: The object name.
            kind: The object kind, e.g. Pod; narrows the search.
            namespace: Defaults to the monitor's namespace.
        """
        return tools.k8s_events(name, kind, namespace)

    @ts.tool_plain
    def k8s_raw(
        path: str, method: str = "GET", body: dict[str, Any] | list[Any] | None = None
    ) -> str:
        """Send a read request to any Kubernetes API path. Only GET is allowed in this step.

        Args:
            path: An API path with optional query, e.g. /apis/batch/v1/namespaces/x/jobs?limit=5.
            method: GET. Any other method is refused.
            body: Not used for reads.
        """
        return tools.k8s_raw(path, method, body)

    @ts.tool_plain
    def http_get(url: str, headers: dict[str, str] | None = None) -> str:
        """HTTP GET a target endpoint (status page, metrics, API). Time and size are limited.

        Args:
            url: An http:// or https:// URL.
            headers: Optional request headers.
        """
        return tools.http_get(url, headers)

    @ts.tool_plain
    def read_file(path: str, offset: int = 0, max_bytes: int = 65536) -> str:
        """Read part of a file, or list a directory, on a mounted volume.

        Args:
            path: An absolute path inside one of the mounted volumes.
            offset: Byte offset to start at.
            max_bytes: At most this many bytes.
        """
        return tools.read_file(path, offset, max_bytes)

    return ts


def act_toolset(tools: StepTools) -> FunctionToolset[Any]:
    """The observe tools plus the mutations an act step may need."""
    ts = observe_toolset(tools)
    ts.tools.pop("k8s_raw", None)

    @ts.tool_plain
    def k8s_raw(
        path: str, method: str = "GET", body: dict[str, Any] | list[Any] | None = None
    ) -> str:
        """Send any request to a Kubernetes API path (GET, POST, PUT, PATCH, DELETE).

        Args:
            path: An API path with optional query.
            method: The HTTP method.
            body: The JSON body for POST, PUT and PATCH (PATCH uses merge patch).
        """
        return tools.k8s_raw_write(path, method, body)

    @ts.tool_plain
    def k8s_apply(manifest: dict[str, Any], force: bool = False) -> str:
        """Server-side apply one object (creates it or updates the fields it names).

        Args:
            manifest: The object, with apiVersion, kind and metadata.name.
            force: Take over fields another manager owns.
        """
        return tools.k8s_apply(manifest, force)

    @ts.tool_plain
    def k8s_create(manifest: dict[str, Any]) -> str:
        """Create one object.

        Args:
            manifest: The object, with apiVersion, kind and metadata.name.
        """
        return tools.k8s_create(manifest)

    @ts.tool_plain
    def k8s_replace(manifest: dict[str, Any]) -> str:
        """Replace one existing object with the given one.

        Args:
            manifest: The full object, with apiVersion, kind and metadata.name.
        """
        return tools.k8s_replace(manifest)

    @ts.tool_plain
    def k8s_patch(
        kind: str,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        api_version: str | None = None,
        patch_type: Literal["merge", "strategic", "json"] = "merge",
    ) -> str:
        """Patch one object.

        Args:
            kind: The object kind.
            name: The object name.
            patch: A merge or strategic patch object, or a JSON patch list.
            namespace: Defaults to the monitor's namespace.
            api_version: e.g. apps/v1; may be omitted for common built-in kinds.
            patch_type: merge, strategic or json.
        """
        return tools.k8s_patch(kind, name, patch, namespace, api_version, patch_type)

    @ts.tool_plain
    def k8s_delete(
        kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        """Delete one object.

        Args:
            kind: The object kind.
            name: The object name.
            namespace: Defaults to the monitor's namespace.
            api_version: May be omitted for common built-in kinds.
        """
        return tools.k8s_delete(kind, name, namespace, api_version)

    @ts.tool_plain
    def k8s_scale(
        kind: str,
        name: str,
        replicas: int,
        namespace: str | None = None,
        api_version: str | None = None,
    ) -> str:
        """Set the replica count of a Deployment, StatefulSet or ReplicaSet.

        Args:
            kind: Deployment, StatefulSet or ReplicaSet.
            name: The object name.
            replicas: The new replica count.
            namespace: Defaults to the monitor's namespace.
            api_version: May be omitted for common built-in kinds.
        """
        return tools.k8s_scale(kind, name, replicas, namespace, api_version)

    @ts.tool_plain
    def k8s_rollout_restart(
        kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        """Restart a workload's pods by stamping its pod template (like kubectl rollout restart).

        Args:
            kind: Deployment, StatefulSet or DaemonSet.
            name: The object name.
            namespace: Defaults to the monitor's namespace.
            api_version: May be omitted for common built-in kinds.
        """
        return tools.k8s_rollout_restart(kind, name, namespace, api_version)

    @ts.tool_plain
    def http_request(
        url: str,
        method: str = "GET",
        body: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> str:
        """Send an HTTP request to a target endpoint. Time and size are limited.

        Args:
            url: An http:// or https:// URL.
            method: GET, HEAD, POST, PUT, PATCH or DELETE.
            body: The request body.
            headers: Optional request headers.
        """
        return tools.http_request(url, method, body, headers)

    if tools.config.allow_commands:

        @ts.tool_plain
        def run_command(argv: list[str], timeout_seconds: float = 120) -> str:
            """Run a command (no shell) in the step's container and return its output.

            Args:
                argv: The program and its arguments.
                timeout_seconds: Stop it after this long.
            """
            return tools.run(argv, timeout_seconds)

    return ts


__all__ = [
    "COMMON_KINDS",
    "REDACTED",
    "REFUSED",
    "Kube",
    "StepTools",
    "ToolConfig",
    "act_toolset",
    "describe",
    "observe_toolset",
    "redact",
    "summarize_events",
    "summarize_list",
]
