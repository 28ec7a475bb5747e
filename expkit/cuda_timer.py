"""CUDA-event timer: seconds per call of a GPU op, cold or warm, that launch gaps and side streams cannot fool.

:class:`CudaTimer` implements :class:`expkit.timing.Timer`. ``fn()`` performs one call
of the op under test on the next prepared input set (the measurement loop rotates the
inputs; the timer never sees them). ``sample(fn, number)`` returns the mean seconds
per call over a block of ``number`` calls.

How a block is timed
--------------------
1. **Hold the stream.** A blocking kernel (``torch.cuda._sleep``: one thread spinning
   on the SM cycle counter for a given number of cycles) is queued first on the
   harness stream (the current stream), then all the block's work is queued behind
   it. While the host is still queuing, the GPU is busy spinning, so when the hold
   ends the calls run back to back and the events see GPU time, not the host's launch
   rate. This is nvbench's blocking-kernel idea. We chose a timed spin over nvbench's
   kernel that spins on a host-mapped flag because ``_sleep`` ships with PyTorch (no
   compiled extension) and cannot deadlock: a flag kernel waits forever when the
   launch queue fills before the host gets to release it. The price is that the spin
   must be sized: the timer predicts the host's queuing time from the previous block
   (x ``hold_margin``), converts seconds to cycles with the SM clock *measured from
   the previous holds* (events around the spin), and **checks that it worked**: an
   event recorded right after the spin is queried once everything is queued; if it
   has already completed, the GPU drained the queue before the host finished and
   launch gaps may be in the numbers, so the block is thrown away and re-run with a
   hold sized from what was just observed. A block too long for the launch queue
   (the host stalls inside a launch until the spin ends) fails twice and is then
   split into halves. ``last_block.hold_ok`` records the outcome.
2. **Cold** (``cold=True``, the default for claims): before each call the L2 cache is
   flushed by touching a buffer of ``flush_factor`` x L2 bytes
   (``torch.cuda.get_device_properties(i).L2_cache_size``), then one event pair is
   recorded around the call alone, so the flush's own time is excluded. ``flush``
   picks how. ``"read"`` (default: a max-reduction over the buffer, one scalar
   written) leaves the L2 full of clean lines, the state Nsight Compute's
   ``--cache-control all`` produces. ``"write"`` (``zero_()``, like nvbench's memset)
   leaves it full of dirty lines whose write-back the op then pays for: on an H200 it
   made an fp32 sum of 2^24 elements 23% slower than the read flush and 41% slower
   than ncu's cold time (benchmarks/README.md). The per-call times of the last block
   are kept in ``last_call_times``.
   **Warm** (``cold=False``): the calls run back to back with one event pair around
   the block; ``last_call_times`` is then empty (no per-call events exist).
3. **Device-wide synchronisation.** The host waits with ``torch.cuda.synchronize()``
   (all streams of the device) before any event is read. Events on the harness stream
   cannot see work that ``fn`` pushed to another stream without joining it; what
   they *can* do is be compared with the host's wall time of the whole block, which
   does include it: the host reads ``perf_counter`` before queuing the hold and after
   the device-wide sync returns. That envelope exceeds the event span (hold start to
   last event) only by the launch and sync latencies, unless some work outlived the
   harness stream. When it exceeds the span by more than
   ``max(foreign_abs_s, foreign_rel * span)``, the block is marked
   ``last_block.foreign_work`` and the sample falls back to the envelope divided by
   the number of calls: host wall time, the upper bound ``torch.utils.benchmark``
   measures, which no stream trick can shorten.
   The limit of this check: side-stream work that finishes *before* the harness
   stream's last event (for instance short work hidden under the hold or under the
   flushes) is not visible in any timing; only a profiler trace shows it (the
   preflight's check that every kernel ran on the harness stream).

Why no CUDA graph
-----------------
Replaying a captured graph of the calls would hide launch gaps too, but replay runs
none of ``fn``'s Python: the measurement loop's input rotation would not advance
(every replay reads the buffers captured at capture time), host-side work or checks
inside ``fn`` would vanish, and ops that synchronise cannot be captured at all. The
hold gives the same back-to-back execution with ``fn`` really called every time.

Measured bias (H200, torch 2.11, 2026-11-21; benchmarks/README.md)
-----------------------------------------------------------------
Against CUPTI's kernel durations of the very same calls, the events add a fixed cost
per call: +0.9 to +1.1 us warm (the gap between back-to-back kernels) and +3.2 to
+3.6 us cold (an event pair straight after the flush kernel reads 1.5 us apart with
nothing between them, and the op's launch inside the pair adds the rest). The ratio to CUPTI
is therefore 0.99-1.01 for kernels of 350 us and more, 1.015-1.03 at 90-180 us, and
1.5 cold / 1.18 warm at 6 us. A constant added to both sides pulls a measured
speedup towards 1: for kernels under ~100 us a claim is judged conservatively.
Nothing is subtracted: no correction was validated (see the README's next steps).

Defaults and why: ``max_calls_per_hold`` 64 cold (4 queued commands a call) and 256
warm, because the host stalled inside a launch once 1024 tiny kernels were queued
behind a spin, but not at 512. ``foreign_abs_s`` 250 us, because honest blocks showed
16-41 us between the host envelope and the event span (median about 17 us) over
every op of the fidelity ladder.

Nothing here imports torch at module import time: ``import expkit.cuda_timer`` works
on any machine, and :meth:`CudaTimer.available` says whether it can run.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

FLUSH_MODES = ("write", "read")


class Event(Protocol):
    """The part of ``torch.cuda.Event`` the timer uses."""

    def record(self) -> None: ...
    def query(self) -> bool: ...
    def elapsed_time(self, end: Any) -> float: ...  # milliseconds


class Device(Protocol):
    """The GPU behind the timer: events and kernels on the current stream, device-wide sync."""

    l2_bytes: int

    def new_event(self) -> Event: ...
    def hold(self, cycles: int) -> None: ...
    def flush_l2(self) -> None: ...
    def synchronize(self) -> None: ...
    def describe_flush(self) -> str: ...


class TorchCudaDevice:
    """:class:`Device` over PyTorch's CUDA runtime (imported here, not at module import)."""

    def __init__(self, index: int | None = None, *, flush: str = "read", flush_factor: float = 2.0) -> None:
        import torch

        if flush not in FLUSH_MODES:
            raise ValueError(f"flush must be one of {FLUSH_MODES}, got {flush!r}")
        if flush_factor <= 0:
            raise ValueError(f"flush_factor must be positive, got {flush_factor}")
        self._torch = torch
        self.index = torch.cuda.current_device() if index is None else index
        self.l2_bytes = int(torch.cuda.get_device_properties(self.index).L2_cache_size)
        self.flush = flush
        self.flush_factor = flush_factor
        self._buf: Any = None
        self._out: Any = None

    def new_event(self) -> Event:
        return self._torch.cuda.Event(enable_timing=True)

    def hold(self, cycles: int) -> None:
        self._torch.cuda._sleep(int(cycles))

    def flush_l2(self) -> None:
        torch = self._torch
        if self._buf is None:
            n = max(1, int(self.flush_factor * self.l2_bytes) // 4)
            self._buf = torch.zeros(n, dtype=torch.float32, device=f"cuda:{self.index}")
            self._out = torch.empty((), dtype=torch.float32, device=f"cuda:{self.index}")
        if self.flush == "write":
            self._buf.zero_()
        else:
            # A reduction reads every byte and writes one scalar: the L2 ends up full of
            # clean lines of this buffer, none of the op's.
            torch.amax(self._buf, dim=0, out=self._out)

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.index)

    def describe_flush(self) -> str:
        mib = self.flush_factor * self.l2_bytes / 2**20
        verb = "writing" if self.flush == "write" else "reading"
        return f"L2 flushed before each call by {verb} {mib:.0f} MiB ({self.flush_factor:g}x L2)"


