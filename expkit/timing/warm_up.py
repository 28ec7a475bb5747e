"""A side's warm-up before its first timed block: first-call costs out, the device left idle.

A GPU call returns once its work is queued. Run until the host's clock passed the warm-up's
seconds, calls queue as fast as the host launches them: far more work than those seconds,
which the first timed block's synchronise then waits for, and a launch queue full behind
which that block's hold cannot cover its calls (the timer then retries it behind a hold
sized on the full queue). :func:`warm_up` drains each call's work before it reads the clock,
so its seconds are work done and none is left queued when it returns.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

# Bound as the harness imports, before the code under test, which may rebind torch's.
_INITIALIZED, _SYNCHRONIZE = torch.cuda.is_initialized, torch.cuda.synchronize


def drain_device() -> None:
    """Wait for the work this process queued on its GPU; nothing where it has not used CUDA
    (asked of ``is_initialized``, which does not start a context: ``checks.preflight.call_synced``)."""
    if _INITIALIZED():
        _SYNCHRONIZE()


def warm_up(call: Callable[[], Any], seconds: float, clock: Callable[[], float],
            drain: Callable[[], None] = drain_device) -> int:
    """Call ``call`` at least once, and again until ``seconds`` have passed on ``clock`` since
    the first began, each call's work drained (``drain``) before the clock is read. Returns
    the calls made."""
    end = clock() + seconds
    calls = 0
    while True:
        call()
        drain()
        calls += 1
        if clock() >= end:
            return calls
