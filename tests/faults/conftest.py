"""The fault tests' own control plane, whose kube-apiserver and etcd they stop and start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import ROOT
from tests.faults.cluster import RestartableControlPlane


@pytest.fixture(scope="session")
def plane() -> Iterator[RestartableControlPlane]:
    cp = RestartableControlPlane(crds_dir=ROOT / "crds")
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()
