"""A thread started at import stops the baseline's worker, now and then, while it is timed.

Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the run's
threads). The thread finds the candidate's sibling processes (the parent's other
children: the baseline's worker among them) and, while the candidate is not being called,
stops them for half of every millisecond (``SIGSTOP``, then ``SIGCONT``): a process may
signal another of the same user. It spends almost no CPU time, and no count or account
around the candidate's calls sees it; the baseline's calls take twice their time.
"""
import os
import signal
import threading
import time

import torch
from adv_siblings import siblings
from torch import Tensor

_last = [0.0, 0]  # when the candidate's last call returned; calls in progress




def _signal(pids: list, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _stopper() -> None:
    while True:
        if _last[1] or time.perf_counter() - _last[0] < 1e-3:  # the candidate is being timed
            time.sleep(1e-4)
            continue
        pids = siblings()
        _signal(pids, signal.SIGSTOP)
        time.sleep(5e-4)
        _signal(pids, signal.SIGCONT)
        time.sleep(5e-4)


threading.Thread(target=_stopper, daemon=True).start()


def sibling_stop(a: Tensor, b: Tensor) -> Tensor:
    _last[1] += 1
    out = torch.addmm(a.new_zeros(()), a, b, beta=0)
    _last[0] = time.perf_counter()
    _last[1] -= 1
    return out
