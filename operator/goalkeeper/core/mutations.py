"""The grammar of a mutation set: what an action may change. Pure, no I/O.

One grammar serves two checks. Before an act step launches, the engine's guards compare
the action's `mutationSet` with the pinned contract's entries (`covers`, `overlaps`); in
the act step, every write an act tool makes is checked against the same set
(`MutationSet.covers`) before any request is sent. An entry is one of:

- A Kubernetes object, in the monitor's namespace unless one is written:
  `RESOURCE/NAME` or `NAMESPACE/RESOURCE/NAME`, RESOURCE being the plural, the Kind or a
  short name in any case with an optional API group (`jobs`, `Job`, `job.batch`,
  `deploy`); or in words, `KIND NAME` or `the NAME KIND`, optionally followed by
  `in namespace NAMESPACE` (`Job build`, `the build Job in namespace ci`). NAME may hold
  `*` globs; only a NAME of `*` covers a write to a whole collection. An object's entry
  covers its subresources, and the act tools also let a Pod write through when the live
  Pod's controller is named (`jobs/build` covers deleting a failed pod of Job build).
  A kind in `KINDS` resolves to its plural and group; any other resource is kept as
  written, lowercased, and compared by equality only.
- `http://HOST[:PORT][/PATH]` or `https://...`: an endpoint a mutating `http_request` may
  call: the same scheme, host and port (the scheme's default when none is given), and a
  path at or below PATH.
- `command:ARGV0`: a program `run_command` may run, compared with argv[0] exactly.

Anything else (a file, a system in words, an ambiguous phrase) parses to nothing and so
names nothing that may be written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Names as the old slash syntax accepted them (cluster-scoped names such as system:foo).
_NAME = re.compile(r"[A-Za-z0-9*][A-Za-z0-9.*:_@-]*")
# In words only lowercase DNS-style names, so prose such as "Job Build" is not misread.
_PHRASE_NAME = r"[a-z0-9*](?:[a-z0-9.*-]*[a-z0-9*])?"
_NAMESPACE = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_RESOURCE = re.compile(r"[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9.-]+)?")
_IN_NAMESPACE = rf"(?: (?i:in namespace) (?P<namespace>{_NAMESPACE}))?"
_KIND_FIRST = re.compile(rf"(?P<kind>[A-Za-z]+) (?P<name>{_PHRASE_NAME}){_IN_NAMESPACE}")
_NAME_FIRST = re.compile(rf"(?i:the) (?P<name>{_PHRASE_NAME}) (?P<kind>[A-Za-z]+){_IN_NAMESPACE}")


@dataclass(frozen=True)
class Kind:
    """A built-in kind the grammar resolves by name."""

    kind: str
    plural: str
    group: str  # "" for the core group
    namespaced: bool
    short: tuple[str, ...] = ()


KINDS = (
    Kind("Pod", "pods", "", True, ("po",)),
    Kind("ConfigMap", "configmaps", "", True, ("cm",)),
    Kind("Secret", "secrets", "", True),
    Kind("Service", "services", "", True, ("svc",)),
    Kind("Endpoints", "endpoints", "", True, ("ep",)),
    Kind("PersistentVolumeClaim", "persistentvolumeclaims", "", True, ("pvc",)),
    Kind("ServiceAccount", "serviceaccounts", "", True, ("sa",)),
    Kind("ResourceQuota", "resourcequotas", "", True, ("quota",)),
    Kind("LimitRange", "limitranges", "", True, ("limits",)),
    Kind("Namespace", "namespaces", "", False, ("ns",)),
    Kind("Node", "nodes", "", False, ("no",)),
    Kind("PersistentVolume", "persistentvolumes", "", False, ("pv",)),
    Kind("Job", "jobs", "batch", True),
    Kind("CronJob", "cronjobs", "batch", True, ("cj",)),
    Kind("Deployment", "deployments", "apps", True, ("deploy",)),
    Kind("StatefulSet", "statefulsets", "apps", True, ("sts",)),
    Kind("DaemonSet", "daemonsets", "apps", True, ("ds",)),
    Kind("ReplicaSet", "replicasets", "apps", True, ("rs",)),
    Kind("Ingress", "ingresses", "networking.k8s.io", True, ("ing",)),
    Kind("NetworkPolicy", "networkpolicies", "networking.k8s.io", True, ("netpol",)),
    Kind("HorizontalPodAutoscaler", "horizontalpodautoscalers", "autoscaling", True, ("hpa",)),
    Kind("PodDisruptionBudget", "poddisruptionbudgets", "policy", True, ("pdb",)),
    Kind("Role", "roles", "rbac.authorization.k8s.io", True),
    Kind("RoleBinding", "rolebindings", "rbac.authorization.k8s.io", True),
    Kind("ClusterRole", "clusterroles", "rbac.authorization.k8s.io", False),
    Kind("ClusterRoleBinding", "clusterrolebindings", "rbac.authorization.k8s.io", False),
    Kind("StorageClass", "storageclasses", "storage.k8s.io", False, ("sc",)),
    Kind(
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "apiextensions.k8s.io",
        False,
        ("crd", "crds"),
    ),
)
# Every way a slash entry may name a kind; in words only the Kind and its plural.
_BY_RESOURCE = {alias: k for k in KINDS for alias in (k.kind.lower(), k.plural, *k.short)}
_BY_WORD = {alias: k for k in KINDS for alias in (k.kind.lower(), k.plural)}


# --- what an entry names ---------------------------------------------------------------------


@dataclass(frozen=True)
class KubeTarget:
    """Kubernetes objects an entry names."""

    group: str | None  # "" for the core group; None: any group (an unknown kind, none written)
    resource: str  # the lowercase plural of a kind in KINDS; else as written, lowercased
    namespace: str  # the monitor's when none is written; "" for a cluster-scoped kind
    name: str  # may hold `*` globs
    kind: str | None  # the Kind when in KINDS


@dataclass(frozen=True)
class UrlTarget:
    """Endpoints an entry names: one origin, and every path at or below `path`."""

    scheme: str
    host: str
    port: int
    path: str


@dataclass(frozen=True)
class CommandTarget:
    """The program an entry names, by argv[0]."""

    argv0: str


Target = KubeTarget | UrlTarget | CommandTarget


def parse_entry(text: str, namespace: str) -> Target | None:
    """What an entry names, read in the monitor's `namespace`; None for anything the
    grammar does not read unambiguously (see the module docstring)."""
    entry = " ".join(text.split())
    if entry.startswith("command:"):
        argv0 = entry.removeprefix("command:")
        return CommandTarget(argv0) if argv0 and " " not in argv0 else None
    if "://" in entry:
        return _url_target(entry)
    if " " in entry:
        return _phrase_target(entry, namespace)
    return _slash_target(entry, namespace)


def _slash_target(entry: str, namespace: str) -> KubeTarget | None:
    parts = entry.split("/")
    if len(parts) not in (2, 3):
        return None
    written = parts[0] if len(parts) == 3 else None
    if written is not None and not re.fullmatch(_NAMESPACE, written):
        return None
    resource, name = parts[-2], parts[-1]
    if not _RESOURCE.fullmatch(resource) or not _NAME.fullmatch(name):
        return None
    base, _, group = resource.lower().partition(".")
    known = _BY_RESOURCE.get(base)
    if known is not None and group in ("", known.group):
        return _known_target(known, name, written, namespace)
    return KubeTarget(
        group=group or None,
        resource=base,
        namespace=written or namespace,
        name=name,
        kind=None,
    )


def _phrase_target(entry: str, namespace: str) -> KubeTarget | None:
    match = _KIND_FIRST.fullmatch(entry) or _NAME_FIRST.fullmatch(entry)
    if match is None:
        return None
    known = _BY_WORD.get(match["kind"].lower())
    if known is None:
        return None
    return _known_target(known, match["name"], match["namespace"], namespace)


def _known_target(known: Kind, name: str, written: str | None, namespace: str) -> KubeTarget | None:
    if not known.namespaced and written is not None:
        return None  # a namespace for a cluster-scoped kind: not read either way
    return KubeTarget(
        group=known.group,
        resource=known.plural,
        namespace=(written or namespace) if known.namespaced else "",
        name=name,
        kind=known.kind,
    )


def _url_target(entry: str) -> UrlTarget | None:
    try:
        parts = urlsplit(entry)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.username or parts.password or parts.query or parts.fragment:
        return None
    return UrlTarget(
        scheme=parts.scheme,
        host=parts.hostname.rstrip(".").lower(),
        port=port or _DEFAULT_PORTS[parts.scheme],
        path=parts.path.rstrip("/"),
    )


# --- entries against entries -----------------------------------------------------------------


def covers(allowed: Target, entry: Target) -> bool:
    """Whether every write `entry` names is one `allowed` names too."""
    if isinstance(allowed, KubeTarget) and isinstance(entry, KubeTarget):
        return (
            allowed.namespace == entry.namespace
            and allowed.resource == entry.resource
            and (allowed.group is None or allowed.group == entry.group)
            # The entry's `*` is literal text here, which only a glob of the allowed name matches.
            and _glob(allowed.name).fullmatch(entry.name) is not None
        )
    if isinstance(allowed, UrlTarget) and isinstance(entry, UrlTarget):
        return _same_origin(allowed, entry) and _at_or_below(entry.path, allowed.path)
    if isinstance(allowed, CommandTarget) and isinstance(entry, CommandTarget):
        return allowed.argv0 == entry.argv0
    return False


def overlaps(one: Target, other: Target) -> bool:
    """Whether some write may be named by both. Errs towards yes: names, paths and programs
    compare without case, and unknown resources meet in their singular or plural."""
    if isinstance(one, KubeTarget) and isinstance(other, KubeTarget):
        return (
            one.namespace == other.namespace
            and _same_resource(one, other)
            and _names_meet(one.name.casefold(), other.name.casefold())
        )
    if isinstance(one, UrlTarget) and isinstance(other, UrlTarget):
        first, second = one.path.casefold(), other.path.casefold()
        return _same_origin(one, other) and (
            _at_or_below(first, second) or _at_or_below(second, first)
        )
    if isinstance(one, CommandTarget) and isinstance(other, CommandTarget):
        return one.argv0.casefold() == other.argv0.casefold()
    return False


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def _same_origin(one: UrlTarget, other: UrlTarget) -> bool:
    return (one.scheme, one.host, one.port) == (other.scheme, other.host, other.port)


def _at_or_below(path: str, base: str) -> bool:
    return not base or path == base or path.startswith(base + "/")


def _same_resource(one: KubeTarget, other: KubeTarget) -> bool:
    if one.group is not None and other.group is not None and one.group != other.group:
        return False
    if one.kind is not None and other.kind is not None:
        return one.resource == other.resource
    return other.resource in _word_forms(one.resource) or one.resource in _word_forms(
        other.resource
    )


def _word_forms(word: str) -> set[str]:
    forms = {word, word + "s", word + "es"}
    if word.endswith("y"):
        forms.add(word[:-1] + "ies")
    return forms


def _names_meet(one: str, other: str) -> bool:
    """Whether two name globs match a common name: with a glob on both sides, exactly when
    their literal heads and tails agree (a glob absorbs anything between)."""
    if "*" not in one:
        return _glob(other).fullmatch(one) is not None
    if "*" not in other:
        return _glob(one).fullmatch(other) is not None
    one_head, *_, one_tail = one.split("*")
    other_head, *_, other_tail = other.split("*")
    heads_agree = one_head.startswith(other_head) or other_head.startswith(one_head)
    tails_agree = one_tail.endswith(other_tail) or other_tail.endswith(one_tail)
    return heads_agree and tails_agree


# --- writes against an act step's mutation set -----------------------------------------------


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


class MutationSet:
    """The parsed `action.mutationSet` of an act step (see the module docstring)."""

    def __init__(self, entries: Sequence[str], namespace: str) -> None:
        self.entries = tuple(e.strip() for e in entries if e.strip())
        self.namespace = namespace
        parsed = (parse_entry(entry, namespace) for entry in self.entries)
        self.targets = tuple(target for target in parsed if target is not None)

    def __str__(self) -> str:
        return ", ".join(self.entries) or "none named"

    def covers(self, write: Write) -> bool:
        return any(self._names(target, write) for target in self.targets)

    def _names(self, target: Target, write: Write) -> bool:
        if isinstance(write, KubeObject):
            return isinstance(target, KubeTarget) and self._names_object(target, write)
        if isinstance(write, HttpCall):
            path = write.path.split("?", 1)[0]
            return (
                isinstance(target, UrlTarget)
                and (target.scheme, target.host, target.port)
                == (write.scheme, write.host, write.port)
                and _at_or_below(path, target.path)
            )
        return isinstance(target, CommandTarget) and target.argv0 == write.argv0

    def _names_object(self, target: KubeTarget, obj: KubeObject) -> bool:
        if obj.namespace is None:
            # Cluster-scoped: a cluster-scoped kind, or an unknown one read in no other namespace.
            if target.namespace not in ("", self.namespace):
                return False
        elif obj.namespace != target.namespace:
            return False
        if target.kind is not None:
            if (target.resource, target.group) != (obj.plural.lower(), obj.group.lower()):
                return False
        elif target.resource not in (obj.kind.lower(), obj.plural.lower()) or (
            target.group is not None and target.group != obj.group.lower()
        ):
            return False
        if obj.name is None:
            return target.name == "*"
        return _glob(target.name).fullmatch(obj.name) is not None

    def label(self, write: Write) -> str:
        """How a write is named in a refusal, in the entries' own syntax."""
        if isinstance(write, KubeObject):
            label = f"{write.plural}/{write.name or '*'}"
            if write.namespace is not None and write.namespace != self.namespace:
                label = f"{write.namespace}/{label}"
            return label + (f" ({write.subresource})" if write.subresource else "")
        if isinstance(write, HttpCall):
            port = "" if _DEFAULT_PORTS.get(write.scheme) == write.port else f":{write.port}"
            host = f"[{write.host}]" if ":" in write.host else write.host
            return f"{write.method} {write.scheme}://{host}{port}{write.path}"
        return f"command:{write.argv0}"


__all__ = [
    "KINDS",
    "Command",
    "CommandTarget",
    "HttpCall",
    "Kind",
    "KubeObject",
    "KubeTarget",
    "MutationSet",
    "Target",
    "UrlTarget",
    "Write",
    "covers",
    "overlaps",
    "parse_entry",
]
