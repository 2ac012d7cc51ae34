"""Child processes of the step: what they get, and the command runner.

The step holds the model's key (`credentials`); no child process ever does. A child gets
the step's environment without every `GOALKEEPER_MODEL_*` variable and without any other
variable that holds the value of a credential among them; it cannot read the step's
/proc/PID/environ or memory (the step is non-dumpable, `confine.make_undumpable`); and, where
the kernel has Landlock, it cannot read the key's file either (`confine.hiding_ruleset`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

from goalkeeper.step import confine
from goalkeeper.step.credentials import model_key
from goalkeeper.step.redact import looks_secret

MODEL_PREFIX = "GOALKEEPER_MODEL_"
EXPORTER_HEADERS = frozenset({"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"})


def model_credentials(environ: Mapping[str, str] | None = None) -> list[str]:
    """The model credentials: the key held by this process, and any in its environment."""
    env = os.environ if environ is None else environ
    held = model_key().value
    found = [
        v for k, v in env.items() if k.startswith(MODEL_PREFIX) and looks_secret(k) and v.strip()
    ]
    return [held, *found] if held else found


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: the step's own, minus the model credentials
    and the trace exporter's headers (a collector's token)."""
    env = os.environ if environ is None else environ
    withheld = set(model_credentials(env))
    return {
        k: v
        for k, v in env.items()
        if not k.startswith(MODEL_PREFIX) and k not in EXPORTER_HEADERS and v not in withheld
    }


def hidden_files() -> list[str]:
    """The files no child may read: the model key's."""
    key_file = model_key().file
    return [key_file] if key_file else []


@contextlib.contextmanager
def child_process(environ: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """The `subprocess` options for one child: `child_environment`, and a Landlock
    confinement that keeps it from the key's file where there is one and Landlock works."""
    env = child_environment(environ)
    ruleset = confine.hiding_ruleset(hidden_files())
    if ruleset is None:
        yield {"env": env}
        return
    try:
        yield {"env": env, "preexec_fn": functools.partial(confine.restrict_self, ruleset)}
    finally:
        os.close(ruleset)


def run_argv(argv: list[str], timeout: float) -> tuple[int, str]:
    """Run argv without a shell, as a child of the step; exit code and combined output."""
    try:
        with child_process() as options:
            proc = subprocess.run(
                argv,
                capture_output=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
                **options,
            )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g}s"
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, f"could not start: {exc}"
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    return proc.returncode, out + (f"\n[stderr]\n{err}" if err else "")


__all__ = ["child_environment", "child_process", "hidden_files", "model_credentials", "run_argv"]
