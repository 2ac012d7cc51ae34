"""The agent's tools: read-only ones for observe, mutations added for act.

Each tool is one method of `StepTools`; `observe_toolset` and `act_toolset` register those
methods as they are, their docstrings being what the model reads. Everything a tool returns
goes through `fence.fenced_result`: bounded to 16,000 characters with a marker, and fenced
as untrusted target data with the run's fence id. A refusal is the step's own text and is
returned unfenced, starting with `REFUSED:`.

What the tools read is redacted first (`redact`), and the model's own key is scrubbed from
every result. The file tools never read process state or mounted credentials (`OFF_LIMITS`,
`ToolConfig.withheld_files`), whatever the roots allow. Every write of an act tool passes
through `_check_write`, against the action's mutation set (`mutations`), before any request is
sent; HTTP goes only where `egress` allows. The Kubernetes backend, the HTTP client, the
resolver and the command runner are injected, so the agent can be tested without a cluster.
"""

from __future__ import annotations

import copy
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import httpx2
import yaml
from pydantic_ai.toolsets import FunctionToolset

from goalkeeper.core.models import JobEnd
from goalkeeper.step import egress
from goalkeeper.step.fence import fenced_result
from goalkeeper.step.mutations import Command, HttpCall, KubeObject, MutationSet, Write
from goalkeeper.step.processes import model_credentials, run_argv
from goalkeeper.step.redact import redact, redact_part, redact_text, scrub
from goalkeeper.step.render import (
    describe,
    patched_view,
    state_line,
    strip_noise,
    summarize_events,
    summarize_list,
    to_yaml,
)

REFUSED = "REFUSED:"
READ_ONLY_REFUSAL = (
    f"{REFUSED} this is a read-only observe step; {{what}} is not allowed here. Report the "
    "needed change as an action request instead (route 'act'), naming the authorized action."
)
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
READ_METHODS = frozenset({"GET", "HEAD"})
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9._:@-]+")
# API paths that tunnel to pods, services or nodes, past the HTTP allow list and the fence.
TUNNELS = frozenset({"proxy", "exec", "attach", "portforward"})
# Never read by the file tools, whatever GOALKEEPER_FILE_ROOTS says: process and kernel state
# (the step's own environment among it), and mounted credentials (service account and cloud
# identity tokens, the model key's Secret volume).
OFF_LIMITS = ("/proc", "/sys", "/var/run/secrets", "/run/secrets")
# A file read is redacted with this much of the file either side of it, so a read from an
# offset inside a credential still sees the name or the start that marks it.
FILE_CONTEXT_BYTES = 256 * 1024
# A read from an offset could start inside a credential, past what marks it.
RANGE_HEADERS = frozenset({"range", "if-range"})

# Labels the Job controller stamps on a Job and its pod template when it makes the selector;
# a Job created again gets new ones.
JOB_CONTROLLER_LABELS = frozenset(
    {
        "controller-uid",
        "job-name",
        "batch.kubernetes.io/controller-uid",
        "batch.kubernetes.io/job-name",
    }
)
_ENDED = {JobEnd.Complete: "succeeded", JobEnd.Failed: "failed"}
# How long a re-run waits for the deleted Job's name to be free (its finalizers to finish).
RERUN_WAIT_SECONDS = 60.0

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

    def resource_info(self, api_version: str, kind: str) -> tuple[str, str, bool]: ...
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


# The Kubernetes verbs each write tool sends; a server-side apply may also create.
_TOOL_VERBS = {
    "k8s_patch": ("patch",),
    "k8s_scale": ("patch",),
    "k8s_rollout_restart": ("patch",),
    "k8s_apply": ("patch", "create"),
    "k8s_create": ("create",),
    "k8s_replace": ("update",),
    "k8s_delete": ("delete",),
    "k8s_rerun_job": ("delete", "create"),
    "k8s_raw PATCH": ("patch",),
    "k8s_raw POST": ("create",),
    "k8s_raw PUT": ("update",),
    "k8s_raw DELETE": ("delete",),
}


