"""The ``contention`` check: how long a side's timing thread waited for a CPU while it was timed.

A timed call on a CPU is only the code's time if the thread that makes it was on a core
throughout. Linux counts, per thread, the time it spent runnable but waiting in a run
queue (``/proc/thread-self/schedstat``, second field, nanoseconds: the scheduler's own
account, kept where the kernel has ``CONFIG_SCHED_INFO``, as this project's CPU machine's
has; where the file is missing the account stays empty and nothing is reported). Summed
over a case's timed blocks against their wall time it says how much of a side's figure
was a wait for cores that other work held: another process on the host (a build,
another job), or more threads of the run than the cores it was given.

That is a warning, not a verdict: the times are what they were, and a claim that held
beside such work may hold without it. But with both cores of the 2-core CPU machine held
by two other processes, three of the adversarial suite's honest candidates went from
``supported`` to ``inconclusive`` with no sign of why, their timing threads waiting for a
CPU for 36-48% of their timed blocks, against 0-1% on the quiet machine
(evidence/README.md); the report now says why their times
are not the code's alone.

Two consequences are a verdict's. A candidate that ran more threads than
``measure.cpu_threads`` allows, timed on such a host, may have taken a larger share of the
cores than its baseline's one thread got, and that share cannot be told apart from faster
code; its ``supported`` becomes ``inconclusive`` (:func:`share_findings`). And a case with
such a warning is judged again with each side's wait taken out of its times, where a side
on more than one thread gets no verdict at all (``verdict/load.py``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..core.findings import WARNING, Finding

CONTENTION = "contention"
SHARE = "share"


class RunQueueWait:
    """The calling thread's total wait for a CPU so far, in ns (None where the kernel keeps
    no such account). Each thread's file stays open: a read is one ``pread``, 1.8 us a
    read on the 2-core CPU machine (evidence/README.md)."""

    def __init__(self, path: str = "/proc/thread-self/schedstat") -> None:
        self.path = path
        self._fds: Dict[int, Optional[int]] = {}

    def __call__(self) -> Optional[int]:
        me = threading.get_native_id()
        fd = self._fds.get(me, -1)
        if fd == -1:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                fd = None
            self._fds[me] = fd
        if fd is None:
            return None
        try:
            return int(os.pread(fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def __del__(self) -> None:  # the files close with the reader
        for fd in self._fds.values():
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


@dataclass
class ContentionAccount:
    """A side's wait for a CPU over a case's timed blocks in one process: :meth:`begin` and
    :meth:`end` around each block, with the block's wall clock readings. The
    :class:`~.activity.ResourceAccount` around the same blocks holds one and adds its
    :meth:`summary` to its own; :func:`contention_findings` judges the sums over a run's
    processes."""

    read: Callable[[], Optional[int]] = field(default_factory=RunQueueWait)
    waited_ns: int = 0
    wall_ns: int = 0
    _start: Optional[Tuple[int, int]] = None

    def begin(self, wall_ns: int) -> None:
        q = self.read()
        self._start = (wall_ns, q) if q is not None else None

    def end(self, wall_ns: int) -> None:
        start, self._start = self._start, None
        q = self.read() if start is not None else None
        if start is None or q is None:
            return
        self.wall_ns += max(0, wall_ns - start[0])
        self.waited_ns += max(0, q - start[1])

    def summary(self) -> Dict[str, Any]:
        """Plain data for the evidence: the wait and the blocks' wall time, in ms."""
        return {"waited_ms": round(self.waited_ns / 1e6, 3), "blocks_ms": round(self.wall_ns / 1e6, 3)}


#: The share of a side's timed blocks spent waiting for a CPU above which it is reported,
#: and the least wait that is: on the 2-core CPU machine with nothing else running the
#: suite's honest candidates waited 0-5% of their blocks over two runs of each (5%: a
#: candidate whose two pool threads and its own share the two cores), and with two other
#: busy processes 1-53%, 14% or more in 23 of 26 sides of the later run
#: (evidence/README.md).
LIMIT = 0.10
MIN_WAIT_MS = 10.0


