"""The model key: read from its file (or, in a local run, once from the environment), held
only by the step, never readable by a child or through the file tools."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.step_fakes import FakeKube, deployment

from goalkeeper.step import credentials
from goalkeeper.step.confine import landlock_abi
from goalkeeper.step.credentials import (
    KEY_FILE_VAR,
    KEY_VAR,
    ModelKey,
    model_key,
    settings_environment,
    take_model_key,
)
from goalkeeper.step.processes import child_environment, hidden_files, model_credentials
from goalkeeper.step.redact import REDACTED
from goalkeeper.step.settings import SettingsError, load_settings
from goalkeeper.step.tools import OFF_LIMITS, StepTools, ToolConfig

ROOT = Path(__file__).resolve().parents[3]
THIEF = ROOT / "tests" / "support" / "key_thief.py"
PR_CAPBSET_DROP = 24


@pytest.fixture(autouse=True)
def no_key_held(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts, and leaves the process, holding no key."""
    monkeypatch.setattr(credentials, "_held", ModelKey())
    monkeypatch.delenv(KEY_VAR, raising=False)
    monkeypatch.delenv(KEY_FILE_VAR, raising=False)
    yield


def a_key() -> str:
    return f"KEYMARK-{secrets.token_hex(16)}"


def test_the_key_is_read_from_its_file_and_the_variable_is_deleted(tmp_path: Path) -> None:
    key = a_key()
    (tmp_path / "api-key").write_text(key + "\n")
    env = {KEY_FILE_VAR: str(tmp_path / "api-key"), KEY_VAR: "a-leftover", "OTHER": "x"}
    taken = take_model_key(env)
    assert (taken.value, taken.file) == (key, str((tmp_path / "api-key").resolve()))
    assert KEY_VAR not in env and key not in repr(taken)
    assert model_key() == taken
    assert model_credentials({}) == [key]
    assert hidden_files() == [taken.file]
    assert settings_environment()[KEY_VAR] == key
    settings = load_settings({**settings_environment(), "GOALKEEPER_MODEL": "anthropic:claude"})
    assert settings.api_key == key


def test_a_local_run_passes_the_key_in_the_environment_once() -> None:
    key = a_key()
    env = {KEY_VAR: key, "PATH": "/bin"}
    assert take_model_key(env) == ModelKey(key)
    assert env == {"PATH": "/bin"}
    assert hidden_files() == []
    # a copy of the key under another name is withheld from children as well
    assert child_environment({"COPY": key, "PATH": "/bin"}) == {"PATH": "/bin"}


def test_an_unreadable_key_file_is_a_settings_problem(tmp_path: Path) -> None:
    take_model_key({KEY_FILE_VAR: str(tmp_path / "missing")})
    with pytest.raises(SettingsError) as problem:
        settings_environment()
    assert problem.value.problems[0].startswith(f"{KEY_FILE_VAR} is {tmp_path / 'missing'}")


# --- the file tools ----------------------------------------------------------------------


def file_tools(*roots: str, withheld: tuple[str, ...] = ()) -> StepTools:
    return StepTools(
        FakeKube([deployment()]),
        ToolConfig(
            fence_id="1234123412341234", namespace="shop", file_roots=roots, withheld_files=withheld
        ),
    )


def body(out: str) -> str:
    """What a read_file result shows of the file: inside the fence, after its header."""
    inside = out.split("\n", 1)[1].rsplit("\n", 1)[0]
    return inside.split("\n", 1)[1] if inside.startswith("file ") else inside


def test_a_file_read_at_any_offset_never_shows_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The secrets are written in letters the rest of the file never uses.
    held = "QZXJ" * 6
    monkeypatch.setenv(KEY_VAR, held)  # the step's own key, bare in the file
    text = (
        "progress: done 21 of 27\n"
        f"API_KEY=JXZQJXZQJXZQJXZQ\nmodel key {held} in a note\n"
        "settings:\n  password: |\n    ZZQQXXJJ\n    QQJJZZXX\n  user: bob\n"
        "db: postgres://bob:XQZJXQZJ@db/shop\nthe end\n"
    )
    path = tmp_path / "progress.txt"
    path.write_text(text)
    tools = file_tools(str(tmp_path))
    for size in (1, 3, 7, 16, 64):
        for offset in range(len(text) + 1):
            shown = body(tools.read_file(str(path), offset=offset, max_bytes=size))
            assert not set(shown) & set("QZXJ"), (offset, size, shown)
    whole = body(tools.read_file(str(path)))
    assert whole.startswith("progress: done 21 of 27\nAPI_KEY=" + REDACTED)
    assert "user: bob" in whole and "the end" in whole


