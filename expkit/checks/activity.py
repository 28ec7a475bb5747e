"""Activity outside the timed call: work after it returns, and work on more cores than allowed.

The ``threads`` check: work that goes on after a call has returned escapes any timer.
Python threads and child processes are counted before and after each preflight call
and around every timed call (threads) or block (processes). A thread pool started on
first use leaves workers behind that wait for the next task: those are *parked* and
not counted. The helper processes ``multiprocessing`` starts for itself (its resource
tracker and fork server, which torch.compile's workers start lazily) are not the
candidate's work and are not counted while they stay idle (:func:`.children.helper_process`;
child processes are read in :mod:`.children`).

The ``resources`` check (:class:`ResourceAccount`): the CPU time the process spent
during a timed block against the block's wall time, and which threads spent it. A
candidate that computes on more cores than ``measure.cpu_threads`` allows -- its own
pool, or ``torch.set_num_threads(8)`` restored before it returns -- is timed against a
baseline held to fewer, and its speedup counts cores, not code.

On the GPU, work on other streams or devices during a block is the kernel-time
recorder's to see (``expkit/timing/``); other processes with a context on the GPU are
the ``gpu-processes`` check's (:mod:`.gpu_processes`).

The preflight and the bench both apply these checks, so they live here, below both.
"""

from __future__ import annotations

import _thread
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Protocol, Tuple

import torch

from ..core.findings import INVALID, WARNING, Finding
from .children import child_pids
from .contention import ContentionAccount, RunQueueWait

try:  # children_cpu_ns, twice a timed block: imported once here
    import resource
except ImportError:  # not a Unix
    resource = None  # type: ignore[assignment]

THREADS = "threads"
RESOURCES = "resources"

#: The Python threads running now, less the main one: ``_thread._count``, the interpreter's
#: own counter (a private name of the standard library, there since Python 2 and what
#: CPython's own test helpers count threads with). Read twice around every timed call, it
#: costs 0.03 us where ``threading.active_count()`` (a lock and two dictionaries) costs 0.30
#: on the 2-core machine (evidence/README.md), and it also counts
#: threads started with ``_thread.start_new_thread``, which ``threading`` never lists. The
#: fallback, where it is missing, is ``threading``'s count.
thread_count: Callable[[], int] = getattr(_thread, "_count", None) or threading.active_count


@dataclass(frozen=True)
class Activity:
    """Live Python threads (ident -> name) and child process ids of this process."""

    threads: Mapping[int, str]
    children: FrozenSet[int]


def activity() -> Activity:
    return Activity({t.ident or 0: t.name for t in threading.enumerate() if t.is_alive()}, child_pids())


_STDLIB = os.path.dirname(os.__file__)


def _os_state(native_id: Optional[int]) -> Optional[str]:
    """The kernel's scheduling state of a thread ('R' running, 'S' sleeping, ...)."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, TypeError):
        return None


def parked(thread: threading.Thread) -> bool:
    """A thread waiting for work: asleep (where the kernel says), with its innermost
    Python frame in the standard library (a pool worker blocked on its queue), not in
    anybody's code and not on a CPU. A thread that sleeps inside the candidate's own
    code (``time.sleep`` before deferred work) is not parked."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None or not os.path.realpath(frame.f_code.co_filename).startswith(_STDLIB):
        return False
    return _os_state(getattr(thread, "native_id", None)) in (None, "S", "D")


def new_activity(before: Activity, after: Activity, *, grace_s: float = 0.01) -> Optional[str]:
    """What was started and is still running (not parked), or None.

    A pool that starts its workers on first use leaves new threads behind that wait
    for the next task; those are parked and not counted. A thread that was just
    finishing gets ``grace_s`` to finish or park before it counts."""
    def busy() -> List[threading.Thread]:
        return [t for t in threading.enumerate()
                if t.is_alive() and t.ident in after.threads and t.ident not in before.threads and not parked(t)]

    running = busy()
    if running and grace_s > 0:
        time.sleep(grace_s)
        running = busy()
    threads = [t.name for t in running]
    children = sorted(after.children - before.children)
    bits = []
    if threads:
        bits.append(f"{len(threads)} new thread(s) still running ({', '.join(threads[:3])})")
    if children:
        bits.append(f"{len(children)} new child process(es) still running (pid {', '.join(map(str, children[:3]))})")
    if not bits:
        return None
    return " and ".join(bits) + " after the call returned: work that goes on after a call escapes its timer"


