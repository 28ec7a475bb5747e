"""Threads started at import compute on the baseline's cores whenever the baseline runs.

Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the run's
threads). Each thread (one a core) finds the candidate's sibling processes (the parent's other
children: the baseline's worker among them) and looks every millisecond whether one of
them is running; only then does it compute, for some milliseconds, on the cores the candidate's worker has,
which are the baseline's worker's too. While the candidate is timed its sibling waits, so
the threads rest too, and no count or account around the candidate's calls sees it: the
baseline is timed on a core it does not have to itself.
"""
import os
import threading
import time

import torch
from torch import Tensor

_cores: list = []
_last = [0.0, 0]  # when the candidate's last call returned; calls in progress


def _siblings() -> list:
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/task/{ppid}/children") as f:
            return [int(p) for p in f.read().split() if int(p) != os.getpid()]
    except OSError:
        return []


def _running(pids: list) -> bool:
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] == "R":
                    return True
        except OSError:
            pass
    return False


def _spin() -> None:
    torch.set_num_threads(1)  # this thread's OpenMP setting: no pool of its own that spins on
    a = torch.rand(64, 64)
    while True:
        if _last[1] or time.perf_counter() - _last[0] < 1e-3:  # the candidate is being timed
            time.sleep(1e-4)
            continue
        if _cores:
            os.sched_setaffinity(0, _cores.pop())  # this thread only: onto the side's cores
        torch.mm(a, a)  # releases the GIL: the candidate's worker stays responsive


for _ in range(os.cpu_count() or 1):  # one a core: the baseline's calls share every one
    threading.Thread(target=_spin, daemon=True).start()


def idle_spin(a: Tensor, b: Tensor) -> Tensor:
    _last[1] += 1
    _cores[:] = [os.sched_getaffinity(0)]
    out = torch.addmm(a.new_zeros(()), a, b, beta=0)
    _last[0] = time.perf_counter()
    _last[1] -= 1
    return out
