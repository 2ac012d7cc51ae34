"""Who wrote a Monitor, and what goalkeeper would do in their name. Pure, no I/O.

goalkeeper must never do what a Monitor's author could not do themselves. The API server
records the author on the Monitor (config/admission/monitor-author.yaml stamps three
annotations on every create and spec edit, and refuses any other value); this module reads
that record and lists the permissions a Monitor's steps would use, so the operator can ask
the API server (a SubjectAccessReview) whether the author holds each of them.

A permission reads like a mutation-set entry with a verb in front, in the namespace it
applies to: `patch deployments.apps/web in team-a` (a named object; the core group is not
written), `list pods/* in team-a` (every object of the resource), `get pods/* (log) in
team-a` (a subresource, in parentheses). A cluster-scoped permission has no `in` part.

What the act tools may send, so that the author's review covers it (`writes_for`):

- every target: `get` and `patch` (merge, strategic, JSON patch and server-side apply of
  an existing object are all `patch`), on the named object, or on every object of the
  resource when the name holds a `*` glob, which also needs `list` to find the matches;
- a `pods` target: `delete` too (a pod is restarted by deleting it);
- a `jobs.batch` target: `delete` on every pod of its namespace too (a Job's failed pods
  have generated names).

Never required, so never to be sent by the act tools: `update` (replace, PUT), `create`
(create, POST, apply of a missing object), `delete` of anything but pods, `deletecollection`,
and writes to a subresource (`scale`, `status`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from goalkeeper.core.engine import LaunchStep
from goalkeeper.core.modelconfig import ModelChoice
from goalkeeper.core.models import MUTATING_STEPS, StepKind
from goalkeeper.core.mutations import KubeTarget, parse_entry

AUTHOR = "goalkeeper.dev/author"
AUTHOR_UID = "goalkeeper.dev/author-uid"
AUTHOR_GROUPS = "goalkeeper.dev/author-groups"
# The author's groups are joined with this; the stamp leaves out a group holding it.
GROUP_SEPARATOR = ","


@dataclass(frozen=True)
class Author:
    """The user who last wrote a Monitor's spec, as the API server authenticated them."""

    user: str
    uid: str
    groups: tuple[str, ...]


def author_of(annotations: Mapping[str, str] | None) -> Author | None:
    """The author recorded in a Monitor's annotations; None when none is recorded."""
    found = annotations or {}
    # Never trimmed: "alice " is another user than "alice", and the review must ask about
    # the one the API server recorded.
    user = found.get(AUTHOR) or ""
    if not user.strip():
        return None
    groups = (found.get(AUTHOR_GROUPS) or "").split(GROUP_SEPARATOR)
    return Author(
        user=user,
        uid=found.get(AUTHOR_UID) or "",
        groups=tuple(group for group in groups if group),
    )


@dataclass(frozen=True)
class Permission:
    """One request's authorization attributes: what a SubjectAccessReview asks about.

    `group` is the API group ("" for the core group), `resource` the lowercase plural,
    `name` empty for every object of the resource, `namespace` empty when cluster-scoped.
    """

    verb: str
    group: str
    resource: str
    namespace: str
    name: str = ""
    subresource: str = ""

    @property
    def text(self) -> str:
        """The permission in words: `patch deployments.apps/web in team-a`."""
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        words = f"{self.verb} {resource}/{self.name or '*'}"
        if self.subresource:
            words += f" ({self.subresource})"
        return f"{words} in {self.namespace}" if self.namespace else words

    def __str__(self) -> str:
        return self.text


class ObjectTarget(Protocol):
    """An object an action may change, as its mutation-set entry names it: `group` None
    for the core group, `resource` the lowercase plural, `namespace` "" for a
    cluster-scoped object (reviewed without a namespace, so no namespace's Role counts),
    `name` possibly holding `*` globs."""

    @property
    def group(self) -> str | None: ...
    @property
    def resource(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


# The target reads of config/rbac/steps.yaml's goalkeeper-observer Role: what an observe
# step reads and a report may show. The tools read and list; they never watch.
_OBSERVED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("", ("pods", "services", "endpoints", "configmaps", "events", "persistentvolumeclaims")),
    ("apps", ("deployments", "statefulsets", "daemonsets", "replicasets")),
    ("batch", ("jobs", "cronjobs")),
    ("events.k8s.io", ("events",)),
)
_READ_VERBS = ("get", "list")


