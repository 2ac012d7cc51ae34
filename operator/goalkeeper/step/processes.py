"""Child processes of the step: the environment they get, and the command runner.

The step holds the model's credentials in its environment (`GOALKEEPER_MODEL_API_KEY`);
no child process ever does. A child gets the step's environment without every
`GOALKEEPER_MODEL_*` variable, and without any other variable that holds the value of a
credential among them (one whose name looks secret, see `redact.looks_secret`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from goalkeeper.step.redact import looks_secret

MODEL_PREFIX = "GOALKEEPER_MODEL_"


def model_credentials(environ: Mapping[str, str] | None = None) -> list[str]:
    """The model credentials in the step's environment (non-empty values)."""
    env = os.environ if environ is None else environ
    return [
        v for k, v in env.items() if k.startswith(MODEL_PREFIX) and looks_secret(k) and v.strip()
    ]


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: the step's own, minus the model credentials."""
    env = os.environ if environ is None else environ
    withheld = set(model_credentials(env))
    return {k: v for k, v in env.items() if not k.startswith(MODEL_PREFIX) and v not in withheld}


def run_argv(argv: list[str], timeout: float) -> tuple[int, str]:
    """Run argv without a shell, in the child environment; exit code and combined output."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            env=child_environment(),
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g}s"
    except OSError as exc:
        return 127, f"could not start: {exc}"
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    return proc.returncode, out + (f"\n[stderr]\n{err}" if err else "")


__all__ = ["child_environment", "model_credentials", "run_argv"]