def parked_new_threads(before: Activity) -> int:
    return sum(1 for t in threading.enumerate() if t.is_alive() and t.ident not in before.threads and parked(t))



# --- CPU time per timed block (check ``resources``) ----------------------------------------


class CpuReader(Protocol):
    """Where :class:`ResourceAccount` reads its clocks (tests give a seeded fake)."""

    def wall_ns(self) -> int: ...

    def process_cpu_ns(self) -> int:
        """This process's CPU time and its waited-for children's (``RUSAGE_CHILDREN``)."""

    def thread_cpu_ns(self) -> Dict[int, int]: ...

    def wait_ns(self) -> Optional[int]:
        """The calling thread's wait for a CPU so far (:class:`.contention.RunQueueWait`)."""


def _unknown() -> Optional[int]:
    return None


def _thread_clock(tid: int) -> int:
    """Linux's CPU-time clock of thread ``tid`` of this process (``MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)``)."""
    return ((~tid) << 3) | 4 | 2


def children_cpu_ns() -> int:
    """CPU time of this process's children that were waited for (``RUSAGE_CHILDREN``,
    microseconds; ``os.times`` has only clock ticks); 0 where there is no ``resource``."""
    if resource is None:
        return 0
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((r.ru_utime + r.ru_stime) * 1e9)


class ProcCpuReader:
    """The process's CPU time (``CLOCK_PROCESS_CPUTIME_ID``) and each thread's, native
    threads included (OpenMP's, a library's), from the per-thread CPU clocks of the
    threads listed in ``/proc/self/task``: nanosecond resolution, where ``/proc``'s tick
    counts have 10 ms. The process's figure adds its children's once waited for
    (``getrusage(RUSAGE_CHILDREN)``, microseconds): a call that forks a process to
    compute beside it and waits for it before returning leaves no child behind, and
    only this shows its CPU time."""

    def __init__(self) -> None:
        self.wait_ns = RunQueueWait()

    def wall_ns(self) -> int:
        return time.perf_counter_ns()

    def process_cpu_ns(self) -> int:
        return time.process_time_ns() + children_cpu_ns()

    def thread_cpu_ns(self) -> Dict[int, int]:
        out: Dict[int, int] = {}
        try:
            tids = os.listdir("/proc/self/task")
        except OSError:
            return out
        for t in tids:
            try:
                out[int(t)] = time.clock_gettime_ns(_thread_clock(int(t)))
            except (OSError, ValueError):
                continue
        return out


#: perf_counter() when the harness's own work on every host core (:func:`wide`) last ended.
_WIDE_END = [float("-inf")]
#: perf_counter() when :func:`settle` last found the other threads quiet.
_SETTLED = [float("-inf")]


def wide_work_ended() -> None:
    """Mark the end of harness work on every host core (inputs, digests, oracles).

    An OpenMP pool spins for several milliseconds after its parallel region ends (GNU
    OpenMP's default spin count is about 300,000 pauses, 10-20 ms on recent x86), so a
    timed block that starts right after such work would charge those cores to the
    side under test. :func:`settle` waits them out first."""
    _WIDE_END[0] = time.perf_counter()


