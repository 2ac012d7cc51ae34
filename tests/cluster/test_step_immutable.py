"""A MonitorStep's spec is what its step runs: the API server refuses any change of it once
the step exists, to anyone, cluster admins included (the CRD's `self == oldSelf` rule,
generated from the model). Metadata and the status stay writable."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "goalkeeper.dev", "v1alpha1", "monitorsteps"


def observe_step(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MonitorStep",
        "metadata": {"name": name},
        "spec": {
            "monitor": "build",
            "kind": "observe",
            "check": 2,
            "seq": 2,
            "input": {
                "kind": "observe",
                "check": 2,
                "maxChecks": 10,
                "task": "Finish the build.",
                "stopWhen": "Stop when it is done.",
            },
        },
    }


def refused_as_immutable(write: Any) -> None:
    with pytest.raises(ApiException) as caught:
        write()
    assert caught.value.status == 422, caught.value
    assert "is immutable once created" in str(caught.value.body)


def test_no_one_changes_a_steps_spec_once_it_exists(api_client: Any, namespace: str) -> None:
    """The admin client: whoever may write MonitorSteps at all still cannot turn an observe
    step into an act step, or change what it reads, after the operator created it."""
    custom = client.CustomObjectsApi(api_client)
    name = "build-2-observe-aaaaa"
    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, observe_step(name)
    )

    def patch(body: dict[str, Any]) -> Any:
        return custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
            _content_type="application/merge-patch+json",
        )

    acting = {"kind": "act", "input": {"kind": "act", "task": "Delete the namespace."}}
    refused_as_immutable(lambda: patch({"spec": acting}))
    refused_as_immutable(lambda: patch({"spec": {"input": {"task": "Read the Secrets."}}}))
    replaced = {**created, "spec": {**created["spec"], "check": 3}}
    refused_as_immutable(
        lambda: custom.replace_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, replaced
        )
    )
    kept = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    assert kept["spec"] == created["spec"]

    # Only the spec is frozen: labels and the status (its pod's result) are still written.
    labelled = patch({"metadata": {"labels": {"audit": "seen"}}})
    assert labelled["metadata"]["labels"] == {"audit": "seen"}
    written = custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"status": {"phase": "Running"}},
        _content_type="application/merge-patch+json",
    )
    assert written["status"]["phase"] == "Running" and written["spec"] == created["spec"]
