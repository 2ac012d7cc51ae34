"""A local Kubernetes control plane for development and CI.

`ControlPlane` runs etcd, kube-apiserver and kube-controller-manager with its default
controllers (built from Go modules by `scripts/build-k8s.sh`) as child processes on
loopback; `PodRunner` plays a small kubelet and scheduler: it registers a Node, binds pods
to it and runs their first container as a local process.

The names load on first use, so the command line can offer `goalkeeper cluster` in an
image that ships without the development dependencies (the local PKI's `cryptography`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goalkeeper.devcluster.binaries import K8S_VERSION as K8S_VERSION
    from goalkeeper.devcluster.binaries import BuildError as BuildError
    from goalkeeper.devcluster.binaries import ensure_binaries as ensure_binaries
    from goalkeeper.devcluster.controlplane import ControlPlane as ControlPlane
    from goalkeeper.devcluster.controlplane import ControlPlaneError as ControlPlaneError
    from goalkeeper.devcluster.podrunner import PodRunner as PodRunner

_WHERE = {
    "K8S_VERSION": "binaries",
    "BuildError": "binaries",
    "ensure_binaries": "binaries",
    "ControlPlane": "controlplane",
    "ControlPlaneError": "controlplane",
    "PodRunner": "podrunner",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
