"""What one side's worker does to the other's while the other is timed.

The two workers are processes of one user, and such a process may act on another: stop
it (``SIGSTOP``, then ``SIGCONT``) for part of every millisecond, compute beside it on
the cores it is timed on, or lower its priority. None of it shows in any check inside the
worker that is slowed: its calls just take longer, and a candidate whose baseline was
stopped for half of each millisecond came out `supported` (its intervals 2.1-2.8x in three
runs) with calls of its own no faster (``tests/adversarial/cpu/sibling_stop.yaml``,
evidence/README.md). The parent watches each worker from the
outside, through the kernel, where a worker's code cannot reach:

- **Work while the other side is timed** (:class:`WorkerWatch`): the other worker's
  process CPU clock, read by the parent before and after each block request of a side.
  A worker that waits for its next request spends next to nothing but what its own thread
  pool spins: with ``measure.cpu_threads`` above 1, GNU OpenMP's idle threads spin for
  milliseconds after each parallel region (``pool_cores``: up to ``cpu_threads - 1``
  cores; honest candidates at two threads were `invalid` before that was allowed:
  evidence/README.md), and the kernel accounts a spinning thread of another process up to
  a scheduler tick late (:data:`READ_LAG_NS`, allowed a request for each pool thread). One
  that computed beyond that while its sibling was timed competed with it for the machine.
  With the freeze (the default, ``bench/defences/freeze.py``) the idle worker is stopped
  while the other side is timed: it spends nothing, and the pool's allowance is given only
  where the run turns the freeze off (inside it a thread of the candidate's that computed
  only then was `supported`).
- **Stops**, two ways. The kernel tells a parent when its child was stopped or continued
  (:func:`stop_event`: ``waitid`` with ``WSTOPPED | WCONTINUED``), and each worker
  counts the ``SIGCONT`` that ends every stop (:func:`count_continues`, installed before
  any code under test is imported; a stopped process cannot be continued without it).
  The first sees only a worker the parent forked: one from the fork server is the
  server's child (reported as not watched). The second sees every worker, and the
  baseline's count is in the baseline's process, which the candidate's code cannot reach
  (on the H100 host, where a test session's workers came from the fork server, a
  candidate that stopped its baseline was `supported` with the first alone).
- **Priority**: each side's scheduling policy and nice, read after each of its requests,
  against the run's (a process may lower another's of its user; `sibling_nice`): the
  parent's, with ``SCHED_BATCH`` where the workers relay on the parent's cores
  (``bench.processes.cores.relay_quietly``).

The CPU time is watched in CPU runs only: a GPU worker's own driver and CUPTI threads
work between its requests, and what slows a GPU side's kernels is work on the GPU
(:mod:`.activity`). Stops and priorities are watched in both.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Set, Tuple

from ..core.findings import Finding

INTERFERENCE = "interference"

#: The other side's CPU time during a side's block requests, as cores over their wall
#: time, above which that side was not timed alone; and the least CPU time that can be
#: judged at all (a millisecond is a few scheduler ticks' worth of noise).
IDLE_CORES_LIMIT = 0.25
IDLE_MIN_NS = 5_000_000
_CLOCK_MONOTONIC_COARSE = 6  # Linux's clock id of the clock that advances once a scheduler tick


def scheduler_tick_ns() -> int:
    """The kernel's scheduler tick (``1/CONFIG_HZ``): the resolution of its coarse clock,
    which advances once a tick; 10 ms, the longest tick Linux is built with, where that
    cannot be read or is no tick Linux is built with (shorter than 1 ms or longer than 10)."""
    try:
        tick = int(round(time.clock_getres(_CLOCK_MONOTONIC_COARSE) * 1e9))
    except (OSError, ValueError, AttributeError):
        return 10_000_000
    return tick if 1_000_000 <= tick <= 10_000_000 else 10_000_000


#: How far behind the kernel's account of another process's CPU time can be, for each of
#: its threads on a core when it is read: a running thread's time is folded in at the
#: scheduler tick (4 ms on the 2-core machine's kernel, ``CONFIG_HZ=250``: another
#: process's clock advanced in 4 ms steps while it spun, evidence/README.md). An idle
#: pool's spinning thread is on a core as a request starts and asleep when it ends, so its
#: reading takes in up to one tick of spin from before the request, a request.
READ_LAG_NS = scheduler_tick_ns()

_CPUCLOCK_SCHED = 2  # the kernel's process CPU-time clock id for a pid: ((~pid) << 3) | 2


def cpu_clock_ns(pid: int) -> Optional[int]:
    """Process ``pid``'s CPU time (all its threads, as the kernel accounts it), or None
    where it cannot be read (gone, or not Linux)."""
    try:
        return int(time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED))
    except (OSError, OverflowError, ValueError, AttributeError):
        return None


Priority = Tuple[int, int]  # (scheduling policy, nice)


def read_priority(pid: int) -> Optional[Priority]:
    """How the scheduler treats process ``pid``'s main thread: its policy (``SCHED_OTHER``,
    ``SCHED_IDLE``, a real-time one...) and its nice; None where it cannot be read."""
    try:
        return os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid)
    except (OSError, AttributeError):
        return None


def priority_text(p: Priority) -> str:
    names = {getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO", "SCHED_RR")
             if hasattr(os, n)}
    return f"nice {p[1]}" + ("" if p[0] == getattr(os, "SCHED_OTHER", 0) else f", {names.get(p[0], p[0])}")


def stop_event(pid: int) -> Optional[str]:
    """``"stopped"`` or ``"continued"`` where process ``pid``, a child of this process, was
    stopped or continued since last asked; ``"unwatched"`` where it is not this process's
    child (or the platform cannot say); None where nothing happened. Asking consumes the
    kernel's note, so each stop is reported once."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        return "unwatched"
    try:
        got = waitid(os.P_PID, pid, os.WSTOPPED | os.WCONTINUED | os.WNOHANG)
    except ChildProcessError:
        return "unwatched"
    except OSError:
        return None
    if got is None:
        return None
    return "continued" if got.si_code == os.CLD_CONTINUED else "stopped"


