"""Child processes of a side's process (``expkit/checks/children.py``): multiprocessing's own
helpers are not the candidate's work; a child still running is.

/proc is a seam: fakes here, the real one in the live tests.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import List, Optional

import pytest

from expkit.checks import children


# --- multiprocessing's helpers ----------------------------------------------------------------


def fake_proc(cmd: List[str], state: str = "S", cpu_ticks: int = 5, me: Optional[List[str]] = None):
    """/proc with child 123 running ``cmd``; this process runs ``me`` (pytest by default)."""
    stat = f"123 (python) {state} 1 1 1 0 -1 0 0 0 0 0 {cpu_ticks} 0 0 0 20 0 1 0 100 0 0".encode()

    def read(path: str) -> Optional[bytes]:
        if path.endswith("/cmdline"):
            argv = (me or [sys.executable, "-m", "pytest"]) if path == "/proc/self/cmdline" else cmd
            return b"\0".join(c.encode() for c in argv) + b"\0"
        if path.endswith("/stat"):
            return stat
        return None
    return read


TRACKER = [sys.executable, "-B", "-c", "from multiprocessing.resource_tracker import main;main(11)"]


def test_helper_processes_are_recognised_by_their_command_line_and_idleness():
    assert children.helper_process(123, fake_proc(TRACKER))
    assert children.helper_process(123, fake_proc(
        [sys.executable, "-c", "from multiprocessing.forkserver import main; main(9, 10, ['__main__'], **{})"]))
    # the same command line with more code after it: not the helper
    assert not children.helper_process(123, fake_proc(TRACKER[:-1] + [TRACKER[-1] + "; import work; work.run()"]))
    # running, or having used more CPU than an interpreter's start-up: not idle
    assert not children.helper_process(123, fake_proc(TRACKER, state="R"))
    assert not children.helper_process(123, fake_proc(TRACKER, cpu_ticks=1000))
    assert not children.helper_process(123, fake_proc([sys.executable, "worker.py"]))


def test_a_fork_of_a_worker_from_the_fork_server_is_not_taken_for_the_server():
    """A worker that came from the fork server has the server's command line, and so has
    a process it forks: on the H100 host the import_pool_cores cheat's helper, forked at
    import and idle until the first call, passed as the fork server."""
    server = [sys.executable, "-c", "from multiprocessing.forkserver import main; main(9, 10, ['torch'], **{})"]
    assert children.helper_process(123, fake_proc(server))
    assert not children.helper_process(123, fake_proc(server, me=server))


def test_the_resource_tracker_is_not_a_new_child():
    """Regression (audits, torch.compile): the resource tracker that compiled code starts lazily
    in a worker was counted as "1 new child process still running"."""
    from multiprocessing import resource_tracker

    before = children.child_pids()
    resource_tracker.ensure_running()
    pid = resource_tracker._resource_tracker._pid
    if pid is None:
        pytest.skip("this Python's resource tracker runs in no process of its own")
    time.sleep(0.2)  # let it settle into its read
    assert pid not in children.child_pids()
    assert children.child_pids() - before == frozenset()


def test_a_busy_child_is_still_counted():
    p = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 5: pass"])
    try:
        time.sleep(0.3)
        assert p.pid in children.child_pids()
    finally:
        p.kill()
        p.wait()