def settle(reader: "CpuReader", *, after_s: float = 0.25, quiet_ns: int = 200_000, step_s: float = 0.002,
           limit_s: float = 0.1) -> float:
    """Before a timed block: if the harness worked on every core in the last ``after_s``,
    wait until no thread but this one spends more than ``quiet_ns`` of CPU in ``step_s``,
    for at most ``limit_s``. Returns the seconds waited. A side's own thread that never
    goes quiet is not hidden: the wait ends at ``limit_s`` and the block's account sees it.

    Once the other threads were found quiet, later blocks do not wait again until the
    harness works on every core anew: a pool that went quiet is woken only by new work.
    Waiting before every block within ``after_s`` cost at least one ``step_s`` a block: on
    the CPU example honest-win, whose blocks are milliseconds long and whose input builds
    and rechecks marked wide work 120 times while it was measured, 1,212 of 1,569 blocks
    waited, 2.7 s in all (both sides in one process, ``defences.isolate=false``)."""
    if time.perf_counter() - _WIDE_END[0] > after_s or _SETTLED[0] > _WIDE_END[0]:
        return 0.0
    me = threading.get_native_id()
    t0 = time.perf_counter()
    last = reader.thread_cpu_ns()
    while time.perf_counter() - t0 < limit_s:
        time.sleep(step_s)
        now = reader.thread_cpu_ns()
        busy = max((c - last.get(tid, 0) for tid, c in now.items() if tid != me), default=0)
        last = now
        if busy <= quiet_ns:
            _SETTLED[0] = time.perf_counter()
            break
    return time.perf_counter() - t0


#: The thread id under which :class:`CpuUse` keeps the CPU time of threads that ended within
#: the span, and of children waited for in it (no live thread has id 0): what the process's
#: clocks (:meth:`ProcCpuReader.process_cpu_ns`) counted beyond its live threads'.
#: They count as the fewest threads that could have spent it (:meth:`CpuUse.ran`).
EXITED = 0


@dataclass(frozen=True)
class CpuUse:
    """CPU time spent in the process over some wall time, and by which threads."""

    wall_s: float
    cpu_s: float
    #: (thread id, CPU seconds) of every thread that spent any, busiest first; :data:`EXITED`
    #: stands for the threads (and waited-for children) that ended within the span.
    threads: Tuple[Tuple[int, float], ...] = ()

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def ran(self, fraction: float) -> int:
        """Threads that were on a CPU for at least ``fraction`` of the wall time; the ended
        threads (:data:`EXITED`) as the fewest that could have spent their time in it."""
        if self.wall_s <= 0:
            return 0
        return sum((math.ceil(c / self.wall_s - 1e-9) if tid == EXITED else 1) for tid, c in self.threads
                   if c >= fraction * self.wall_s)


