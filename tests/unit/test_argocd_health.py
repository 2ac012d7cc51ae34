"""The Argo CD health check of a Monitor, run by a real Lua interpreter on the test cases
in Argo's own layout (health_test.yaml + testdata/)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ARGOCD = Path(__file__).resolve().parents[2] / "charts" / "goalkeeper" / "argocd"
LUA = shutil.which("lua5.4")
CASES = yaml.safe_load((ARGOCD / "health_test.yaml").read_text())["tests"]

pytestmark = pytest.mark.skipif(LUA is None, reason="needs lua5.4 (apt-get install lua5.4)")


def lua_literal(value: Any) -> str:
    """A Lua table constructor for a YAML value (non-ASCII kept as is, so every JSON string
    escape left is one Lua reads the same)."""
    if isinstance(value, dict):
        items = (f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nil"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def health(resource: dict[str, Any], tmp_path: Path) -> tuple[str, str]:
    chunk = tmp_path / "obj.lua"
    chunk.write_text("return " + lua_literal(resource) + "\n")
    done = subprocess.run(
        [str(LUA), str(ARGOCD / "run_health.lua"), str(chunk), str(ARGOCD / "health.lua")],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    status, message = done.stdout.split("\n", 1)
    return status, message.rstrip("\n")


@pytest.mark.parametrize("case", CASES, ids=[Path(c["inputPath"]).stem for c in CASES])
def test_health_matches_the_expected_status(case: dict[str, Any], tmp_path: Path) -> None:
    resource = yaml.safe_load((ARGOCD / case["inputPath"]).read_text())
    expected = case["healthStatus"]
    assert health(resource, tmp_path) == (expected["status"], expected["message"])


def test_every_testdata_file_is_a_case() -> None:
    used = {c["inputPath"] for c in CASES}
    assert used == {f"testdata/{p.name}" for p in (ARGOCD / "testdata").glob("*.yaml")}
