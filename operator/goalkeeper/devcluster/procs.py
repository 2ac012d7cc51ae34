"""Child processes that die with their parent and are always reaped."""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

_PR_SET_PDEATHSIG = 1


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGKILL the child when its parent thread dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl: then nobody would kill us.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    stdout: IO[Any] | None = None,
    stderr: IO[Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own process group (session), stdin closed, output to `log`
    (or the given files). The child gets SIGKILL if this process dies (Linux
    PR_SET_PDEATHSIG; the fork happens in a daemon thread that lives as long as the process).
    """
    out: IO[Any] | int | None = stdout
    err: IO[Any] | int | None = stderr
    logf = None
    if log is not None:
        logf = open(log, "ab")  # noqa: SIM115 - handed to the child, closed below
        out, err = logf, subprocess.STDOUT
    try:
        process: subprocess.Popen[bytes] = _in_spawner_thread(
            subprocess.Popen,
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_pdeathsig_preexec(),
        )
    finally:
        if logf is not None:
            logf.close()
    return process


_spawn_queue: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Future[Any]]]
_spawn_queue = queue.Queue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawner_main() -> None:
    while True:
        fn, args, kwargs, fut = _spawn_queue.get()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            fut.set_exception(exc)


def _in_spawner_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `fn` (a fork) in one daemon thread that lives as long as the process.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so children
    must not be forked from short-lived threads (asyncio.to_thread, fixtures' helpers).
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(
                target=_spawner_main, name="devcluster-spawner", daemon=True
            )
            _spawner.start()
    fut: Future[Any] = Future()
    _spawn_queue.put((fn, args, kwargs, fut))
    return fut.result()


def kill_group(proc: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def terminate(proc: subprocess.Popen[Any], *, grace: float = 10.0) -> int | None:
    """SIGTERM the child's process group, SIGKILL after `grace` seconds, reap it."""
    if proc.poll() is None:
        kill_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    # Kill what is left of the group (grandchildren), and the child if still alive.
    kill_group(proc, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
    return proc.returncode


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def log_tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"(no log: {exc})"
    return data[-limit:].decode("utf-8", "replace")
