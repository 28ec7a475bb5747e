"""The timing stage: clocks behind a small seam, and the sampling loop that uses them.

* :mod:`.timer` -- the :class:`~.timer.Timer` protocol, the CPU timer,
  :func:`~.timer.calibrate` (block sizes), and the values a timer with two figures
  leaves (:class:`~.timer.BlockTiming`, :class:`~.timer.TimerInfo`); re-exported here.
* :mod:`.cuda_timer` (its GPU seam in :mod:`.cuda_device`) -- CUDA events on the harness
  stream, L2 flushes, launch gaps hidden; with a recorder, kernel time beside them.
* :mod:`.kernel_time` -- the :class:`~.kernel_time.Recorder` seam and each call's span
  from GPU activity records; :mod:`.cupti_recorder` -- the recorder over cupti-python
  (optional: ``expkit[gpu]``).
* :mod:`.per_call` -- the defended loop's per-call timer (CPU) and hooked device (GPU).
* :mod:`.factory` -- :func:`~.factory.make_timer`, the one place a side's timer is chosen.
* :mod:`.figures` -- kernel time and call time per case, and the launch-bound warning.
* :mod:`.telemetry` -- NVML clocks, temperature and throttling around the samples.
* :mod:`.measure` -- interleaved rounds with adaptive stopping, over any Timer.

Hardware sits behind seams that tests fill with seeded fakes or recorded fixtures.
This stage knows nothing of the manifest's code, the defences or the checks; it
imports the verdict stage's statistics (for the stopping rule), the settings' types
and the core's findings.
"""

from .timer import BlockTiming, PerfCounterTimer, Timer, TimerInfo, calibrate

__all__ = ["Timer", "PerfCounterTimer", "calibrate", "BlockTiming", "TimerInfo"]
