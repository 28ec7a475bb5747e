"""Per-call timing for the defended loop: room between calls for the harness's per-call work.

Fresh inputs and the recheck's copy must happen between timed calls, outside the timed
spans. On the CPU, :class:`PerCallTimer` reads the harness's clock around each call; on a
GPU, :class:`HookedDevice` runs the per-call hook inside the CUDA timer's L2 flush,
before each call's start event (and, with a kernel-time recorder, under the harness's
tag, so the hook's kernels are never counted as the call's).

Moved here from ``expkit.bench.per_call`` (issue #14) so that :func:`.factory.make_timer`
can build every timer in this stage; the bench imports them from here.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .timer import CPU, TimerInfo


class PerCallTimer:
    """Host clock around each call; the harness's per-call work runs between the spans.

    The undefended CPU timer (``timing.PerfCounterTimer``) reads the clock once around
    a block, which is cheaper for ops of a few microseconds but leaves no gap between
    calls for fresh inputs. Here ``before()`` (fresh inputs, the recheck's copy) and
    ``after()`` (thread count) run outside the timed spans and their time is added up
    in ``last_untimed`` for the parent's envelope check. Two clock reads per call
    (tens of nanoseconds each on Linux) are the price; they fall inside the span.
    ``clock`` should be bound before any code under test is imported (the bench passes
    its own, ``bench.defences.clock.CLOCK``).
    """

    method = ("cpu: time.perf_counter around each call; inputs made fresh before each call "
              "outside the timed span (defended)")
    info = TimerInfo(CPU, CPU)
    per_call_hook = True

    def __init__(self, before: Callable[[], None], after: Callable[[], None],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._before, self._after, self._clock = before, after, clock
        self.last_untimed = 0.0

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        clock, before, after = self._clock, self._before, self._after
        timed = untimed = 0.0
        for _ in range(number):
            u0 = clock()
            before()
            t0 = clock()
            fn()
            t1 = clock()
            after()
            untimed += (t0 - u0) + (clock() - t1)
            timed += t1 - t0
        self.last_untimed = untimed
        return timed / number


class HookedDevice:
    """A ``cuda_device.Device`` whose L2 flush first runs the harness's per-call hook.

    In cold mode ``CudaTimer`` flushes the L2 right before recording each call's start
    event, so this is the one seam where per-call work stays outside the events
    without editing the timer. The hook queues its GPU work (the salt, the recheck's
    copy) before the flush, which then evicts whatever that work brought into L2."""

    def __init__(self, inner: Any, hook: Callable[[], None]) -> None:
        self._inner, self._hook = inner, hook
        self.l2_bytes = inner.l2_bytes

    def new_event(self) -> Any:
        return self._inner.new_event()

    def hold(self, cycles: int) -> None:
        self._inner.hold(cycles)

    def flush_l2(self) -> None:
        self._hook()
        self._inner.flush_l2()

    def synchronize(self) -> None:
        self._inner.synchronize()

    def describe_flush(self) -> str:
        return self._inner.describe_flush()
