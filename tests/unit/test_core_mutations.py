"""The mutation-set grammar in the core, and the guards that hold a mutation set to the
pinned contract: parsing in natural forms, coverage by the allowed resources, and
forbidden or protected entries compared as what they name."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.observations import action, contract

from goalkeeper.core import guards
from goalkeeper.core.models import ActionRequest, Contract, MonitorStatus, StopReason
from goalkeeper.core.mutations import (
    KINDS,
    CommandTarget,
    KubeTarget,
    UrlTarget,
    parse_entry,
)

NS = "default"
RENDER = KubeTarget(group="batch", resource="jobs", namespace=NS, name="render-part-2", kind="Job")
RENDER_FORMS = [
    "Job render-part-2",
    "job render-part-2",
    "job/render-part-2",
    "jobs/render-part-2",
    "Job/render-part-2",
    "JOBS/render-part-2",
    "jobs.batch/render-part-2",
    "Job.batch/render-part-2",
    "default/jobs/render-part-2",
    "Job render-part-2 in namespace default",
    "the render-part-2 Job",
    "the render-part-2 job in namespace default",
    "  Job   render-part-2 ",
]


def request(*mutations: str, kind: str = "advance") -> ActionRequest:
    return ActionRequest.model_validate(action(kind=kind, mutationSet=list(mutations)))


def pinned(**fields: Any) -> Contract:
    return Contract.model_validate(contract(**fields))


def outside(allowed: list[str], *mutations: str, namespace: str = NS) -> str | None:
    found = guards.mutation_outside_contract(
        pinned(allowedResources=allowed), request(*mutations), namespace
    )
    return None if found is None else found[1]


def forbidden(
    mutations: list[str], namespace: str = NS, **fields: Any
) -> tuple[StopReason, str] | None:
    status = MonitorStatus(contract=pinned(**fields))
    return guards.forbidden_mutation(status, request(*mutations), namespace)


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", RENDER_FORMS)
def test_natural_forms_of_one_job_parse_alike(entry: str) -> None:
    assert parse_entry(entry, NS) == RENDER


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("deploy/web", KubeTarget("apps", "deployments", NS, "web", "Deployment")),
        ("Deployment payments", KubeTarget("apps", "deployments", NS, "payments", "Deployment")),
        (
            "the payments Deployment",
            KubeTarget("apps", "deployments", NS, "payments", "Deployment"),
        ),
        ("prod/cm/build-*", KubeTarget("", "configmaps", "prod", "build-*", "ConfigMap")),
        ("pods/*", KubeTarget("", "pods", NS, "*", "Pod")),
        ("ns/prod", KubeTarget("", "namespaces", "", "prod", "Namespace")),
        ("Namespace prod", KubeTarget("", "namespaces", "", "prod", "Namespace")),
        ("nodes/n1", KubeTarget("", "nodes", "", "n1", "Node")),
        ("ing/web", KubeTarget("networking.k8s.io", "ingresses", NS, "web", "Ingress")),
        ("widgets/x", KubeTarget(None, "widgets", NS, "x", None)),
        ("Widget/x", KubeTarget(None, "widget", NS, "x", None)),
        ("other/widgets.example.com/x", KubeTarget("example.com", "widgets", "other", "x", None)),
        ("deployments.example.com/web", KubeTarget("example.com", "deployments", NS, "web", None)),
        ("https://Hooks.Example.com/v1/", UrlTarget("https", "hooks.example.com", 443, "/v1")),
        ("http://build-api:8080", UrlTarget("http", "build-api", 8080, "")),
        ("command:python3", CommandTarget("python3")),
    ],
)
def test_entries_parse_to_what_they_name(entry: str, parsed: object) -> None:
    assert parse_entry(entry, NS) == parsed


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "source code",
        "the model provider",
        "database build",
        "Job Build",  # object names are lowercase: prose, not an object
        "Widget build",  # an unknown kind in words
        "every build Job",
        "the render-part-2 Job and its pods",
        "Job render-part-2 in default",
        "any field of Job build but spec.suspend",
        "repo:build/config.yaml",
        "a/b/c/d",
        "*/jobs/build",
        "default/namespaces/prod",  # a namespace for a cluster-scoped kind
        "Namespace prod in namespace default",
        "jobs/",
        "command:",
        "command:make all",
        "http://user:secret@host/",
        "https://host/path?query=1",
        "ftp://host/file",
    ],
)
def test_anything_else_parses_to_nothing(entry: str) -> None:
    assert parse_entry(entry, NS) is None


def test_every_name_of_a_built_in_kind_resolves_to_its_plural_and_group() -> None:
    for known in KINDS:
        for alias in (known.kind, known.kind.lower(), known.plural, *known.short):
            parsed = parse_entry(f"{alias}/x", NS)
            assert isinstance(parsed, KubeTarget), alias
            assert (parsed.resource, parsed.group, parsed.kind) == (
                known.plural,
                known.group,
                known.kind,
            )
            assert parsed.namespace == (NS if known.namespaced else "")
    short = {"deploy", "sts", "ds", "rs", "cm", "svc", "pvc", "cj", "po", "ns", "sa"}
    assert short <= {alias for known in KINDS for alias in known.short}


# --- coverage by the allowed resources -------------------------------------------------------


def test_a_mutation_set_past_the_allowed_resources_is_refused_naming_each_entry() -> None:
    lie = request("configmaps/web-entrypoint", "deployments/web", "command:python3", kind="recover")
    allowed = pinned(allowedResources=["jobs/render-part-2"])
    assert guards.mutation_outside_contract(allowed, lie, NS) == (
        StopReason.outsideAuthority,
        "The recover action would change configmaps/web-entrypoint, deployments/web and "
        "command:python3, which the recorded allowed resources (jobs/render-part-2) do not "
        "cover.",
    )


@pytest.mark.parametrize("form", RENDER_FORMS)
def test_natural_forms_of_the_allowed_object_are_covered_either_way(form: str) -> None:
    assert outside(["jobs/render-part-2"], form) is None
    assert outside([form], "jobs/render-part-2") is None


@pytest.mark.parametrize(
    ("mutation", "covering"),
    [
        ("configmaps/web-entrypoint", "cm/web-entrypoint"),
        ("deployments/web", "Deployment web"),
        ("jobs/render-part-3", "jobs/render-part-3"),
        ("jobs/render-*", "jobs/render-*"),
        ("jobs/render-*", "jobs/*"),
        ("jobs/*", "jobs/*"),
        ("other-ns/jobs/render-part-2", "other-ns/jobs/render-part-2"),
        ("jobs.example.com/render-part-2", "jobs.example.com/render-part-2"),
        ("https://hooks.example.com/v1/resume", "https://hooks.example.com/v1"),
        ("command:python3", "command:python3"),
    ],
)
def test_anything_else_is_covered_only_where_the_allowed_entry_names_it(
    mutation: str, covering: str
) -> None:
    refusal = outside(["jobs/render-part-2"], mutation)
    assert refusal is not None and mutation in refusal
    assert outside(["jobs/render-part-2", covering], mutation) is None


@pytest.mark.parametrize(
    ("allowed", "mutation"),
    [
        ("jobs/render-part-2", "jobs/render-*"),
        ("jobs/render-part-*", "jobs/render-*"),
        ("jobs/render-*", "jobs/*"),
        ("jobs/render-part-2", "prod/jobs/render-part-2"),
        ("prod/jobs/render-part-2", "jobs/render-part-2"),
        ("jobs/render-part-2", "Widget render-part-2"),
        ("widgets/x", "Widget/x"),  # an unknown kind compares by equality only
        ("widgets.example.com/x", "widgets/x"),  # the mutation names every group's widgets
        ("jobs.batch/render-part-2", "jobs.example.com/render-part-2"),
        ("https://hooks.example.com/v1", "https://hooks.example.com/v10"),
        ("https://hooks.example.com/v1", "http://hooks.example.com/v1"),
        ("https://hooks.example.com", "https://hooks.example.com:8443"),
        ("command:python3", "command:/usr/bin/python3"),
        ("command:python3", "commands/python3"),
        ("Job render-part-2 and its pods", "jobs/render-part-2"),
    ],
)
def test_a_narrower_or_unreadable_allowed_entry_does_not_cover(allowed: str, mutation: str) -> None:
    assert outside([allowed], mutation) is not None


@pytest.mark.parametrize(
    ("allowed", "mutation"),
    [
        ("jobs/render-*", "jobs/render-part-*"),
        ("jobs/r*", "jobs/render-*"),
        ("jobs/*", "Job render-part-2"),
        ("widgets/x", "widgets.example.com/x"),
        ("https://hooks.example.com", "https://HOOKS.example.com:443/any/path"),
        ("prod/deploy/web", "the web Deployment in namespace prod"),
    ],
)
def test_a_wider_allowed_entry_covers(allowed: str, mutation: str) -> None:
    assert outside([allowed], mutation) is None


def test_an_entry_read_in_another_namespace_is_not_the_monitors() -> None:
    assert outside(["jobs/build"], "jobs/build", namespace="prod") is None
    assert outside(["default/jobs/build"], "jobs/build", namespace="prod") is not None


def test_without_a_contract_or_allowed_resources_nothing_is_covered() -> None:
    lie = request("jobs/build")
    assert guards.mutation_outside_contract(None, lie, NS) == (
        StopReason.outsideAuthority,
        "The advance action would change jobs/build, which the recorded allowed resources "
        "(none) do not cover.",
    )


def test_an_uncovered_secret_is_a_credential_the_words_do_not_give() -> None:
    allowed = pinned(allowedResources=["jobs/build"])
    for entry in ("secrets/db-password", "Secret db-password", f"{NS}/secrets/db-password"):
        found = guards.mutation_outside_contract(allowed, request("jobs/build", entry), NS)
        assert found is not None and found[0] is StopReason.credentialWithoutAuthority, entry
    # A Secret the words give is covered; a ConfigMap uncovered is no credential.
    allowed = pinned(allowedResources=["secrets/db-password"])
    assert guards.mutation_outside_contract(allowed, request("secrets/db-password"), NS) is None
    found = guards.mutation_outside_contract(allowed, request("configmaps/db"), NS)
    assert found is not None and found[0] is StopReason.outsideAuthority
    assert outside([], "jobs/build") is not None


# --- forbidden and protected entries ---------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "mutation"),
    [
        ("Deployment payments", "deployments/payments"),
        ("Deployment payments", "deploy/payments"),
        ("the payments Deployment", "default/deployments.apps/payments"),
        ("deployments/pay*", "deployments/payments"),
        ("deployments/payments", "deployments/pay*"),  # overlap either way
        ("deployments/payments", "deployments/*"),
        ("deployments/*-live", "deployments/pay*"),
        ("prod/deployments/payments", "Deployment payments in namespace prod"),
        ("Widget/payments", "widgets.example.com/payments"),
        ("networkpolicy/x", "networkpolicies/x"),
        ("https://pay.example.com/api", "https://pay.example.com/api/v1/charge"),
        ("https://pay.example.com/api/v1", "https://pay.example.com"),
        ("command:psql", "command:psql"),
    ],
)
def test_a_forbidden_entry_meets_what_names_the_same_object(rule: str, mutation: str) -> None:
    refusal = forbidden([mutation], forbiddenChanges=[rule])
    assert refusal is not None and refusal[0] is StopReason.outsideAuthority
    assert refusal[1] == (
        f"The advance action would change '{mutation}', which the recorded contract forbids: "
        f"'{rule}'."
    )


@pytest.mark.parametrize(
    ("rule", "mutation"),
    [
        ("deployments/payments", "deployments/payments-v2"),
        ("Deployment payments", "statefulsets/payments"),
        ("prod/deployments/payments", "deployments/payments"),
        ("deployments/pay*", "deployments/web"),
        ("deployments/*-live", "deployments/pay*-test"),
        ("jobs/build", "jobs.example.com/build"),
        ("https://pay.example.com/api", "https://pay.example.com/apis"),
        ("command:psql", "command:python3"),
        ("any field of Job build but spec.suspend", "jobs/build"),
        ("any other resource", "jobs/build"),
    ],
)
def test_a_forbidden_entry_does_not_meet_another_object(rule: str, mutation: str) -> None:
    assert forbidden([mutation], forbiddenChanges=[rule]) is None


def test_an_entry_without_a_namespace_is_read_in_the_monitors() -> None:
    rule = {"forbiddenChanges": ["prod/deployments/payments"]}
    assert forbidden(["deployments/payments"], namespace="prod", **rule) is not None
    assert forbidden(["deployments/payments"], namespace="shop", **rule) is None


@pytest.mark.parametrize(
    ("rule", "mutation"),
    [
        ("source code", "Source code of the build"),
        ("source code", "configmaps/source-code"),
        ("the model provider", "the model"),
        ("Secret", "secrets/db"),
        ("payments deployment", "deployments/payments"),
    ],
)
def test_free_text_meets_nothing_and_is_never_covered(rule: str, mutation: str) -> None:
    # No text comparison: prose forbids nothing by its words, and an act can write only
    # what a typed grant's object covers, which prose never names.
    assert forbidden([mutation], forbiddenChanges=[rule]) is None
    if parse_entry(mutation, NS) is None:
        assert outside(["jobs/build"], mutation) is not None


def test_a_protected_contract_is_checked_first_and_stops_as_such() -> None:
    refusal = forbidden(
        ["jobs/build", "deployments/db"],
        forbiddenChanges=["jobs/build"],
        protectedContracts=["deployments/db"],
    )
    assert refusal is not None and refusal[0] is StopReason.protectedContractChange
    assert "'deployments/db'" in refusal[1]


ENTRIES = st.sampled_from(
    [
        *RENDER_FORMS,
        "jobs/build",
        "jobs/build-2",
        "jobs/*",
        "source code",
        "Source code of the build",
        "the model provider",
        "the model",
        "provider openai",
        "database build",
        "Deployment payments",
        "deployments/payments-v2",
        "command:python3",
        "https://pay.example.com/api",
    ]
)


@settings(max_examples=300, deadline=None)
@given(mutation=ENTRIES)
def test_free_text_is_never_covered_by_an_object(mutation: str) -> None:
    if parse_entry(mutation, NS) is None:
        assert outside(["jobs/build", "deployments/payments"], mutation) is not None


# --- the coverage guard against an independent oracle ----------------------------------------


@dataclass(frozen=True)
class Named:
    """What a generated entry names, kept by the generator rather than read back."""

    what: str  # a kind, an unknown resource, "url" or "command"
    group: str | None  # for an unknown resource: None for any group
    namespace: str
    name: str  # an object name glob, a URL's origin and path, or a program


# How each kind may be written in slashes, and whether it has the phrase forms.
SPELLINGS = {
    "Job": ["Job", "job", "jobs", "JOBS", "job.batch", "jobs.batch"],
    "Deployment": ["Deployment", "deployments", "deploy", "deployments.apps"],
    "ConfigMap": ["ConfigMap", "configmaps", "cm"],
}
NAMES = ["web", "build-1", "build-2", "render-part-2", "build-*", "b*", "*-2", "*"]
FREE_TEXT = [
    "source code",
    "the model provider",
    "Job Build",
    "every build Job",
    "a/b/c/d",
    "*/jobs/web",
    "configmaps/web entrypoint",
    "command:make all",
    "Widget web",
]
URLS = {
    "https://hooks.example.com": ("https://hooks.example.com:443", ""),
    "https://HOOKS.example.com/v1/": ("https://hooks.example.com:443", "/v1"),
    "https://hooks.example.com/v1/resume": ("https://hooks.example.com:443", "/v1/resume"),
    "http://hooks.example.com/v1": ("http://hooks.example.com:80", "/v1"),
    "https://hooks.example.com:8443/v1": ("https://hooks.example.com:8443", "/v1"),
}


@st.composite
def entries(draw: st.DrawFn) -> tuple[str, Named | None]:
    """An entry as written, and what it names (None: free text that names nothing)."""
    choice = draw(st.sampled_from(["kind"] * 6 + ["unknown"] * 2 + ["url", "command", "free"]))
    written_ns = draw(st.sampled_from([None, None, NS, "other-ns"]))
    prefix = f"{written_ns}/" if written_ns else ""
    name = draw(st.sampled_from(NAMES))
    if choice == "kind":
        kind = draw(st.sampled_from(sorted(SPELLINGS)))
        forms = [f"{prefix}{spelling}/{name}" for spelling in SPELLINGS[kind]]
        suffix = f" in namespace {written_ns}" if written_ns else ""
        forms += [f"{kind} {name}{suffix}", f"the {name} {kind.lower()}{suffix}"]
        return draw(st.sampled_from(forms)), Named(kind, None, written_ns or NS, name)
    if choice == "unknown":
        group = draw(st.sampled_from([None, "example.com", "other.io"]))
        resource = "widgets" + (f".{group}" if group else "")
        return f"{prefix}{resource}/{name}", Named("widgets", group, written_ns or NS, name)
    if choice == "url":
        written = draw(st.sampled_from(sorted(URLS)))
        origin, path = URLS[written]
        return written, Named("url", None, origin, path)
    if choice == "command":
        program = draw(st.sampled_from(["python3", "make", "/usr/bin/make"]))
        return f"command:{program}", Named("command", None, "", program)
    return draw(st.sampled_from(FREE_TEXT)), None


def glob_within(inner: str, outer: str) -> bool:
    """Every name `inner` matches, `outer` matches: checked on sample fillings of its globs."""
    fillings = ["", "x", "build-", "-2", "b", "render-part-"]
    parts = inner.split("*")
    for filled in itertools.product(fillings, repeat=len(parts) - 1):
        name = parts[0] + "".join(f + p for f, p in zip(filled, parts[1:], strict=True))
        if not fnmatchcase(name, outer):
            return False
    return True


def oracle_covers(allowed: Named, entry: Named) -> bool:
    if (allowed.what, allowed.namespace) != (entry.what, entry.namespace):
        return False
    if allowed.what == "url":
        return allowed.name in ("", entry.name) or entry.name.startswith(allowed.name + "/")
    if allowed.what == "command":
        return allowed.name == entry.name
    if allowed.group is not None and allowed.group != entry.group:
        return False
    return glob_within(entry.name, allowed.name)


@settings(max_examples=1500, deadline=None)
@given(
    allowed=st.lists(entries(), max_size=4),
    mutations=st.lists(entries(), min_size=1, max_size=4),
)
def test_a_mutation_set_passes_only_when_every_entry_is_covered(
    allowed: list[tuple[str, Named | None]], mutations: list[tuple[str, Named | None]]
) -> None:
    refusal = outside([written for written, _ in allowed], *(m for m, _ in mutations))
    named_allowed = [named for _, named in allowed if named is not None]
    for written, named in mutations:
        parses = parse_entry(written, NS) is not None
        assert parses == (named is not None), written
        covered = named is not None and any(oracle_covers(a, named) for a in named_allowed)
        if refusal is None:
            assert covered, (written, allowed)
        elif not covered:
            assert written in refusal
    # Without globs in the mutation set the oracle is exact, so the converse holds too.
    named = [n for _, n in mutations if n is not None and "*" not in n.name]
    if len(named) == len(mutations) and all(
        any(oracle_covers(a, n) for a in named_allowed) for n in named
    ):
        assert refusal is None
