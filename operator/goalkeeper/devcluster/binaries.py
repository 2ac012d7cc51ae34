"""Where the control plane binaries live, and building them when they are missing.

The build itself is `scripts/build-k8s.sh` (the same code `make k8s` and CI run); this
module only finds its output and calls it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

K8S_VERSION = "v1.37.2"
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")


class BuildError(RuntimeError):
    """The binaries are missing and building them failed."""


def repo_root() -> Path:
    """The source checkout this package is installed from (editable install)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "scripts" / "build-k8s.sh").is_file() and (
            parent / "pyproject.toml"
        ).is_file():
            return parent
    raise BuildError(f"cannot find the repository root (scripts/build-k8s.sh) above {here}")


def cache_root() -> Path:
    explicit = os.environ.get("GOALKEEPER_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "goalkeeper"


def bin_dir() -> Path:
    return cache_root() / f"k8s-{K8S_VERSION}"


def find_binary(name: str) -> Path | None:
    """`KUBEBUILDER_ASSETS/name` when present there, else the cache's, else None."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    candidates = [Path(assets) / name] if assets else []
    candidates.append(bin_dir() / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def ensure_binaries(*, build: bool = True) -> dict[str, Path]:
    """Return the path of every binary, building the missing ones first.

    Raises `BuildError` (with the build's output tail) when a binary is missing and
    cannot be built.
    """
    missing = [name for name in NAMES if find_binary(name) is None]
    if missing and build:
        script = repo_root() / "scripts" / "build-k8s.sh"
        print(f"goalkeeper: building {', '.join(missing)} with {script}", file=sys.stderr)
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
        sys.stderr.write(proc.stderr[-4000:])
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-6000:]
            raise BuildError(f"{script} failed with exit code {proc.returncode}:\n{tail}")
        missing = [name for name in NAMES if find_binary(name) is None]
    if missing:
        raise BuildError(
            f"missing binaries {missing} (looked in KUBEBUILDER_ASSETS and {bin_dir()}); "
            "run `make k8s` or scripts/build-k8s.sh"
        )
    return {name: path for name in NAMES if (path := find_binary(name)) is not None}
