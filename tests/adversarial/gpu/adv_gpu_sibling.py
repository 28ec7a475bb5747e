"""GPU cheats that act on the baseline's worker from outside it (checks/interference.py).

``sibling_stop``: an honest fp32 product, computed in fp64 (not the baseline's kernel); a
thread started at import stops the baseline's worker for half of every millisecond while
the candidate is not being called, as ``../cpu/adv_sibling_stop.py`` does on the CPU. On a
GPU the baseline's kernels run on whatever the host does, but its launches and its
timer's host side wait; the stop is the finding either way.
"""
import sys
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))  # the CPU cheats' adv_siblings
from adv_siblings import Stopper  # noqa: E402

_stop = Stopper()  # its thread starts as the module is imported


def sibling_stop(a: Tensor, b: Tensor) -> Tensor:
    with _stop:
        return torch.mm(a.double(), b.double()).float()
