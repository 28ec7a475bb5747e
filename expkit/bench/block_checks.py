"""The checks after a timed block, and when they run: before the block's reply or after it.

After each timed block a defended side checks what the block's calls left behind:
threads alive that were not before it (or a call that returned with a new thread
still running), child processes still running, and the functions and settings the
harness relies on (checks ``tamper`` and ``global_state``). On honest-win on the 2-core CPU
machine they took about 0.5 ms of each timed block request, which took 3.7 ms on average
(``benchmarks/results/block_checks_652cd4b.md``).

With each side in its own worker the parent waits for nothing of them: the worker can
send the block's timing first and run its checks while the parent has the *other*
side's worker time the next block (:class:`LateChecks`). Nothing of the side's own
code runs in between -- a worker is one thread that finishes the checks before it
reads its next request -- so they see the process as they would have before the reply;
the window a side's own background thread has to undo something before the checks
look grows by the reply's send, tens of microseconds. Two things change: the findings
reach the parent with the side's next reply (the next block's, or the case's end), and
the checks share the machine with the other side's timed block. So they go after the
reply only where the machine has a core to spare beyond what that block uses
(:func:`spare_core`); with both sides in one process (``defences.isolate=false``) the
next block runs in the same thread, and they always run before the reply.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, List, Optional

from ..checks.activity import THREADS, Activity, child_pids, new_activity, parked_new_threads
from ..core.findings import Finding
from .tamper import TAMPER


def spare_core(cpu_threads: Optional[int], device: str) -> bool:
    """Whether this process may run its checks beside the other side's timed block: the
    cores it may use hold that block's threads (CPU: ``measure.cpu_threads``, all of them
    when None; a GPU block: the one host thread that launches it) and one more."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
    need = (cpu_threads or cores) if device == "cpu" else 1
    return cores >= need + 1


def threads_now() -> Activity:
    """The live Python threads (what a block's checks compare against its start)."""
    return Activity({t.ident or 0: t.name for t in threading.enumerate()}, frozenset())


def after_block(side: Any, cs: Any, before: Activity, children: Any) -> List[Finding]:
    """What one block of ``side`` (a ``SideBench``) left behind: threads, child processes,
    and the tamper and global-state checks. ``before`` and ``children``: the live threads
    and child pids when the block began; ``cs``: its case's state (its leaked-thread count
    is read and reset here)."""
    found: List[Finding] = []
    grown = new_activity(before, threads_now())
    # Calls that returned with more threads alive than they started with, beyond the
    # workers a lazily started pool keeps parked: threads that did the work after
    # the call and were gone by the end of the block.
    leaked = cs.leaked_threads - parked_new_threads(before)
    cs.leaked_threads = 0
    if grown or leaked > 0:
        found.append(Finding(THREADS, False, f"{side.role}: " + (grown or f"{leaked} call(s) left a new "
                                                                 "thread running when they returned"), cs.name))
    new = sorted(child_pids() - children)
    if new:
        found.append(Finding(THREADS, False, f"{side.role}: {len(new)} new child process(es) still running (pid "
                             f"{', '.join(map(str, new[:3]))}) after timed calls returned: work that goes on "
                             "after a call escapes its timer", cs.name))
    return found + side.tamper_findings(f"while the {side.role} was timed", cs.name, hot_only=True)


class LateChecks:
    """One side's block checks, run before the block's reply or, with ``after_reply``,
    kept until :meth:`run` (the worker calls it once the reply is sent); their findings
    then go with the next reply that asks for them (:meth:`submit`, :meth:`take`)."""

    def __init__(self, role: str, after_reply: bool) -> None:
        self.role, self.after_reply = role, after_reply
        self._job: Optional[Callable[[], List[Finding]]] = None
        self._found: List[Finding] = []

    def submit(self, job: Callable[[], List[Finding]]) -> List[Finding]:
        """This block's checks; returns the findings its reply carries: the earlier
        block's, and with ``after_reply`` off, this one's."""
        earlier = self.take()
        if self.after_reply:
            self._job = job
            return earlier
        return earlier + self._guarded(job)

    def run(self) -> None:
        """Run the kept checks, if any (after the reply went out)."""
        job, self._job = self._job, None
        if job is not None:
            self._found += self._guarded(job)

    def take(self) -> List[Finding]:
        """Every finding not yet sent, running kept checks first (a case's end)."""
        self.run()
        out, self._found = self._found, []
        return out

    def _guarded(self, job: Callable[[], List[Finding]]) -> List[Finding]:
        try:
            return job()
        except Exception as e:  # the checks' own tools broke: something replaced them
            return [Finding(TAMPER, False, f"the {self.role}'s checks after a timed block raised "
                            f"{type(e).__name__}: {e}")]