@dataclass(frozen=True)
class BlockReport:
    """Diagnostics of the last ``sample`` call (all its held sub-blocks together).

    ``hold_ok``: every sub-block's hold outlasted the host's queuing. ``attempts``: held
    blocks run, retries included. ``queue_s``: host seconds spent queuing (kept
    attempts). ``hold_s``: GPU seconds spent in holds. ``span_s``: GPU seconds from hold
    start to the last event; ``envelope_s``: host seconds from before the hold to the
    return of the device-wide sync; ``max_slack_s``: the largest envelope minus span of
    a sub-block. ``foreign_work``: some sub-block's slack exceeded the tolerance, and the
    sample is the host wall time (see the module docstring).
    """

    calls: int
    chunks: int
    attempts: int
    hold_ok: bool
    queue_s: float
    hold_s: float
    span_s: float
    envelope_s: float
    max_slack_s: float
    foreign_work: bool
    event_seconds: float
    returned_seconds: float


def split_calls(number: int, max_per_chunk: int) -> list[int]:
    """``number`` calls cut into near-equal chunks of at most ``max_per_chunk``."""
    if number < 1:
        raise ValueError(f"number must be at least 1, got {number}")
    if max_per_chunk < 1:
        raise ValueError(f"max_per_chunk must be at least 1, got {max_per_chunk}")
    k = -(-number // max_per_chunk)
    base, extra = divmod(number, k)
    return [base + 1] * extra + [base] * (k - extra)


class CudaTimer:
    """CUDA-event timer with a held stream, optional L2 flush and a device-wide sync guard.

    Parameters (defaults were checked on the device, see benchmarks/README.md):

    * ``cold``: flush L2 before every call and time each call alone (default), or time
      a warm back-to-back block.
    * ``flush`` / ``flush_factor``: how the L2 is flushed and with how many L2-sizes.
    * ``max_calls_per_hold``: sub-block size; keeps the queued work well inside the
      driver's launch queue so the host never stalls behind the hold.
    * ``hold_margin`` / ``hold_floor_s``: the hold lasts ``margin x predicted queuing
      time + floor``.
    * ``foreign_abs_s`` / ``foreign_rel``: tolerance of the envelope check.
    * ``device`` / ``clock``: seams for tests (a simulated GPU and its host clock).
    """

    def __init__(
        self,
        *,
        cold: bool = True,
        flush: str = "read",
        flush_factor: float = 2.0,
        max_calls_per_hold: int | None = None,
        hold_margin: float = 1.5,
        hold_floor_s: float = 50e-6,
        foreign_abs_s: float = 250e-6,
        foreign_rel: float = 0.01,
        max_attempts: int = 8,
        device: Device | None = None,
        clock: Callable[[], float] = time.perf_counter,
        cycles_per_second_hint: float = 2.0e9,
    ) -> None:
        if hold_margin < 1:
            raise ValueError(f"hold_margin must be >= 1, got {hold_margin}")
        self.cold = cold
        self._device = device if device is not None else TorchCudaDevice(flush=flush, flush_factor=flush_factor)
        self._clock = clock
        # Cold calls queue four commands each (flush, event, op, event), warm ones one.
        self.max_calls_per_hold = max_calls_per_hold or (64 if cold else 256)
        self.hold_margin = hold_margin
        self.hold_floor_s = hold_floor_s
        self.foreign_abs_s = foreign_abs_s
        self.foreign_rel = foreign_rel
        self.max_attempts = max_attempts
        self._retries = 0
        # An over-estimate of the SM clock makes the first hold longer, never shorter,
        # than asked: H100/H200 boost to 1980 MHz (device/KINDS.md). Replaced by the
        # clock measured around each hold.
        self._cycles_per_s = cycles_per_second_hint
        # Host seconds to queue one call; first guess, then the last observation.
        self._queue_per_call_s = 40e-6 if cold else 15e-6
        self._events: list[Event] = []
        self.last_call_times: tuple[float, ...] = ()
        self.last_block: BlockReport | None = None
        mode = f"cold ({self._device.describe_flush()}; one event pair per call)" if cold else (
            "warm (back-to-back calls; one event pair per block)"
        )
        self.method = (
            f"cuda-events {mode}; stream held by a torch.cuda._sleep spin while queuing (checked); "
            "device-wide synchronize before reading events, host-wall fallback on work outside the stream"
        )

    @staticmethod
    def available() -> bool:
        """True when PyTorch sees a CUDA device and has the spin kernel the hold needs."""
        try:
            import torch
        except ImportError:
            return False
        try:
            return bool(torch.cuda.is_available()) and hasattr(torch.cuda, "_sleep")
        except Exception:  # a broken driver install raises from is_available on some builds
            return False

    # -- internals -------------------------------------------------------------------
    def _event_pool(self, n: int) -> list[Event]:
        while len(self._events) < n:
            self._events.append(self._device.new_event())
        return self._events

    def _run_held(self, fn: Callable[[], Any], n: int, hold_s: float) -> dict[str, Any]:
        """Queue hold + n calls, sync, and read everything. Returns the raw observations."""
        dev, clock = self._device, self._clock
        ev = self._event_pool(2 * n + 2 if self.cold else 4)
        begin, released = ev[0], ev[1]
        pairs = ev[2 : 2 + 2 * n]
        cycles = max(1, math.ceil(hold_s * self._cycles_per_s))
        t0 = clock()
        begin.record()
        dev.hold(cycles)
        released.record()
        if self.cold:
            for i in range(n):
                dev.flush_l2()
                pairs[2 * i].record()
                fn()
                pairs[2 * i + 1].record()
            last = pairs[2 * n - 1]
        else:
            pairs[0].record()
            for _ in range(n):
                fn()
            pairs[1].record()
            last = pairs[1]
        t_queued = clock()
        drained = released.query()
        dev.synchronize()
        t_idle = clock()
        held_s = begin.elapsed_time(released) / 1e3
        if self.cold:
            calls = [pairs[2 * i].elapsed_time(pairs[2 * i + 1]) / 1e3 for i in range(n)]
            event_total = sum(calls)
        else:
            calls = []
            event_total = pairs[0].elapsed_time(pairs[1]) / 1e3
        if held_s > 0:
            self._cycles_per_s = cycles / held_s
        return {
            "ok": not drained,
            "queue_s": t_queued - t0,
            "held_s": held_s,
            "span_s": begin.elapsed_time(last) / 1e3,
            "envelope_s": t_idle - t0,
            "calls": calls,
            "event_total": event_total,
        }

    def _chunk(self, fn: Callable[[], Any], n: int, log: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Time n calls under one hold; retry, then split, until the hold covers the queuing.

        At most ``max_attempts`` held blocks are re-run per ``sample`` call; once that
        budget is spent, a block is kept as it came (``hold_ok`` False). An ``fn`` that
        synchronises with the host can never be held, and ends there.
        """
        hold_s = self.hold_margin * self._queue_per_call_s * n + self.hold_floor_s
        obs: dict[str, Any] = {}
        for attempt in range(2):
            obs = self._run_held(fn, n, hold_s)
            log.append(obs)
            self._queue_per_call_s = obs["queue_s"] / n
            if obs["ok"] or self._retries >= self.max_attempts:
                return [obs]
            self._retries += 1
            if attempt == 0:
                # Size the next hold from what this attempt actually took, with room to spare.
                hold_s = 2 * self.hold_margin * obs["queue_s"] + self.hold_floor_s
        if n == 1:
            return [obs]
        # Twice too short even when sized from observation: the host most likely
        # stalled inside a launch (launch queue full behind the hold). Smaller blocks,
        # from now on.
        self.max_calls_per_hold = max(1, min(self.max_calls_per_hold, n // 2))
        out: list[dict[str, Any]] = []
        for part in split_calls(n, self.max_calls_per_hold):
            out.extend(self._chunk(fn, part, log))
        return out

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        """Mean seconds per call over ``number`` calls (see the module docstring)."""
        log: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        self._retries = 0
        # A collection in the middle of a block would stretch the host envelope (and so
        # raise a false foreign-work alarm) or starve the hold; timeit does the same.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for n in split_calls(number, self.max_calls_per_hold):
                kept.extend(self._chunk(fn, n, log))
        finally:
            if gc_was_enabled:
                gc.enable()
        event_total = sum(o["event_total"] for o in kept)
        foreign = False
        max_slack = -math.inf
        fallback_total = 0.0
        for o in kept:
            slack = o["envelope_s"] - o["span_s"]
            max_slack = max(max_slack, slack)
            # Only a good hold makes the envelope comparable: with a drained queue the
            # host's queuing time, not foreign work, is what outlasts the span.
            if o["ok"] and slack > max(self.foreign_abs_s, self.foreign_rel * o["span_s"]):
                foreign = True
            fallback_total += max(o["envelope_s"], o["event_total"])
        total = fallback_total if foreign else event_total
        self.last_call_times = tuple(c for o in kept for c in o["calls"])
        self.last_block = BlockReport(
            calls=number,
            chunks=len(kept),
            attempts=len(log),
            hold_ok=all(o["ok"] for o in kept),
            queue_s=sum(o["queue_s"] for o in kept),
            hold_s=sum(o["held_s"] for o in kept),
            span_s=sum(o["span_s"] for o in kept),
            envelope_s=sum(o["envelope_s"] for o in kept),
            max_slack_s=max_slack,
            foreign_work=foreign,
            event_seconds=event_total / number,
            returned_seconds=total / number,
        )
        return total / number
