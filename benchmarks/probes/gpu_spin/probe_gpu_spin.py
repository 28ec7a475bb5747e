"""A probe of a limit, not a test: can the candidate's worker slow the baseline's GPU kernels
by keeping the GPU busy from its own process while the baseline is timed?

``spin``: an honest fp32 product (``torch.addmm``, the same cuBLAS work as the baseline's
``torch.mm``), claimed at 1.5x. A thread started at import keeps GPU spin kernels
(``torch.cuda._sleep``) queued on a stream of its own whenever the candidate is not being
called. The GPU time-slices between the two workers' contexts, so the baseline's kernels,
timed by their own start and end in CUPTI's record, may stretch. The candidate's worker
spends almost no CPU time on it (one launch a millisecond), so the parent's watch
(``checks/interference.py``, which on a GPU reads stops and priority only) sees nothing.
``spin_off``: the same candidate with the thread never started, for comparison.
"""
import os
import threading
import time
from typing import Any, Dict, Tuple

import torch
from torch import Tensor


def mat_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor]:
    n = int(params["n"])
    return (torch.randn(n, n, generator=gen, device=device), torch.randn(n, n, generator=gen, device=device))


def mm_fp32(a: Tensor, b: Tensor) -> Tensor:
    return torch.mm(a, b)


class _Spinner:
    def __init__(self) -> None:
        self.calls, self.last = 0, 0.0
        self.started = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        stream = torch.cuda.Stream()
        cycles = int(os.environ.get("PROBE_SPIN_CYCLES", "1000000"))  # ~0.5 ms at ~2 GHz
        pending = []
        while True:
            if self.calls or time.perf_counter() - self.last < 1e-3:
                time.sleep(1e-4)
                continue
            with torch.cuda.stream(stream):
                torch.cuda._sleep(cycles)
                ev = torch.cuda.Event()
                ev.record(stream)
            pending.append(ev)
            while len(pending) > 2:  # keep two spins queued, no more
                pending.pop(0).synchronize()


_spin = _Spinner()


def spin(a: Tensor, b: Tensor) -> Tensor:
    _spin.start()
    _spin.calls += 1
    try:
        return torch.addmm(a.new_zeros(()), a, b, beta=0)
    finally:
        _spin.last = time.perf_counter()
        _spin.calls -= 1


def spin_off(a: Tensor, b: Tensor) -> Tensor:
    return torch.addmm(a.new_zeros(()), a, b, beta=0)
