"""The RELEASES file at the repository root: each release's version and commit, then main's
version, unreleased (the file's first lines say the format)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "RELEASES"
UNRELEASED = "unreleased"
_LINE = re.compile(r"^v(?P<version>\d+\.\d+\.\d+) (?P<commit>[0-9a-f]{40}|unreleased)$")


@dataclass(frozen=True)
class Release:
    version: str  # without the leading v: 0.1.0
    commit: str | None  # None for main's version, not yet released

    @property
    def tag(self) -> str:
        return f"v{self.version}"


def parse(text: str) -> list[Release]:
    """Every line of a RELEASES file, in order; ValueError names a malformed line."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(
                f"RELEASES line {number} is not `vX.Y.Z <40-hex commit>` or "
                f"`vX.Y.Z unreleased`: {line!r}"
            )
        commit = match["commit"]
        found.append(Release(match["version"], None if commit == UNRELEASED else commit))
    return found


def releases(path: Path = RELEASES) -> list[Release]:
    return parse(path.read_text())


def previous_release(path: Path = RELEASES) -> Release:
    """The newest release with a commit: the one an upgrade to main starts from."""
    released = [r for r in releases(path) if r.commit is not None]
    if not released:
        raise ValueError(f"{path} names no released commit")
    return released[-1]


def has_history(root: Path = ROOT) -> bool:
    """Whether `root` is a git checkout (a clone, or a worktree whose .git is a file)."""
    return (root / ".git").exists()


def git(*args: str, root: Path = ROOT, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=check, timeout=120
    )
