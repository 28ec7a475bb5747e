"""What the cheats that act on the other worker share: finding it (no manifest runs this)."""
import os


def siblings() -> list:
    """The other children of this process's parent: the other side's worker among them."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/task/{ppid}/children") as f:
            return [int(p) for p in f.read().split() if int(p) != os.getpid()]
    except OSError:
        return []
