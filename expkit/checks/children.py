"""Child processes of this process: which are running, and which are ``multiprocessing``'s
own helpers rather than work.

The ``threads`` check (:mod:`.activity`) counts child processes still running after a
call or a timed block: work that goes on after a call has returned escapes any timer.
The helper processes ``multiprocessing`` starts for itself (its resource tracker and
fork server, which torch.compile's workers start lazily) are not the candidate's work
and are not counted while they stay idle (:func:`helper_process`). :func:`descendants`
names what a worker left behind when it is closed.
"""

from __future__ import annotations

import os
import re
from typing import Callable, FrozenSet, List, Optional

#: The command line ``multiprocessing`` gives its own helper processes (``-c`` and the code).
HELPER_COMMAND = re.compile(r"^from multiprocessing\.(resource_tracker|forkserver) import main;\s*main\([^()]*\)$")
#: CPU time a helper may have used and still count as idle (a Python interpreter's start-up).
HELPER_CPU_S = 1.0


def read_proc(path: str) -> Optional[bytes]:
    """A ``/proc`` file's bytes, or None where it cannot be read (the process has gone)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def helper_process(pid: int, read: Callable[[str], Optional[bytes]] = read_proc) -> bool:
    """Whether child ``pid`` is one of ``multiprocessing``'s own idle helpers.

    The rule: its command line is a Python interpreter running exactly the code
    ``multiprocessing`` starts its resource tracker or fork server with
    (:data:`HELPER_COMMAND`), it is not on a CPU now, and it has used less CPU time than
    an interpreter's start-up (:data:`HELPER_CPU_S`). A process that only borrows the
    command line but computes fails the last two. A plain fork of this process is not a
    helper either, whatever its command line: a worker that came from the fork server
    has the server's, and so has every process it forks (a candidate that forked a
    helper of its own at import passed as the fork server on the H100 host, where a test
    session's workers came from it)."""
    raw = read(f"/proc/{pid}/cmdline")
    if not raw or raw == read("/proc/self/cmdline"):
        return False
    argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if "-c" not in argv[:-1] or not HELPER_COMMAND.match(argv[argv.index("-c") + 1].strip()):
        return False
    stat = read(f"/proc/{pid}/stat")
    if not stat:
        return False
    fields = stat.decode(errors="replace").rsplit(")", 1)[-1].split()
    try:
        state, utime, stime = fields[0], int(fields[11]), int(fields[12])
    except (IndexError, ValueError):
        return False
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return state in ("S", "D", "I") and (utime + stime) / ticks < HELPER_CPU_S


def descendants(pid: int, proc: str = "/proc") -> List[int]:
    """Every live descendant of process ``pid``, children first (Linux ``/proc``; empty
    elsewhere): the children of each of its threads, and theirs, to any depth."""
    out: List[int] = []
    todo = [pid]
    while todo:
        p = todo.pop(0)
        try:
            tids = os.listdir(f"{proc}/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"{proc}/{p}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for k in kids:
                if k not in out and k != pid:
                    out.append(k)
                    todo.append(k)
    return out


def child_pids() -> FrozenSet[int]:
    """Children of every thread of this process (Linux ``/proc``; empty elsewhere), less
    ``multiprocessing``'s idle helper processes (:func:`helper_process`)."""
    out: set = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            try:  # os.open/os.read: a third of the cost of open() here, and it runs twice a timed block
                fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY)
            except OSError:
                continue
            try:
                out.update(int(p) for p in os.read(fd, 65536).split())
            except OSError:
                pass
            finally:
                os.close(fd)
    except OSError:
        pass
    return frozenset(p for p in out if not helper_process(p)) if out else frozenset()