@pytest.mark.parametrize("path", ["/proc/self/environ", "/proc/1/environ", "/proc", "/sys/kernel"])
def test_process_and_kernel_state_is_refused_whatever_the_roots(path: str) -> None:
    out = file_tools("/").read_file(path)
    assert out.startswith("REFUSED:") and "process state or credentials" in out


def test_mounted_credentials_and_the_key_file_are_refused(tmp_path: Path) -> None:
    key_dir = tmp_path / "model"
    key_dir.mkdir()
    (key_dir / "api-key").write_text(a_key())
    (tmp_path / "via-link").symlink_to(key_dir / "api-key")
    (tmp_path / "environ-link").symlink_to("/proc/self/environ")
    tools = file_tools("/", str(tmp_path), withheld=(str(key_dir / "api-key"),))
    for path in (
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "/run/secrets/kubernetes.io/serviceaccount/token",
        str(key_dir / "api-key"),
        str(tmp_path / "via-link"),
        str(tmp_path / "environ-link"),
    ):
        out = tools.read_file(path)
        assert out.startswith("REFUSED:"), (path, out)
        assert "KEYMARK" not in out
    assert set(OFF_LIMITS) >= {"/proc", "/sys", "/var/run/secrets", "/run/secrets"}


def test_a_range_read_over_http_is_refused() -> None:
    tools = StepTools(
        FakeKube(),
        ToolConfig(fence_id="1234123412341234", namespace="shop", http_allowed_hosts=("x",)),
    )
    out = tools.http_get("http://x/config", headers={"Range": "bytes=100-"})
    assert out.startswith("REFUSED:")


# --- children of the step ----------------------------------------------------------------

# The step's side, started as its entry point starts: non-dumpable first (unless told not
# to), then the key is taken; then it runs the thief as a command and (protected) as the
# repair workflow.
STEP = """
import json, sys
from goalkeeper.step.confine import make_undumpable
from goalkeeper.step.credentials import take_model_key
from goalkeeper.step.processes import run_argv

if sys.argv[1] == "protected":
    make_undumpable()
take_model_key()
thief = [sys.executable, sys.argv[2], sys.argv[3]]
code, output = run_argv(thief, 60)
found = {"command": json.loads(output.split("\\n")[0])}
if sys.argv[1] == "protected":
    from goalkeeper.step.repair import run_repair
    from tests.support.step_fakes import step_input

    repaired = run_repair(step_input("repair"), thief, timeout_seconds=60)
    found["repair"] = json.loads(repaired.result["evidence"])
print(json.dumps(found))
"""


def without_capabilities() -> None:
    """As the step's container is: no capability, so none to read a non-dumpable process."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(64):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)


def run_step_with_thief(
    key: str, tmp_path: Path, *, key_file: bool, protected: bool = True
) -> dict[str, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOALKEEPER_")}
    file = tmp_path / "api-key"
    if key_file:
        file.write_text(key)
        file.chmod(0o400)
        env[KEY_FILE_VAR] = str(file)
    else:
        env[KEY_VAR] = key
    mode = "protected" if protected else "unprotected"
    proc = subprocess.run(
        [sys.executable, "-c", STEP, mode, str(THIEF), str(file)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=without_capabilities if os.geteuid() == 0 else None,
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, dict[str, object]] = json.loads(proc.stdout.splitlines()[-1])
    return found


needs_linux = pytest.mark.skipif(sys.platform != "linux", reason="the protections are Linux's")


@needs_linux
@pytest.mark.parametrize("key_file", [False, True], ids=["key-in-environment", "key-in-file"])
def test_no_child_reads_the_key_from_proc_or_its_file(tmp_path: Path, key_file: bool) -> None:
    key = a_key()
    found = run_step_with_thief(key, tmp_path, key_file=key_file)
    for child in ("command", "repair"):
        assert key not in json.dumps(found[child]), (child, found)
        assert str(found[child]["environ"]).startswith("denied"), found
        assert str(found[child]["mem"]).startswith("denied"), found
        if key_file and landlock_abi() > 0:
            assert found[child]["file"] == "denied: Permission denied", found


@needs_linux
def test_without_the_protection_a_child_would_read_the_key(tmp_path: Path) -> None:
    key = a_key()
    found = run_step_with_thief(key, tmp_path, key_file=False, protected=False)
    assert found["command"]["environ"] == [key]
