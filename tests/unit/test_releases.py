"""RELEASES, the version files and the image name agree: main's version is the one line
`unreleased`, every release before it names a commit of this history whose version files
say that release's version."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from typing import Any

import pytest
import yaml
from tests.support.releases import ROOT, Release, git, has_history, parse, releases

import goalkeeper
from goalkeeper.controller.settings import OperatorSettings

CHART = ROOT / "charts" / "goalkeeper" / "Chart.yaml"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _pyproject_version(text: str) -> str:
    return str(tomllib.loads(text)["project"]["version"])


def _chart(text: str) -> dict[str, Any]:
    chart: dict[str, Any] = yaml.safe_load(text)
    return chart


def main_version() -> str:
    return releases()[-1].version


def test_the_file_parses_and_ends_with_main_unreleased() -> None:
    found = releases()
    assert found, "RELEASES names no version"
    unreleased = [r for r in found if r.commit is None]
    assert unreleased == [found[-1]], "exactly one line, the last, is main's unreleased version"
    assert any(r.commit for r in found), "RELEASES names no released commit"
    versions = [_version_key(r.version) for r in found]
    assert versions == sorted(set(versions)), "versions must rise, each named once"
    commits = [r.commit for r in found if r.commit]
    assert len(commits) == len(set(commits)), "a commit is one release"


def test_malformed_lines_are_refused() -> None:
    assert parse("# note\n\nv1.2.3 unreleased\n") == [Release("1.2.3", None)]
    for bad in ("1.2.3 unreleased", "v1.2 unreleased", "v1.2.3 930ee19", "v1.2.3  unreleased"):
        with pytest.raises(ValueError, match="RELEASES line 1"):
            parse(bad)


def test_main_version_is_the_version_of_every_version_file() -> None:
    version = main_version()
    assert _pyproject_version((ROOT / "pyproject.toml").read_text()) == version
    chart = _chart(CHART.read_text())
    assert (str(chart["version"]), str(chart["appVersion"])) == (version, version)
    assert goalkeeper.__version__ == version


def test_the_image_is_tagged_with_main_version() -> None:
    """The chart's image.tag defaults to appVersion; the operator's step image and the
    image build script default to the same tag, and the docs name no other."""
    image = f"goalkeeper:{main_version()}"
    values = yaml.safe_load((ROOT / "charts" / "goalkeeper" / "values.yaml").read_text())
    assert values["image"]["tag"] == "", "image.tag empty: the chart's appVersion"
    assert OperatorSettings().stepImage == image
    env = {k: v for k, v in os.environ.items() if k != "GOALKEEPER_IMAGE"}
    printed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image.sh"), "--print-image"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert printed.stdout.strip() == image
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        named = set(re.findall(r"goalkeeper:(\d+\.\d+\.\d+)", doc.read_text()))
        assert named <= {main_version()}, f"{doc.relative_to(ROOT)} names image {named}"


def test_every_release_is_a_commit_of_this_history_with_its_version() -> None:
    if not has_history():
        pytest.skip("no .git: a source tree without history cannot show its releases")
    for release in releases():
        if release.commit is None:
            continue
        where = f"release {release.tag} ({release.commit})"
        known = git("cat-file", "-e", f"{release.commit}^{{commit}}", check=False)
        assert known.returncode == 0, (
            f"{where} is not in this clone: a shallow clone? `git fetch --unshallow`"
        )
        ancestor = git("merge-base", "--is-ancestor", release.commit, "HEAD", check=False)
        assert ancestor.returncode == 0, f"{where} is not an ancestor of HEAD"
        pyproject = git("show", f"{release.commit}:pyproject.toml").stdout
        assert _pyproject_version(pyproject) == release.version, where
        chart = _chart(git("show", f"{release.commit}:{CHART.relative_to(ROOT)}").stdout)
        assert str(chart["version"]) == str(chart["appVersion"]) == release.version, where