_CONTINUED = [0]


def count_continues() -> None:
    """In a worker, before any code under test is imported: count every ``SIGCONT`` this
    process receives (:func:`continues_taken`). The signal still continues the process.

    The handler restarts the system call it interrupts (``SA_RESTART``): the kernel may run
    it on any thread, and a GNU OpenMP pool thread whose futex wait failed with ``EINTR``
    spins afresh, 10-20 ms on a core. With the parent stopping and continuing each idle
    worker around every block (``bench/defences/freeze.py``), the harness's own pool in the
    baseline's worker spun into its timed blocks that way: honest candidates on the
    16-core H100 host were `invalid` (`resources`, 1.5-1.9 cores at ``cpu_threads=1``,
    evidence/README.md)."""

    def _count(signum: int, frame: object) -> None:
        _CONTINUED[0] += 1

    signal.signal(signal.SIGCONT, _count)
    signal.siginterrupt(signal.SIGCONT, False)


def continues_taken() -> int:
    """The ``SIGCONT`` this process received since last asked (:func:`count_continues`)."""
    n, _CONTINUED[0] = _CONTINUED[0], 0
    return n


def pool_cores(cpu_threads: Optional[int]) -> float:
    """The cores an idle worker's own thread pool may spend spinning: ``cpu_threads - 1``
    (its main thread waits for the next request, blocked); with no limit set, every core
    but one, which leaves the CPU time all but unwatched."""
    threads = cpu_threads if cpu_threads is not None else (os.cpu_count() or 1)
    return float(max(0, threads - 1))


