"""Whether the parent may fork a worker, or must start it another way.

A fork is milliseconds where the fork server costs seconds (:mod:`..sides.endpoint`), but a fork
copies only the calling thread: a lock another thread held stays held in the child, an
OpenMP pool that a torch op started is broken there, and CUDA cannot be used in a child of
a process that initialised the driver. :func:`fork_unsafe_reason` says which of those
holds for this process now; it compares the native threads (by id) with those there once
torch was imported, which this module records when it is imported.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import threading
from contextlib import contextmanager
from typing import Any, Callable, Dict, FrozenSet, Iterator, Mapping, Optional, Set

import torch  # before _TIDS_AT_IMPORT: its own helper thread is not ours

from .blas import load_scipy_single_threaded
from .native import mapped_library, open_loaded

_log = logging.getLogger(__name__)


def cuda_initialised() -> bool:
    """Whether this process has initialised the CUDA driver, so that a forked child cannot
    use CUDA. ``torch.cuda.is_initialized()`` alone is not enough: ``torch.cuda.is_available()``
    and ``device_count()`` initialise the driver (and mark the process unfit to fork)
    without initialising torch's CUDA state, as a test module's ``skipif`` does at
    collection. A driver library merely mapped is not enough the other way: on a GPU
    machine ``import torch`` maps it without initialising it, and a process that never
    called ``cuInit`` forks as safely as one without the library. So where the library is
    mapped, the driver itself is asked (:func:`_driver_initialised`)."""
    try:
        if torch.cuda.is_initialized():
            return True
    except Exception:
        return True
    path = _driver_loaded()
    return path is not None and _driver_initialised(path)


def _driver_loaded(maps: str = "/proc/self/maps") -> Optional[str]:
    """The path of the CUDA driver library mapped into this process, or None."""
    return mapped_library(b"libcuda.so", maps=maps)


#: ``CUDA_ERROR_NOT_INITIALIZED``: what the driver API answers before ``cuInit``.
_NOT_INITIALIZED = 3


def _driver_initialised(path: str, *, load: Optional[Callable[[str], Any]] = None) -> bool:
    """Whether the mapped driver library at ``path`` has been initialised: every driver call
    but ``cuInit`` and a few version queries answers ``CUDA_ERROR_NOT_INITIALIZED`` before
    it, and ``cuDeviceGetCount`` starts nothing. The library is opened only if already
    loaded (``RTLD_NOLOAD``). Anything but that one answer counts as initialised: a wrong
    "not initialised" would fork a child that cannot use CUDA, a wrong "initialised" costs
    only the fork server's start. ``load`` is the seam for tests."""
    try:
        lib = (load or open_loaded)(path)
        count = ctypes.c_int(0)
        return int(lib.cuDeviceGetCount(ctypes.byref(count))) != _NOT_INITIALIZED
    except Exception:
        return True


def native_thread_ids() -> FrozenSet[int]:
    """This process's native thread ids (``/proc/self/task``); empty where there is none."""
    try:
        return frozenset(int(t) for t in os.listdir("/proc/self/task"))
    except (OSError, ValueError):
        return frozenset()


def native_thread_names() -> Dict[str, int]:
    """This process's native threads by name (``/proc/self/task/*/comm``: a library's pool
    names its threads, ``cuda-EvtHandlr`` or ``OpenBLAS``, where the count alone says not
    whose they are); empty where there is no ``/proc``."""
    names: Dict[str, int] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return names
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                name = f.read().strip() or "?"
        except OSError:  # the thread ended while we looked
            continue
        names[name] = names.get(name, 0) + 1
    return names


def _new_names(now: Mapping[str, int], before: Mapping[str, int]) -> str:
    new = {k: n - before.get(k, 0) for k, n in now.items() if n > before.get(k, 0)}
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(new.items())) or "none by name"


#: scipy (the parent's intervals) loaded now with its BLAS on one thread: see :mod:`.blas`.
load_scipy_single_threaded()
try:
    # pandas (the result's tables) loaded now too, so that a thread it starts as it loads
    # counts with torch's: where pyarrow is installed, pandas imports it, and pyarrow starts
    # jemalloc's background thread (``jemalloc_bg_thd`` on the H100). Loaded after this
    # count, it left a parent that had imported this module first unfit to fork, and every
    # worker came from the fork server; the CLI, which loads pandas first, forked every
    # worker with it there (``tests/gpu/test_gpu_start.py``, and the KernelBench runs).
    import pandas  # noqa: F401
