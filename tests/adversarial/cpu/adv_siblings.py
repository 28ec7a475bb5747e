"""What the cheats that act on the other worker share: finding it (no manifest runs this)."""
import os


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
