"""CUDA-event timer: seconds per call of a GPU op, cold or warm, that launch gaps and side streams cannot fool.

:class:`CudaTimer` implements :class:`expkit.timing.Timer`: ``sample(fn, number)`` returns the
mean seconds per call over a block of ``number`` calls of ``fn`` (one call of the op on the
next prepared input set; the timer never sees the inputs). What it guarantees:

* **No launch gaps.** A timed spin (``torch.cuda._sleep``) holds the harness stream while the
  block is queued, so the calls run back to back; the timer checks that the hold outlasted the
  queuing (an event after the spin must still be pending) and re-runs, then splits, a block
  where it did not. ``last_block.hold_ok`` records the outcome.
* **Cold by default.** With ``cold=True`` the L2 is flushed before each call (``flush="read"``,
  the state Nsight Compute's ``--cache-control all`` leaves) and one event pair times the call
  alone; ``cold=False`` times the block back to back with one event pair.
* **No hidden side-stream work.** The host waits on a device-wide synchronise; where its wall
  time of the block exceeds the event span by more than ``max(foreign_abs_s, foreign_rel *
  span)`` the block is marked ``foreign_work`` and the sample is the host envelope per call.
  Side work that ends before the harness stream's last event is invisible here: the
  preflight's same-stream check covers it.
* **Kernel time** with a ``recorder`` (:mod:`.kernel_time`): each call's span in the GPU's own
  record, the event figure kept beside it in ``last_timing.call_seconds``; a block falls back
  to the events (``unrecorded``, ``clock-mismatch``) or the envelope (``foreign``) and says so.
  Each call's kernels (name, grid, block) are left in ``last_launches`` for the per-call
  launch check.

CUDA events add a fixed cost per call (about 1 us warm, 3-4 us cold), which pulls a small
kernel's speedup towards 1: judged conservatively, nothing subtracted. Why a timed spin and no
CUDA graph, and the defaults' reasons: docs/decisions.md. Nothing here imports torch at import
time; :meth:`CudaTimer.available` says whether it can run.
"""

from __future__ import annotations

import gc
import math
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .cuda_device import FLUSH_MODES, Device, Event, TorchCudaDevice, demangle
from .kernel_time import FOREIGN, NO_HOLD_RECORD, RECORDER_ERROR, Recorder, TagCounter, block_kernel_time, block_launches
from .blocks import BlockReport, lead_gap, split_calls
from .timer import ENVELOPE, EVENTS, KERNEL, BlockTiming, TimerInfo

__all__ = ["CudaTimer", "BlockReport", "split_calls", "Device", "Event", "TorchCudaDevice", "FLUSH_MODES"]

