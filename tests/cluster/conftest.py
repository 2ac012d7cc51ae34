"""Fixtures of the cluster tests that hold the step identities to their limits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.test_admission import ACTOR
from tests.support.accounts import client_with_token, token
from tests.support.cluster_fixtures import REPO


@pytest.fixture
def ns(control_plane: Any, namespace: str) -> str:
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", str(REPO / "config" / "rbac" / "steps.yaml"), check=True
    )
    return namespace


@pytest.fixture
def actor(control_plane: Any, api_client: Any, ns: str) -> Iterator[Any]:
    """An API client that holds only the actor's token, as an act step's pod does."""
    api = client_with_token(control_plane, token(api_client, ns, ACTOR))
    yield api
    api.close()