def waited_share(rec: Mapping[str, Any]) -> Optional[float]:
    """A side's wait over its timed blocks (``defences.resources`` summary) where it is over
    :data:`LIMIT` and at least :data:`MIN_WAIT_MS`, else None."""
    waited, blocks = float(rec.get("waited_ms") or 0.0), float(rec.get("blocks_ms") or 0.0)
    if blocks <= 0 or waited < MIN_WAIT_MS or waited / blocks <= LIMIT:
        return None
    return waited / blocks


def contention_findings(resources: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> List[Finding]:
    """One warning per case and side whose timing thread waited for a CPU for more than
    :data:`LIMIT` of its timed blocks, summed over the run's processes (``resources``:
    result.json's ``defences.resources``, case -> side -> the account's summary)."""
    out = []
    for case, sides in sorted(resources.items()):
        for role, rec in sorted(sides.items()):
            share = waited_share(rec)
            if share is None:
                continue
            waited, blocks = float(rec["waited_ms"]), float(rec["blocks_ms"])
            n = int(rec.get("processes", 1))
            out.append(Finding(CONTENTION, False, (
                f"the {role}'s timing thread waited for a CPU for {waited:.1f} ms of its {blocks:.1f} ms of timed "
                f"blocks ({share:.0%}, over {n} process{'es' if n != 1 else ''}; more than {LIMIT:.0%} "
                "is reported): other work held the cores its calls needed (another process on this host, or more "
                "threads than cores), and its times include that wait; measure on a quiet machine"),
                case, severity=WARNING, figure=round(share, 4), threshold=LIMIT))
    return out


def share_findings(resources: Mapping[str, Mapping[str, Mapping[str, Any]]],
                   cpu_threads: Optional[int]) -> List[Finding]:
    """One ``share`` warning per case whose candidate ran more threads than ``cpu_threads``
    allows (``case_threads_ran``: threads each on a CPU for at least a tenth of the case's
    timed blocks) while either side's timing thread waited for a CPU for more than
    :data:`LIMIT` of its blocks; the run's verdict treats it as a reason for
    ``inconclusive`` (:func:`~expkit.verdict.rules.inconclusive_when`).

    On a quiet host the ``resources`` check sees such a candidate's extra cores. On a busy
    one it cannot: each runnable thread gets a share of the cores, and a candidate that
    computed half of each call on a second thread used 0.85-0.99 cores beside two busy
    processes on the 2-core CPU machine, under the limit, yet was ``supported`` at 1.36x
    against its own baseline (evidence/README.md). Nor can
    a count of runnable threads (CPU time plus each thread's wait for a CPU) tell such a
    candidate from an honest one that hands small calls to a pool and waits: under load
    the pool's wake-ups overlap, and the two ranges met
    (evidence/README.md). What is known is that the speedup
    was measured where more threads buy more of the host; so it is not reported as earned."""
    if cpu_threads is None:
        return []
    out = []
    for case, sides in sorted(resources.items()):
        cand = sides.get("candidate") or {}
        ran = int(cand.get("case_threads_ran") or 0)
        if ran <= cpu_threads:
            continue
        busy = [(w, role) for role, rec in sorted(sides.items()) if (w := waited_share(rec)) is not None]
        if not busy:
            continue
        share, role = max(busy)
        out.append(Finding(SHARE, False, (
            f"the candidate ran {ran} threads where measure.cpu_threads allows {cpu_threads}, on a host where the "
            f"{role}'s timing thread waited for a CPU for {share:.0%} of its timed blocks: where other work holds the "
            "cores, more threads take a larger share of them, and that share cannot be told apart from faster code; "
            "measure on a quiet machine"),
            case, severity=WARNING, figure=float(ran), threshold=float(cpu_threads)))
    return out