@dataclass
class ResourceAccount:
    """CPU time against wall time around each timed block: ``begin()``, the block, ``end()``.

    ``end()`` returns a :class:`~expkit.core.findings.Finding` (check ``resources``) when
    the process used more cores than ``cpu_threads`` allows, else None. The rule: over
    the judged span, CPU time / wall time > ``cpu_threads x (1 + rel_slack) + abs_slack``
    (the core count, with room for the harness's own bookkeeping and a waking pool), and
    more threads than ``cpu_threads`` each ran for at least ``ran_fraction`` of it, the
    threads that ended within the span counting as the fewest that could have spent
    their time (:data:`EXITED`: a thread started and joined inside a call is gone when
    the block ends; without them a candidate that computed half of each call on such a
    thread read 1.59-1.73 cores and one thread, and was ``supported``:
    evidence/README.md). Blocks shorter than
    ``min_wall_s`` are pooled with the next until the pool is that long, so a single
    scheduler tick cannot decide (and :meth:`close`). For the candidate the finding is
    ``invalid``; for the baseline a warning (its speedup is then against more cores than
    allowed).

    What it cannot see: work on other processes, unless they are its children and were
    waited for within the span (a child still running is the ``threads`` check's),
    cores the candidate takes *between* blocks, and a block that uses its extra cores
    for less than the slack. ``cpu_threads`` None (torch's own choice) judges nothing."""

    cpu_threads: Optional[int]
    role: str = "candidate"
    case: Optional[str] = None
    reader: CpuReader = field(default_factory=ProcCpuReader)
    rel_slack: float = 0.25
    abs_slack: float = 0.25
    ran_fraction: float = 0.10
    min_wall_s: float = 0.02
    _start: Optional[Tuple[int, int, Dict[int, int]]] = None
    _pool: Optional[CpuUse] = None
    reported: bool = False
    #: The judged span that used the most cores (what :meth:`summary` reports).
    peak: Optional[CpuUse] = None
    #: The timing thread's wait for a CPU over the same blocks (check ``contention``).
    contention: Optional[ContentionAccount] = None
    #: Every block's CPU time by thread and wall time, summed over the case (:meth:`over_case`).
    case_cpu: Dict[int, float] = field(default_factory=dict)
    case_wall_s: float = 0.0

    def __post_init__(self) -> None:
        if self.contention is None:
            self.contention = ContentionAccount(read=getattr(self.reader, "wait_ns", _unknown))

    def begin(self) -> None:
        # The threads' clocks before the process's, as at the end: reading a running thread's
        # clock brings the kernel's account of it up to date, which the process clock alone
        # leaves up to a scheduler tick behind for every thread but the caller. Read first,
        # the process clock started low, and a 2-core machine's spans showed up to 3.87 cores
        # and CPU no thread spent (evidence/README.md).
        w0 = self.reader.wall_ns()
        self.contention.begin(w0)
        t0 = self.reader.thread_cpu_ns()
        self._start = (w0, self.reader.process_cpu_ns(), t0)

    def end(self) -> Optional[Finding]:
        if self._start is None:
            raise RuntimeError("ResourceAccount.end() without begin()")
        w0, c0, t0 = self._start
        t1 = self.reader.thread_cpu_ns()
        c1, w1 = self.reader.process_cpu_ns(), self.reader.wall_ns()
        self.contention.end(w1)
        self._start = None
        live = {tid: (t1[tid] - t0.get(tid, 0)) / 1e9 for tid in t1 if t1[tid] - t0.get(tid, 0) > 0}
        cpu_s = max(0, c1 - c0) / 1e9
        gone = cpu_s - sum(live.values())  # threads that ended, and children waited for, within the span
        if gone > 0:
            live[EXITED] = gone
        self.case_wall_s += (w1 - w0) / 1e9
        for tid, c in live.items():
            self.case_cpu[tid] = self.case_cpu.get(tid, 0.0) + c
        return self.judge(CpuUse((w1 - w0) / 1e9, cpu_s, tuple(sorted(live.items(), key=lambda x: -x[1]))))

    def close(self) -> Optional[Finding]:
        """Judge the blocks left in the pool when the case ends, if no span was judged yet.

        Every block of a short measurement can fit in one pool shorter than ``min_wall_s``
        (a quick budget; a clean-clone CI run saw a candidate on two cores come out
        ``supported`` with no span judged). Such a side is judged on all it timed rather
        than passed unjudged; a tail after judged spans stays unjudged, so a short tail's
        scheduler noise never decides a run that has longer spans behind it."""
        pool, self._pool = self._pool, None
        if pool is None or pool.wall_s <= 0 or self.peak is not None:
            return None
        return self.judge(pool, final=True)

    def over_case(self) -> CpuUse:
        """Every timed block of the case so far as one span (:attr:`case_cpu`)."""
        return CpuUse(self.case_wall_s, sum(self.case_cpu.values()),
                      tuple(sorted(self.case_cpu.items(), key=lambda x: -x[1])))

    def judge(self, use: CpuUse, *, final: bool = False) -> Optional[Finding]:
        """Pool ``use`` with shorter spans before it and judge the pool once it is long
        enough (``final``: judge it whatever its length; :meth:`close`)."""
        if self._pool is not None:
            merged: Dict[int, float] = dict(self._pool.threads)
            for tid, c in use.threads:
                merged[tid] = merged.get(tid, 0.0) + c
            use = CpuUse(self._pool.wall_s + use.wall_s, self._pool.cpu_s + use.cpu_s,
                         tuple(sorted(merged.items(), key=lambda x: -x[1])))
        if use.wall_s < self.min_wall_s and not final:
            self._pool = use
            return None
        self._pool = None
        if self.peak is None or use.cores > self.peak.cores:
            self.peak = use
        if self.cpu_threads is None or self.reported:
            return None
        limit = self.limit()
        ran = use.ran(self.ran_fraction)
        if use.cores <= limit or ran <= self.cpu_threads:
            return None
        self.reported = True
        severity = INVALID if self.role == "candidate" else WARNING
        return Finding(RESOURCES, False,
                       f"the {self.role}'s process used {use.cores:.2f} cores over {use.wall_s * 1e3:.1f} ms of timed "
                       f"calls ({use.cpu_s * 1e3:.1f} ms of CPU time; {ran} threads each on a CPU for at least "
                       f"{self.ran_fraction:.0%} of it), where measure.cpu_threads allows {self.cpu_threads} (limit "
                       f"{limit:.2f} cores): work on more cores than the run allows makes the speedup a count of cores",
                       self.case, severity=severity, figure=round(use.cores, 4), threshold=limit)

    def limit(self) -> float:
        """Cores a span may use before it counts (``cpu_threads`` with the slack)."""
        return (self.cpu_threads or 0) * (1 + self.rel_slack) + self.abs_slack

    def summary(self) -> Dict[str, Any]:
        """Plain data for the evidence: the busiest judged span's cores, CPU and wall time,
        threads that ran, and the limit (None when ``cpu_threads`` sets none)."""
        p = self.peak
        return {"peak_cores": round(p.cores, 4) if p else None, "peak_wall_ms": round(p.wall_s * 1e3, 3) if p else None,
                "peak_cpu_ms": round(p.cpu_s * 1e3, 3) if p else None,
                "threads_ran": p.ran(self.ran_fraction) if p else None,
                "limit": round(self.limit(), 4) if self.cpu_threads is not None else None,
                "flagged": self.reported, "case_threads_ran": self.over_case().ran(self.ran_fraction),
                **self.contention.summary()}