@dataclass(frozen=True)
class ToolConfig:
    fence_id: str
    namespace: str  # the monitor's namespace: the default for namespaced calls
    mutation_set: tuple[str, ...] = ()  # the act step's action.mutationSet; empty: no writes
    http_allowed_hosts: tuple[str, ...] = ()  # `host` or `host:port`; empty: no HTTP
    file_roots: tuple[str, ...] = ()
    # Refused by the file tools besides OFF_LIMITS: the model key's file, the kubeconfig.
    withheld_files: tuple[str, ...] = ()
    http_timeout_seconds: float = 15.0
    http_max_bytes: int = 256 * 1024
    file_max_bytes: int = 256 * 1024
    log_max_bytes: int = 256 * 1024
    allow_commands: bool = False
    # Kubernetes write verbs beyond patch (and deleting a Job's pods) the act tools use.
    extra_verbs: tuple[str, ...] = ()
    command_timeout_seconds: float = 300.0
    result_max_chars: int = 16_000


Runner = Callable[[list[str], float], tuple[int, str]]


class StepTools:
    """The tool implementations. Each returns the string the model sees."""

    def __init__(
        self,
        kube: Kube | None,
        config: ToolConfig,
        *,
        http: httpx2.Client | None = None,
        runner: Runner = run_argv,
        resolver: egress.Resolver = egress.resolve,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube = kube
        self.config = config
        self.http = http or egress.client(config.http_timeout_seconds)
        self.egress = egress.Egress(
            egress.parse_allowed(config.http_allowed_hosts), resolver=resolver
        )
        self.mutations = MutationSet(config.mutation_set, config.namespace)
        self.runner = runner
        self.clock = clock
        self.sleep = sleep
        self.refusals: list[str] = []  # what was refused, for the audit trail and tests

    # --- helpers ---------------------------------------------------------------------------

    def _out(
        self, text: str, source: str, *, keep: Literal["head", "tail"] = "head", hint: str = ""
    ) -> str:
        kwargs: dict[str, Any] = {"keep": keep}
        if hint:
            kwargs["hint"] = hint
        return fenced_result(
            scrub(text, model_credentials()),
            self.config.fence_id,
            source=source,
            limit=self.config.result_max_chars,
            **kwargs,
        )

    def fenced(self, text: str, source: str) -> str:
        """Target text the step read itself, fenced as a tool result is."""
        return self._out(text, source)

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
    def _split(name: str, namespace: str | None) -> tuple[str, str | None]:
        """A `namespace/name` given as the name, split; refused when the namespaces differ."""
        name = name.strip()
        if "/" not in name:
            return name, namespace
        ns, _, bare = name.partition("/")
        if not ns or not bare or "/" in bare:
            raise _ToolProblem(f"name {name!r} is neither a name nor namespace/name")
        given = (namespace or "").strip()
        if given and given != ns:
            raise _ToolProblem(
                f"name {name!r} says namespace {ns!r} but the namespace argument is {given!r}; "
                "pass the bare name and one namespace"
            )
        return bare, ns

    @staticmethod
    def _check_kind(kind: str) -> None:
        if "/" in kind:
            base, _, name = kind.strip().partition("/")
            raise _ToolProblem(
                f"kind {kind!r} holds a name: pass kind and name separately "
                f"(kind={base!r}, name={name!r})"
            )

    @classmethod
    def _api_version(cls, kind: str, api_version: str | None) -> str:
        cls._check_kind(kind)
        if api_version and api_version.strip():
            return api_version.strip()
        found = COMMON_KINDS.get(kind.strip().lower().removesuffix("s")) or COMMON_KINDS.get(
            kind.strip().lower()
        )
        if not found:
            raise _ToolProblem(f"api_version is required for kind {kind!r} (e.g. 'apps/v1')")
        return found

    def _call(self, source: str, fn: Callable[[], str | Led], **out: Any) -> str:
        from goalkeeper.step.kube import KubeError

        try:
            text = fn()
            if isinstance(text, Led):
                fenced = self._out(text.body, source, **out)
                return f"{text.lead}\n{fenced}" if text.lead else fenced
            return self._out(text, source, **out)
        except _ToolProblem as exc:
            return f"ERROR: {exc}"
        except _Refused as exc:
            return str(exc)
        except egress.EgressRefused as exc:
            return f"{REFUSED} {exc}"
        except egress.Unreachable as exc:
            return f"ERROR: {exc}"
        except KubeError as exc:
            return self._out(f"ERROR: Kubernetes API: {exc}", source)
        except httpx2.HTTPError as exc:
            return self._out(f"ERROR: HTTP: {type(exc).__name__}: {exc}", source)
        except OSError as exc:
            return self._out(f"ERROR: {exc}", source)

    # --- the write check: every act write passes here before anything is sent -------------

    def _check_write(self, tool: str, write: Write) -> None:
        """Refuse (raise `_Refused`) a write outside the action's mutation set, or with a
        verb the Monitor's author was not checked for (core/permissions.py)."""
        label = self.mutations.label(write)
        if not (self.mutations.covers(write) or self._covered_by_controller(write)):
            self.refusals.append(f"{tool} {label}")
            raise _Refused(
                f"{REFUSED} {label} is not in the action's mutation set ({self.mutations}); "
                "nothing was sent. Change only what the action names, or report outcome blocked."
            )
        if not isinstance(write, KubeObject):
            return
        verbs = set(_TOOL_VERBS.get(tool, ("create", "update", "delete")))
        allowed = {"patch", *self.config.extra_verbs}
        if (write.plural, write.group) == ("pods", ""):
            allowed.add("delete")  # a Job's failed pods, see _covered_by_controller
        if not verbs <= allowed:
            self.refusals.append(f"{tool} {label}")
            raise _Refused(
                f"{REFUSED} {tool} would {' and '.join(sorted(verbs - allowed))} {label}; act "
                "steps patch, and do more only where GOALKEEPER_ACT_EXTRA_VERBS says so; "
                "nothing was sent."
            )

    def _covered_by_controller(self, write: Write) -> bool:
        """A Pod write is covered when the live Pod's controller is in the mutation set."""
        from goalkeeper.step.kube import KubeError

        if not isinstance(write, KubeObject) or (write.plural, write.group) != ("pods", ""):
            return False
        if write.name is None:
            return False
        try:
            pod = self._need_kube().get("v1", "Pod", write.name, write.namespace)
            refs = ((pod or {}).get("metadata") or {}).get("ownerReferences") or []
            owner = next((r for r in refs if isinstance(r, dict) and r.get("controller")), None)
            if owner is None:
                return False
            kind, plural, namespaced = self._need_kube().resource_info(
                str(owner.get("apiVersion")), str(owner.get("kind"))
            )
        except KubeError:
            return False
        owner_object = KubeObject(
            kind=kind,
            plural=plural,
            group=_group(str(owner.get("apiVersion"))),
            namespace=write.namespace if namespaced else None,
            name=str(owner.get("name") or ""),
        )
        return bool(owner_object.name) and self.mutations.covers(owner_object)

    def _object(
        self,
        api_version: str,
        kind: str,
        name: str | None,
        namespace: str | None,
        subresource: str | None = None,
    ) -> KubeObject:
        real_kind, plural, namespaced = self._need_kube().resource_info(api_version, kind)
        return KubeObject(
            kind=real_kind,
            plural=plural,
            group=_group(api_version),
            namespace=self._ns(namespace) if namespaced else None,
            name=name,
            subresource=subresource,
        )

    def _manifest_object(self, manifest: dict[str, Any]) -> KubeObject:
        meta = manifest["metadata"]
        return self._object(
            str(manifest["apiVersion"]),
            str(manifest["kind"]),
            str(meta["name"]),
            meta.get("namespace"),
        )

    def _path_object(self, path: str, body: Any) -> KubeObject:
        """The object a raw API path writes to, read the way the API server routes it."""
        segments = path.split("?", 1)[0].strip("/").split("/")
        if any(s in (".", "..") or not _PATH_SEGMENT.fullmatch(s) for s in segments):
            raise _ToolProblem(f"{path} is not a plain API path")
        if segments[:2] == ["api", "v1"]:
            api_version, rest = "v1", segments[2:]
        elif segments[0] == "apis" and len(segments) >= 3:
            api_version, rest = f"{segments[1]}/{segments[2]}", segments[3:]
        else:
            raise _ToolProblem(f"{path} is not a Kubernetes API path (/api/v1 or /apis/...)")
        namespace: str | None = None
        # namespaces/NS/RESOURCE... is a namespaced resource; namespaces/NS[/sub] the namespace
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise _ToolProblem(f"{path} names no resource")
        name = rest[1] if len(rest) > 1 else None
        if name is None and isinstance(body, dict):
            name = ((body.get("metadata") or {}).get("name")) or None
        kind, plural, namespaced = self._need_kube().resource_info(api_version, rest[0])
        if namespaced and namespace is None:
            namespace = "*"  # every namespace: no entry names that
        return KubeObject(
            kind=kind,
            plural=plural,
            group=_group(api_version),
            namespace=namespace if namespaced else None,
            name=str(name) if name else None,
            subresource="/".join(rest[2:]) or None,
        )

    # --- read tools ------------------------------------------------------------------------

    def k8s_get(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        """Read one Kubernetes object (describe-like view). Secret values are never shown.

        Args:
            kind: The object kind, e.g. Deployment, Pod, Job, ConfigMap, or a custom kind.
            name: The object name.
            namespace: Defaults to the monitor's namespace.
            api_version: e.g. apps/v1; may be omitted for common built-in kinds.
        """

        def go() -> Led:
            av = self._api_version(kind, api_version)
            bare, ns = self._split(name, namespace)
            obj = strip_noise(redact(self._need_kube().get(av, kind, bare, self._ns(ns))))
            return Led(state_line(obj) or "", describe(obj))

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
            return summarize_list(strip_noise(redact(doc)), now=self.clock())

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
        """Read the end of a pod's log.

        Args:
            pod: The pod name.
            namespace: Defaults to the monitor's namespace.
            container: Needed when the pod has several containers.
            tail_lines: How many lines from the end (1-10000).
            limit_bytes: At most this many bytes.
            previous: The previous (crashed) container instance.
        """

        def go() -> str:
            bare, ns = self._split(pod, namespace)
            text = self._need_kube().logs(
                bare,
                self._ns(ns),
                container=container or None,
                tail_lines=max(1, min(int(tail_lines), 10_000)),
                limit_bytes=max(1, min(int(limit_bytes), self.config.log_max_bytes)),
                previous=previous,
            )
            return redact_text(text) or "(no log lines)"

        return self._call(
            f"pod_logs {pod}",
            go,
            keep="tail",
            hint="use fewer tail_lines or a smaller limit_bytes, or pick one container",
        )

    def k8s_events(self, name: str, kind: str | None = None, namespace: str | None = None) -> str:
        """Read the events recorded for one object, oldest first.

        Args:
            name: The object name.
            kind: The object kind, e.g. Pod; narrows the search.
            namespace: Defaults to the monitor's namespace.
        """

        def go() -> str:
            if kind:
                self._check_kind(kind)
            bare, ns = self._split(name, namespace)
            doc = self._need_kube().events(self._ns(ns), kind=kind or None, name=bare)
            return summarize_events(redact(doc))

        return self._call(f"k8s_events {kind or ''} {name}", go, keep="tail")

    def k8s_raw(
        self, path: str, method: str = "GET", body: dict[str, Any] | list[Any] | None = None
    ) -> str:
        """Send a read request to any Kubernetes API path. Only GET is allowed in this step.

        Args:
            path: An API path with optional query, e.g. /apis/batch/v1/namespaces/x/jobs?limit=5.
            method: GET. Any other method is refused.
            body: Not used for reads.
        """
        verb = method.strip().upper()
        if verb not in READ_METHODS:
            return self._refuse(f"{verb} {path}")
        return self._raw(verb, path, None)

    def _raw(self, verb: str, path: str, body: Any) -> str:
        if not path.startswith("/"):
            return "ERROR: path must be an API path starting with '/', e.g. /api/v1/namespaces"
        if "watch=" in path or "/watch/" in path:
            return "ERROR: watches are not supported; read the current state instead"
        segments = set(path.split("?", 1)[0].split("/"))
        if segments & TUNNELS:
            return (
                f"ERROR: {', '.join(sorted(segments & TUNNELS))} through the API server is not "
                "supported; use http_get for a target endpoint"
            )

        def go() -> str:
            if verb in WRITE_METHODS:
                self._check_write(f"k8s_raw {verb}", self._path_object(path, body))
            doc = self._need_kube().request_json(verb, path, body=body)
            doc = strip_noise(redact(doc))
            return to_yaml(doc) if isinstance(doc, dict | list) else str(doc)

        return self._call(f"k8s_raw {verb} {path}", go)

    def http_get(self, url: str, headers: dict[str, str] | None = None) -> str:
        """HTTP GET a target endpoint (status page, metrics, API). Time and size are limited.

        Args:
            url: An http:// or https:// URL.
            headers: Optional request headers.
        """
        return self._http("GET", url, headers=headers, body=None)

    def _http(
        self, verb: str, url: str, *, headers: dict[str, str] | None, body: str | None
    ) -> str:
        if not url.startswith(("http://", "https://")):
            return "ERROR: only http:// and https:// URLs are supported"
        if any(name.strip().lower() in RANGE_HEADERS for name in headers or {}):
            return f"{REFUSED} a Range header is not allowed; read the whole body"

        def go() -> str:
            if verb not in READ_METHODS:
                target = egress.parse_target(url)
                self._check_write(
                    "http_request",
                    HttpCall(verb, target.scheme, target.host, target.port, target.path),
                )
            try:
                return self._fetch(verb, url, headers=headers, body=body)
            except httpx2.HTTPError as exc:
                target = egress.parse_target(url)
                problem = egress.connect_problem(target, exc, self.config.http_timeout_seconds)
                return f"ERROR: HTTP {verb} {redact_text(url)}: {problem}"

        return self._call(f"http {verb} {url}", go)

    def _fetch(
        self, verb: str, url: str, *, headers: dict[str, str] | None, body: str | None
    ) -> str:
        limit = self.config.http_max_bytes
        with self.egress.stream(
            self.http,
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
            if response.is_redirect:
                location = redact_text(response.headers.get("location", ""))
                head += f"redirect not followed: location: {location}\n"
            if truncated:
                head += f"(body cut at {limit} bytes)\n"
            return head + "\n" + redact_text(data.decode("utf-8", "replace"))

    def read_file(self, path: str, offset: int = 0, max_bytes: int = 65536) -> str:
        """Read part of a file, or list a directory, on a mounted volume.

        Args:
            path: An absolute path inside one of the mounted volumes.
            offset: Byte offset to start at.
            max_bytes: At most this many bytes.
        """
        roots = self.config.file_roots
        if not roots:
            return "ERROR: no mounted volumes are configured for file reads (GOALKEEPER_FILE_ROOTS)"

        def go() -> str:
            # Checked before opening (opening a device can act) and again on what was opened,
            # so a link swapped in between leads nowhere else.
            self._check_readable(os.path.realpath(path))
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                real = _opened_path(fd, path)
                self._check_readable(real)
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode):
                    names = sorted(os.listdir(fd))
                    return f"directory {real} ({len(names)} entries)\n" + "\n".join(names)
                if not stat.S_ISREG(info.st_mode):
                    raise _ToolProblem(f"{path} is not a regular file or a directory")
                start = min(max(0, int(offset)), info.st_size)
                count = max(1, min(int(max_bytes), self.config.file_max_bytes))
                end = min(start + count, info.st_size)
                # The part is redacted as its surroundings show it (`redact_part`).
                around = max(0, start - FILE_CONTEXT_BYTES)
                data = os.pread(fd, end + FILE_CONTEXT_BYTES - around, around)
                text = redact_part(data, start - around, end - around, model_credentials())
            finally:
                os.close(fd)
            return f"file {real}: bytes {start}-{end} of {info.st_size}\n{text}"

        return self._call(f"read_file {path}", go)

    def _check_readable(self, real: str) -> None:
        """Raise unless `real`, a resolved path, is in a root and none of the withheld."""
        roots = self.config.file_roots
        if not any(_within(real, r) or _within(real, os.path.realpath(r)) for r in roots):
            raise _ToolProblem(f"{real} is outside the readable volumes: {', '.join(roots)}")
        withheld = (*OFF_LIMITS, *self.config.withheld_files)
        if any(_within(real, p) or _within(real, os.path.realpath(p)) for p in withheld):
            raise _Refused(
                f"{REFUSED} {real} holds process state or credentials; the file tools never read it"
            )

    # --- act tools -------------------------------------------------------------------------

    def k8s_raw_write(
        self, path: str, method: str = "GET", body: dict[str, Any] | list[Any] | None = None
    ) -> str:
        """Send any request to a Kubernetes API path (GET, POST, PUT, PATCH, DELETE).

        Args:
            path: An API path with optional query.
            method: The HTTP method.
            body: The JSON body for POST, PUT and PATCH (PATCH uses merge patch).
        """
        verb = method.strip().upper()
        if verb not in READ_METHODS | WRITE_METHODS:
            return f"ERROR: unsupported method {method!r}"
        return self._raw(verb, path, body)

    def k8s_apply(self, manifest: dict[str, Any], force: bool = False) -> str:
        """Server-side apply one object (creates it or updates the fields it names).

        Args:
            manifest: The object, with apiVersion, kind and metadata.name.
            force: Take over fields another manager owns.
        """

        def go() -> str:
            checked = _manifest(manifest)
            self._check_write("k8s_apply", self._manifest_object(checked))
            obj = self._need_kube().apply(checked, namespace=self.config.namespace, force=force)
            return "applied\n" + describe(strip_noise(redact(obj)))

        return self._call("k8s_apply", go)

    def k8s_create(self, manifest: dict[str, Any]) -> str:
        """Create one object.

        Args:
            manifest: The object, with apiVersion, kind and metadata.name.
        """

        def go() -> str:
            checked = _manifest(manifest)
            self._check_write("k8s_create", self._manifest_object(checked))
            obj = self._need_kube().create(checked, namespace=self.config.namespace)
            return "created\n" + describe(strip_noise(redact(obj)))

        return self._call("k8s_create", go)

    def k8s_replace(self, manifest: dict[str, Any]) -> str:
        """Replace one existing object with the given one.

        Args:
            manifest: The full object, with apiVersion, kind and metadata.name.
        """

        def go() -> str:
            checked = _manifest(manifest)
            self._check_write("k8s_replace", self._manifest_object(checked))
            obj = self._need_kube().replace(checked, namespace=self.config.namespace)
            return "replaced\n" + describe(strip_noise(redact(obj)))

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
        """Patch one object.

        Args:
            kind: The object kind.
            name: The object name.
            patch: A merge or strategic patch object, or a JSON patch list.
            namespace: Defaults to the monitor's namespace.
            api_version: e.g. apps/v1; may be omitted for common built-in kinds.
            patch_type: merge, strategic or json.
        """

        def go() -> Led:
            av = self._api_version(kind, api_version)
            bare, ns = self._split(name, namespace)
            self._check_write("k8s_patch", self._object(av, kind, bare, ns))
            obj = self._need_kube().patch(
                av, kind, bare, self._ns(ns), patch, patch_type=patch_type
            )
            shown = strip_noise(redact(obj))
            line = state_line(shown)
            return Led(f"patched; {line}" if line else "patched", patched_view(shown, patch))

        return self._call(f"k8s_patch {kind} {name}", go)

    def k8s_delete(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        """Delete one object.

        Args:
            kind: The object kind.
            name: The object name.
            namespace: Defaults to the monitor's namespace.
            api_version: May be omitted for common built-in kinds.
        """

        def go() -> str:
            av = self._api_version(kind, api_version)
            bare, ns = self._split(name, namespace)
            target = self._object(av, kind, bare, ns)
            if (target.plural, target.group) == ("jobs", "batch") and self.reruns_jobs():
                # Seen: a Job deleted to re-run it, then created from memory and refused.
                self.refusals.append(f"k8s_delete {self.mutations.label(target)}")
                raise _Refused(
                    f"{REFUSED} to re-run Job {bare}, call k8s_rerun_job: it deletes the Job and "
                    "creates it again with the same spec in one call. Nothing was sent. (To "
                    "delete a Job for good, send DELETE with k8s_raw.)"
                )
            self._check_write("k8s_delete", target)
            obj = self._need_kube().delete(av, kind, bare, self._ns(ns))
            status = obj.get("status") if isinstance(obj, dict) else None
            return f"deleted {kind} {name} ({status or 'accepted'})"

        return self._call(f"k8s_delete {kind} {name}", go)

    def k8s_rerun_job(self, name: str, namespace: str | None = None) -> str:
        """Re-run a finished Job: delete it and create it again with exactly the same spec, in
        one call. Use this to re-run a Job, never k8s_delete followed by k8s_create.

        Args:
            name: The Job name.
            namespace: Defaults to the monitor's namespace.
        """

        def go() -> str:
            bare, ns = self._split(name, namespace)
            where = self._ns(ns)
            self._check_write("k8s_rerun_job", self._object("batch/v1", "Job", bare, ns))
            kube = self._need_kube()
            job = kube.get("batch/v1", "Job", bare, where)
            ended = job_end(job)
            if ended is None:
                raise _ToolProblem(
                    f"Job {bare} has not finished ({state_line(job) or 'no end condition'}); "
                    "only a Job that succeeded or failed is re-run. Nothing was changed."
                )
            again = rerun_manifest(job)
            kube.delete("batch/v1", "Job", bare, where)
            created = self._create_when_free(again, where, f"Job {bare}")
            uid = ((created or {}).get("metadata") or {}).get("uid", "?")
            return (
                f"re-ran Job {bare}: the {_ENDED[ended]} Job was deleted and created again "
                f"with the same spec (new uid {uid})"
            )

        return self._call(f"k8s_rerun_job {name}", go)

    def reruns_jobs(self) -> bool:
        return {"create", "delete"} <= set(self.config.extra_verbs)

    def _create_when_free(self, manifest: dict[str, Any], namespace: str, what: str) -> Any:
        """Create `manifest` once the name its deleted predecessor held is free."""
        from goalkeeper.step.kube import KubeError

        deadline = time.monotonic() + RERUN_WAIT_SECONDS
        while True:
            try:
                return self._need_kube().create(manifest, namespace=namespace)
            except KubeError as exc:
                if exc.status == 409 and time.monotonic() < deadline:
                    self.sleep(1.0)  # the deleted object is still finalizing
                    continue
                raise _ToolProblem(
                    f"{what} was deleted but not created again: {exc}. Report outcome failed "
                    "and say so."
                ) from None

    def k8s_scale(
        self,
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

        def go() -> str:
            if int(replicas) < 0:
                raise _ToolProblem("replicas must not be negative")
            av = self._api_version(kind, api_version)
            bare, ns = self._split(name, namespace)
            self._check_write("k8s_scale", self._object(av, kind, bare, ns))
            obj = self._need_kube().patch(
                av, kind, bare, self._ns(ns), {"spec": {"replicas": int(replicas)}}
            )
            spec = (obj or {}).get("spec", {}) if isinstance(obj, dict) else {}
            return f"scaled {kind} {name}: spec.replicas is now {spec.get('replicas')}"

        return self._call(f"k8s_scale {kind} {name}", go)

    def k8s_rollout_restart(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> str:
        """Restart a workload's pods by stamping its pod template (like kubectl rollout restart).

        Args:
            kind: Deployment, StatefulSet or DaemonSet.
            name: The object name.
            namespace: Defaults to the monitor's namespace.
            api_version: May be omitted for common built-in kinds.
        """

        def go() -> str:
            av = self._api_version(kind, api_version)
            bare, ns = self._split(name, namespace)
            self._check_write("k8s_rollout_restart", self._object(av, kind, bare, ns))
            at = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
            patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}}}
            self._need_kube().patch(av, kind, bare, self._ns(ns), patch)
            return f"restarted {kind} {name}: pod template annotation {RESTARTED_AT}={at}"

        return self._call(f"k8s_rollout_restart {kind} {name}", go)

    def http_request(
        self,
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
        verb = method.strip().upper()
        if verb not in READ_METHODS | WRITE_METHODS:
            return f"ERROR: unsupported method {method!r}"
        return self._http(verb, url, headers=headers, body=body)

    def run_command(self, argv: list[str], timeout_seconds: float = 120) -> str:
        """Run a command (no shell) in the step's container and return its output.

        Args:
            argv: The program and its arguments.
            timeout_seconds: Stop it after this long.
        """
        if not self.config.allow_commands:
            return f"{REFUSED} running commands is disabled (GOALKEEPER_ALLOW_COMMANDS is off)"
        if not argv:
            return "ERROR: argv must not be empty"
        command = [str(a) for a in argv]

        def go() -> str:
            self._check_write("run_command", Command(command[0]))
            timeout = max(1.0, min(float(timeout_seconds), self.config.command_timeout_seconds))
            code, output = self.runner(command, timeout)
            return f"exit code {code}\n{redact_text(output)}"

        return self._call(
            f"run {command[0]}",
            go,
            keep="tail",
            hint="make the command print less (filter or tail its output)",
        )


@dataclass(frozen=True)
class Led:
    """A result led by one line of the tool's own (outside the fence) before the fenced body."""

    lead: str
    body: str


class _ToolProblem(Exception):
    """A problem with the call itself, reported to the model as an error line."""


class _Refused(Exception):
    """A write outside the mutation set, or a withheld file; the message is what the model
    sees."""


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _opened_path(fd: int, path: str) -> str:
    """The real path of what `fd` holds (Linux names it in /proc); elsewhere `path`'s."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def job_end(job: Any) -> JobEnd | None:
    """A Job's end condition (Complete or Failed) when it holds one; None while it has none."""
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    ended = [
        c.get("type")
        for c in conditions
        if isinstance(c, dict)
        and c.get("status") == "True"
        and c.get("type") in (JobEnd.Complete, JobEnd.Failed)
    ]
    return JobEnd(str(ended[0])) if ended else None


def rerun_manifest(job: dict[str, Any]) -> dict[str, Any]:
    """What creates `job` again: its spec as stored, without the selector and labels the Job
    controller made for the old one (kept when the author set them: `manualSelector`)."""
    meta = job.get("metadata") or {}
    spec = copy.deepcopy(job.get("spec") or {})
    labels = dict(meta.get("labels") or {})
    if not spec.get("manualSelector"):
        spec.pop("selector", None)
        labels = {k: v for k, v in labels.items() if k not in JOB_CONTROLLER_LABELS}
        template_meta = (spec.get("template") or {}).get("metadata") or {}
        if template_meta.get("labels"):
            template_meta["labels"] = {
                k: v for k, v in template_meta["labels"].items() if k not in JOB_CONTROLLER_LABELS
            }
    again: dict[str, Any] = {
        "apiVersion": job.get("apiVersion") or "batch/v1",
        "kind": "Job",
        "metadata": {"name": meta["name"], "namespace": meta.get("namespace")},
        "spec": spec,
    }
    if labels:
        again["metadata"]["labels"] = labels
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith("batch.kubernetes.io/")
    }
    if annotations:
        again["metadata"]["annotations"] = annotations
    return again


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


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

# The order and the docstrings are what the model sees: they must not change between checks.
_READS = ("k8s_get", "k8s_list", "pod_logs", "k8s_events")
_LOCAL_READS = ("http_get", "read_file")
# Read-only tools. There is no write tool; the generic one refuses mutating verbs.
OBSERVE_TOOLS = (*_READS, "k8s_raw", *_LOCAL_READS)
# The observe tools plus the mutations an act step may need.
ACT_TOOLS = (
    *_READS,
    *_LOCAL_READS,
    "k8s_raw_write",
    "k8s_apply",
    "k8s_create",
    "k8s_replace",
    "k8s_patch",
    "k8s_delete",
    "k8s_rerun_job",
    "k8s_scale",
    "k8s_rollout_restart",
    "http_request",
)
TOOL_NAMES = {"k8s_raw_write": "k8s_raw"}  # the act step's k8s_raw also writes


def _toolset(tools: StepTools, methods: tuple[str, ...]) -> FunctionToolset[Any]:
    ts: FunctionToolset[Any] = FunctionToolset()
    # A tool that could only refuse is not offered: its definition costs every request.
    no_http = not tools.config.http_allowed_hosts
    unusable = {
        "http_get": no_http,
        "http_request": no_http,
        "read_file": not tools.config.file_roots,
        "k8s_rerun_job": not tools.reruns_jobs(),
    }
    for method in methods:
        if not unusable.get(method, False):
            ts.add_function(getattr(tools, method), name=TOOL_NAMES.get(method, method))
    return ts


def observe_toolset(tools: StepTools) -> FunctionToolset[Any]:
    return _toolset(tools, OBSERVE_TOOLS)


def act_toolset(tools: StepTools) -> FunctionToolset[Any]:
    commands = ("run_command",) if tools.config.allow_commands else ()
    return _toolset(tools, (*ACT_TOOLS, *commands))


__all__ = [
    "COMMON_KINDS",
    "REFUSED",
    "Kube",
    "StepTools",
    "ToolConfig",
    "act_toolset",
    "observe_toolset",
]
