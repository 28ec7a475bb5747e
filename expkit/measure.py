"""The measurement loop: interleaved rounds with adaptive stopping.

Each round takes one block of baseline calls and one block of candidate calls, in a
random order drawn per round, so that clock drift, thermal state and background load
hit both sides alike instead of favouring whichever ran second. Each side gets its
own block size (see :func:`expkit.timing.calibrate`) so a fast candidate is not timed
with a block too short for the clock.

Sampling stops at the first of:

* the interval on the speedup is within ``±target_ci`` -- checked only once
  ``min_rounds`` rounds and ``min_seconds`` of timed work are in, because an interval
  from a handful of samples can look tight by luck;
* ``max_seconds`` of timed work (the hard budget): the result then says so, and the
  verdict may have to be ``inconclusive``;
* ``max_rounds``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from . import stats
from .settings import MeasureSettings
from .timing import Timer, calibrate

SIDES = ("baseline", "candidate")
STOP_TARGET = "target interval reached"
STOP_BUDGET = "time budget spent before the target interval was reached"
STOP_ROUNDS = "round limit reached before the target interval was reached"


@dataclass(frozen=True)
class Sample:
    """One timed block: ``seconds`` per call over ``number`` calls."""

    case: str
    side: str
    round: int
    position: int
    number: int
    seconds: float
    t_start: float
    t_end: float


@dataclass(frozen=True)
class CaseSamples:
    case: str
    samples: Tuple[Sample, ...]
    stopped: str
    timed_seconds: float
    wall_seconds: float
    method: str

    def times(self, side: str) -> list[float]:
        return [s.seconds for s in self.samples if s.side == side]

    @property
    def budget_spent(self) -> bool:
        return self.stopped != STOP_TARGET


ProgressFn = Callable[[str, int, Optional[float], float], None]


def _warm_up(fn: Callable[[], Any], seconds: float, clock: Callable[[], float]) -> None:
    fn()  # at least once: first-call costs (allocation, autotuning, lazy init) stay out
    end = clock() + seconds
    while clock() < end:
        fn()


def measure_case(
    case: str,
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    timer: Timer,
    settings: MeasureSettings,
    *,
    rng: random.Random,
    clock: Callable[[], float] = time.perf_counter,
    progress: Optional[ProgressFn] = None,
) -> CaseSamples:
    """Time both sides of one case until the interval is tight or the budget is spent."""
    wall_start = clock()
    fns = {"baseline": baseline, "candidate": candidate}
    for side in SIDES:
        _warm_up(fns[side], settings.warmup_seconds / 2, clock)
    number = {side: calibrate(timer, fns[side], settings.min_block_seconds) for side in SIDES}

    samples: list[Sample] = []
    timed = 0.0
    stopped = STOP_ROUNDS
    next_check = settings.min_rounds
    for rnd in range(settings.max_rounds):
        order = list(SIDES)
        rng.shuffle(order)
        for position, side in enumerate(order):
            t0 = clock()
            per_call = timer.sample(fns[side], number[side])
            t1 = clock()
            samples.append(Sample(case, side, rnd, position, number[side], per_call, t0, t1))
            timed += per_call * number[side]
        rounds = rnd + 1
        width: Optional[float] = None
        if rounds >= next_check and timed >= settings.min_seconds:
            est = stats.estimate(
                [s.seconds for s in samples if s.side == "baseline"],
                [s.seconds for s in samples if s.side == "candidate"],
                confidence=settings.confidence, resamples=min(settings.bootstrap, 500), seed=rnd,
            )
            width = est.relative_half_width
            # Re-checking every round costs a bootstrap each; every ~10% more rounds
            # keeps the overshoot past the stopping point small.
            next_check = rounds + max(1, rounds // 10)
            if width <= settings.target_ci:
                stopped = STOP_TARGET
                break
        if progress is not None:
            progress(case, rounds, width, settings.max_seconds - timed)
        if timed >= settings.max_seconds:
            stopped = STOP_BUDGET
            break
    return CaseSamples(case, tuple(samples), stopped, timed, clock() - wall_start, timer.method)
