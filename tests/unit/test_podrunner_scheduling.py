"""Which pods the pod runner binds to its node: nodeSelector and required node affinity."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import V1Pod

from goalkeeper.devcluster.podrunner import node_fits

NODE = "goalkeeper-dev-1"
LABELS = {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "size": "4"}


def pod(**spec: Any) -> V1Pod:
    return V1Pod.from_dict({"spec": {"containers": [{"name": "main"}], **spec}})


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    selector = {"nodeSelectorTerms": list(terms)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def test_a_pod_without_constraints_fits() -> None:
    assert node_fits(pod(), NODE, LABELS)


@pytest.mark.parametrize(
    ("selector", "fits"),
    [({"kubernetes.io/os": "linux"}, True), ({"kubernetes.io/os": "windows"}, False)],
)
def test_node_selector(selector: dict[str, str], fits: bool) -> None:
    assert node_fits(pod(nodeSelector=selector), NODE, LABELS) is fits


def test_a_daemonset_pod_fits_only_the_node_it_names() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    assert node_fits(pod(affinity=required(term)), NODE, LABELS)
    assert not node_fits(pod(affinity=required(term)), "other-node", LABELS)


@pytest.mark.parametrize(
    ("term", "fits"),
    [
        (expression("kubernetes.io/os", "In", "linux", "darwin"), True),
        (expression("kubernetes.io/os", "NotIn", "linux"), False),
        (expression("gpu", "NotIn", "yes"), True),
        (expression("size", "Exists"), True),
        (expression("gpu", "Exists"), False),
        (expression("gpu", "DoesNotExist"), True),
        (expression("size", "Gt", "2"), True),
        (expression("size", "Lt", "2"), False),
        (expression("kubernetes.io/os", "Gt", "2"), False),
        ({}, False),  # a term without requirements matches no node
    ],
)
def test_required_node_affinity_operators(term: dict[str, Any], fits: bool) -> None:
    assert node_fits(pod(affinity=required(term)), NODE, LABELS) is fits


def test_terms_are_ored_and_an_empty_list_matches_nothing() -> None:
    miss, hit = expression("gpu", "Exists"), expression("size", "Exists")
    assert node_fits(pod(affinity=required(miss, hit)), NODE, LABELS)
    assert not node_fits(pod(affinity=required()), NODE, LABELS)
