"""One thread started at import computes whenever the candidate is not being called.

``adv_idle_spin.py`` with one thread instead of one a core: at ``measure.cpu_threads=2``
an idle worker's own OpenMP pool may spin up to ``cpu_threads - 1`` cores while the other
side is timed (``checks/interference.py``), and one thread computing stays inside that
allowance. Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the
run's threads). The thread rests while a call is in progress and for a millisecond after
the last one returned, so no account around the candidate's own blocks sees it; the
rest of the time, which is while the baseline is timed, it computes on the side's cores,
where the baseline's two threads then share a core with it.
"""
import os
import threading
import time

import torch
from torch import Tensor

_cores: list = []
_last = [0.0, 0]  # when the candidate's last call returned; calls in progress


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


threading.Thread(target=_spin, daemon=True).start()


def idle_spin_pool(a: Tensor, b: Tensor) -> Tensor:
    _last[1] += 1
    _cores[:] = [os.sched_getaffinity(0)]
    out = torch.addmm(a.new_zeros(()), a, b, beta=0)
    _last[0] = time.perf_counter()
    _last[1] -= 1
    return out