def observer_reads(namespace: str) -> tuple[Permission, ...]:
    """What the observe step reads in `namespace`: get and list of its target resources,
    and get of pods' logs."""
    reads = [
        Permission(verb, group, resource, namespace)
        for group, resources in _OBSERVED
        for resource in resources
        for verb in _READ_VERBS
    ]
    reads.append(Permission("get", "", "pods", namespace, subresource="log"))
    return tuple(reads)


def writes_for(
    targets: Sequence[ObjectTarget], extra_verbs: Sequence[str] = ()
) -> tuple[Permission, ...]:
    """Every permission the act tools would use on `targets` (see the module docstring for
    the verbs), in order, without repeats, each reviewed in its target's namespace.
    `extra_verbs` are those the operator lets the act tools use beyond patch
    (GOALKEEPER_ACT_EXTRA_VERBS): the author must hold them on every target too."""
    needed: dict[Permission, None] = {}
    for target in targets:
        group = target.group or ""
        where = target.namespace
        glob = "*" in target.name
        name = "" if glob else target.name
        verbs = ["get", *(["list"] if glob else []), "patch", *extra_verbs]
        if (group, target.resource) == ("", "pods"):
            verbs.append("delete")
        for verb in verbs:
            needed[Permission(verb, group, target.resource, where, name)] = None
        if (group, target.resource) == ("batch", "jobs"):
            needed[Permission("delete", "", "pods", where)] = None
    return tuple(needed)


def denied_text(author: Author, denied: Sequence[Permission]) -> str:
    """Why `author`'s Monitor may not run, `denied` being at least one permission:
    `alice may not patch deployments.apps/web in team-a; delete pods/* in team-a`."""
    return f"{author.user} may not " + "; ".join(permission.text for permission in denied)


def needed_for(
    launches: Sequence[LaunchStep], namespace: str, extra_verbs: Sequence[str] = ()
) -> tuple[Permission, ...]:
    """What the author must hold for these launches to go ahead: reading the task starts
    a generation, and the reports will show what the observer reads; an act or repair
    step makes the writes its mutation set names (URLs and programs are no Kubernetes
    permission: the pinned contract alone covers them)."""
    needed: dict[Permission, None] = {}
    for launch in launches:
        if launch.kind is StepKind.extract:
            needed.update(dict.fromkeys(observer_reads(namespace)))
        elif launch.kind in MUTATING_STEPS and launch.input.action is not None:
            entries = launch.input.action.mutationSet
            targets = [t for e in entries if isinstance(t := parse_entry(e, namespace), KubeTarget)]
            needed.update(dict.fromkeys(writes_for(targets, extra_verbs)))
    return tuple(needed)


def model_config_readers(
    choice: ModelChoice,
    namespace: str,
    config: Mapping[str, Any] | None,
    monitor: Mapping[str, str] | None,
) -> list[tuple[Author | None, Permission, str]]:
    """Who must hold what for `choice` to be used: the config's writer must be able to read
    its key's Secret (else whoever may write a ModelConfig could send any Secret to a server
    of their choosing), and the Monitor's author the config itself. Each with the words of
    its refusal; an author None means none is recorded."""
    spec = choice.spec
    if spec is None or config is None:
        return []
    needed: list[tuple[Author | None, Permission, str]] = [
        (
            author_of(monitor),
            Permission("get", "goalkeeper.dev", "modelconfigs", namespace, choice.name),
            "a Monitor uses no ModelConfig its author could not read",
        )
    ]
    secret = spec.apiKeySecret
    if secret is not None:
        writer = author_of((config.get("metadata") or {}).get("annotations"))
        needed.append(
            (
                writer,
                Permission("get", "", "secrets", namespace, secret.name),
                f"ModelConfig {choice.name} sends no Secret its writer could not read",
            )
        )
    return needed


def model_config_refused(
    choice: ModelChoice, author: Author | None, permission: Permission, why: str
) -> ModelChoice:
    """`choice`, unusable because `author` does not hold `permission` (or none is recorded)."""
    who = (
        f"{author.user} may not {permission.text}"
        if author is not None
        else f"no author is recorded (annotation {AUTHOR}, set by the API server) to hold "
        f"{permission.text}"
    )
    return ModelChoice(choice.name, problem=f"{who}; {why}.")