@dataclass
class WorkerWatch:
    """What the parent sees of the two workers from outside, over a case: the other
    worker's CPU time in each side's block requests, stops, and priorities.

    ``pids``: side -> the worker's pid (two sides). :meth:`before` and :meth:`after`
    bracket one side's request; :meth:`findings` judges the case and starts the next from
    zero. The wall a side's CPU figure is divided by is stamped on ``clock`` before the
    first read of the other worker's CPU clock and after the second, so it spans the time
    the reading covers however long the parent itself waits around its reads (a busy
    host), but for the kernel's lag (:data:`READ_LAG_NS`). ``cpu``: whether the CPU time
    is watched (a CPU run; stops and priorities are watched either way). Each side's priority (its main
    thread's scheduling policy and nice: the thread that times its calls) is read after
    each of its requests and held against ``expected``: the parent's, which a worker
    inherits, or the policy the relay gave both (``bench.sides.case_sides``). ``pool_cores``:
    the cores an idle worker's own thread pool may spin (``measure.cpu_threads - 1``),
    allowed beyond :data:`IDLE_CORES_LIMIT`, and ``read_lag_ns`` (:data:`READ_LAG_NS`) a
    request for each.
    Without a pool (one thread a side, or the freeze: a stopped worker has no thread on a
    core) every reading is exact and no lag is allowed.
    ``read``, ``events``, ``priority`` and ``clock`` are the seams for tests."""

    pids: Mapping[str, int]
    cpu: bool = True
    pool_cores: float = 0.0
    read_lag_ns: int = READ_LAG_NS
    read: Callable[[int], Optional[int]] = cpu_clock_ns
    clock: Callable[[], int] = time.perf_counter_ns
    events: Callable[[int], Optional[str]] = stop_event
    priority: Callable[[int], Optional[Priority]] = read_priority
    wall_ns: Dict[str, int] = field(default_factory=dict)
    other_ns: Dict[str, int] = field(default_factory=dict)
    requests: Dict[str, int] = field(default_factory=dict)
    #: Sides whose stops could not be seen (a worker that is not the parent's child).
    unwatched: Set[str] = field(default_factory=set)
    expected: Optional[Priority] = field(default_factory=lambda: read_priority(0))
    #: Each side's last priority reading that differed from ``expected``.
    reniced: Dict[str, Priority] = field(default_factory=dict)
    _open: Optional[Tuple[str, int, Optional[int]]] = None

    def _other(self, side: str) -> Optional[int]:
        others = [pid for s, pid in self.pids.items() if s != side]
        return others[0] if len(others) == 1 else None

    def before(self, side: str) -> None:
        """Just before ``side``'s request is sent."""
        pid = self._other(side)
        t0 = self.clock()
        self._open = (side, t0, self.read(pid) if pid is not None and self.cpu else None)

    def after(self) -> None:
        """Just after the reply to the request :meth:`before` opened has come."""
        if self._open is None:
            return
        side, t0, c0 = self._open
        self._open = None
        pid = self._other(side)
        c1 = self.read(pid) if pid is not None and c0 is not None else None
        t1 = self.clock()
        self._check_priority(side)
        if c1 is None:
            return
        self.wall_ns[side] = self.wall_ns.get(side, 0) + max(0, t1 - t0)
        self.other_ns[side] = self.other_ns.get(side, 0) + max(0, c1 - c0)
        self.requests[side] = self.requests.get(side, 0) + 1

    def add_summary(self, into: Dict[str, Dict[str, float]]) -> None:
        """Add this case's :meth:`summary` into ``into`` (the run's, over its replicates)."""
        add_summaries(into, self.summary())

    def _check_priority(self, side: str) -> None:
        pid = self.pids.get(side)
        now = self.priority(pid) if pid is not None and self.expected is not None else None
        if now is not None and now != self.expected:
            self.reniced[side] = now

    def summary(self) -> Dict[str, Dict[str, float]]:
        """Per timed side: its requests' wall and the other worker's CPU in them, in ms."""
        return {side: {"timed_ms": round(self.wall_ns[side] / 1e6, 3),
                       "other_cpu_ms": round(self.other_ns.get(side, 0) / 1e6, 3)} for side in sorted(self.wall_ns)}

    def findings(self, case: str, roles: Mapping[str, str],
                 continued: Optional[Mapping[str, int]] = None) -> List[Finding]:
        """The case's findings (``roles``: side -> the name a reason uses; ``continued``:
        side -> the ``SIGCONT`` its worker counted in the case), then a fresh start."""
        out: List[Finding] = []
        limit = IDLE_CORES_LIMIT + self.pool_cores
        pool = f", {self.pool_cores:g} of them for its thread pool's spin" if self.pool_cores else ""
        for side, wall in sorted(self.wall_ns.items()):
            other = [s for s in self.pids if s != side]
            spent = self.other_ns.get(side, 0)
            n = self.requests.get(side, 0)
            lag = n * self.pool_cores * self.read_lag_ns
            allowed = limit * wall + lag
            if not other or wall <= 0 or spent < IDLE_MIN_NS or spent <= allowed:
                continue
            lagged = (f", and {self.read_lag_ns / 1e6:g} ms a request for each pool thread, the kernel's late account "
                      f"of a spinning thread: {allowed / wall:.2f} cores over {n} requests") if lag else ""
            out.append(Finding(INTERFERENCE, False, (
                f"the {roles.get(other[0], other[0])}'s process spent {spent / 1e6:.1f} ms of CPU time "
                f"({spent / wall:.2f} cores) while only the {roles.get(side, side)} was to run "
                f"({wall / 1e6:.1f} ms of its block requests; limit {limit:.2f} cores{pool}{lagged}): work one side "
                f"does while the other is timed competes with it, and the other's time is then not its own"),
                case, figure=round(spent / wall, 3), threshold=round(allowed / wall, 3)))
        for side, pid in sorted(self.pids.items()):
            event = self.events(pid)
            if event == "unwatched":
                self.unwatched.add(side)
            seen = [f"the kernel reported it {event}"] if event in ("stopped", "continued") else []
            n = (continued or {}).get(side, 0)
            seen += [f"it was continued {n} time(s)"] if n else []
            if seen:
                out.append(Finding(INTERFERENCE, False, (
                    f"the {roles.get(side, side)}'s worker was stopped during the case ({'; '.join(seen)}): a stopped "
                    f"worker's timed calls include the time it stood still. Another process of this user can stop "
                    f"it; if you suspended the run yourself (Ctrl-Z), run it again"), case))
        for side, now in sorted(self.reniced.items()):
            run = priority_text(self.expected) if self.expected is not None else "unknown"
            out.append(Finding(INTERFERENCE, False, (
                f"the {roles.get(side, side)}'s worker had its priority changed ({priority_text(now)} where the "
                f"run's is {run}): another process of this user can lower a worker's "
                f"priority (or, with the privilege, raise one), and then one side's calls wait for whatever else "
                f"runs and the other's do not"), case))
        self.wall_ns, self.other_ns, self.requests, self.reniced = {}, {}, {}, {}
        return out


def add_summaries(into: Dict[str, Dict[str, float]], more: Mapping[str, Mapping[str, float]]) -> None:
    """Sum :meth:`WorkerWatch.summary` figures, side by side (one replicate's into the run's)."""
    for side, rec in more.items():
        mine = into.setdefault(side, {"timed_ms": 0.0, "other_cpu_ms": 0.0})
        for key in ("timed_ms", "other_cpu_ms"):
            mine[key] = round(mine.get(key, 0.0) + float(rec.get(key, 0.0)), 3)
