"""What keeps the model key out of the step's children (Linux; elsewhere nothing is done).

Non-dumpable (`make_undumpable`): no other process of the same user can then read this
process's /proc/PID/environ (the environment it started with, deleted variables included)
or /proc/PID/mem, or ptrace it; only a holder of CAP_SYS_PTRACE could, and the step's
container drops every capability. A child starts dumpable again, but holds no key.

Landlock (`hiding_ruleset`, `restrict_self`): a child cannot read the key's file, which a
Secret volume makes readable to the step's user and so to every process it starts. Landlock
only allows, so the rules allow reading files beneath every entry of each directory on the
way from / to a hidden file, except the next one on that way. The hidden file, and any entry
made later in one of those directories, stays unreadable to the child.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
# The same numbers on x86_64 and arm64 (the generic system call table).
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    return ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


_LIBC = _libc()


def make_undumpable() -> bool:
    """Make this process non-dumpable; False where that cannot be done."""
    return _LIBC is not None and _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def _syscall(libc: ctypes.CDLL, number: int, *args: int | ctypes._Pointer[Any] | None) -> int:
    """A system call with its arguments as C longs (the width the kernel reads them at)."""
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return int(libc.syscall(ctypes.c_long(number), *converted))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (or a seccomp filter hides it)."""
    if _LIBC is None:
        return 0
    return max(
        _syscall(_LIBC, SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION), 0
    )


def _on_the_way(hidden: Iterable[str]) -> tuple[set[str], set[str]]:
    """The hidden files (real paths) and every directory on the way from / to one of them."""
    files = {os.path.realpath(path) for path in hidden}
    directories: set[str] = set()
    for path in files:
        parent = os.path.dirname(path)
        while parent not in directories:
            directories.add(parent)
            if parent == "/":
                break
            parent = os.path.dirname(parent)
    return files, directories


def hiding_ruleset(hidden: Iterable[str]) -> int | None:
    """A Landlock ruleset (its file descriptor) under which every file but `hidden` can be
    read; None when there is nothing to hide or Landlock is not available."""
    files, directories = _on_the_way(hidden)
    if not files or _LIBC is None or landlock_abi() < 1:
        return None
    attr = _RulesetAttr(LANDLOCK_ACCESS_FS_READ_FILE)
    ruleset = _syscall(
        _LIBC, SYS_LANDLOCK_CREATE_RULESET, ctypes.pointer(attr), ctypes.sizeof(attr), 0
    )
    if ruleset < 0:
        return None
    try:
        for directory in directories:
            _allow_entries(_LIBC, ruleset, directory, files | directories)
    except OSError:
        os.close(ruleset)
        raise
    return int(ruleset)


def _allow_entries(libc: ctypes.CDLL, ruleset: int, directory: str, on_the_way: set[str]) -> None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return  # an unlisted directory allows nothing beneath it
    for entry in entries:
        # A symbolic link is read where it leads, and one that leads onto the way would
        # open the hidden file: the entries it may lead to have rules of their own.
        if entry.path in on_the_way or entry.is_symlink():
            continue
        try:
            fd = os.open(entry.path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            rule = _PathBeneathAttr(LANDLOCK_ACCESS_FS_READ_FILE, fd)
            added = _syscall(
                libc,
                SYS_LANDLOCK_ADD_RULE,
                ruleset,
                LANDLOCK_RULE_PATH_BENEATH,
                ctypes.pointer(rule),
                0,
            )
            if added != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"landlock_add_rule {entry.path}: {os.strerror(error)}")
        finally:
            os.close(fd)


def restrict_self(ruleset: int) -> None:
    """Confine the calling process, and all it starts, to `ruleset`. It runs in a forked
    child before exec (`preexec_fn`), so it makes two system calls and nothing more."""
    assert _LIBC is not None
    _LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if _syscall(_LIBC, SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"landlock_restrict_self: {os.strerror(error)}")


__all__ = ["hiding_ruleset", "landlock_abi", "make_undumpable", "restrict_self"]
