"""The cores a CPU run's processes share while its blocks are timed (``defences.pin_cores``).

With each side in its own worker, a timed block is a relay: the parent asks one worker,
the worker times its calls and answers, the parent asks the other. Only one of the three
processes works at any moment, yet each one's wake-up lands on whichever core the
scheduler picks; on a virtual machine waking a process on another, idle core costs
tens to hundreds of microseconds a hand-over, paid by every block
(evidence/README.md). Put on the same ``measure.cpu_threads``
cores, the hand-over is a switch between processes on one core. The side's calls get
the same number of cores they are allowed; the harness's processes wait, blocked, while
it runs.

Only the calling thread is moved (``sched_setaffinity`` of thread 0 is the caller's):
the parent's other threads, and threads a worker started before, keep their cores. A
worker's thread is pinned only while it waits (:class:`Relay`): it has its own cores
back while it serves a request, so a thread the side's code starts is born with them,
and a candidate that spreads over more cores than it is allowed is seen doing so by the
CPU-time account, as unpinned. Linux only; elsewhere, and where the cores cannot be set,
nothing is pinned.
"""

from __future__ import annotations

import os
from typing import FrozenSet, List, Optional, Sequence, Tuple

Cores = FrozenSet[int]


def share_for(threads: Optional[int], allowed: Optional[Sequence[int]] = None) -> Optional[Cores]:
    """The cores a run whose sides may use ``threads`` share: the highest-numbered
    ``threads`` of ``allowed`` (this thread's, by default), away from core 0, which takes
    most of a machine's interrupts. ``None`` where nothing is to be pinned: no thread
    limit, or no more cores allowed than the limit."""
    if threads is None or threads < 1:
        return None
    if allowed is None:
        allowed = sorted(current() or ())
    if len(allowed) <= threads:
        return None
    return frozenset(sorted(allowed)[-threads:])


def current() -> Optional[Cores]:
    """This thread's cores, or ``None`` where the platform does not say."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    try:
        return frozenset(get(0))
    except OSError:
        return None


def pin(cores: Optional[Cores]) -> Optional[Cores]:
    """Move this thread to ``cores``; return the cores it had, for :func:`unpin`, or
    ``None`` where nothing moved."""
    if not cores:
        return None
    before = current()
    if before is None or before == cores:
        return None
    try:
        os.sched_setaffinity(0, cores)
    except OSError:
        return None
    return before


def unpin(before: Optional[Cores]) -> None:
    """Give this thread back the cores :func:`pin` returned."""
    if before:
        try:
            os.sched_setaffinity(0, before)
        except OSError:
            pass


class Relay:
    """A worker's side of the pin: on the shared cores while it waits for a request, on
    its own while it serves one, so that what the side's code runs, and every thread it
    starts, has the cores it would have unpinned (the CPU-time account judges them)."""

    def __init__(self) -> None:
        self.cores: Optional[Cores] = None
        self._wide: Optional[Cores] = None

    def share(self, cores: Optional[Sequence[int]]) -> None:
        """Wait on ``cores`` from now on (a case's ``prepare``); ``None``: stop pinning."""
        self.work()
        self.cores = frozenset(int(c) for c in cores) if cores else None

    def wait(self) -> None:
        if self.cores and self._wide is None:
            self._wide = pin(self.cores)

    def work(self) -> None:
        unpin(self._wide)
        self._wide = None


def _threads(pid: int) -> List[int]:
    """The threads of process ``pid``, its main thread first (only that one where the
    platform does not list them)."""
    try:
        others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    except OSError:
        others = []
    return [pid, *others]


def relay_quietly(pids: Sequence[int]) -> Optional[int]:
    """Put every thread of each worker on ``SCHED_BATCH`` for a relay on shared cores; return
    that policy, or ``None`` where it could not be set for every worker's main thread (the one
    that answers requests and times the calls; then nothing is changed).

    A batch thread woken by a request does not preempt the thread that woke it, so the
    parent ends its write and waits for the reply before the worker runs its block. Under
    ``SCHED_OTHER`` the woken worker took the core inside the parent's write, and the
    parent took it back, to end its write and wait, inside the timed span of 31-57% of the
    blocks of the README's example on the 2-core machine (an involuntary switch in the
    timed calls, those blocks a few per cent slower on average); as batch threads 0-6%
    (evidence/README.md; on a 16-core H200 host 27-57%
    against 1-5%). A running batch thread is scheduled as any
    other: the calls get the same core as before.

    Every thread, not the main one alone: a thread inherits its creator's policy, so a
    side's pool started after this call runs as a batch thread and one started before it
    (in the preflight of a run's first process) would not, and the side's calls would hand
    over to it differently in the first process than in the later ones. A thread that ends
    meanwhile is passed over."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return None
    done: List[Tuple[int, int]] = []
    for pid in pids:
        for tid in _threads(pid):
            try:
                before = os.sched_getscheduler(tid)
                if before != policy:
                    os.sched_setscheduler(tid, policy, os.sched_param(0))
                    done.append((tid, before))
            except OSError:
                if tid != pid:
                    continue
                for t, was in done:
                    try:
                        os.sched_setscheduler(t, was, os.sched_param(0))
                    except OSError:
                        pass
                return None
    return policy
