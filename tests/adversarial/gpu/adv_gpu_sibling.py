"""GPU cheats that act on the baseline's worker from outside it (checks/interference.py).

``sibling_stop``: an honest fp32 product, computed in fp64 (not the baseline's kernel); a
thread started at import stops the baseline's worker for half of every millisecond while
the candidate is not being called, as ``../cpu/adv_sibling_stop.py`` does on the CPU. On a
GPU the baseline's kernels run on whatever the host does, but its launches and its
timer's host side wait; the stop is the finding either way.
"""
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))  # the CPU cheats' adv_siblings
from adv_siblings import siblings  # noqa: E402

_last = [0.0, 0]  # when the candidate's last call returned; calls in progress


def _stopper() -> None:
    while True:
        if _last[1] or time.perf_counter() - _last[0] < 1e-3:  # the candidate is being timed
            time.sleep(1e-4)
            continue
        pids = siblings()
        for sig in (signal.SIGSTOP, signal.SIGCONT):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            time.sleep(5e-4)


threading.Thread(target=_stopper, daemon=True).start()


def sibling_stop(a: Tensor, b: Tensor) -> Tensor:
    _last[1] += 1
    out = torch.mm(a.double(), b.double()).float()
    _last[0] = time.perf_counter()
    _last[1] -= 1
    return out
