"""A thread started at import lowers the priority of the baseline's worker.

Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the run's
threads). The thread finds the candidate's sibling processes (the parent's other
children: the baseline's worker among them) and sets each one's nice to 19: a process may
lower the priority of another of its user. On a machine where anything else runs (another
job on a shared host) the baseline's calls then wait for it, and the candidate's do not.
It spends no CPU time while the baseline is timed.
"""
import os
import threading
import time

import torch
from adv_siblings import siblings
from torch import Tensor




def _renice() -> None:
    while True:
        for pid in siblings():
            try:
                os.setpriority(os.PRIO_PROCESS, pid, 19)
            except OSError:
                pass
        time.sleep(0.05)


threading.Thread(target=_renice, daemon=True).start()


def sibling_nice(a: Tensor, b: Tensor) -> Tensor:
    return torch.addmm(a.new_zeros(()), a, b, beta=0)
