"""The namespace admin's instructions are theirs: config/admission/instructions.yaml.

The step identities never write ConfigMap goalkeeper-instructions, whatever its labels or
its namespace's labels say; whoever writes it gets an error naming the field and the bound
when it is not one `instructions` key of at most 4,000 characters. Writes are made with the
actor's own ServiceAccount token, as an act step makes them.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.test_actor_limits import WRITABLE, until_refused
from tests.cluster.test_admission import _typechecked, refused
from tests.support.cluster_fixtures import wait_for

pytestmark = pytest.mark.cluster

NAME = "goalkeeper-instructions"
POLICIES = ("goalkeeper-instructions", "goalkeeper-instructions-steps")


def instructions(text: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": NAME, **extra}, "data": {"instructions": text}}


def test_the_policies_load_without_type_errors(control_plane: Any) -> None:
    for name in POLICIES:
        status = wait_for(
            lambda name=name: _typechecked(control_plane, name), 60, f"{name} type checking"
        )
        assert status == "ok", (name, status)


def test_the_actor_never_writes_the_instructions_whatever_the_labels_say(
    api_client: Any, ns: str, actor: Any
) -> None:
    core, act = client.CoreV1Api(api_client), client.CoreV1Api(actor)
    # Labelled as data the actor may change: the label does not reach these.
    core.create_namespaced_config_map(
        ns, instructions("Never scale Deployment payments-api.", labels={WRITABLE: "true"})
    )
    lifted = {"data": {"instructions": "Anything goes."}}
    until_refused(lambda: act.patch_namespaced_config_map(NAME, ns, lifted, dry_run="All"), NAME)
    said = refused(lambda: act.patch_namespaced_config_map(NAME, ns, lifted))
    assert f"goalkeeper's steps may not write ConfigMap {NAME}" in said
    refused(lambda: act.delete_namespaced_config_map(NAME, ns))  # RBAC: no delete at all

    # Nor where a cluster admin lifted the actor's field limits for the namespace.
    core.patch_namespace(ns, {"metadata": {"labels": {"goalkeeper.dev/actor-limits": "off"}}})
    tuning = {"metadata": {"name": "tuning", "labels": {WRITABLE: "true"}}, "data": {"a": "1"}}
    core.create_namespaced_config_map(ns, tuning)

    def limits_lifted() -> bool:
        try:
            act.patch_namespaced_config_map("tuning", ns, {"metadata": {"labels": {"x": "y"}}})
        except ApiException:
            return False
        return True

    wait_for(limits_lifted, 60, "the opt-out label to lift the actor's limits")
    said = refused(lambda: act.patch_namespaced_config_map(NAME, ns, lifted))
    assert f"may not write ConfigMap {NAME}" in said
    kept = core.read_namespaced_config_map(NAME, ns).data
    assert kept == {"instructions": "Never scale Deployment payments-api."}


def test_an_admin_writing_them_is_told_the_field_and_the_bound(api_client: Any, ns: str) -> None:
    core = client.CoreV1Api(api_client)
    wrong_key = {"metadata": {"name": NAME}, "data": {"rules": "Never delete anything."}}
    until_refused(
        lambda: core.create_namespaced_config_map(ns, wrong_key, dry_run="All"), "data.instructions"
    )
    said = refused(lambda: core.create_namespaced_config_map(ns, wrong_key))
    assert f"ConfigMap {NAME} needs its text under data.instructions" in said
    said = refused(lambda: core.create_namespaced_config_map(ns, instructions("x" * 4001)))
    assert "data.instructions of ConfigMap goalkeeper-instructions must be at most 4000" in said
    extra = instructions("Never delete anything.")
    extra["data"]["more"] = "x"
    said = refused(lambda: core.create_namespaced_config_map(ns, extra))
    assert "holds data.instructions and nothing else" in said
    core.create_namespaced_config_map(ns, instructions("Never delete anything."))
    # Other ConfigMaps are none of these policies' business.
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "other"}, "data": {"x": "y" * 5000}}
    )
