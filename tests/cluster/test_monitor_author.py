"""The API server records who wrote a Monitor, and the operator can ask what they may do.

config/admission/monitor-author.yaml is installed by the local control plane. The users
here are ServiceAccounts acting through token-only kubeconfigs (no client certificate), as
a person would through their own credentials; the cluster admin is the control plane's
certificate user. No operator runs: `KubeApi.review_access` is called directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from goalkeeper.controller.api import KubeApi, denied_permissions
from goalkeeper.core.permissions import (
    AUTHOR,
    AUTHOR_GROUPS,
    AUTHOR_UID,
    Author,
    Permission,
    author_of,
)
from tests.e2e.harness import write_token_kubeconfig
from tests.support.cluster_fixtures import REPO, wait_for

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "goalkeeper.dev", "v1alpha1", "monitors"
POLICY = "goalkeeper-monitor-author"
POLICY_FILE = REPO / "config" / "admission" / "monitor-author.yaml"
WRITER, EDITOR = "writer", "editor"

Opened = Callable[[str], client.ApiClient]


def monitor(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Monitor",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"task": "Finish the nightly build."},
    }


def create(api: Any, namespace: str, body: dict[str, Any], dry_run: bool = False) -> Any:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body, **({"dry_run": "All"} if dry_run else {})
    )


def patch(api: Any, namespace: str, name: str, body: dict[str, Any]) -> Any:
    return client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, body
    )


def annotations_of(api: Any, namespace: str, name: str) -> dict[str, str]:
    stored = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return dict(stored["metadata"].get("annotations") or {})


def refused(write: Callable[[], Any]) -> str:
    """The API server's refusal of `write`, which must be refused by admission."""
    with pytest.raises(ApiException) as caught:
        write()
    assert caught.value.status in (403, 422), caught.value
    return str(caught.value.body)


def user_info(api: Any) -> Any:
    """Who the API server takes `api`'s credentials for."""
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    return review.status.user_info


def stamp_of(user: Any) -> dict[str, str]:
    """The three annotations the API server writes for `user`."""
    return {
        AUTHOR: user.username,
        AUTHOR_UID: user.uid or "",
        AUTHOR_GROUPS: ",".join(user.groups or []),
    }


def recorded(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k in (AUTHOR, AUTHOR_UID, AUTHOR_GROUPS)}


