"""One place that builds the timer of a side: :func:`make_timer`.

The bench builds one timer per case and side in the process that runs the code under
test; which one follows from the device, the settings and whether the harness has
per-call work to do between calls (the defended loop's fresh inputs). Keeping the
choice here keeps the bench free of timer details and the timers' construction
tested in one place.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from ..manifest.settings import TIMER_CHOICES, MeasureSettings
from .kernel_time import Recorder, RecorderUnavailable
from .timer import CPU, KERNEL, PerfCounterTimer, Timer, TimerInfo
from .cuda_device import TorchCudaDevice
from .cuda_timer import CudaTimer
from .cupti_recorder import open_recorder
from .per_call import HookedDevice, PerCallTimer

RecorderFactory = Callable[[], Recorder]
DeviceFactory = Callable[[], Any]


def _cupti() -> Recorder:

    return open_recorder(names=True)  # the per-call launch check compares kernels by name


def _torch_device() -> Any:

    return TorchCudaDevice()


def make_timer(device: str, measure: MeasureSettings, *, before: Optional[Callable[[], None]] = None,
               after: Optional[Callable[[], None]] = None, clock: Callable[[], float] = time.perf_counter,
               recorder: RecorderFactory = _cupti, cuda_device: DeviceFactory = _torch_device,
               keep_recording: bool = False) -> Timer:
    """The timer for one side's timed blocks.

    Contract:

    * ``device == "cpu"``: with ``before``/``after`` (the defended loop's per-call work),
      a :class:`~.per_call.PerCallTimer` on ``clock`` that runs ``before()`` before and
      ``after()`` after every call, outside the timed spans; without, a
      :class:`~.timer.PerfCounterTimer` around the block.
    * ``device == "cuda"``: a :class:`~.cuda_timer.CudaTimer`, cold when
      ``measure.cold`` (with ``before`` run inside each call's L2 flush through a
      :class:`~.per_call.HookedDevice`, so under the harness's tag and outside the
      call's events), warm otherwise (``before`` is then never called by the timer: a
      warm block has no gap between calls, and the caller refreshes inputs once per
      block). ``after`` is not used on a GPU. With ``measure.timer == "kernel"`` it
      records kernel time through ``recorder()`` (CUPTI by default); when that raises
      :class:`~.kernel_time.RecorderUnavailable` the timer uses CUDA events and its
      ``info.fallback`` says ``"CUPTI unavailable: <why>"``. With ``keep_recording`` the
      recorder keeps its activity kinds enabled between blocks (a block's first CUDA call
      then no longer pays for enabling them: :mod:`.cupti_recorder`), and the caller must
      ``close()`` the timer when its blocks are done.

    Every timer returned has ``sample(fn, number)`` (seconds per call: the verdict's
    figure), ``method`` (a sentence for the report), ``info`` (a
    :class:`~.timer.TimerInfo`) and ``per_call_hook`` (True when it runs ``before``
    before every call itself). A CUDA timer also leaves ``last_timing`` (a
    :class:`~.timer.BlockTiming`: both figures and the block's flags) after each
    ``sample``; send ``last_timing.to_dict()`` to the parent, where
    ``measure.measure_case`` accepts it in place of the bare seconds.
    """
    requested = measure.timer
    if requested not in TIMER_CHOICES:
        raise ValueError(f"measure.timer must be one of {TIMER_CHOICES}, got {requested!r}")
    if device == "cpu":

        timer: Any
        if before is not None or after is not None:
            timer = PerCallTimer(before or _nothing, after or _nothing, clock)
        else:
            timer = PerfCounterTimer(clock)
        timer.info = TimerInfo(CPU, requested)
        return timer
    if device != "cuda":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")

    rec: Optional[Recorder] = None
    fallback = ""
    if requested == KERNEL:
        try:
            rec = recorder()
        except RecorderUnavailable as e:
            fallback = f"CUPTI unavailable: {e}"
        if keep_recording and hasattr(rec, "keep_enabled"):
            rec.keep_enabled = True  # type: ignore[union-attr]
    dev = cuda_device()
    hooked = measure.cold and before is not None
    if hooked:
        dev = HookedDevice(dev, before)  # type: ignore[arg-type]
    timer = CudaTimer(cold=measure.cold, device=dev, clock=clock, recorder=rec, fallback=fallback)
    timer.per_call_hook = hooked
    return timer


def side_timer(device: str, measure: MeasureSettings, before: Callable[[], None], after: Callable[[], None],
               clock: Callable[[], float]) -> Timer:
    """The timer for one side's timed blocks in the bench, which closes it when the case is
    done (its recorder keeps CUPTI's kinds enabled until then). ``per_call_hook`` says
    whether it runs ``before`` itself: a warm GPU block has no gap between calls, so the
    bench refreshes its inputs once per block instead."""
    if device == "cuda" and not measure.cold:
        return make_timer(device, measure, clock=clock, keep_recording=True)
    return make_timer(device, measure, before=before, after=after, clock=clock, keep_recording=True)


def _nothing() -> None:
    return None
