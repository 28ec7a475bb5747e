"""What the kernel's micro speedup predicts for its workload, and whether the workload agrees.

The prediction (Amdahl's law)
-----------------------------
If the replaced op takes a share ``f`` of the baseline workload's time and the kernel
is ``s`` times faster, the workload should become ``1 / ((1 - f) + f / s)`` times
faster, and no more. ``f`` is read from a profile of the baseline workload
(``torch.profiler``): on a GPU, the time of the kernels the replaced op launched (or
whose names the manifest's ``replaced`` patterns match) over the run's wall time; on
the CPU, the time of the matching ops (outermost ones only) over the wall time.

The prediction carries an interval. The micro interval ``[s_lo, s_hi]`` comes from
the micro measurement; the share's spread ``[f_lo, f_hi]`` from several profiled runs
(min and max), or ``[0, 1]`` where no pattern names the replaced op. The predicted
speedup is monotone in each of ``f`` and ``s``, so its interval is the smallest and
largest value at the four corners of that box. This is conservative: it treats the
two uncertainties as if they could take their extremes together.

The disagreement rule
---------------------
With the measured end-to-end interval ``[e_lo, e_hi]`` and the predicted ``[p_lo, p_hi]``:

* ``e_hi < p_lo``: the workload falls short of the prediction beyond both intervals.
  Where the micro result is a win (``s_lo > 1``) and the workload a loss (``e_hi < 1``),
  that is **"micro win, end-to-end loss"**; where the workload still gains
  (``e_lo > 1``), **"end-to-end gain smaller than predicted"**; otherwise
  "end-to-end below prediction".
* ``e_lo > p_hi``: "end-to-end gain larger than predicted" (the change helped the
  workload in some way the kernel's timing does not show).
* otherwise "as predicted": the intervals overlap, and the run has no evidence of a
  disagreement -- which is not evidence of agreement when the intervals are wide.

Only an interval falling short counts; a point estimate below the prediction inside
overlapping intervals does not. When the claim names the workload
(``end_to_end.claim``), the workload's interval is judged against that figure like a
case (``verdict.judge_case``), and a refuted workload refutes the run
(:func:`expkit.verdict.pipeline.end_to_end`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# Labels of the disagreement rule (see the module docstring).
AS_PREDICTED = "as predicted"
MICRO_WIN_E2E_LOSS = "micro win, end-to-end loss"
SMALLER_GAIN = "end-to-end gain smaller than predicted"
BELOW = "end-to-end below prediction"
LARGER_GAIN = "end-to-end gain larger than predicted"
SHORT_LABELS = (MICRO_WIN_E2E_LOSS, SMALLER_GAIN, BELOW)


def amdahl(share: float, speedup: float) -> float:
    """Speedup of the whole when a part taking ``share`` of its time gets ``speedup`` faster."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    if speedup <= 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    return 1.0 / ((1.0 - share) + share / speedup)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval (``low <= value <= high``)."""

    value: float
    low: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.value <= self.high:
            raise ValueError(f"interval [{self.low}, {self.high}] does not hold its value {self.value}")


@dataclass(frozen=True)
class Prediction:
    """The end-to-end speedup the micro result predicts, with the inputs behind it.

    ``share_source`` says where the share came from: ``"profile"`` (measured) or
    ``"unknown"`` (no pattern named the replaced op, so any share in [0, 1])."""

    share: Interval
    micro: Interval
    speedup: Interval
    share_source: str = "profile"


def predict(micro: Interval, share: Optional[Interval]) -> Prediction:
    """Amdahl's law over the box ``share x micro`` (see the module docstring)."""
    source = "profile"
    if share is None:
        share, source = Interval(0.5, 0.0, 1.0), "unknown"
    corners = [amdahl(f, s) for f in (share.low, share.high) for s in (micro.low, micro.high)]
    point = amdahl(share.value, micro.value)
    return Prediction(share, micro, Interval(point, min(corners + [point]), max(corners + [point])), source)


@dataclass(frozen=True)
class Agreement:
    """The verdict of the disagreement rule: one of the labels above, and why."""

    label: str
    detail: str

    @property
    def short(self) -> bool:
        """The measurement falls short of the prediction beyond both intervals."""
        return self.label in SHORT_LABELS


def _x(v: float) -> str:
    return f"{v:.3g}x"


def compare(prediction: Prediction, measured: Interval) -> Agreement:
    """Hold the measured end-to-end interval against the predicted one."""
    p, e, s = prediction.speedup, measured, prediction.micro
    said = (f"measured {_x(e.value)} [{_x(e.low)}, {_x(e.high)}] end to end; the micro speedup "
            f"{_x(s.value)} [{_x(s.low)}, {_x(s.high)}] predicts {_x(p.value)} [{_x(p.low)}, {_x(p.high)}]")
    if e.high < p.low:
        if s.low > 1.0 and e.high < 1.0:
            return Agreement(MICRO_WIN_E2E_LOSS, said)
        if e.low > 1.0:
            return Agreement(SMALLER_GAIN, said)
        return Agreement(BELOW, said)
    if e.low > p.high:
        return Agreement(LARGER_GAIN, said)
    return Agreement(AS_PREDICTED, said)
