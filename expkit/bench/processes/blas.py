"""scipy's BLAS threads: one in the runner's process, the run's ``measure.cpu_threads`` in each worker.

The runner computes its intervals with ``scipy.stats``, and scipy's OpenBLAS starts a pool
of idle threads (one per core) as it loads. A process with those threads is not fit to fork
a worker (:func:`expkit.bench.processes.fork_safety.fork_is_safe`): on an H100 host (16 cores) the
runner went from 16 native threads to 33 mid-run and every later replicate's workers came
from the fork server (evidence/README.md), and
counting the pool as harmless hung a forked worker of the CPU suite on a lock. So the
runner loads scipy with ``OPENBLAS_NUM_THREADS=1`` (:func:`load_scipy_single_threaded`;
OpenBLAS reads it once, as it loads), and each worker, which inherits that library as
loaded, gives it the thread count the run allows (:func:`worker_scipy_threads`):
``measure.cpu_threads``, as torch's intra-op pool gets, or where that is null the count
OpenBLAS would have chosen itself (:func:`restore_scipy_threads`), so code under test that
calls scipy's BLAS runs on the cores the run allows. numpy's own OpenBLAS, loaded with
torch before any of this, is not touched.

Why not always the library's own count: OpenBLAS starts its pool's threads as the count
is raised, and they spin before they sleep. A worker's first timed blocks came within
that spin once its start got faster, and the ``resources`` check saw the harness's own
idle BLAS thread busy beside an honest candidate: 1.73-1.92 cores over 21-24 ms of
timed calls, in 3 of 11 runs of the suite test ``test_killed_suite_keeps_finished_runs_and_resume_runs_the_rest``
on the 2-core CPU machine (gdb: the busy thread was ``blas_thread_server``). Where the
pool is raised (``cpu_threads`` null, or above one), the worker marks it as the
harness's own work on every core, so the settle before the first timed block waits it out.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Optional

from ...checks import activity
from .native import mapped_library, open_loaded

_ENV = "OPENBLAS_NUM_THREADS"
#: What OpenBLAS reads, in its order, to choose its thread count as it loads.
_ENV_ORDER = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def load_scipy_single_threaded() -> None:
    """Import ``scipy.stats`` with scipy's OpenBLAS on the calling thread only; the
    environment is as it was afterwards. A no-op where scipy is already loaded."""
    before = os.environ.get(_ENV)
    os.environ[_ENV] = "1"
    try:
        # lazy: this import is what loads scipy's OpenBLAS, with its thread count set to one above
        import scipy.stats  # noqa: F401
    except Exception:  # scipy is a dependency; a broken install only costs the fork
        pass
    finally:
        if before is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = before


def default_threads(environ: Optional[dict] = None) -> int:
    """The thread count OpenBLAS picks as it loads: its variables first, else the cores this
    process may run on."""
    env = os.environ if environ is None else environ
    for key in _ENV_ORDER:
        try:
            n = int(env.get(key, ""))
        except ValueError:
            continue
        if n > 0:
            return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _scipy_openblas(maps: str = "/proc/self/maps") -> Optional[str]:
    """The path of scipy's OpenBLAS mapped here (``libscipy_openblas``, not numpy's
    ``libscipy_openblas64_``), or None."""
    return mapped_library(b"libscipy_openblas", unless=b"openblas64", maps=maps)


def scipy_threads(*, path: Optional[str] = None, load: Callable[[str], Any] = open_loaded) -> Optional[int]:
    """scipy's OpenBLAS thread count in this process, or None where it is not loaded."""
    path = path or _scipy_openblas()
    if path is None:
        return None
    try:
        return int(load(path).scipy_openblas_get_num_threads())
    except Exception:
        return None


def restore_scipy_threads(*, path: Optional[str] = None, load: Callable[[str], Any] = open_loaded,
                          threads: Optional[int] = None) -> Optional[int]:
    """Give scipy's OpenBLAS, where this process has it loaded, the thread count it would
    have chosen itself (:func:`default_threads`); the count set, or None where nothing was
    loaded or the library would not say. Never raises: a worker starts regardless."""
    path = path or _scipy_openblas()
    if path is None:
        return None
    n = threads or default_threads()
    try:
        lib = load(path)
        lib.scipy_openblas_set_num_threads(ctypes.c_int(n))
        return int(lib.scipy_openblas_get_num_threads())
    except Exception:
        return None


def worker_scipy_threads(cpu_threads: Optional[int], *, path: Optional[str] = None,
                         load: Callable[[str], Any] = open_loaded) -> Optional[int]:
    """In a worker: scipy's OpenBLAS on ``cpu_threads`` (``measure.cpu_threads``), or the
    library's own count where that is None; the count set, or None (see the module
    docstring). A pool raised above one thread is marked as the harness's wide work."""
    n = restore_scipy_threads(path=path, load=load, threads=cpu_threads)
    if n is not None and n > 1:
        activity.wide_work_ended()
    return n
