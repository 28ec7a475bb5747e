"""The freeze (bench/defences/freeze.py): while one side is timed, the other side's worker is stopped.

The logic runs against a fake kernel (what was signalled, in order); the waits and the
kernel's reports run against real child processes."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import List, Optional, Tuple

import pytest

from expkit.bench.defences import freeze as F
from expkit.checks.interference import stop_event

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc: Linux")

PIDS = {"baseline": 101, "candidate": 202}


class Kernel:
    """A fake kernel: every signal sent, in order; which pids stop when asked."""

    def __init__(self, stops: Optional[bool] = True, alive: bool = True) -> None:
        self.log: List[Tuple[str, int]] = []
        self.stops, self.alive = stops, alive

    def kill(self, pid: int, sig: int) -> bool:
        self.log.append(("STOP" if sig == signal.SIGSTOP else "CONT", pid))
        return self.alive

    def wait(self, pid: int) -> Optional[bool]:
        self.log.append(("wait", pid))
        return self.stops

    def drain(self, pid: int) -> None:
        self.log.append(("drain", pid))


def freeze(k: Kernel) -> F.Freeze:
    return F.Freeze(PIDS, kill=k.kill, wait=k.wait, drain=k.drain)


def test_the_other_side_is_stopped_before_a_side_is_timed_and_continued_after():
    k = Kernel()
    f = freeze(k)
    f.quiet("baseline")
    assert k.log == [("STOP", 202), ("wait", 202), ("CONT", 101), ("drain", 101)] and f.stopped == {"candidate"}
    f.quiet("baseline")  # the same side again: the other stays stopped, this one is continued anyway
    assert k.log[4:] == [("CONT", 101), ("drain", 101)]
    f.release()
    assert k.log[6:] == [("CONT", 202), ("drain", 202)] and not f.stopped
    assert f.take_sent() == {"baseline": 2, "candidate": 1} and f.take_sent() == {}


def test_handing_over_stops_the_other_before_the_next_side_runs():
    """The side about to be timed is continued only once the other is stopped: continued
    first, its pool threads spin on and keep the stopping worker off a small machine's cores."""
    k = Kernel()
    f = freeze(k)
    f.quiet("baseline")
    f.quiet("candidate")
    assert k.log == [("STOP", 202), ("wait", 202), ("CONT", 101), ("drain", 101),
                     ("STOP", 101), ("wait", 101), ("CONT", 202), ("drain", 202)]
    assert f.stopped == {"baseline"}


def test_a_worker_that_does_not_stop_is_continued_and_named():
    k = Kernel(stops=False)
    f = freeze(k)
    f.quiet("baseline")
    assert k.log[:4] == [("STOP", 202), ("wait", 202), ("CONT", 202), ("drain", 202)] and not f.stopped
    got = f.findings("c", {"baseline": "baseline", "candidate": "candidate"})
    assert len(got) == 1 and got[0].check == "interference" and not got[0].ok and got[0].case == "c"
    assert "candidate's worker could not be stopped" in got[0].message and "1 time(s)" in got[0].message
    assert f.findings("c", {}) == []  # a fresh start each case


def test_a_worker_that_is_gone_is_no_finding():
    """A dead worker is the channel's to report (`worker`), not the freeze's."""
    f = freeze(Kernel(stops=None))
    f.quiet("baseline")
    assert not f.stopped and f.findings("c", {}) == []
    k = Kernel(alive=False)
    f = freeze(k)
    f.quiet("baseline")
    assert k.log == [("STOP", 202), ("CONT", 101)] and not f.stopped


def test_the_parents_time_in_the_freeze_is_counted():
    def slow_wait(pid: int) -> bool:
        time.sleep(0.01)
        return True

    f = F.Freeze(PIDS, kill=lambda pid, sig: True, wait=slow_wait, drain=lambda pid: None)
    f.quiet("baseline")
    f.release()
    assert f.seconds >= 0.01


