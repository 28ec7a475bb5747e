"""Threads started at import that compute only while the candidate is not being called.

Shared by ``adv_idle_spin.py`` (one thread a core) and ``adv_idle_spin_pool.py`` (one
thread). Each thread rests while a call is in progress and for a millisecond after the
last one returned, so that no count or account around the candidate's calls or blocks
sees it; otherwise, which is while the baseline is timed, it computes on the cores the
candidate's worker has, which are the baseline's too.
"""
import os
import threading
import time

import torch


class IdleSpin:
    """``threads`` threads computing whenever no call of the candidate's is in progress."""

    def __init__(self, threads: int) -> None:
        self._cores: list = []
        self._last = [0.0, 0]  # when the candidate's last call returned; calls in progress
        for _ in range(threads):
            threading.Thread(target=self._spin, daemon=True).start()

    def _spin(self) -> None:
        torch.set_num_threads(1)  # this thread's OpenMP setting: no pool of its own that spins on
        a = torch.rand(64, 64)
        while True:
            if self._last[1] or time.perf_counter() - self._last[0] < 1e-3:  # the candidate is being timed
                time.sleep(1e-4)
                continue
            if self._cores:
                os.sched_setaffinity(0, self._cores.pop())  # this thread only: onto the side's cores
            torch.mm(a, a)  # releases the GIL: the candidate's worker stays responsive

    def __enter__(self) -> "IdleSpin":
        self._last[1] += 1
        self._cores[:] = [os.sched_getaffinity(0)]
        return self

    def __exit__(self, *exc: object) -> None:
        self._last[0] = time.perf_counter()
        self._last[1] -= 1
