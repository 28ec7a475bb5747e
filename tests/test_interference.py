"""checks.interference: what one side's worker does to the other's while the other is timed."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from expkit.checks import interference
from expkit.checks.interference import IDLE_CORES_LIMIT, IDLE_MIN_NS, INTERFERENCE, WorkerWatch, read_priority

ROLES = {"b": "baseline", "c": "candidate"}
#: The fake pids 1 and 2 are real processes of the host, whose priority is not the test's:
#: these tests fake it as the run's own (the priority rule has tests of its own below).
SAME = lambda pid: read_priority(0)  # noqa: E731


class Clocks:
    """Each pid's CPU clock, advanced by hand."""

    def __init__(self) -> None:
        self.ns = {1: 0, 2: 0}

    def read(self, pid: int):
        return self.ns.get(pid)


class Wall:
    """The parent's clock, advanced by hand."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


#: The tests' scheduler tick, whatever the host's: the 2-core machine's.
TICK_NS = 4_000_000


def watch(clocks, wall: "Wall | None" = None, **kw) -> WorkerWatch:
    """The baseline (pid 1) and candidate (pid 2) watched through ``clocks.read``, on a
    parent's clock advanced by hand and the tests' tick."""
    return WorkerWatch({"b": 1, "c": 2}, priority=SAME, read=clocks.read, events=lambda pid: None,
                       clock=wall or Wall(), read_lag_ns=TICK_NS, **kw)


def _timed(w: WorkerWatch, clocks: Clocks, side: str, wall_ns: int, other_ns: int) -> None:
    other = 2 if side == "b" else 1
    w.before(side)
    clocks.ns[other] += other_ns
    w.clock.ns += wall_ns
    w.after()


def test_the_other_worker_computing_while_a_side_is_timed_is_named_with_its_figures():
    clocks = Clocks()
    w = watch(clocks)
    for _ in range(10):
        _timed(w, clocks, "b", 4_000_000, 2_000_000)  # the candidate at half a core beside the baseline
        _timed(w, clocks, "c", 4_000_000, 10_000)     # the baseline waits
    got = w.findings("k", ROLES)
    assert [(f.check, f.case, f.figure) for f in got] == [(INTERFERENCE, "k", 0.5)], got
    assert "the candidate's process spent 20.0 ms of CPU time (0.50 cores) while only the baseline" in got[0].message
    assert w.wall_ns == {} and w.findings("k", ROLES) == []  # each case from zero


@pytest.mark.parametrize("other_ns, wall_ns", [
    (int(IDLE_CORES_LIMIT * 40_000_000) - 1, 40_000_000),  # at the limit: a pool's spin after its block
    (IDLE_MIN_NS - 1, IDLE_MIN_NS),                         # above the limit, too little to judge
])
def test_a_waiting_worker_raises_no_alarm(other_ns, wall_ns):
    clocks = Clocks()
    w = watch(clocks)
    _timed(w, clocks, "b", wall_ns, other_ns)
    assert w.findings("k", ROLES) == []


def test_an_idle_workers_own_pool_may_spin_up_to_its_threads_but_one():
    """With measure.cpu_threads=2 each worker's OpenMP pool has a thread that spins after
    every block: honest candidates were `invalid` at 0.43-0.58 cores of the other worker
    before that was allowed (evidence/defences/confine/README.md)."""
    assert interference.pool_cores(1) == 0.0 and interference.pool_cores(2) == 1.0 and interference.pool_cores(0) == 0.0
    assert interference.pool_cores(None) == float(max(0, (os.cpu_count() or 1) - 1))
    clocks = Clocks()
    w = watch(clocks, pool_cores=1.0)
    _timed(w, clocks, "b", 40_000_000, 36_000_000)  # 0.9 cores: its pool's spin
    assert w.findings("k", ROLES) == []
    _timed(w, clocks, "b", 40_000_000, 56_000_000)  # 1.4 cores: more than a spinning pool
    got = w.findings("k", ROLES)
    assert [(f.figure, f.threshold) for f in got] == [(1.4, 1.35)], got  # 1.25, and 4 ms over one request
    assert "limit 1.25 cores, 1 of them for its thread pool's spin, and 4 ms a request" in got[0].message


class Kernel:
    """One thread of pid 2 spinning through each request and asleep at its end, as the
    kernel accounts it to another process: its time is folded in at the tick, so a reading
    taken while it runs is up to a tick behind, one taken once it sleeps is exact."""

    def __init__(self, behind_ns: int) -> None:
        self.true_ns, self.behind_ns, self.running = 0, behind_ns, True

    def read(self, pid: int):
        if pid != 2:
            return 0
        return self.true_ns - (self.behind_ns if self.running else 0)


def _spun(w: WorkerWatch, kernel: Kernel, requests: int, wall_ns: int, spin_ns: int) -> None:
    for _ in range(requests):
        kernel.running = True
        w.before("b")
        kernel.true_ns += spin_ns  # the pool's spin after the other worker's last block
        kernel.running = False  # asleep before the request ends
        w.clock.ns += wall_ns
        w.after()


def test_an_idle_pools_spin_read_a_tick_late_is_allowed_and_work_beyond_it_is_not():
    """An honest pool's spinning thread reads a tick late at each request's start (up to
    4 ms on a 4 ms tick): 3 ms requests it spun through read 2.3 cores, above the 1.25 of
    the pool's allowance (an honest pool of two read 1.26 cores so on CI). Allowed one
    lag a request for each pool thread; a pool spinning through 8 ms requests beside a
    thread of 0.8 cores (1.8 cores, read half a core more) is not."""
    kernel = Kernel(behind_ns=3_900_000)
    w = watch(kernel, pool_cores=1.0)
    _spun(w, kernel, 8, 3_000_000, 3_000_000)
    assert w.summary()["b"]["other_cpu_ms"] / w.summary()["b"]["timed_ms"] > 2.0, w.summary()
    assert w.findings("k", ROLES) == []
    _spun(w, kernel, 8, 8_000_000, 14_400_000)
    (f,) = w.findings("k", ROLES)
    assert f.figure > f.threshold and "over 8 requests" in f.message, f
    kernel.behind_ns = 0  # one thread a side: no pool, every reading exact, no lag allowed
    w = watch(kernel)
    _spun(w, kernel, 8, 20_000_000, 6_000_000)
    (f,) = w.findings("k", ROLES)
    assert f.threshold == IDLE_CORES_LIMIT, f


def test_the_lag_allowed_is_the_kernels_scheduler_tick(monkeypatch):
    """The coarse clock's resolution is the tick (1/CONFIG_HZ: 1, 3.3, 4 or 10 ms); where it
    cannot be read, or reads no tick Linux is built with, the longest one."""
    if sys.platform.startswith("linux"):
        assert interference.READ_LAG_NS in (1_000_000, 3_333_333, 4_000_000, 10_000_000), interference.READ_LAG_NS
    assert WorkerWatch({"b": 1, "c": 2}).read_lag_ns == interference.READ_LAG_NS

    def unreadable(clock_id: int) -> float:
        raise OSError("no such clock")

    monkeypatch.setattr(interference.time, "clock_getres", unreadable)
    assert interference.scheduler_tick_ns() == 10_000_000
    for not_a_tick in (1e-9, 0.5):  # a fine clock's resolution, or half a second
        monkeypatch.setattr(interference.time, "clock_getres", lambda clock_id: not_a_tick)
        assert interference.scheduler_tick_ns() == 10_000_000
    monkeypatch.setattr(interference.time, "clock_getres", lambda clock_id: 0.001)
    assert interference.scheduler_tick_ns() == 1_000_000


def test_the_wall_of_a_figure_spans_the_reads_however_long_the_parent_waits_in_them():
    """The parent held off its core for 3 ms inside each CPU-clock read (a busy host)
    while the other worker's one thread ran: the wall the figure is divided by is stamped
    around the reads, so the thread reads one core. Stamped apart from the reads, the same
    requests read 2.5 cores."""
    clocks, wall = Clocks(), Wall()

    def held_off(pid: int):
        wall.ns += 3_000_000
        clocks.ns[2] += 3_000_000  # the other worker's thread ran all the while
        return clocks.ns[pid]

    w = WorkerWatch({"b": 1, "c": 2}, priority=SAME, read=held_off, events=lambda pid: None, clock=wall)
    for _ in range(10):
        w.before("b")
        wall.ns += 2_000_000
        clocks.ns[2] += 2_000_000
        w.after()
    assert w.summary()["b"]["other_cpu_ms"] / w.summary()["b"]["timed_ms"] <= 1.0, w.summary()


def test_a_worker_that_is_gone_is_not_judged():
    clocks = Clocks()
    w = watch(clocks)
    w.before("b")
    del clocks.ns[2]
    w.clock.ns += 10_000_000
    w.after()
    assert w.wall_ns == {} and w.findings("k", ROLES) == []


def test_a_stop_is_reported_for_the_side_stopped_and_a_worker_not_ours_as_unwatched():
    events = {1: "continued", 2: "unwatched"}
    w = WorkerWatch({"b": 1, "c": 2}, priority=SAME, read=lambda pid: 0, events=events.get)
    got = w.findings("k", ROLES)
    assert len(got) == 1 and got[0].check == INTERFERENCE and "the baseline's worker was stopped" in got[0].message
    assert w.unwatched == {"c"}


def _spinning_child(seconds: float) -> int:
    pid = os.fork()
    if pid == 0:
        t = time.perf_counter()
        while time.perf_counter() - t < seconds:
            pass
        os._exit(0)
    return pid


def test_the_kernel_counts_a_childs_cpu_and_reports_its_stops_once():
    """The real clocks and the real note: a child's CPU clock read from here grows as it
    computes; a stop and a continue are reported (once), as are a stop in progress."""
    pid = _spinning_child(1.0)
    try:
        c0 = interference.cpu_clock_ns(pid)
        assert interference.stop_event(pid) is None
        time.sleep(0.2)
        c1 = interference.cpu_clock_ns(pid)
        assert c0 is not None and c1 is not None and c1 - c0 > 50_000_000, (c0, c1)
        for _ in range(2):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.05)
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
        assert interference.stop_event(pid) == "continued"
        assert interference.stop_event(pid) is None
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.05)
        assert interference.stop_event(pid) == "stopped"
        os.kill(pid, signal.SIGCONT)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert interference.cpu_clock_ns(pid) is None  # gone


def test_a_process_that_is_not_our_child_is_unwatched():
    assert interference.stop_event(os.getppid()) == "unwatched"


def test_a_gpu_runs_watch_reads_no_cpu_clock_but_sees_stops():
    """A GPU worker's driver and CUPTI threads work between its requests: only stops count."""
    read = []
    w = WorkerWatch({"b": 1, "c": 2}, priority=SAME, cpu=False, read=lambda pid: read.append(pid) or 0,
                  events={2: "stopped"}.get)
    w.before("b")
    w.after()
    got = w.findings("k", ROLES)
    assert read == [] and w.summary() == {}
    assert [f.message.split(" was")[0] for f in got] == ["the candidate's worker"]


