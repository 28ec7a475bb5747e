"""The baseline's threads kept on the cores the run gave them (``measure.cpu_threads`` of 2 or more).

A process may change the affinity of another of its user, thread by thread. A candidate
whose import started a thread that moved each thread of the baseline's worker onto one
core, at ``measure.cpu_threads=2``, was ``supported`` at 4.2-5.4x from an honest 1.0x: the
baseline's two threads shared a core, and nothing else changed that any check read
(evidence/README.md).
Landlock does not scope affinity (``.confine``), and a thread keeps what was set, so the
candidate need not act while the baseline is timed, where the parent's watch would see it.

In the baseline's worker (trusted, and the one such a cheat slows) :class:`AffinityGuard`
gives every thread the worker's own cores back before each block request and, after it,
names any thread whose cores were narrowed while it ran: `interference`, `invalid`. Not
where ``measure.cpu_threads`` is 1 (one thread, which the relay of ``..processes.cores`` moves back
each request, and which gains nothing from a core of its own), nor where the user asked
OpenMP to bind its threads (``OMP_PROC_BIND``, ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``,
``KMP_AFFINITY``): bound threads have one core each by design.
"""

from __future__ import annotations

import os
from typing import FrozenSet, List, Optional, Tuple


#: Environment variables with which a user asks OpenMP to bind its threads to cores.
BINDING_ENV = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")


def _tids() -> List[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return []


class AffinityGuard:
    """See the module docstring. ``threads``: ``measure.cpu_threads``; ``start``: the
    worker's cores as it started, before any code under test ran (:func:`..processes.cores.current`);
    ``on`` says whether it acts (Linux, two or more threads, no binding asked for)."""

    def __init__(self, threads: Optional[int], start: Optional[FrozenSet[int]]) -> None:
        self.cores = start
        self.on = (self.cores is not None and (threads is None or threads > 1)
                   and not any(os.environ.get(k) for k in BINDING_ENV))
        self.told = False

    def restore(self) -> None:
        """Every thread of this process back on the worker's cores (before a block request)."""
        if not self.on:
            return
        for tid in _tids():
            try:
                os.sched_setaffinity(tid, self.cores)  # type: ignore[arg-type]
            except OSError:
                pass

    def narrowed(self) -> List[Tuple[int, FrozenSet[int]]]:
        """Threads whose cores are fewer than the worker's now (after a block request)."""
        out = []
        for tid in _tids() if self.on else ():
            try:
                now = frozenset(os.sched_getaffinity(tid))
            except OSError:
                continue
            if now != self.cores:
                out.append((tid, now))
        return out
