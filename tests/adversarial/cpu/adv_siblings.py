"""What the cheats that act on the other worker share: finding it, stopping it (no manifest
runs this)."""
import ctypes
import os
import signal
import threading
import time


def _command(pid) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def siblings() -> list:
    """The other workers of this run: the children of this process's parent with this
    process's command line (a worker is a fork of the parent or of the fork server; the
    parent's other children, the fork server among them, are left alone, so that the
    cheat's effects end with its run and cannot reach a later test's)."""
    ppid, me = os.getppid(), _command("self")
    try:
        with open(f"/proc/{ppid}/task/{ppid}/children") as f:
            pids = [int(p) for p in f.read().split() if int(p) != os.getpid()]
    except OSError:
        return []
    return [p for p in pids if _command(p) == me]


_PTRACE_DETACH, _PTRACE_SEIZE, _PTRACE_INTERRUPT = 17, 0x4206, 0x4207


def _tell(what: str) -> None:
    """One line on the worker's stderr, descriptor 2 (kept beside result.json; ``sys.stderr``
    may be a test runner's capture): what the cheat managed."""
    os.write(2, f"adv_siblings: {what}\n".encode())


class _Signals:
    """Stop by ``SIGSTOP``, resume by ``SIGCONT``."""

    def stop(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)

    def resume(self, pid: int) -> None:
        os.kill(pid, signal.SIGCONT)


class _Trace:
    """Stop by tracing (``PTRACE_SEIZE``, ``PTRACE_INTERRUPT``), resume by detaching: a stop
    under a tracer is reported to the tracer, not the parent, and no ``SIGCONT`` ends it."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.ptrace.restype = ctypes.c_long
        self.libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]

    def _call(self, request: int, pid: int) -> None:
        if self.libc.ptrace(request, pid, None, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def stop(self, pid: int) -> None:
        self._call(_PTRACE_SEIZE, pid)
        self._call(_PTRACE_INTERRUPT, pid)
        os.waitpid(pid, 0x40000000)  # __WALL: the stop, reported to this tracer

    def resume(self, pid: int) -> None:
        self._call(_PTRACE_DETACH, pid)


class Stopper:
    """Stops this run's other workers for half of every millisecond (``SIGSTOP``, then
    ``SIGCONT``; or with ``trace=True`` by tracing them), from a thread started now, while no
    call of the candidate is in progress or returned in the last millisecond. The candidate's
    function wraps its work in ``with stopper:``. Its first stop and its first refusal are
    told on stderr."""

    def __init__(self, trace: bool = False) -> None:
        self.last, self.calls = 0.0, 0
        self.how = _Trace() if trace else _Signals()
        self.told: set = set()
        threading.Thread(target=self._run, daemon=True).start()

    def _once(self, what: str) -> None:
        key = what.split(":", 1)[0]
        if key not in self.told:
            self.told.add(key)
            _tell(what)

    def __enter__(self) -> None:
        self.calls += 1

    def __exit__(self, *exc) -> None:
        self.last = time.perf_counter()
        self.calls -= 1

    def _run(self) -> None:
        while True:
            if self.calls or time.perf_counter() - self.last < 1e-3:  # the candidate is being timed
                time.sleep(1e-4)
                continue
            stopped = []
            for pid in siblings():
                try:
                    self.how.stop(pid)
                    stopped.append(pid)
                    self._once(f"stopped: pid {pid}")
                except OSError as e:
                    self._once(f"refused: pid {pid}: {e.strerror}")
            time.sleep(5e-4)
            for pid in stopped:
                try:
                    self.how.resume(pid)
                except OSError:
                    pass
            time.sleep(5e-4)