def busiest(before: Optional[Mapping[str, Any]], now: Mapping[str, Any]) -> Dict[str, Any]:
    """One side's CPU account over a case's processes (each replicate's pair reports its
    own): the busiest judged span of any, the most threads that ran over a case in any,
    flagged if any was, how many reported, and the timing thread's wait for a CPU and the
    blocks' wall summed over them."""
    if before is None:
        return {**now, "processes": int(now.get("processes", 1))}
    key = lambda r: -1.0 if r.get("peak_cores") is None else r["peak_cores"]  # noqa: E731
    top = dict(now if key(now) > key(before) else before)
    top.update(case_threads_ran=max(int(r.get("case_threads_ran") or 0) for r in (before, now)),
               flagged=bool(before.get("flagged") or now.get("flagged")),
               processes=int(before.get("processes", 1)) + int(now.get("processes", 1)),
               **{k: round(float(before.get(k, 0.0)) + float(now.get(k, 0.0)), 3) for k in ("waited_ms", "blocks_ms")})
    return top


def set_cpu_threads(threads: Optional[int]) -> None:
    """Pin torch's intra-op threads for a run (``measure.cpu_threads``; null leaves torch's own).

    On a shared machine with more runnable threads than cores, torch's OpenMP workers spin
    and wait on each other, and a multi-threaded op can slow by an order of magnitude while
    a single-threaded one barely moves (seen on this project's 2-core CI kind under load:
    a row-wise GEMV 16 ms with 2 threads, 0.16 ms with 1). A ratio of two such ops then
    measures the machine's load, not the code; one thread per run keeps it about the code.
    """
    if threads is not None:

        torch.set_num_threads(int(threads))