except Exception:  # pandas is a dependency; a broken install only costs the fork
    pass

#: The process's native threads once torch is imported (this module imports it): importing
#: torch starts one helper thread of its own, which a fork survives. By id, not by count: in a test session the helper thread there at import had ended and
#: another stood in its place, the count was the same, and the worker forked then hung in
#: its first parallel op, in OpenMP's barrier (``tests/test_start_method.py``).
_TIDS_AT_IMPORT = native_thread_ids()
_NAMES_AT_IMPORT = native_thread_names()
#: Native threads started inside :func:`threads_the_child_never_needs`: a fork leaves them
#: behind, and no worker forked after them uses the library that started them.
_TOLERATED: Set[int] = set()
#: In a forked child: why its parent was not fit to fork when it forked (None: it was).
_INHERITED: Optional[str] = None
_PARENT_REASON: Optional[str] = None


def _before_fork() -> None:
    global _PARENT_REASON
    try:
        _PARENT_REASON = fork_unsafe_reason()
    except Exception as e:  # a fork must never fail on this account
        _PARENT_REASON = f"it could not be told ({type(e).__name__}: {e})"


def _after_fork_in_child() -> None:
    """A forked child has one thread, its own; it is as fit to fork as its parent was (a
    child of a fork server that imported this module is, so its own workers fork too)."""
    global _TIDS_AT_IMPORT, _NAMES_AT_IMPORT, _INHERITED
    _TIDS_AT_IMPORT, _NAMES_AT_IMPORT = native_thread_ids(), native_thread_names()
    _TOLERATED.clear()
    _INHERITED = None if _PARENT_REASON is None else f"its parent was not fit to fork when it forked ({_PARENT_REASON})"


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def fork_is_safe() -> bool:
    """Whether this process can fork a worker safely: no thread beyond those there once
    torch was imported, Python's or native (a fork copies only the calling thread, so a
    lock another thread held stays held in the child, and an OpenMP pool that a torch op
    started is broken there: a worker forked from a process that had run a parallel op
    hung in its first one), CUDA's driver never initialised (CUDA in a forked child of a
    process that initialised it fails), and fork available. Threads that the parent's
    own NVML calls start may stay (:func:`threads_the_child_never_needs`). The runner
    runs no torch op, starts no other thread before its workers and never initialises
    CUDA, so the parent of a CLI run qualifies; a notebook or a test session that
    computed with torch does not."""
    return fork_unsafe_reason() is None


def fork_unsafe_reason() -> Optional[str]:
    """Why this process cannot fork a worker safely (:func:`fork_is_safe`), or None."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return "fork is not available here"
    if _INHERITED is not None:
        return _INHERITED
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads: " + ", ".join(t.name for t in threading.enumerate())
    now = native_thread_ids()
    started = now - _TIDS_AT_IMPORT - _TOLERATED
    if not now or started:
        return (f"{len(now)} native threads, {len(started)} of them started since torch was imported, when there "
                f"were {len(_TIDS_AT_IMPORT)} (new: {_new_names(native_thread_names(), _NAMES_AT_IMPORT)})")
    if cuda_initialised():
        return "CUDA's driver is initialised in this process"
    return None


@contextmanager
def threads_the_child_never_needs(library: str) -> Iterator[None]:
    """Run the block, and let the native threads it starts stay in a process that forks.

    For the parent's own calls into a library that no worker forked after them uses:
    NVML's ``nvmlInit`` starts a thread (``cuda0000340000f`` on the H100), and the parent
    opens NVML for the GPU's clocks and its processes once the first pair of workers has
    started. A fork copies only the calling thread, so what the child loses is that
    library's thread and whatever lock it held, which matters only to a child that calls
    the library. The only workers that call NVML are the first pair's (the end-to-end
    workload samples the GPU's utilisation there), forked before. Without this, every
    replicate after the first came from the fork server. The block must start no thread of a library the workers
    use (torch's pools, CUDA's driver): those are what :func:`fork_unsafe_reason` is for.
    ``library`` names it in the debug log."""
    before = native_thread_ids()
    try:
        yield
    finally:
        new = native_thread_ids() - before
        if new:
            _TOLERATED.update(new)
            _log.debug("fork safety: %d native thread(s) started by %s tolerated", len(new), library)
