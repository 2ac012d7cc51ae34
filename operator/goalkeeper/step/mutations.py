"""The act step's mutation set: what an action may change. Pure, no I/O.

An act step's input names its mutation set (`action.mutationSet`). Every write an act tool
makes is checked against it in one place (`StepTools._check_write`) before any request is
sent; a write to anything the set does not name is refused. Entries:

- `RESOURCE/NAME`: a Kubernetes object in the monitor's namespace, or a cluster-scoped one.
  RESOURCE is the plural (`deployments`) or the Kind (`Deployment`), in any case, with an
  optional API group (`deployments.apps`, `Job.batch`). NAME may hold `*` globs
  (`pods/build-*`); only `RESOURCE/*` covers a write to a whole collection.
- `NAMESPACE/RESOURCE/NAME`: the same in another namespace.
- An object's entry covers its subresources (`scale`, `status`, ...). A Pod write is also
  covered when the live Pod's controller (the ownerReference with `controller: true`) is
  named: `jobs/build` covers deleting a failed pod of Job build.
- `http://HOST[:PORT][/PATH]` or `https://...`: an endpoint a mutating `http_request` (any
  method but GET and HEAD) may call: the same scheme, host and port (the scheme's default
  when none is given), and a path at or below PATH.
- `command:ARGV0`: a program `run_command` may run, compared with argv[0] exactly.

Anything else (a file, a system in words) names nothing the tools can write to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME = re.compile(r"[A-Za-z0-9*][A-Za-z0-9.*:_@-]*")
_RESOURCE = re.compile(r"[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9.-]+)?")


@dataclass(frozen=True)
class KubeObject:
    """A Kubernetes object a tool would write, with its kind resolved by discovery."""

    kind: str  # e.g. Deployment
    plural: str  # e.g. deployments
    group: str  # "" for the core group
    namespace: str | None  # None for a cluster-scoped object
    name: str | None  # None for a write to the whole collection
    subresource: str | None = None


@dataclass(frozen=True)
class HttpCall:
    """A mutating HTTP request, its URL parsed by the client that would send it."""

    method: str
    scheme: str
    host: str
    port: int
    path: str


@dataclass(frozen=True)
class Command:
    argv0: str


Write = KubeObject | HttpCall | Command


@dataclass(frozen=True)
class _KubeEntry:
    namespace: str | None  # None: the monitor's namespace (or cluster-scoped)
    resource: str  # lowercased plural or Kind
    group: str | None
    name: re.Pattern[str]
    whole: bool  # the name is `*`


@dataclass(frozen=True)
class _UrlEntry:
    scheme: str
    host: str
    port: int
    path: str


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def _kube_entry(entry: str) -> _KubeEntry | None:
    parts = entry.split("/")
    if len(parts) not in (2, 3) or any(not p for p in parts):
        return None
    namespace = parts[0] if len(parts) == 3 else None
    resource, name = parts[-2], parts[-1]
    if not _RESOURCE.fullmatch(resource) or not _NAME.fullmatch(name):
        return None
    base, _, group = resource.partition(".")
    return _KubeEntry(
        namespace=namespace,
        resource=base.lower(),
        group=group.lower() or None,
        name=_glob(name),
        whole=name == "*",
    )


def _url_entry(entry: str) -> _UrlEntry | None:
    try:
        parts = urlsplit(entry)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.username or parts.password or parts.query or parts.fragment:
        return None
    return _UrlEntry(
        scheme=parts.scheme,
        host=parts.hostname.rstrip(".").lower(),
        port=port or DEFAULT_PORTS[parts.scheme],
        path=parts.path.rstrip("/"),
    )


class MutationSet:
    """The parsed `action.mutationSet` of an act step (see the module docstring)."""

    def __init__(self, entries: Sequence[str], namespace: str) -> None:
        self.entries = tuple(e.strip() for e in entries if e.strip())
        self.namespace = namespace
        self._kube: list[_KubeEntry] = []
        self._urls: list[_UrlEntry] = []
        self._commands: set[str] = set()
        for entry in self.entries:
            if entry.startswith("command:"):
                self._commands.add(entry.removeprefix("command:"))
            elif "://" in entry:
                url = _url_entry(entry)
                if url is not None:
                    self._urls.append(url)
            else:
                kube = _kube_entry(entry)
                if kube is not None:
                    self._kube.append(kube)

    def __str__(self) -> str:
        return ", ".join(self.entries) or "none named"

    def covers(self, write: Write) -> bool:
        if isinstance(write, KubeObject):
            return any(self._covers_object(e, write) for e in self._kube)
        if isinstance(write, HttpCall):
            return any(self._covers_call(e, write) for e in self._urls)
        return write.argv0 in self._commands

    def _covers_object(self, entry: _KubeEntry, obj: KubeObject) -> bool:
        if obj.namespace is not None and obj.namespace != (entry.namespace or self.namespace):
            return False
        if obj.namespace is None and entry.namespace is not None:
            return False
        if entry.resource not in (obj.kind.lower(), obj.plural.lower()):
            return False
        if entry.group is not None and entry.group != obj.group.lower():
            return False
        if obj.name is None:
            return entry.whole
        return entry.name.fullmatch(obj.name) is not None

    @staticmethod
    def _covers_call(entry: _UrlEntry, call: HttpCall) -> bool:
        if (entry.scheme, entry.host, entry.port) != (call.scheme, call.host, call.port):
            return False
        path = call.path.split("?", 1)[0]
        return not entry.path or path == entry.path or path.startswith(entry.path + "/")

    def label(self, write: Write) -> str:
        """How a write is named in a refusal, in the entries' own syntax."""
        if isinstance(write, KubeObject):
            label = f"{write.plural}/{write.name or '*'}"
            if write.namespace is not None and write.namespace != self.namespace:
                label = f"{write.namespace}/{label}"
            return label + (f" ({write.subresource})" if write.subresource else "")
        if isinstance(write, HttpCall):
            port = "" if DEFAULT_PORTS.get(write.scheme) == write.port else f":{write.port}"
            host = f"[{write.host}]" if ":" in write.host else write.host
            return f"{write.method} {write.scheme}://{host}{port}{write.path}"
        return f"command:{write.argv0}"


__all__ = ["Command", "HttpCall", "KubeObject", "MutationSet", "Write"]