class CudaTimer:
    """CUDA-event timer with a held stream, optional L2 flush and a device-wide sync guard.

    Parameters (defaults were checked on the device; docs/decisions.md says why):

    * ``cold``: flush L2 before every call and time each call alone (default), or time
      a warm back-to-back block.
    * ``flush`` / ``flush_factor``: how the L2 is flushed and with how many L2-sizes.
    * ``max_calls_per_hold``: sub-block size; keeps the queued work well inside the
      driver's launch queue so the host never stalls behind the hold.
    * ``hold_margin`` / ``hold_floor_s``: the hold lasts ``margin x predicted queuing
      time + floor``.
    * ``foreign_abs_s`` / ``foreign_rel``: tolerance of the envelope check.
    * ``recorder``: a :class:`~.kernel_time.Recorder`; given, ``sample`` returns kernel
      time (see the module docstring). ``fallback``: why there is none although
      kernel time was asked for (recorded in ``info``).
    * ``device`` / ``clock``: seams for tests (a simulated GPU and its host clock).
    """

    #: True when the device runs the bench's per-call hook before each call (set by
    #: ``timing.factory.make_timer``, which wraps the device in a ``HookedDevice``).
    per_call_hook = False

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
        recorder: Recorder | None = None,
        fallback: str = "",
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
        self._outruns_queue = False  # one call alone stalled the launch queue behind a hold
        # An over-estimate of the SM clock makes the first hold longer, never shorter,
        # than asked: H100/H200 boost to 1980 MHz (device/KINDS.md). Replaced by the
        # clock measured around each hold.
        self._cycles_per_s = cycles_per_second_hint
        # The lead spin before each hold (see _run_held): long enough to cover the host's
        # launch of the hold; grows when it did not.
        self._lead_s = 300e-6 if recorder is not None else 30e-6
        self.max_lead_s = 5e-3
        # Host seconds to queue one call; first guess, then the last observation.
        self._queue_per_call_s = 40e-6 if cold else 15e-6
        self._events: list[Event] = []
        self._recorder = recorder
        self._active: Recorder | None = None  # the recorder while a sample runs
        self._tags = TagCounter()
        self._recorder_trouble = 0
        self._ticks_per_second: Optional[float] = None
        self.last_call_times: tuple[float, ...] = ()
        self.last_kernel_times: tuple[Optional[float], ...] = ()
        self.last_block: BlockReport | None = None
        self.last_timing: BlockTiming | None = None
        self.last_attribution: dict | None = None
        self.last_launches: dict | None = None  # kernel_time.block_launches; None without a recorder
        requested = KERNEL if (recorder is not None or fallback) else EVENTS
        self.info = TimerInfo(KERNEL if recorder is not None else EVENTS, requested, fallback)
        self._set_method()

    def _set_method(self) -> None:
        mode = (f"cold ({self._device.describe_flush()}; one event pair per call)" if self.cold
                else "warm (back-to-back calls; one event pair per block)")
        events = (f"cuda-events {mode}; stream held by a torch.cuda._sleep spin while queuing (checked); "
                  "device-wide synchronize before reading events, host-wall fallback on work outside the stream")
        if self._recorder is not None:
            self.method = (f"kernel time: {self._recorder.describe()}, each call's span from its first kernel's "
                           f"start to its last kernel's end; call time beside it: {events}")
        elif self.info.fallback:
            self.method = f"{events} (kernel time was asked for; {self.info.fallback})"
        else:
            self.method = events

    def close(self) -> None:
        """Done with the blocks: a recorder that keeps CUPTI's kinds enabled disables them."""
        getattr(self._recorder, "close", lambda: None)()

    def _drop_recorder(self, why: str) -> None:
        self.close()
        self._recorder = None
        self.info = TimerInfo(EVENTS, self.info.requested, f"CUPTI stopped recording: {why}")
        self._set_method()

    @staticmethod
    def available() -> bool:
        """True when PyTorch sees a CUDA device and has the spin kernel the hold needs."""
        try:
            # lazy: the timing modules import without torch (tests/test_cuda_timer.py)
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
        dev, clock, rec = self._device, self._clock, self._active
        ev = self._event_pool(2 * n + 3 if self.cold else 5)
        lead, begin, released = ev[0], ev[1], ev[2]
        pairs = ev[3 : 3 + 2 * n]
        cycles = max(1, math.ceil(hold_s * self._cycles_per_s))
        tags = self._tags.chunk(n) if rec is not None else None
        # The lead spin keeps the GPU busy while the host records ``begin`` and the hold's
        # launch reaches the GPU, so the hold starts the moment ``begin`` is reached: the
        # events then time the hold alone. Without it, the launch (76-97 us from the
        # previous kernel's end to the hold's start with CUPTI recording, on an H100) sat
        # between the two, the hold's events read long, and the clock and the ticks taken
        # from them read 15-30% slow. The lead grows
        # from what the host saw (here) and, with a recorder, from the gap the records
        # show (``_learn_lead``).
        t0 = clock()
        lead.record()
        lead_cycles = max(1, math.ceil(self._lead_s * self._cycles_per_s))
        if rec is not None and tags is not None:
            rec.push(tags.harness)
            dev.hold(lead_cycles)
            rec.pop()
        else:
            dev.hold(lead_cycles)
        t_lead = clock()
        begin.record()
        if rec is not None and tags is not None:
            rec.push(tags.hold)
            dev.hold(cycles)
            rec.pop()
        else:
            dev.hold(cycles)
        t_launched = clock()
        released.record()
        if rec is not None and tags is not None:
            # The same loops with every launch under its tag (module docstring, 4.).
            harness, first = tags.harness, tags.first_call
            # A call's closing event is recorded under its tag: that API call closes the
            # bracket that places other threads' launches made during the call
            # (kernel_time's module docstring); on the GPU it is the same event.
            if self.cold:
                for i in range(n):
                    rec.push(harness)
                    dev.flush_l2()
                    rec.pop()
                    pairs[2 * i].record()
                    rec.push(first + i)
                    fn()
                    pairs[2 * i + 1].record()
                    rec.pop()
                last = pairs[2 * n - 1]
            else:
                pairs[0].record()
                for i in range(n):
                    rec.push(first + i)
                    fn()
                    if i == n - 1:
                        pairs[1].record()
                    rec.pop()
                last = pairs[1]
        elif self.cold:
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
        lead_s = lead.elapsed_time(begin) / 1e3
        # The host took ``t_launched - t_lead`` to reach the hold: a lead shorter than
        # that (a slow launch) left a gap in ``held_s``; the next lead is longer.
        covered = (t_launched - t_lead) < 0.8 * lead_s
        if not covered:
            self._lead_s = min(self.max_lead_s, max(self._lead_s, 3 * (t_launched - t_lead)))
        if self.cold:
            calls = [pairs[2 * i].elapsed_time(pairs[2 * i + 1]) / 1e3 for i in range(n)]
            event_total = sum(calls)
        else:
            calls = []
            event_total = pairs[0].elapsed_time(pairs[1]) / 1e3
        if held_s > 0 and covered:
            self._cycles_per_s = cycles / held_s
        return {
            "ok": not drained,
            "queue_s": t_queued - t_lead,
            "held_s": held_s,
            "lead_covered": covered,
            "span_s": begin.elapsed_time(last) / 1e3,
            # The host's time less the lead's on the GPU: what the GPU's span from ``begin``
            # must explain (the envelope check, and the fallback figure).
            "envelope_s": t_idle - t0 - lead_s,
            # The host's time from the first moment a call could have launched work (on any
            # stream): the fallback figure, which must hold all of it.
            "fallback_s": t_idle - t0 - min(lead_s, t_launched - t0),
            "calls": calls,
            "event_total": event_total,
            "tags": tags,
        }

    def _learn_lead(self, recorded: Any, chunks: Sequence[Any]) -> None:
        """Lengthen the lead spin by twice the largest gap the records show between a lead's
        end and its hold's start (:func:`.blocks.lead_gap`)."""
        gap = lead_gap(recorded, chunks, float(self._ticks_per_second or recorded.ticks_per_second))
        if gap > 2e-6:
            self._lead_s = min(self.max_lead_s, self._lead_s + 2 * gap)

    def _chunk(self, fn: Callable[[], Any], n: int, log: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Time n calls under one hold; retry, then split, until the hold covers the queuing.

        At most ``max_attempts`` held blocks are re-run per ``sample`` call; once that
        budget is spent, a block is kept as it came (``hold_ok`` False). An ``fn`` that
        synchronises with the host can never be held, and ends there.
        """
        hold_s = self.hold_margin * self._queue_per_call_s * n + self.hold_floor_s
        if self._outruns_queue:
            log.append(self._run_held(fn, n, self.hold_floor_s))
            return log[-1:]
        for attempt in range(2):
            obs = self._run_held(fn, n, hold_s)
            log.append(obs)
            if obs["ok"]:  # a failed block's queuing may hold a stall as long as the hold
                self._queue_per_call_s = obs["queue_s"] / n
                return [obs]
            if self._retries >= self.max_attempts:
                return [obs]
            self._retries += 1
            if attempt == 0:
                # Size the next hold from what this attempt actually took, with room to spare.
                hold_s = 2 * self.hold_margin * obs["queue_s"] + self.hold_floor_s
        if n == 1:  # one call fills the launch queue (an RNN's ~1000 launches): no hold covers it
            self._outruns_queue = True
            return [obs]
        # Twice too short even when sized from observation: the host most likely
        # stalled inside a launch (launch queue full behind the hold). Smaller blocks,
        # from now on.
        self.max_calls_per_hold = max(1, min(self.max_calls_per_hold, n // 2))
        out: list[dict[str, Any]] = []
        for part in split_calls(n, self.max_calls_per_hold):
            out.extend(self._chunk(fn, part, log))
        return out

    def rehearse(self, fn: Callable[[], Any]) -> None:
        """One held run of one call of ``fn``, its figures and records dropped: untimed, like a
        warm-up call. A process's first held run pays once for what its later ones do not
        (CUPTI's first records, the first launch of the harness's own kernels, its events):
        in a replicate's fresh process on an H200, 15-28 ms of queuing against about 1 ms after.
        A timed block that paid it found its hold too short and was retried behind a hold
        sized on that queue (3x it); rehearsed, the first timed block is sized on what a
        call queues. The clock and the lead spin still learn from it; the queuing estimate
        does not."""
        self._tags.reset()
        # Records and any recorder trouble dropped: the first timed block meets the same recorder.
        self._recording(lambda: self._run_held(fn, 1, self.hold_floor_s))
        self._tags.reset()

    def _recording(self, run: Callable[[], Any]) -> tuple[Any, str]:
        """``run()`` with the recorder collecting, where there is one, and the garbage
        collector off: the records (None without), and what went wrong with the recorder
        ("" where nothing did)."""
        rec, recorded, trouble = self._recorder, None, ""
        if rec is not None:
            try:
                rec.start()
                self._active = rec
            except Exception as e:  # a recorder that cannot start costs this block its kernel time
                trouble = f"{type(e).__name__}: {e}"
        # A collection in the middle of a block would stretch the host envelope (and so
        # raise a false foreign-work alarm) or starve the hold; timeit does the same.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            run()
        finally:
            if gc_was_enabled:
                gc.enable()
            if self._active is not None:
                self._active = None
                try:
                    recorded = rec.stop() if rec is not None else None
                except Exception as e:
                    trouble = f"{type(e).__name__}: {e}"
        return recorded, trouble

    def sample(self, fn: Callable[[], Any], number: int) -> float:
        """Seconds per call over ``number`` calls (see the module docstring): kernel time
        with a recorder, else event time; ``last_timing`` has the block's whole account."""
        log: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        self._retries = 0
        self._tags.reset()
        rec = self._recorder

        def chunks() -> None:
            for n in split_calls(number, self.max_calls_per_hold):
                kept.extend(self._chunk(fn, n, log))

        recorded, trouble = self._recording(chunks)
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
            fallback_total += max(o["fallback_s"], o["event_total"])
        flags: List[str] = []
        kernel_total, self.last_launches = None, None
        kernel_calls: Tuple[Optional[float], ...] = ()
        if recorded is not None and rec is not None:
            # Kept for diagnostics and for recording test fixtures (scripts/record_cupti_fixtures.py).
            self.last_attribution = {"recorded": recorded, "kept": [o["tags"] for o in kept],
                                     "attempted": [o["tags"] for o in log], "event_holds": [o["held_s"] for o in kept]}
            self._learn_lead(recorded, self.last_attribution["attempted"])
            kb = block_kernel_time(recorded, self.last_attribution["kept"], self.last_attribution["attempted"],
                                   self.last_attribution["event_holds"], rec.recalibrate, self._ticks_per_second)
            flags.extend(kb.flags)
            kernel_calls = kb.calls
            self.last_launches = block_launches(rec, recorded, self.last_attribution, kb.flags, demangle)
            if kb.usable:
                kernel_total = kb.total
                self._ticks_per_second = kb.ticks_per_second  # what agreed with the events: the next block's first try
            if NO_HOLD_RECORD in kb.flags:
                trouble = "no record of the timer's own hold kernel"
        elif rec is not None:
            flags.append(RECORDER_ERROR)
        if rec is not None:
            self._recorder_trouble = self._recorder_trouble + 1 if trouble else 0
            if self._recorder_trouble >= 3:
                self._drop_recorder(trouble)
        # The events' envelope check stands in for a record of every kernel: with a usable
        # recorder, work on any stream of this process is in the record (attributed to its
        # call, or foreign), so the record decides. The host's slack then measures the
        # recorder's own overhead on the host, not foreign work (on an H100, a 3.5 us add
        # whose record held nothing but its own and the harness's kernels showed a 0.49 ms
        # envelope a call), and falling back to the
        # envelope would time that overhead instead of the op.
        if foreign and kernel_total is None and FOREIGN not in flags:
            flags.append(FOREIGN)
        foreign = FOREIGN in flags
        if foreign:
            total, source = fallback_total, ENVELOPE
        elif kernel_total is not None:
            total, source = kernel_total, KERNEL
        else:
            total, source = event_total, EVENTS
        self.last_call_times = tuple(c for o in kept for c in o["calls"])
        self.last_kernel_times = kernel_calls
        kernel_s = kernel_total / number if kernel_total is not None else None
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
            kernel_seconds=kernel_s,
            record_s=recorded.host_seconds if recorded is not None else 0.0,
            source=source,
            flags=tuple(flags),
        )
        self.last_timing = BlockTiming(total / number, source, event_total / number, kernel_s, tuple(flags))
        return total / number