def _sleeper(threads: int = 0) -> Tuple[int, int]:
    """A child that waits on a pipe (with ``threads`` more threads waiting too); (pid, write end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(w)
        for _ in range(threads):
            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    return pid, w


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[-1].split()[0]


def _end(pid: int, w: int) -> None:
    os.kill(pid, signal.SIGCONT)
    os.write(w, b"x")  # not a close: the other child holds a copy of this end
    os.close(w)
    os.waitpid(pid, 0)


def test_real_workers_are_stopped_and_continued_and_the_kernels_reports_consumed():
    """The watch reads the kernel's stop and continue reports (checks.interference): the
    freeze's own must not reach it, or every frozen run would be `interference`."""
    a, wa = _sleeper(threads=2)
    b, wb = _sleeper()
    try:
        time.sleep(0.05)
        f = F.Freeze({"baseline": a, "candidate": b})
        f.quiet("baseline")
        assert _state(b) == b"T" and F._all_tasks_stopped(b)
        f.quiet("candidate")
        assert _state(a) == b"T" and F._all_tasks_stopped(a) and _state(b) != b"T"
        f.release()
        time.sleep(0.02)
        assert _state(a) != b"T" and _state(b) != b"T"
        assert stop_event(a) is None and stop_event(b) is None
        assert f.take_sent() == {"baseline": 2, "candidate": 1}
    finally:
        _end(a, wa)
        _end(b, wb)


def test_a_side_stopped_by_another_process_is_continued_before_it_is_timed():
    """Where the confinement cannot refuse signals, a thread of the candidate's that stops
    its baseline now and then can itself be stopped by the freeze before it continues it:
    the baseline is continued before its block all the same (the run waited out its
    timeout before: `sibling_stop` unconfined)."""
    a, wa = _sleeper()
    b, wb = _sleeper()
    try:
        time.sleep(0.05)
        os.kill(a, signal.SIGSTOP)  # by someone else
        assert F.wait_stopped(a)
        f = F.Freeze({"baseline": a, "candidate": b})
        f.quiet("baseline")
        time.sleep(0.02)
        assert _state(a) != b"T" and _state(b) == b"T"
        f.release()
    finally:
        _end(a, wa)
        _end(b, wb)


def test_a_stop_is_seen_through_proc_where_the_worker_is_not_a_child():
    """A worker from the fork server is the server's child: its stop is read from every
    thread's state in /proc."""
    a, wa = _sleeper(threads=2)
    try:
        time.sleep(0.05)
        assert F._all_tasks_stopped(a) is False
        os.kill(a, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not F._all_tasks_stopped(a) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert F._all_tasks_stopped(a)
    finally:
        _end(a, wa)
    assert F._all_tasks_stopped(a) is None  # gone


def test_waiting_for_a_worker_that_exited_says_so():
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    time.sleep(0.05)
    assert F.wait_stopped(pid, timeout=1.0) is None
    os.waitpid(pid, 0)


STOPPED_GRANDCHILD = r"""
import os, signal, sys, time
from expkit.bench.processes.lifetime import die_with_parent
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "tied":
        die_with_parent()
    os.kill(os.getpid(), signal.SIGSTOP)  # as the freeze leaves an idle worker
    time.sleep(60)
    os._exit(0)
print(pid, flush=True)
time.sleep(60)
"""


def _gone_or_stopped(pid: int, timeout: float) -> str:
    """``gone`` once ``pid`` has ended (or is a zombie), else its state after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        try:
            state = _state(pid)
        except OSError:
            return "gone"
        if state == b"Z":
            return "gone"
        if time.monotonic() > end:
            return state.decode()
        time.sleep(0.02)


@pytest.mark.parametrize("tied", [True, False])
def test_a_worker_left_stopped_ends_with_its_parent(tied):
    """A parent killed while its idle worker is stopped cannot continue it: with
    ``die_with_parent`` (set in every worker, bench/processes/lifetime.py) the kernel kills it; without,
    it stays stopped for good (the second case shows the test can fail)."""
    import subprocess

    mid = subprocess.Popen([sys.executable, "-c", STOPPED_GRANDCHILD, "tied" if tied else "free"],
                           stdout=subprocess.PIPE, text=True)
    child = int(mid.stdout.readline())
    try:
        end = time.monotonic() + 5
        while _state(child) != b"T":  # stopped itself
            assert time.monotonic() < end
            time.sleep(0.01)
        mid.kill()
        mid.wait()
        assert _gone_or_stopped(child, 5.0) == ("gone" if tied else "T")
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
