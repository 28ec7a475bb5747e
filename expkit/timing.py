"""Timers: the seam between the measurement loop and a clock.

A :class:`Timer` turns "call ``fn`` ``number`` times" into seconds per call. The
measurement loop (``measure.py``) never reads a clock itself, so tests swap in a
seeded fake and the GPU timer (``cuda_timer.py``) slots in beside the CPU one.

The CPU timer blocks several calls per sample: ``perf_counter`` resolves to tens of
nanoseconds but costs about as much to read, so one call of a 2-microsecond op per
sample would time the clock as much as the op. :func:`calibrate` picks the block size
so that one sample lasts at least ``min_block_seconds`` (the trade-off
``torch.utils.benchmark``'s ``blocked_autorange`` makes: fewer, larger samples lose
some of the distribution's shape but none of its centre).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol, runtime_checkable


@runtime_checkable
class Timer(Protocol):
    """Times blocks of calls. ``method`` is written into the result."""

    method: str

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        """Seconds per call: the time of ``number`` back-to-back calls over ``number``."""
        ...


class PerfCounterTimer:
    """Host wall clock around a block of calls (CPU work)."""

    method = "cpu: time.perf_counter around a block of calls"

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        clock = self._clock
        start = clock()
        for _ in range(number):
            fn()
        return (clock() - start) / number


def calibrate(timer: Timer, fn: Callable[[], Any], min_block_seconds: float, max_number: int = 1 << 20) -> int:
    """The smallest power of two ``number`` whose block lasts at least ``min_block_seconds``."""
    number = 1
    while number < max_number:
        per_call = timer.sample(fn, number)
        if per_call * number >= min_block_seconds:
            break
        # Jump straight to the estimate instead of doubling one step at a time.
        wanted = min_block_seconds / max(per_call, 1e-9)
        number = min(max_number, max(number * 2, 1 << max(0, int(wanted - 1).bit_length())))
    return number
