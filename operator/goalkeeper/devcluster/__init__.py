"""A local Kubernetes control plane for development and CI.

`ControlPlane` runs etcd, kube-apiserver and kube-controller-manager (built from Go
modules by `scripts/build-k8s.sh`) as child processes on loopback; `PodRunner` plays a
small kubelet that runs pods' first container as a local process.
"""

from __future__ import annotations

from goalkeeper.devcluster.binaries import K8S_VERSION, BuildError, ensure_binaries
from goalkeeper.devcluster.controlplane import ControlPlane, ControlPlaneError
from goalkeeper.devcluster.podrunner import PodRunner

__all__ = [
    "K8S_VERSION",
    "BuildError",
    "ControlPlane",
    "ControlPlaneError",
    "PodRunner",
    "ensure_binaries",
]
