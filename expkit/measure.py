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

A timer that offers ``sample_batch`` (``defences.SessionTimer``, whose blocks run in a
worker process) gets the rounds up to the next stopping check in one request: their
order is drawn here before the request, nothing is decided between two checks, and
one round trip per batch instead of per block keeps the parent's wake-up latency out
of the run time. Each sample's ``t_start``/``t_end`` is then its share of the batch's
span on this process's clock, in proportion to its timed work.
"""

from __future__ import annotations

import math
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
    warm = getattr(fn, "warm_up", None)
    if warm is not None:  # a side that runs elsewhere (defences.SideFn) warms up where it runs
        warm(seconds)
        return
    fn()  # at least once: first-call costs (allocation, autotuning, lazy init) stay out
    end = clock() + seconds
    while clock() < end:
        fn()


#: The most rounds one batch may hold (a timer with ``sample_batch``).
MAX_BATCH_ROUNDS = 64


def _batch_rounds(rnd: int, next_check: int, timed: float, round_s: Optional[float],
                  settings: MeasureSettings) -> int:
    """How many rounds to plan at once for a timer that takes batches.

    Nothing is decided between two stopping checks, so the rounds up to the next
    one can go in one request (a timer in another process pays one round trip per
    request). Past a check that was skipped for want of ``min_seconds``, the batch
    is sized to reach it; a batch never plans more timed work than the budget has
    left (the last round's time is the guide, and the first round goes alone to
    provide it), so the overshoot stays about one round."""
    if round_s is None:
        return 1  # the first round measures how long a round takes
    if rnd < next_check:
        k = next_check - rnd
    elif round_s:
        k = math.ceil(max(settings.min_seconds - timed, 0.0) / round_s) or 1
    else:
        k = 1
    if round_s:
        k = min(k, max(1, int((settings.max_seconds - timed) / round_s)))
    return max(1, min(k, MAX_BATCH_ROUNDS, settings.max_rounds - rnd))


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
    batch = getattr(timer, "sample_batch", None)
    round_s: Optional[float] = None  # timed seconds of the last round, to size batches
    rnd = 0
    while rnd < settings.max_rounds:
        k = 1 if batch is None else _batch_rounds(rnd, next_check, timed, round_s, settings)
        plan = []
        for r in range(k):
            order = list(SIDES)
            rng.shuffle(order)
            plan += [(rnd + r, position, side) for position, side in enumerate(order)]
        if batch is None:
            for r, position, side in plan:
                t0 = clock()
                per_call = timer.sample(fns[side], number[side])
                t1 = clock()
                samples.append(Sample(case, side, r, position, number[side], per_call, t0, t1))
                timed += per_call * number[side]
        else:
            t0 = clock()
            got = batch([(fns[side], number[side]) for _, _, side in plan])
            t1 = clock()
            # Each sample's place in the batch's span, in proportion to its timed work:
            # the telemetry flags samples by time window.
            work = [max(p * number[side], 0.0) for p, (_, _, side) in zip(got, plan)]
            scale = (t1 - t0) / sum(work) if sum(work) > 0 else 0.0
            at = t0
            for (r, position, side), per_call, w in zip(plan, got, work):
                samples.append(Sample(case, side, r, position, number[side], per_call, at, at + w * scale))
                at += w * scale
                timed += per_call * number[side]
        round_s = sum(s.seconds * s.number for s in samples[-2 * k:]) / k
        rnd += k
        rounds = rnd
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
