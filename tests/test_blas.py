"""scipy's BLAS threads: one in the runner's process (so it stays fit to fork), in each
worker the run's ``measure.cpu_threads`` (as torch gets), or where that is null the
library's own default again (so code under test runs as outside expkit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from expkit.bench.processes import blas


def test_the_default_is_openblas_own_choice(monkeypatch):
    monkeypatch.setattr(blas.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert blas.default_threads({}) == 3
    assert blas.default_threads({"OMP_NUM_THREADS": "4"}) == 4
    assert blas.default_threads({"OMP_NUM_THREADS": "4", "GOTO_NUM_THREADS": "5"}) == 5
    assert blas.default_threads({"OPENBLAS_NUM_THREADS": "6", "OMP_NUM_THREADS": "4"}) == 6
    assert blas.default_threads({"OPENBLAS_NUM_THREADS": "x", "OMP_NUM_THREADS": "0"}) == 3


def test_scipys_library_is_told_from_numpys(tmp_path: Path):
    maps = tmp_path / "maps"
    maps.write_bytes(b"7f00-7f10 r-xp 0 00:00 1   /v/numpy.libs/libscipy_openblas64_-32a4b2a6.so\n"
                     b"7f20-7f30 r-xp 0 00:00 1   /v/scipy.libs/libscipy_openblas-6cdc3b4a.so\n")
    assert blas._scipy_openblas(str(maps)) == "/v/scipy.libs/libscipy_openblas-6cdc3b4a.so"
    maps.write_bytes(b"7f00-7f10 r-xp 0 00:00 1   /v/numpy.libs/libscipy_openblas64_-32a4b2a6.so\n")
    assert blas._scipy_openblas(str(maps)) is None


class _Lib:
    def __init__(self) -> None:
        self.n = 1

    def scipy_openblas_set_num_threads(self, n) -> None:
        self.n = n.value

    def scipy_openblas_get_num_threads(self) -> int:
        return self.n


def test_a_worker_gives_the_library_its_default_back():
    lib = _Lib()
    assert blas.restore_scipy_threads(path="/x.so", load=lambda p: lib, threads=7) == 7
    assert blas.scipy_threads(path="/x.so", load=lambda p: lib) == 7


def test_a_library_that_will_not_answer_never_stops_a_worker():
    def refuse(path):
        raise OSError("not loaded")

    assert blas.restore_scipy_threads(path="/x.so", load=refuse, threads=2) is None
    assert blas.scipy_threads(path="/x.so", load=refuse) is None


def _fork_lines(parent: str, child: str) -> list:
    """stdout lines of a fresh interpreter that imports the bench, runs ``parent``, then
    forks and runs ``child`` (one line of code each) in the child, as a worker starts."""
    code = (f"import os; from expkit.bench.processes import fork_safety, blas; {parent}\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            f"    {child}; os._exit(0)\n"
            "os.waitpid(pid, 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()


def test_the_runner_loads_scipy_on_one_thread_and_a_forked_worker_gets_the_default_back():
    """The real libraries: in a process that imported the bench, scipy's OpenBLAS has one
    thread and no pool; in a child forked from it (as a worker is), the default again."""
    lines = _fork_lines("print('parent', blas.scipy_threads(), fork_safety.fork_unsafe_reason())",
                        "n = blas.restore_scipy_threads(); print('child', n == blas.default_threads(), "
                        "blas.scipy_threads() == n, flush=True)")
    assert lines[0] == "parent 1 None" and lines[1] == "child True True", lines


def test_a_worker_gives_the_library_the_runs_threads_and_marks_a_raised_pool(monkeypatch):
    """``measure.cpu_threads`` wins over the library's default (no pool to spin beside the
    first timed blocks); a pool raised above one thread is the harness's wide work, which
    the settle before a timed block waits out."""
    from expkit.checks import activity

    marked = []
    monkeypatch.setattr(activity, "wide_work_ended", lambda: marked.append(1))
    monkeypatch.setattr(blas, "default_threads", lambda environ=None: 4)
    lib = _Lib()
    assert blas.worker_scipy_threads(1, path="/x.so", load=lambda p: lib) == 1 and lib.n == 1 and not marked
    assert blas.worker_scipy_threads(None, path="/x.so", load=lambda p: lib) == 4 and lib.n == 4 and marked == [1]
    assert blas.worker_scipy_threads(2, path="/x.so", load=lambda p: lib) == 2 and marked == [1, 1]


def test_a_forked_worker_on_one_thread_starts_no_blas_pool():
    """The real library: with ``measure.cpu_threads=1`` a forked worker keeps scipy's
    OpenBLAS on the calling thread, so no idle BLAS thread is there to spin."""
    lines = _fork_lines("", "n = blas.worker_scipy_threads(1); print('child', n, blas.scipy_threads(), "
                        "len(os.listdir('/proc/self/task')), flush=True)")
    assert lines[-1] == "child 1 1 1", lines
