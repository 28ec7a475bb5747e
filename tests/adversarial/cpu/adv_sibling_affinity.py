"""A thread started at import moves every thread of the baseline's worker onto one core.

Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the run's
threads). With ``measure.cpu_threads=2`` each side computes on two threads; the thread
finds the candidate's sibling processes (the baseline's worker among them) and sets the
affinity of each of their threads it has not seen yet to the lowest core they may use: a
process may change the affinity of another of the same user. The baseline's two threads
then share one core. A thread keeps its affinity, so it looks every 20 ms only, and spends
almost no CPU time; it stops nothing.
"""
import os
import threading
import time

import torch
from adv_siblings import siblings
from torch import Tensor


def _squeeze() -> None:
    seen = set()
    while True:
        for pid in siblings():
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                if tid in seen:
                    continue
                try:
                    os.sched_setaffinity(tid, {min(os.sched_getaffinity(tid))})
                    seen.add(tid)
                except OSError:
                    pass
        time.sleep(0.02)


threading.Thread(target=_squeeze, daemon=True).start()


def sibling_affinity(a: Tensor, b: Tensor) -> Tensor:
    return torch.addmm(a.new_zeros(()), a, b, beta=0)
