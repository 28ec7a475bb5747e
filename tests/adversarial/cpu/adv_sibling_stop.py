"""A thread started at import stops the baseline's worker, now and then, while it is timed.

Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the run's
threads). The thread finds the candidate's sibling processes (the parent's other
children: the baseline's worker among them) and, while the candidate is not being called,
stops them for half of every millisecond (``SIGSTOP``, then ``SIGCONT``): a process may
signal another of the same user. It spends almost no CPU time, and no count or account
around the candidate's calls sees it; the baseline's calls take twice their time.
"""
import torch
from adv_siblings import Stopper
from torch import Tensor

_stop = Stopper()  # its thread starts as the module is imported


def sibling_stop(a: Tensor, b: Tensor) -> Tensor:
    with _stop:
        return torch.addmm(a.new_zeros(()), a, b, beta=0)
