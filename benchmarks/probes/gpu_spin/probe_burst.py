"""The probe's second cheat (see ``probe_spin.py``): spins only in the baseline's turn.

``probe_spin``'s steady spins also ran into the candidate's own next call, where the
``stream`` check saw them. Here a thread started at import waits until the candidate has
been called ``PROBE_AFTER`` times (300: past the preflight, whose calls come at other
intervals) and then, each time its block has ended (no call for 1 ms), queues
``PROBE_BURST`` spins of 0.2 ms (4: 0.8 ms) on a stream of its own and waits for the next
block's end: the spins run while the baseline's block (several ms) is timed, and end before
the candidate is called again.
"""
import os
import threading
import time

import torch
from probe_gpu_common import product
from torch import Tensor

_state = {"calls": 0, "last": 0.0, "done": 0.0, "n": 0}


def _run() -> None:
    stream = torch.cuda.Stream()
    burst = int(os.environ.get("PROBE_BURST", "4"))
    after = int(os.environ.get("PROBE_AFTER", "300"))
    while True:
        time.sleep(1e-4)
        if _state["n"] < after or _state["calls"] or _state["last"] <= _state["done"] or time.perf_counter() - _state["last"] < 1e-3:
            continue
        _state["done"] = _state["last"]
        with torch.cuda.stream(stream):
            for _ in range(burst):
                torch.cuda._sleep(400_000)  # about 0.2 ms at 2 GHz


threading.Thread(target=_run, daemon=True).start()


def burst(a: Tensor, b: Tensor) -> Tensor:
    _state["calls"] += 1
    _state["n"] += 1
    try:
        return product(a, b)
    finally:
        _state["last"] = time.perf_counter()
        _state["calls"] -= 1
