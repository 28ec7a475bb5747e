"""A probe of a limit, not a test: can the candidate's worker slow the baseline's GPU kernels
by keeping the GPU busy from its own process while the baseline is timed?

``spin``: an honest product (``probe_gpu_common.product``). A thread started at import keeps
GPU spin kernels (``torch.cuda._sleep``, ``PROBE_SPIN_CYCLES`` each, two queued at most) on a
stream of its own whenever the candidate is not being called. The GPU time-slices between the
two workers' contexts, so the baseline's kernels, timed by their own start and end in
CUPTI's record, may stretch. The candidate's worker spends almost no CPU time on it, so the
parent's watch (``checks/interference.py``, which on a GPU reads stops and priority only)
sees nothing. ``probe_spin_off.py`` is the same candidate without the thread: the probe's
answer is the two speedups side by side.
"""
import os
import threading
import time

import torch
from probe_gpu_common import product
from torch import Tensor

_state = {"calls": 0, "last": 0.0}


def _run() -> None:
    stream = torch.cuda.Stream()
    cycles = int(os.environ.get("PROBE_SPIN_CYCLES", "1000000"))  # about 0.5 ms at 2 GHz
    pending = []
    while True:
        if _state["calls"] or time.perf_counter() - _state["last"] < 1e-3:
            time.sleep(1e-4)
            continue
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cycles)
            ev = torch.cuda.Event()
            ev.record(stream)
        pending.append(ev)
        while len(pending) > 2:
            pending.pop(0).synchronize()


threading.Thread(target=_run, daemon=True).start()


def spin(a: Tensor, b: Tensor) -> Tensor:
    _state["calls"] += 1
    try:
        return product(a, b)
    finally:
        _state["last"] = time.perf_counter()
        _state["calls"] -= 1
