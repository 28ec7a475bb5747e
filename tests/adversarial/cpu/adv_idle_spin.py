"""Threads started at import compute whenever the candidate is not being called.

Its own calls are honest (one ``torch.addmm``, not the baseline's op, on the run's
threads). One thread a core (``adv_idle.IdleSpin``) rests while a call is in progress
and for a millisecond after; otherwise, which is while the baseline is timed, it
computes on every core the candidate's worker has, which are the baseline's too. On this
project's 2-core machine the baseline lost no time to it (1.0x either way,
``evidence/defences/interference-watch/README.md``); a memory-bound baseline, or one on
every core, would.
"""
import os

import torch
from adv_idle import IdleSpin
from torch import Tensor

_spin = IdleSpin(os.cpu_count() or 1)  # one a core: the baseline's calls share every one


def idle_spin(a: Tensor, b: Tensor) -> Tensor:
    with _spin:
        return torch.addmm(a.new_zeros(()), a, b, beta=0)
