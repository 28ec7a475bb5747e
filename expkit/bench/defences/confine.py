"""Confine the candidate's worker so that it cannot reach another process (``defences.confine``).

The two workers run as the same user, and on a rented GPU that user is usually root. Any
process of that user may trace another (``ptrace``), read and write its memory
(``/proc/PID/mem``, ``process_vm_writev``) and signal it. A candidate that stopped the
baseline's worker for half of every millisecond by tracing it (``PTRACE_INTERRUPT``, then
detaching) left no trace that the parent's watch reads: a stop under a tracer is reported to
the tracer, not to the parent, and no ``SIGCONT`` ends it (``checks/interference.py``;
``tests/adversarial/cpu/sibling_trace.yaml``).

Before the candidate's code is imported its worker enters a Landlock domain (the kernel's
own sandbox, which needs no privilege and holds against root).
From then on that process and every process it starts:

- cannot trace, or open the memory of, any process outside the domain (Landlock ABI 2,
  Linux 5.19): the baseline's worker, the parent, the fork server;
- cannot send a signal to one (ABI 6, Linux 6.12: ``LANDLOCK_SCOPE_SIGNAL``); where the
  kernel is older, the parent's watch is what sees a stop.

Nothing else changes: files, devices, shared memory and sockets are as before, and the
candidate may trace and signal its own children. Processes outside the domain keep every
right over the candidate's worker (the parent reads its clocks, ends it). Priority and
affinity are not scoped: the watch reads the priority; see ``docs/threat-model.md``.

Files need care. A domain that handles any file-system right denies, unless told otherwise,
every rename or link into another directory (``EXDEV``; Landlock's ``REFER`` right), and
Triton's and Inductor's caches move each compiled kernel into place that way: on an H100 the
first version of this module, which handled one right (making block devices), made honest
Triton candidates crash. So from ABI 6 the domain handles no file-system right at all, only
the signal scope; with ABI 2 to 5 it handles ``REFER`` alone, allowed beneath ``/`` by a
rule, which leaves every rename as it was; ABI 1 cannot allow renames, and is not used.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from typing import Any, Dict, Optional

#: The Landlock system calls (the same numbers on every Linux architecture).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
#: Renaming or linking into another directory (ABI 2): the right handled below ABI 6, and allowed.
_ACCESS_FS_REFER = 1 << 13
_RULE_PATH_BENEATH = 1
#: ``scoped``: no signal to a process outside the domain (ABI 6).
_SCOPE_SIGNAL = 1 << 1
_PR_SET_NO_NEW_PRIVS = 38


def _libc() -> Optional[Any]:
    """libc through ctypes, on Linux; tests pass a fake with ``syscall`` and ``prctl``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def landlock_abi(libc: Any = None) -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, an older kernel,
    Landlock not among the enabled security modules)."""
    libc = libc if libc is not None else _libc()
    if libc is None:
        return 0
    got = libc.syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return int(got) if got > 0 else 0


def confine(libc: Any = None, *, abi: Optional[int] = None) -> Dict[str, Any]:
    """Put this process (and all it starts later) in a Landlock domain of its own; returns
    what now holds, for the run's evidence (``defences.confinement``): ``landlock_abi``,
    ``trace`` (other processes cannot be traced or their memory opened), ``signals`` (nor
    signalled), and ``why`` where either is not. ``abi``: use at most this version (tests
    take the older kernels' way on a newer one)."""
    libc = libc if libc is not None else _libc()
    abi = min(landlock_abi(libc), abi) if abi is not None else landlock_abi(libc)
    if abi < 2:
        why = ("the kernel has no Landlock (Linux 5.19+ with Landlock enabled)" if abi < 1 else
               "Landlock ABI 1 would deny every rename into another directory (compilers' caches do that)")
        return {"landlock_abi": abi, "trace": False, "signals": False, "why": why}
    # ABI 6 and later: no file-system right handled, signals scoped. Before: REFER handled and allowed.
    fs, scoped, size = (0, _SCOPE_SIGNAL, 24) if abi >= 6 else (_ACCESS_FS_REFER, 0, 16)
    attr = ctypes.create_string_buffer(struct.pack("QQQ", fs, 0, scoped)[:size], size)
    fd = libc.syscall(_CREATE_RULESET, attr, size, 0)
    if fd < 0:
        return _failed(abi, "landlock_create_ruleset")
    try:
        if fs and not _allow_beneath_root(libc, fd, fs):
            return _failed(abi, "landlock_add_rule")
        # Without this flag an unprivileged process may not restrict itself; it also keeps a
        # set-user-id program the candidate runs from gaining rights, which nothing here needs.
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return _failed(abi, "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_RESTRICT_SELF, fd, 0) != 0:
            return _failed(abi, "landlock_restrict_self")
    finally:
        os.close(fd)
    out: Dict[str, Any] = {"landlock_abi": abi, "trace": True, "signals": abi >= 6}
    if abi < 6:
        out["why"] = f"Landlock ABI {abi} scopes no signals (6 does: Linux 6.12+); the watch sees stops"
    return out


def _allow_beneath_root(libc: Any, ruleset: int, access: int) -> bool:
    """Allow ``access`` everywhere: a path-beneath rule on ``/``."""
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        rule = ctypes.create_string_buffer(struct.pack("=Qi", access, root), 12)  # packed: u64, s32
        return libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0) == 0
    finally:
        os.close(root)


def _failed(abi: int, call: str) -> Dict[str, Any]:
    err = ctypes.get_errno()
    return {"landlock_abi": abi, "trace": False, "signals": False,
            "why": f"{call} failed: {os.strerror(err) if err else 'unknown error'}"}