def test_the_sigcont_a_worker_counts_reaches_the_verdict_where_waitid_cannot():
    """A worker from the fork server is not the parent's child: only its own count of the
    SIGCONT that ended each stop tells (the sibling_stop cheat on the H100 host)."""
    w = WorkerWatch({"b": 1, "c": 2}, priority=SAME, read=lambda pid: 0, events=lambda pid: "unwatched")
    got = w.findings("k", ROLES, {"b": 3, "c": 0})
    assert len(got) == 1 and "the baseline's worker was stopped during the case (it was continued 3 time(s))" \
        in got[0].message, got
    assert w.unwatched == {"b", "c"}


def test_a_process_counts_the_sigcont_it_receives_and_goes_on():
    import subprocess
    import sys

    code = ("import os, signal; from expkit.checks import interference as i; i.count_continues(); "
            "[os.kill(os.getpid(), signal.SIGCONT) for _ in range(2)]; import time; time.sleep(0.05); "
            "print(i.continues_taken() >= 1, i.continues_taken())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True 0", out.stderr[-2000:]


CHILD_READS_THROUGH_A_CONTINUE = r"""
import ctypes, os, signal, sys, threading
from expkit.checks import interference as i
i.count_continues()
r, w = os.pipe()
libc = ctypes.CDLL(None, use_errno=True)
got = []
def reader():
    buf = ctypes.create_string_buffer(1)
    got.append((libc.read(r, buf, 1), ctypes.get_errno()))  # C's read: no retry of its own
t = threading.Thread(target=reader)
t.start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT})  # the handler can run on the reader only
print("ready", flush=True)
sys.stdin.readline()
os.write(w, b"x")
t.join()
print(got, i.continues_taken(), flush=True)
"""


def test_the_count_of_continues_interrupts_no_system_call_of_another_thread():
    """The kernel may run the SIGCONT handler on any thread of the worker. Without
    ``SA_RESTART`` the call it interrupts fails with EINTR, and a GNU OpenMP pool thread
    whose futex wait failed spins afresh: with the freeze continuing each idle worker
    before its blocks, honest candidates on the H100 host were `invalid` (`resources`).
    Here a thread blocked in C's ``read`` takes the handler, and must read on."""
    import signal
    import subprocess
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-c", CHILD_READS_THROUGH_A_CONTINUE], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.1)  # the reader blocked in read()
        os.kill(p.pid, signal.SIGSTOP)
        os.waitid(os.P_PID, p.pid, os.WSTOPPED)
        os.kill(p.pid, signal.SIGCONT)
        time.sleep(0.1)
        out, err = p.communicate("go\n", timeout=60)
    finally:
        p.kill()
    assert out.strip() == "[(1, 0)] 1", (out, err[-2000:])


def test_a_worker_whose_priority_is_not_the_runs_is_named():
    """A process may lower the priority of another of its user (``renice``): the baseline's
    calls then wait for whatever else the machine runs. Read after each of a side's
    requests, held against the parent's own, which a worker inherits; a real-time policy
    (a privileged candidate raising its own) is named too."""
    nice = {1: (0, 0), 2: (0, 0)}
    w = WorkerWatch({"b": 1, "c": 2}, read=lambda pid: 0, events=lambda pid: None, clock=Wall(), priority=nice.get, expected=(0, 0))
    _timed(w, Clocks(), "b", 1_000_000, 0)
    assert w.findings("k", ROLES) == []
    nice[1] = (0, 19)
    _timed(w, Clocks(), "b", 1_000_000, 0)
    nice[1] = (0, 0)  # put back before the case ends: seen all the same
    _timed(w, Clocks(), "b", 1_000_000, 0)
    (f,) = w.findings("k", ROLES)
    assert f.check == INTERFERENCE and "the baseline's worker had its priority changed (nice 19 where the run's is nice 0)" \
        in f.message, f.message
    assert w.findings("k", ROLES) == []
    nice[2] = (os.SCHED_FIFO, 0)
    _timed(w, Clocks(), "c", 1_000_000, 0)
    (f,) = w.findings("k", ROLES)
    assert "the candidate's worker had its priority changed (nice 0, SCHED_FIFO where the run's is nice 0)" \
        in f.message, f.message


def test_a_worker_put_back_from_the_relays_batch_policy_is_named():
    """Where the workers relay on the parent's cores as batch threads (``cores.relay_quietly``),
    the run's expected policy is ``SCHED_BATCH``: a worker set back to ``SCHED_OTHER`` (which
    preempts the parent when woken, and has the parent interrupt its timed calls) is named."""
    policy = {1: (os.SCHED_BATCH, 0), 2: (os.SCHED_BATCH, 0)}
    w = WorkerWatch({"b": 1, "c": 2}, read=lambda pid: 0, events=lambda pid: None, clock=Wall(), priority=policy.get,
                    expected=(os.SCHED_BATCH, 0))
    _timed(w, Clocks(), "b", 1_000_000, 0)
    assert w.findings("k", ROLES) == []
    policy[1] = (os.SCHED_OTHER, 0)
    _timed(w, Clocks(), "b", 1_000_000, 0)
    (f,) = w.findings("k", ROLES)
    assert "the baseline's worker had its priority changed (nice 0 where the run's is nice 0, SCHED_BATCH)" \
        in f.message, f.message


def test_a_real_workers_priority_is_read_from_the_parent():
    """The real calls: a child's policy and nice as the parent reads them, and a nice of 5
    more than the parent's named."""
    pid = _spinning_child(0.5)
    try:
        assert interference.read_priority(pid) == interference.read_priority(0)
        os.setpriority(os.PRIO_PROCESS, pid, interference.read_priority(0)[1] + 5)
        w = WorkerWatch({"b": pid, "c": os.getpid()}, events=lambda p: None)
        w.before("b")
        w.after()
        assert [f.check for f in w.findings("k", ROLES)] == [INTERFERENCE]
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_the_runs_figures_add_up_over_its_replicates():
    run: dict = {}
    interference.add_summaries(run, {"baseline": {"timed_ms": 10.0, "other_cpu_ms": 0.5}})
    interference.add_summaries(run, {"baseline": {"timed_ms": 12.5, "other_cpu_ms": 0.25},
                                     "candidate": {"timed_ms": 3.0, "other_cpu_ms": 0.0}})
    assert run == {"baseline": {"timed_ms": 22.5, "other_cpu_ms": 0.75},
                   "candidate": {"timed_ms": 3.0, "other_cpu_ms": 0.0}}
