"""The model API key: read once, then held only by this process.

In a pod the key is a file from a Secret volume, named by `GOALKEEPER_MODEL_API_KEY_FILE`; a
local run may set `GOALKEEPER_MODEL_API_KEY` instead, which `take_model_key` deletes from the
environment as it reads it. The entry point takes the key first thing, once the process is
non-dumpable (`confine`); from then on the settings, the scrubbing of what the step writes
and the hiding of the key's file from every child (`processes`) ask for it here.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from goalkeeper.step.settings import SettingsError

KEY_VAR = "GOALKEEPER_MODEL_API_KEY"
KEY_FILE_VAR = "GOALKEEPER_MODEL_API_KEY_FILE"
KEY_SOURCE_VAR = "GOALKEEPER_MODEL_API_KEY_SOURCE"


@dataclass(frozen=True)
class ModelKey:
    value: str | None = field(default=None, repr=False)
    file: str | None = None  # the real path of the file it is read from
    problem: str | None = None  # why that file could not be read


_held = ModelKey()


def take_model_key(environ: MutableMapping[str, str] | None = None) -> ModelKey:
    """Read the key from its file, or else from the environment, and hold it here; the
    environment variable is deleted whichever way the key comes."""
    global _held
    env = os.environ if environ is None else environ
    from_environment = env.pop(KEY_VAR, "").strip() or None
    path = env.get(KEY_FILE_VAR, "").strip()
    if not path:
        _held = ModelKey(from_environment)
        return _held
    real = os.path.realpath(path)
    # A ModelConfig's Secret is mounted optional: a missing one is named here, not by a pod
    # that never starts.
    source = env.get(KEY_SOURCE_VAR, "").strip()
    try:
        _held = ModelKey(Path(real).read_text(encoding="utf-8").strip() or None, real)
    except FileNotFoundError:
        missing = (
            f"The model API key, {source}, is missing: create that Secret with that key in "
            "this namespace"
            if source
            else f"{KEY_FILE_VAR} is {path}, which does not exist"
        )
        _held = ModelKey(None, real, missing)
    except (OSError, UnicodeError) as exc:
        _held = ModelKey(None, real, f"{KEY_FILE_VAR} is {path}, which cannot be read: {exc}")
    if source and _held.problem is None and _held.value is None:
        _held = ModelKey(None, real, f"The model API key, {source}, is empty")
    return _held


def model_key() -> ModelKey:
    """The key this process holds (empty until `take_model_key`)."""
    return _held


def settings_environment() -> dict[str, str]:
    """The environment the settings are read from: this process's, with the key held here."""
    if _held.problem:
        raise SettingsError([_held.problem])
    env = dict(os.environ)
    if _held.value:
        env[KEY_VAR] = _held.value
    return env


__all__ = [
    "KEY_FILE_VAR",
    "KEY_VAR",
    "ModelKey",
    "model_key",
    "settings_environment",
    "take_model_key",
]
