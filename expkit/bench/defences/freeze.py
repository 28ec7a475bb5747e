"""While one side's blocks are timed, the other side's worker is stopped (``defences.freeze``).

The parent hands blocks to the two workers in turn, and the idle one used to wait,
running, while the other was timed. Whatever ran in it then competed with the timed
side: its thread pool's spin after a parallel region, and any thread the candidate's
code started. The parent's watch (:mod:`expkit.checks.interference`) counts the idle
worker's CPU time, but it must allow a pool's spin (``measure.cpu_threads - 1`` cores),
and inside that allowance one thread of the candidate's, computing only while the
baseline was timed, made an honest 1.0x candidate `supported` at 3.5-4.4x
(``tests/adversarial/cpu/idle_spin_pool.yaml``,
evidence/README.md).

So before a side's block request the parent sends the other worker ``SIGSTOP``, which
no code can catch, block or ignore, and waits until the kernel reports every thread of
it stopped; it sends ``SIGCONT`` before that worker's own next block request
(:meth:`Freeze.quiet`), before a recheck (both workers take part) and when the batch of
blocks ends (:meth:`Freeze.release`). A stopped
process runs nothing: no pool spins, no thread of the candidate's computes, signals or
moves anything while the baseline is timed. What it started before it was stopped and
that runs elsewhere is not stopped with it: a child process (counted after every
block: :mod:`.block_checks`) and work already queued on a GPU (the ``stream`` check).

The parent consumes the kernel's reports of its own stops and continues (``waitid``),
so that the watch sees only others'; each worker still counts every ``SIGCONT`` it
receives, and the watch compares that count with what the parent sent
(:attr:`Freeze.sent`). A worker that is not the parent's child (one from the fork
server) is seen stopped through ``/proc``. One that cannot be stopped in
:data:`STOP_TIMEOUT_S` is named (:meth:`Freeze.findings`) and its sibling timed anyway,
under the CPU-time watch. ``kill``, ``wait`` and ``drain`` are the seams for tests.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Set

from ...checks.children import read_proc
from ...checks.interference import INTERFERENCE
from ...core.findings import Finding
from .clock import CLOCK

#: How long the parent waits for a worker to stop before it times the other side anyway.
STOP_TIMEOUT_S = 2.0


def _all_tasks_stopped(pid: int) -> Optional[bool]:
    """Whether every thread of process ``pid`` is stopped, read from ``/proc``; None where
    it cannot be read (gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        stat = read_proc(f"/proc/{pid}/task/{tid}/stat")
        fields = stat.rsplit(b")", 1)[-1].split() if stat is not None else []
        if fields and fields[0] not in (b"T", b"t"):  # none: a thread that ended
            return False
    return True


def wait_stopped(pid: int, timeout: float = STOP_TIMEOUT_S) -> Optional[bool]:
    """Wait until process ``pid``, just sent ``SIGSTOP``, is stopped: True once it is,
    False where it was not within ``timeout``, None where it is gone. A child's stop is the
    kernel's report to its parent, consumed here; another process's is every thread's state
    in ``/proc``. The wait yields the core, which the stopping process may need."""
    end = time.monotonic() + timeout
    child = True
    while True:
        if child:
            try:
                got = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                child = False
                continue
            if got is not None:
                if got.si_code != os.CLD_STOPPED:
                    return None  # exited: left for whoever reaps it
                os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)  # the report, consumed
                return True
        else:
            done = _all_tasks_stopped(pid)
            if done is not False:
                return done
        if time.monotonic() > end:
            return False
        os.sched_yield()


def drain_continued(pid: int) -> None:
    """Consume the kernel's report that child ``pid`` was continued (set as ``SIGCONT`` is
    sent); nothing for a process that is not this one's child."""
    try:
        os.waitid(os.P_PID, pid, os.WCONTINUED | os.WNOHANG)
    except ChildProcessError:
        pass


def _kill(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except OSError:  # gone: the channel reports a dead worker
        return False


@dataclass
class Freeze:
    """The two workers of a case, one stopped while the other is timed.

    ``pids``: side -> worker pid (two sides). ``stopped``: the sides whose worker is
    stopped now. ``sent``: per side, the ``SIGCONT`` sent since :meth:`take_sent` last
    asked; ``unstoppable``: sides whose worker could not be stopped, since
    :meth:`findings`; ``seconds``: the parent's time in :meth:`quiet` and
    :meth:`release`, on the harness's clock (its own, which the envelope check must not
    hold against a worker)."""

    pids: Mapping[str, int]
    kill: Callable[[int, int], bool] = _kill
    wait: Callable[[int], Optional[bool]] = wait_stopped
    drain: Callable[[int], None] = drain_continued
    stopped: Set[str] = field(default_factory=set)
    sent: Dict[str, int] = field(default_factory=dict)
    unstoppable: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def quiet(self, side: str) -> None:
        """Before ``side``'s block request: the other side's worker stopped, then ``side``'s
        running. In that order: a worker's pool threads stopped mid-spin spin on when
        continued, and on a small machine they would keep the stopping one off the cores.

        ``side`` is continued whether or not the parent stopped it. Another process of the
        user may have (where the confinement cannot refuse signals): a thread of the
        candidate's that stops its baseline for part of every millisecond, stopped itself
        before it sent the ``SIGCONT``, left the baseline stopped, and the run waited out
        ``defences.timeout_seconds`` for its block (``sibling_stop`` unconfined). Once the
        other worker is stopped nothing of it can stop this one again."""
        other = next((s for s in self.pids if s != side), None)
        t0 = CLOCK()
        if other is not None and other not in self.stopped:
            self._stop(other)
        self.stopped.discard(side)
        self._continue(side)
        self.seconds += CLOCK() - t0

    def _stop(self, side: str) -> None:
        pid = self.pids[side]
        if not self.kill(pid, signal.SIGSTOP):
            return
        done = self.wait(pid)
        if done:
            self.stopped.add(side)
            return
        if done is False:  # named; continued at once, as a worker left stopped answers nothing
            self.unstoppable[side] = self.unstoppable.get(side, 0) + 1
        self._continue(side)

    def wake(self, side: str) -> None:
        """``side``'s worker running, if it is stopped."""
        if side in self.stopped:
            self.stopped.discard(side)
            self._continue(side)

    def release(self) -> None:
        """Every stopped worker running again (before anything else is asked of them)."""
        if self.stopped:
            t0 = CLOCK()
            for side in sorted(self.stopped):
                self.wake(side)
            self.seconds += CLOCK() - t0

    def _continue(self, side: str) -> None:
        pid = self.pids[side]
        if self.kill(pid, signal.SIGCONT):
            self.sent[side] = self.sent.get(side, 0) + 1
            self.drain(pid)

    def take_sent(self) -> Dict[str, int]:
        """The ``SIGCONT`` sent to each side's worker since last asked."""
        out, self.sent = self.sent, {}
        return out

    def findings(self, case: str, roles: Mapping[str, str]) -> List[Finding]:
        """Workers that could not be stopped while the other side was timed, then a fresh start."""
        out = [Finding(INTERFERENCE, False, (
            f"the {roles.get(side, side)}'s worker could not be stopped within {STOP_TIMEOUT_S:g} s while the other "
            f"side was timed ({n} time(s)): the other side's blocks then ran beside it (defences.freeze)"), case)
            for side, n in sorted(self.unstoppable.items())]
        self.unstoppable = {}
        return out
