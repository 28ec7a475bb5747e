"""One thread started at import computes whenever the candidate is not being called.

``adv_idle_spin.py`` with one thread instead of one a core: at ``measure.cpu_threads=2``
an idle worker's own OpenMP pool may spin up to ``cpu_threads - 1`` cores while the other
side is timed (``checks/interference.py``, without the freeze), and one thread computing
stays inside that allowance. Its own calls are honest (one ``torch.addmm``, not the
baseline's op, on the run's threads). The thread (``adv_idle.IdleSpin``) rests while a
call is in progress and for a millisecond after, so no account around the candidate's
own blocks sees it; the rest of the time, which is while the baseline is timed, it
computes on the side's cores, where the baseline's two threads then share a core with it.
"""
import torch
from adv_idle import IdleSpin
from torch import Tensor

_spin = IdleSpin(1)


def idle_spin_pool(a: Tensor, b: Tensor) -> Tensor:
    with _spin:
        return torch.addmm(a.new_zeros(()), a, b, beta=0)
