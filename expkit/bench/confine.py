"""Confine the candidate's worker so that it cannot reach another process (``defences.confine``).

The two workers run as the same user, and on a rented GPU that user is usually root. Any
process of that user may trace another (``ptrace``), read and write its memory
(``/proc/PID/mem``, ``process_vm_writev``) and signal it. A candidate that stopped the
baseline's worker for half of every millisecond by tracing it (``PTRACE_INTERRUPT``, then
detaching) left no trace that the parent's watch reads: a stop under a tracer is reported to
the tracer, not to the parent, and no ``SIGCONT`` ends it (``checks/interference.py``;
``tests/adversarial/cpu/sibling_trace.yaml``).

Before the candidate's code is imported its worker enters a Landlock domain (Linux 5.13
and later; the kernel's own sandbox, which needs no privilege and holds against root).
From then on that process and every process it starts:

- cannot trace, or open the memory of, any process outside the domain (Landlock ABI 1):
  the baseline's worker, the parent, the fork server;
- cannot send a signal to one (ABI 6, Linux 6.12: ``LANDLOCK_SCOPE_SIGNAL``); where the
  kernel is older, the parent's watch is what sees a stop.

Nothing else changes: the domain handles one file-system right, making block devices,
which no kernel or library needs, so files, devices, shared memory and sockets are as
before, and the candidate may trace and signal its own children. Processes outside the
domain keep every right over the candidate's worker (the parent reads its clocks, ends it).
Priority and affinity are not scoped: the watch reads the priority; see
``docs/threat-model.md``.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from typing import Any, Dict, Optional

#: The Landlock system calls (the same numbers on every Linux architecture).
_CREATE_RULESET, _RESTRICT_SELF = 444, 446
_CREATE_RULESET_VERSION = 1
#: The one file-system right the domain handles (and so denies): making block devices.
_ACCESS_FS_MAKE_BLOCK = 1 << 11
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


def confine(libc: Any = None) -> Dict[str, Any]:
    """Put this process (and all it starts later) in a Landlock domain of its own; returns
    what now holds, for the run's evidence (``defences.confinement``): ``landlock_abi``,
    ``trace`` (other processes cannot be traced or their memory opened), ``signals`` (nor
    signalled), and ``why`` where either is not."""
    libc = libc if libc is not None else _libc()
    abi = landlock_abi(libc)
    if abi < 1:
        return {"landlock_abi": 0, "trace": False, "signals": False,
                "why": "the kernel has no Landlock (Linux 5.13+ with Landlock enabled)"}
    scoped = _SCOPE_SIGNAL if abi >= 6 else 0
    size = 24 if abi >= 6 else 16  # struct landlock_ruleset_attr grew a ``scoped`` field in ABI 6
    attr = ctypes.create_string_buffer(struct.pack("QQQ", _ACCESS_FS_MAKE_BLOCK, 0, scoped)[:size], size)
    fd = libc.syscall(_CREATE_RULESET, attr, size, 0)
    if fd < 0:
        return _failed(abi, "landlock_create_ruleset")
    try:
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


def _failed(abi: int, call: str) -> Dict[str, Any]:
    err = ctypes.get_errno()
    return {"landlock_abi": abi, "trace": False, "signals": False,
            "why": f"{call} failed: {os.strerror(err) if err else 'unknown error'}"}

