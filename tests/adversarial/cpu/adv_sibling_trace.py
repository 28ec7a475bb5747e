"""A thread started at import stops the baseline's worker, now and then, by tracing it.

Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the run's
threads). The thread finds the candidate's sibling processes (the baseline's worker among
them) and, while the candidate is not being called, stops them for half of every
millisecond: ``PTRACE_SEIZE`` and ``PTRACE_INTERRUPT``, then ``PTRACE_DETACH``. A process
of the same user may trace another where no security module forbids it, and root always
may. Unlike a ``SIGSTOP`` (``sibling_stop``) this stop is reported to the tracer, not the
worker's parent, and no ``SIGCONT`` ends it: what the parent's watch reads does not change.
"""
import torch
from adv_siblings import Stopper
from torch import Tensor

_stop = Stopper(trace=True)  # its thread starts as the module is imported


def sibling_trace(a: Tensor, b: Tensor) -> Tensor:
    with _stop:
        return torch.addmm(a.new_zeros(()), a, b, beta=0)
