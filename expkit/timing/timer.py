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

A timer that has more than one figure per block (the CUDA timer: kernel time from the
GPU's own record and call time from CUDA events) still returns one from ``sample``,
the figure the verdict uses, and leaves the whole account of that block in
``last_timing`` (a :class:`BlockTiming`); ``info`` (a :class:`TimerInfo`) says which
figure it returns and, where it had to fall back, why. Both are optional: the loop
reads them when they are there.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Tuple, Union, runtime_checkable

#: Which figure a block's ``seconds`` is (``BlockTiming.source``).
KERNEL = "kernel"      # the GPU's own record: first kernel start to last kernel end of each call
EVENTS = "events"      # CUDA events around each call (cold) or around the block (warm)
ENVELOPE = "envelope"  # host wall time of the block: work escaped the harness stream
CPU = "cpu"            # the host clock (CPU runs)
SOURCES = (KERNEL, EVENTS, ENVELOPE, CPU)


@runtime_checkable
class Timer(Protocol):
    """Times blocks of calls. ``method`` is written into the result."""

    method: str

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        """Seconds per call: the time of ``number`` back-to-back calls over ``number``."""
        ...


@dataclass(frozen=True)
class BlockTiming:
    """One timed block's account, per call.

    ``seconds`` is the figure the verdict uses and ``source`` says which it is (one of
    :data:`SOURCES`). ``call_seconds`` is the time of a call as its caller's stream
    sees it (CUDA events; the host clock on a CPU), ``kernel_seconds`` the GPU's own
    record of the call's kernels where one was taken and trusted (None otherwise).
    ``flags`` name what the block showed that a reader should know (``other-stream``,
    ``foreign``, ``unrecorded``, ...; see ``cuda_timer``)."""

    seconds: float
    source: str
    call_seconds: Optional[float] = None
    kernel_seconds: Optional[float] = None
    flags: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")

    def to_dict(self) -> dict:
        return {**asdict(self), "flags": list(self.flags)}

    @classmethod
    def coerce(cls, value: Union["BlockTiming", Mapping[str, Any], float]) -> "BlockTiming":
        """A :class:`BlockTiming` from itself, its ``to_dict`` form (as it crosses a
        worker's channel) or a bare number of seconds (a timer with one figure)."""
        if isinstance(value, BlockTiming):
            return value
        if isinstance(value, Mapping):
            return cls(float(value["seconds"]), str(value["source"]), _opt(value.get("call_seconds")),
                       _opt(value.get("kernel_seconds")), tuple(value.get("flags") or ()))
        return cls(float(value), CPU)


def _opt(x: Any) -> Optional[float]:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


@dataclass(frozen=True)
class TimerInfo:
    """Which figure a timer's ``sample`` returns, and why, for ``result.json``.

    ``kind``: ``kernel``, ``events`` or ``cpu``. ``requested``: what ``measure.timer``
    asked for. ``fallback``: why ``kind`` differs from ``requested`` (for instance
    ``"CUPTI unavailable: ModuleNotFoundError: No module named 'cupti'"``), else empty."""

    kind: str
    requested: str
    fallback: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def coerce(cls, value: Union["TimerInfo", Mapping[str, Any], None]) -> Optional["TimerInfo"]:
        if value is None or isinstance(value, TimerInfo):
            return value
        return cls(str(value["kind"]), str(value.get("requested", value["kind"])), str(value.get("fallback") or ""))


class PerfCounterTimer:
    """Host wall clock around a block of calls (CPU work)."""

    method = "cpu: time.perf_counter around a block of calls"
    info = TimerInfo(CPU, CPU)
    per_call_hook = False

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