def role(
    api: Any, namespace: str, name: str, rule: dict[str, Any], subject: dict[str, str]
) -> None:
    """A Role of one rule, bound to `subject`, in force once this returns."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        },
    )
    user = subject["name"]
    if subject["kind"] == "ServiceAccount":
        user = f"system:serviceaccount:{namespace}:{user}"
    attributes = {
        "verb": rule["verbs"][0],
        "group": rule["apiGroups"][0],
        "resource": rule["resources"][0],
        "namespace": namespace,
    }
    who = {"user": user} if subject["kind"] != "Group" else {"user": "nobody", "groups": [user]}
    review = {"spec": {**who, "resourceAttributes": attributes}}
    authorization = client.AuthorizationV1Api(api)
    wait_for(
        lambda: authorization.create_subject_access_review(review).status.allowed,
        30,
        f"Role {name} to be in force",
    )


def account(name: str, namespace: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


@pytest.fixture
def as_account(
    control_plane: Any, api_client: Any, namespace: str, tmp_path: Path
) -> Iterator[Opened]:
    """Opens a client for a ServiceAccount of `namespace` from a token-only kubeconfig.

    The writer may create, read and patch Monitors, nothing else; the editor may read
    and patch them."""
    core = client.CoreV1Api(api_client)
    for name in (WRITER, EDITOR):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    monitors = {"apiGroups": [GROUP], "resources": [PLURAL]}
    writes = {**monitors, "verbs": ["create", "get", "patch"]}
    role(api_client, namespace, "monitor-writer", writes, account(WRITER, namespace))
    edits = {**monitors, "verbs": ["get", "patch"]}
    role(api_client, namespace, "monitor-editor", edits, account(EDITOR, namespace))
    opened: list[client.ApiClient] = []

    def open_client(name: str) -> client.ApiClient:
        path = tmp_path / f"{name}.kubeconfig"
        write_token_kubeconfig(api_client, control_plane.kubeconfig, namespace, name, path)
        (user,) = yaml.safe_load(path.read_text())["users"]
        assert list(user["user"]) == ["token"], "the kubeconfig must hold a token only"
        opened.append(config.new_client_from_config(config_file=str(path)))
        return opened[-1]

    yield open_client
    for api in opened:
        api.close()


def wait_for_the_stamp(api: Any, namespace: str) -> None:
    """The mutating policy takes effect once the API server has loaded it (and the
    Monitor's schema, which it applies to: until then it answers 503): a dry run that
    names someone else comes back stamped with the requester, not refused."""
    me = user_info(api).username

    def stamped() -> bool:
        try:
            probe = create(api, namespace, monitor("probe", {AUTHOR: "someone"}), dry_run=True)
        except ApiException as error:
            if error.status == 503 or AUTHOR in str(error.body):
                return False
            raise
        return bool(probe["metadata"]["annotations"].get(AUTHOR) == me)

    wait_for(stamped, 60, "the monitor-author mutating policy to take effect")


def wait_for_the_guard(api: Any, namespace: str, name: str) -> None:
    """The validating policy takes effect once loaded: a dry-run rename of the author is
    refused."""

    def guarded() -> bool:
        try:
            client.CustomObjectsApi(api).patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name,
                {"metadata": {"annotations": {AUTHOR: "someone-else"}}}, dry_run="All",
            )  # fmt: skip
        except ApiException as error:
            return error.status in (403, 422) and AUTHOR in str(error.body)
        return False

    wait_for(guarded, 60, "the monitor-author validating policy to take effect")


def test_the_author_policies_type_check(control_plane: Any) -> None:
    def checked() -> str | None:
        done = control_plane.kubectl(
            "get", "validatingadmissionpolicy", POLICY, "-o",
            "jsonpath={.status.observedGeneration} {.status.typeChecking.expressionWarnings}",
        )  # fmt: skip
        generation, _, warnings = done.stdout.partition(" ")
        if not generation:
            return None
        return "ok" if not warnings.strip() else warnings

    assert wait_for(checked, 60, f"{POLICY} type checking") == "ok"
    done = control_plane.kubectl("get", "mutatingadmissionpolicy", POLICY, "-o", "name")
    assert done.returncode == 0, done.stderr


def test_the_api_server_records_the_author_and_nobody_rewrites_it(
    api_client: Any, namespace: str, as_account: Opened
) -> None:
    ns = namespace
    writer, editor = as_account(WRITER), as_account(EDITOR)
    wait_for_the_stamp(api_client, ns)

    # (a) Created by the writer, asking to be recorded as the admin: the stamp names them.
    create(writer, ns, monitor("nightly", {AUTHOR: "admin", "team": "builds"}))
    me = user_info(writer)
    assert me.username == f"system:serviceaccount:{ns}:{WRITER}"
    service_account = client.CoreV1Api(api_client).read_namespaced_service_account(WRITER, ns)
    assert me.uid == service_account.metadata.uid
    assert f"system:serviceaccounts:{ns}" in me.groups
    stored = annotations_of(api_client, ns, "nightly")
    assert recorded(stored) == stamp_of(me)
    assert stored["team"] == "builds"
    wait_for_the_guard(api_client, ns, "nightly")

    # (b) Without a spec edit the record does not move: not by the writer, not by the admin.
    admin = user_info(api_client).username
    forgeries = ((AUTHOR, admin), (AUTHOR_UID, "0000"), (AUTHOR_GROUPS, "system:masters"))
    for api in (writer, api_client):
        for key, value in forgeries:
            rename = {"metadata": {"annotations": {key: value}}}
            said = refused(lambda a=api, r=rename: patch(a, ns, "nightly", r))
            assert f"annotation {key} records who wrote the spec" in said, said
    erase = {"metadata": {"annotations": {AUTHOR_UID: None}}}
    said = refused(lambda: patch(api_client, ns, "nightly", erase))
    assert f"annotation {AUTHOR_UID} records who wrote the spec" in said
    # Other metadata still changes, and leaves the record as it was.
    patch(api_client, ns, "nightly", {"metadata": {"annotations": {"team": "release"}}})
    assert recorded(annotations_of(api_client, ns, "nightly")) == stamp_of(me)

    # (c) A spec edit by another user records that user, whatever the edit said.
    edit = {
        "metadata": {"annotations": {AUTHOR: me.username, AUTHOR_GROUPS: "system:masters"}},
        "spec": {"task": "Finish the nightly build and publish it."},
    }
    patch(editor, ns, "nightly", edit)
    them = user_info(editor)
    assert them.username == f"system:serviceaccount:{ns}:{EDITOR}"
    stored = annotations_of(api_client, ns, "nightly")
    assert recorded(stored) == stamp_of(them)
    assert stored["team"] == "release"
    # The admin's own spec edit records the admin.
    patch(api_client, ns, "nightly", {"spec": {"everyMinutes": 60}})
    assert annotations_of(api_client, ns, "nightly")[AUTHOR] == admin


def test_without_the_stamp_a_create_or_spec_edit_names_its_own_writer(
    control_plane: Any, api_client: Any, namespace: str, as_account: Opened
) -> None:
    """Where MutatingAdmissionPolicy is not served, the validating policy alone holds."""
    ns = namespace
    writer, editor = as_account(WRITER), as_account(EDITOR)
    wait_for_the_stamp(api_client, ns)
    me, them = user_info(writer), user_info(editor)
    control_plane.kubectl("delete", "mutatingadmissionpolicybinding", POLICY, check=True)
    try:

        def unstamped() -> bool:
            try:
                create(api_client, ns, monitor("probe", {AUTHOR: "someone-else"}), dry_run=True)
            except ApiException as error:
                return AUTHOR in str(error.body)
            return False

        wait_for(unstamped, 60, "the stamp to be gone")
        said = refused(lambda: create(writer, ns, monitor("forged", {AUTHOR: "admin"})))
        assert f"annotation {AUTHOR} must name the user who writes the spec" in said
        assert me.username in said
        said = refused(lambda: create(writer, ns, monitor("anonymous")))
        assert f"annotation {AUTHOR} must name the user" in said
        masters = {AUTHOR: me.username, AUTHOR_GROUPS: "system:masters"}
        said = refused(lambda: create(writer, ns, monitor("grouped", masters)))
        assert f"annotation {AUTHOR_GROUPS} must list the groups" in said
        other_uid = {AUTHOR: me.username, AUTHOR_UID: "0000"}
        said = refused(lambda: create(writer, ns, monitor("uid", other_uid)))
        assert f"annotation {AUTHOR_UID} must be the uid" in said

        # Naming oneself passes; the uid and groups may be left out, or given truly.
        create(writer, ns, monitor("named", {AUTHOR: me.username}))
        assert recorded(annotations_of(api_client, ns, "named")) == {AUTHOR: me.username}
        create(writer, ns, monitor("full", stamp_of(me)))
        assert recorded(annotations_of(api_client, ns, "full")) == stamp_of(me)

        # Another user's spec edit must name them, not the writer.
        said = refused(lambda: patch(editor, ns, "named", {"spec": {"everyMinutes": 60}}))
        assert them.username in said
        named = {"metadata": {"annotations": {AUTHOR: them.username}}}
        patch(editor, ns, "named", {**named, "spec": {"everyMinutes": 60}})
        assert recorded(annotations_of(api_client, ns, "named")) == {AUTHOR: them.username}
    finally:
        done = control_plane.kubectl("apply", "--server-side", "-f", str(POLICY_FILE))
        assert done.returncode == 0, done.stderr
        wait_for_the_stamp(api_client, ns)


async def test_the_operator_asks_what_the_recorded_author_may_do(
    api_client: Any, namespace: str, as_account: Opened
) -> None:
    ns = namespace
    writer = as_account(WRITER)
    wait_for_the_stamp(api_client, ns)
    create(writer, ns, monitor("nightly"))
    author = author_of(annotations_of(api_client, ns, "nightly"))
    assert author is not None and author.user == f"system:serviceaccount:{ns}:{WRITER}"
    api = KubeApi(api_client)

    create_monitors = Permission("create", GROUP, PLURAL, ns)
    patch_monitor = Permission("patch", GROUP, PLURAL, ns, "nightly")
    patch_settings = Permission("patch", "", "configmaps", ns, "settings")
    pod_logs = Permission("get", "", "pods", ns, subresource="log")
    assert await api.review_access(author, create_monitors)
    assert await api.review_access(author, patch_monitor)
    assert not await api.review_access(author, patch_settings)
    assert not await api.review_access(author, pod_logs)
    asked = [create_monitors, patch_settings, patch_monitor, pod_logs]
    assert await denied_permissions(api, author, asked) == (patch_settings, pod_logs)

    # A grant to one of the author's groups counts, through the groups recorded for them.
    read_configmaps = Permission("get", "", "configmaps", ns, "settings")
    assert not await api.review_access(author, read_configmaps)
    group = {"kind": "Group", "name": f"system:serviceaccounts:{ns}"}
    reads = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    role(api_client, ns, "read-configmaps", reads, group)
    assert await api.review_access(author, read_configmaps)
    assert not await api.review_access(Author(author.user, author.uid, ()), read_configmaps)
