"""A Monitor's recorded author, and the permissions its steps would use in their name."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.support.fake_api import FakeApi

from goalkeeper.controller.api import denied_permissions
from goalkeeper.core.permissions import (
    AUTHOR,
    AUTHOR_GROUPS,
    AUTHOR_UID,
    Author,
    Permission,
    author_of,
    denied_text,
    observer_reads,
    writes_for,
)

ALICE = Author("alice", "u-1", ("devs", "system:authenticated"))


@dataclass(frozen=True)
class Target:
    group: str | None
    resource: str
    namespace: str
    name: str


# --- the recorded author ---------------------------------------------------------------


def test_the_author_is_read_from_the_three_annotations() -> None:
    annotations = {
        AUTHOR: "system:serviceaccount:team-a:ci",
        AUTHOR_UID: "0c5f",
        AUTHOR_GROUPS: "system:serviceaccounts,system:serviceaccounts:team-a",
        "other": "x",
    }
    assert author_of(annotations) == Author(
        "system:serviceaccount:team-a:ci",
        "0c5f",
        ("system:serviceaccounts", "system:serviceaccounts:team-a"),
    )


def test_an_author_without_uid_or_groups_has_none() -> None:
    assert author_of({AUTHOR: "admin", AUTHOR_UID: "", AUTHOR_GROUPS: ""}) == Author(
        "admin", "", ()
    )
    assert author_of({AUTHOR: "admin"}) == Author("admin", "", ())


@pytest.mark.parametrize("annotations", [None, {}, {AUTHOR: ""}, {AUTHOR: "  "}, {AUTHOR_UID: "1"}])
def test_no_author_is_recorded_without_a_user_name(annotations: dict[str, str] | None) -> None:
    assert author_of(annotations) is None


# --- permissions in words --------------------------------------------------------------


@pytest.mark.parametrize(
    ("permission", "text"),
    [
        (Permission("patch", "apps", "deployments", "team-a", "web"),
         "patch deployments.apps/web in team-a"),
        (Permission("list", "", "pods", "team-a"), "list pods/* in team-a"),
        (Permission("get", "", "pods", "team-a", subresource="log"), "get pods/* (log) in team-a"),
        (Permission("patch", "apps", "deployments", "team-a", "web", "scale"),
         "patch deployments.apps/web (scale) in team-a"),
        (Permission("get", "", "namespaces", "", "team-a"), "get namespaces/team-a"),
    ],
)  # fmt: skip
def test_a_permission_reads_like_a_mutation_set_entry(permission: Permission, text: str) -> None:
    assert permission.text == text
    assert str(permission) == text


def test_denied_text_names_the_author_and_every_denial() -> None:
    denied = [
        Permission("patch", "apps", "deployments", "team-a", "web"),
        Permission("delete", "", "pods", "team-a"),
    ]
    assert denied_text(ALICE, denied) == (
        "alice may not patch deployments.apps/web in team-a; delete pods/* in team-a"
    )
    assert denied_text(ALICE, denied[:1]) == "alice may not patch deployments.apps/web in team-a"


# --- what the steps would use ----------------------------------------------------------


def test_observer_reads_mirror_the_observer_roles_target_reads() -> None:
    reads = observer_reads("team-a")
    assert len(set(reads)) == len(reads)
    assert {p.namespace for p in reads} == {"team-a"}
    assert {p.verb for p in reads} == {"get", "list"}
    for group, resource in [
        ("", "pods"),
        ("", "configmaps"),
        ("", "events"),
        ("", "services"),
        ("", "endpoints"),
        ("", "persistentvolumeclaims"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("apps", "replicasets"),
        ("events.k8s.io", "events"),
    ]:
        for verb in ("get", "list"):
            assert Permission(verb, group, resource, "team-a") in reads, (verb, resource)
    assert Permission("get", "", "pods", "team-a", subresource="log") in reads
    assert not [p for p in reads if p.subresource and p.verb != "get"]
    assert not [p for p in reads if p.group == "goalkeeper.dev" or p.resource == "secrets"]
    assert not [p for p in reads if p.name]


def test_a_named_object_needs_get_and_patch_on_it() -> None:
    target = Target("apps", "deployments", "team-a", "web")
    assert writes_for([target]) == (
        Permission("get", "apps", "deployments", "team-a", "web"),
        Permission("patch", "apps", "deployments", "team-a", "web"),
    )


def test_a_target_is_reviewed_in_its_own_namespace() -> None:
    target = Target("", "configmaps", "team-b", "settings")
    assert {p.namespace for p in writes_for([target])} == {"team-b"}


def test_a_cluster_scoped_target_is_reviewed_without_a_namespace() -> None:
    (get, patch) = writes_for([Target(None, "namespaces", "", "team-a")])
    assert (get.namespace, patch.namespace) == ("", "")
    assert patch.text == "patch namespaces/team-a"


def test_a_core_target_has_the_empty_group() -> None:
    (get, patch) = writes_for([Target(None, "configmaps", "team-a", "settings")])
    assert (get.group, patch.group) == ("", "")
    assert patch.text == "patch configmaps/settings in team-a"


def test_a_glob_needs_the_verbs_on_every_object_and_a_list_to_find_them() -> None:
    for name in ("*", "build-*"):
        assert writes_for([Target("batch", "cronjobs", "team-a", name)]) == (
            Permission("get", "batch", "cronjobs", "team-a"),
            Permission("list", "batch", "cronjobs", "team-a"),
            Permission("patch", "batch", "cronjobs", "team-a"),
        )


def test_a_job_also_needs_deleting_any_pod_for_its_failed_ones() -> None:
    assert writes_for([Target("batch", "jobs", "team-a", "build")]) == (
        Permission("get", "batch", "jobs", "team-a", "build"),
        Permission("patch", "batch", "jobs", "team-a", "build"),
        Permission("delete", "", "pods", "team-a"),
    )


def test_a_pod_target_may_be_deleted() -> None:
    assert writes_for([Target(None, "pods", "team-a", "web-0")]) == (
        Permission("get", "", "pods", "team-a", "web-0"),
        Permission("patch", "", "pods", "team-a", "web-0"),
        Permission("delete", "", "pods", "team-a", "web-0"),
    )


def test_no_target_needs_create_update_or_a_subresource() -> None:
    targets = [
        Target("batch", "jobs", "team-a", "build"),
        Target(None, "pods", "team-a", "build-*"),
        Target("apps", "deployments", "team-a", "*"),
        Target(None, "configmaps", "team-b", "settings"),
    ]
    needed = writes_for(targets)
    assert {p.verb for p in needed} == {"get", "list", "patch", "delete"}
    assert {p.resource for p in needed if p.verb == "delete"} == {"pods"}
    assert not [p for p in needed if p.subresource]


def test_repeated_needs_are_listed_once_in_order() -> None:
    targets = [
        Target("batch", "jobs", "team-a", "build"),
        Target("batch", "jobs", "team-a", "test"),
        Target("batch", "jobs", "team-a", "build"),
    ]
    needed = writes_for(targets)
    assert [p.text for p in needed] == [
        "get jobs.batch/build in team-a",
        "patch jobs.batch/build in team-a",
        "delete pods/* in team-a",
        "get jobs.batch/test in team-a",
        "patch jobs.batch/test in team-a",
    ]
    assert writes_for([]) == ()


# --- asking, against the fake ----------------------------------------------------------


async def test_denied_permissions_are_those_no_grant_of_the_user_or_a_group_covers() -> None:
    api = FakeApi()
    patch_web = Permission("patch", "apps", "deployments", "team-a", "web")
    get_any_deployment = Permission("get", "apps", "deployments", "team-a")
    delete_pods = Permission("delete", "", "pods", "team-a")
    api.grant("alice", patch_web)
    api.grant("devs", get_any_deployment)
    asked = [
        Permission("get", "apps", "deployments", "team-a", "web"),
        patch_web,
        Permission("patch", "apps", "deployments", "team-a", "api"),
        delete_pods,
    ]
    denied = await denied_permissions(api, ALICE, asked)
    assert denied == (asked[2], delete_pods)
    assert api.count("review_access") == len(asked)
    # Without the group's grant, reading the Deployment is denied too.
    alone = Author("alice", "u-1", ())
    assert await denied_permissions(api, alone, asked[:1]) == (asked[0],)
