"""What the cheats that act on the other worker share: finding it, stopping it (no manifest
runs this)."""
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


class Stopper:
    """Stops this run's other workers for half of every millisecond (``SIGSTOP``, then
    ``SIGCONT``), from a thread started now, while no call of the candidate is in progress
    or returned in the last millisecond. The candidate's function wraps its work in
    ``with stopper:``."""

    def __init__(self) -> None:
        self.last, self.calls = 0.0, 0
        threading.Thread(target=self._run, daemon=True).start()

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
            pids = siblings()
            for sig in (signal.SIGSTOP, signal.SIGCONT):
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
                time.sleep(5e-4)
