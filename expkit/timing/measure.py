"""The measurement loop: interleaved rounds with adaptive stopping, over fresh processes.

Each round times one block of baseline calls and one of candidate calls, in a random order
drawn per round, so that drift, thermal state and background load hit both sides alike; each
side has its own block size (:func:`expkit.timing.calibrate`). Sampling stops at the first of:
the interval on the speedup within ``±target_ci`` (checked only once ``min_rounds`` rounds and
``min_seconds`` of timed work are in, since a handful of samples can look tight by luck);
``max_seconds`` of timed work (the result then says so); ``max_rounds``.

* A timer with ``sample_batch`` (a worker's blocks) gets the rounds up to the next stopping
  check in one request, their orders drawn here first; each round still pairs two blocks timed
  next to each other, so that what they share cancels.
* **Two figures.** A timer's :class:`~.timer.BlockTiming` keeps, per :class:`Sample`,
  ``seconds`` (what the verdict uses), ``call_seconds``, ``source`` and ``flags``.
* **Several processes.** :func:`measure_replicated` runs ``measure.processes`` replicates, each
  a fresh pair of workers that measures every case once; each gets ``min_rounds`` and a
  ``1/K`` share of the seconds and rounds, and stops on its own interval
  (:func:`expkit.verdict.stats.process_target`), so the stop never depends on the spread between
  processes that the final interval estimates.

The rule stops on the interval's width, never on where it lies against a claim; simulation
showed the final interval at its nominal coverage without an adjusted level (docs/decisions.md).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from ..verdict import stats
from ..manifest.settings import MeasureSettings
from .timer import BlockTiming, Timer, TimerInfo, calibrate
from .warm_up import warm_up

SIDES = ("baseline", "candidate")
STOP_TARGET = "target interval reached"
STOP_BUDGET = "time budget spent before the target interval was reached"
STOP_ROUNDS = "round limit reached before the target interval was reached"
STOP_SPREAD = stats.STOP_SPREAD


@dataclass(frozen=True)
class Sample:
    """One timed block: ``seconds`` per call over ``number`` calls.

    ``call_seconds``: the call time beside it when the timer has two figures (CUDA
    events beside kernel time), else None. ``source``: which figure ``seconds`` is
    (``timer.SOURCES``; empty from a timer that does not say). ``flags``: what the
    block showed, ``;``-separated (``kernel_time`` names them)."""

    case: str
    side: str
    round: int
    position: int
    number: int
    seconds: float
    t_start: float
    t_end: float
    replicate: int = 0  # the process (a fresh worker pair) that timed it
    call_seconds: Optional[float] = None
    source: str = ""
    flags: str = ""


@dataclass(frozen=True)
class CaseSamples:
    case: str
    samples: Tuple[Sample, ...]
    stopped: str
    timed_seconds: float
    wall_seconds: float
    method: str
    info: Optional[TimerInfo] = None  # which figure ``seconds`` is, and why (``timer.TimerInfo``)

    def times(self, side: str) -> list[float]:
        return [s.seconds for s in self.samples if s.side == side]

    @property
    def budget_spent(self) -> bool:
        """Whether the case stopped on its time or round limit before its target: not where
        every process reached its own target (:data:`STOP_SPREAD`), whose width more time
        would not narrow."""
        return self.stopped in (STOP_BUDGET, STOP_ROUNDS)

    @property
    def processes(self) -> int:
        return len({s.replicate for s in self.samples})

    def rounds(self, keep: Optional[Sequence[bool]] = None) -> Tuple[stats.Rounds, ...]:
        """Each process's paired rounds; ``keep`` (one per sample) leaves samples out,
        and a round that loses a side is left out whole."""
        kept = self.samples if keep is None else [s for s, k in zip(self.samples, keep) if k]
        return stats.pair_rounds((s.replicate, s.round, s.side, s.seconds) for s in kept)


def case_estimate(cs: CaseSamples, *, confidence: float, resamples: int, seed: int,
                  keep: Optional[Sequence[bool]] = None) -> stats.Estimate:
    """The speedup of a measured case over its processes' paired rounds
    (:func:`expkit.verdict.stats.estimate_rounds`); ``keep`` as :meth:`CaseSamples.rounds`."""
    return stats.estimate_rounds(cs.rounds(keep), confidence=confidence, resamples=resamples, seed=seed)


ProgressFn = Callable[[str, int, Optional[float], float], None]


def _warm_up(fn: Callable[[], Any], seconds: float, clock: Callable[[], float]) -> None:
    warm = getattr(fn, "warm_up", None)
    if warm is not None:  # a side that runs elsewhere (bench.defences.envelope.SideFn) warms up where it runs
        warm(seconds)
        return
    warm_up(fn, seconds, clock)  # at least once: first-call costs (allocation, autotuning, lazy init) stay out


#: The most rounds one batch may hold (a timer with ``sample_batch``).
MAX_BATCH_ROUNDS = 64


@dataclass(frozen=True)
class Share:
    """One process's part of a case's budget (see the module docstring), and the
    relative half-width its own interval must reach (``stats.process_target``)."""

    warmup_seconds: float
    min_rounds: int
    max_rounds: int
    min_seconds: float
    max_seconds: float
    target: float
    processes: int = 1


def share(settings: MeasureSettings, processes: int, replicate: int) -> Share:
    """Replicate ``replicate``'s share of a case's budget when ``processes`` measure it."""
    k = max(1, processes)
    return Share(
        warmup_seconds=settings.warmup_seconds if replicate == 0 else settings.warmup_seconds / k,
        min_rounds=settings.min_rounds,
        max_rounds=max(settings.min_rounds, settings.max_rounds // k),
        min_seconds=settings.min_seconds / k,
        max_seconds=settings.max_seconds / k,
        target=stats.process_target(settings.target_ci, settings.confidence, k),
        processes=k,
    )


def _batch_rounds(rnd: int, next_check: int, timed: float, round_s: Optional[float], budget: Share) -> int:
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
        k = math.ceil(max(budget.min_seconds - timed, 0.0) / round_s) or 1
    else:
        k = 1
    if round_s:
        k = min(k, max(1, int((budget.max_seconds - timed) / round_s)))
    return max(1, min(k, MAX_BATCH_ROUNDS, budget.max_rounds - rnd))


def _pairs(samples: Sequence[Sample], replicate: int) -> stats.Rounds:
    by_round: Dict[int, Dict[str, float]] = {}
    for x in samples:
        by_round.setdefault(x.round, {})[x.side] = x.seconds
    full = [r for r in by_round.values() if len(r) == 2]
    return stats.Rounds(replicate, tuple(r["baseline"] for r in full), tuple(r["candidate"] for r in full))


#: Bootstrap resamples of a stopping check with several processes (see :func:`_own_width`).
CHECK_RESAMPLES = 200


def _own_width(samples: Sequence[Sample], replicate: int, settings: MeasureSettings, budget: Share,
               seed: int) -> float:
    """This process's relative half-width, as the final interval will see it.

    Rounds are resampled as pairs, as the final interval does (``verdict/stats.py``).
    Alone (``processes=1``) the final interval is this percentile interval, so the check
    is too, from ``min(bootstrap, 500)`` resamples. With several, the final interval is
    built from each process's standard error, so the check is ``z`` times the bootstrap
    standard deviation of the log ratio: a width, not tails, which 200 resamples give to
    within about 5% (the relative standard error of a standard deviation from ``B``
    draws is ``1/sqrt(2(B-1))``), at 40% of the cost of 500."""
    alone = budget.processes <= 1
    return stats.check_width(_pairs(samples, replicate), confidence=settings.confidence,
                             resamples=min(settings.bootstrap, 500) if alone else CHECK_RESAMPLES, seed=seed,
                             percentile=alone)


def _sample_rounds(case: str, fns: Mapping[str, Callable[[], Any]], timer: Timer, settings: MeasureSettings,
                   budget: Share, *, replicate: int, rng: random.Random, clock: Callable[[], float],
                   progress: Optional[ProgressFn],
                   numbers: Optional[Mapping[str, int]] = None) -> Tuple[List[Sample], str, float]:
    """One process's rounds of one case: until its own interval is within
    ``budget.target`` (checked from ``min_rounds`` and ``min_seconds`` on, every ~10%
    more rounds) or its budget is spent. ``numbers``: each side's calls a block, where an
    earlier process calibrated them; else calibrated here. Returns the samples, why it
    stopped, and the timed seconds."""
    for side in SIDES:
        _warm_up(fns[side], budget.warmup_seconds / 2, clock)
    number = {side: int(numbers[side]) if numbers and numbers.get(side) else
              calibrate(timer, fns[side], settings.min_block_seconds) for side in SIDES}

    samples: list[Sample] = []
    timed = 0.0
    stopped = STOP_ROUNDS
    next_check = budget.min_rounds
    batch = getattr(timer, "sample_batch", None)
    round_s: Optional[float] = None  # timed seconds of the last round, to size batches
    rnd = 0
    while rnd < budget.max_rounds:
        k = 1 if batch is None else _batch_rounds(rnd, next_check, timed, round_s, budget)
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
                samples.append(_sample(case, side, r, position, number[side], per_call, _account(timer, per_call),
                                       t0, t1, replicate))
                timed += per_call * number[side]
        else:
            t0 = clock()
            # A timer with two figures per block sends each block's account
            # (BlockTiming, or its dict from a worker) in place of the bare seconds.
            got = [BlockTiming.coerce(g) for g in batch([(fns[side], number[side]) for _, _, side in plan])]
            t1 = clock()
            # Each sample's place in the batch's span, in proportion to its timed work:
            # the telemetry flags samples by time window.
            work = [max(g.seconds * number[side], 0.0) for g, (_, _, side) in zip(got, plan)]
            scale = (t1 - t0) / sum(work) if sum(work) > 0 else 0.0
            at = t0
            for (r, position, side), g, w in zip(plan, got, work):
                samples.append(_sample(case, side, r, position, number[side], g.seconds, g, at, at + w * scale,
                                       replicate))
                at += w * scale
                timed += g.seconds * number[side]
        round_s = sum(s.seconds * s.number for s in samples[-2 * k:]) / k
        rnd += k
        rounds = rnd
        width: Optional[float] = None
        if rounds >= next_check and timed >= budget.min_seconds:
            width = _own_width(samples, replicate, settings, budget, seed=1_000_003 * replicate + rnd)
            # Re-checking every round costs a bootstrap each; every ~10% more rounds
            # keeps the overshoot past the stopping point small.
            next_check = rounds + max(1, rounds // 10)
            if width <= budget.target:
                stopped = STOP_TARGET
                break
        if progress is not None:
            progress(case, rounds, width, budget.max_seconds - timed)
        if timed >= budget.max_seconds:
            stopped = STOP_BUDGET
            break
    return samples, stopped, timed


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
    replicate: int = 0,
) -> CaseSamples:
    """Time both sides of one case in this process until the interval is tight or the
    budget is spent: one process, the whole budget (``measure.processes`` is not read)."""
    wall_start = clock()
    samples, stopped, timed = _sample_rounds(case, {"baseline": baseline, "candidate": candidate}, timer, settings,
                                             share(settings, 1, 0), replicate=replicate, rng=rng, clock=clock,
                                             progress=progress)
    return CaseSamples(case, tuple(samples), stopped, timed, clock() - wall_start, timer.method,
                       TimerInfo.coerce(getattr(timer, "info", None)))


def _account(timer: Timer, seconds: float) -> Optional[BlockTiming]:
    """The timer's account of the block it just timed, when it keeps one (``last_timing``)."""
    t = getattr(timer, "last_timing", None)
    if t is None:
        return None
    t = BlockTiming.coerce(t)
    return t if t.seconds == seconds else None


def _sample(case: str, side: str, rnd: int, position: int, number: int, seconds: float,
            timing: Optional[BlockTiming], t0: float, t1: float, replicate: int) -> Sample:
    """A :class:`Sample`, with the block's second figure, source and flags where the timer gave them."""
    if timing is None or (timing.source == "cpu" and timing.call_seconds is None and not timing.flags):
        return Sample(case, side, rnd, position, number, seconds, t0, t1, replicate)
    return Sample(case, side, rnd, position, number, seconds, t0, t1, replicate, timing.call_seconds, timing.source,
                  ";".join(timing.flags))


@dataclass(frozen=True)
class CaseSides:
    """What one replicate offers for one case: the two sides and the timer, exactly as
    :func:`measure_case` takes them."""

    baseline: Callable[[], Any]
    candidate: Callable[[], Any]
    timer: Timer


class Replicate(Protocol):
    """One fresh pair of worker processes, open for every case of a run.

    ``sides(case)`` is called just before the case's rounds (the place to prepare its
    inputs and open a telemetry window), ``finish(case)`` just after them (to collect
    the case's findings and close the window), ``close()`` once, after the last case or
    an error."""

    def sides(self, case: str) -> CaseSides: ...

    def finish(self, case: str) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Replicated:
    """A run's measurement over its replicates: each case's samples from every process,
    and the cases that raised (left out of ``cases``, with the first error each)."""

    cases: Mapping[str, CaseSamples]
    errors: Mapping[str, BaseException]
    processes: int


def _final_stop(settings: MeasureSettings, samples: Sequence[Sample], reasons: Sequence[str], seed: int) -> str:
    """Why a case's sampling ended, over all its processes."""
    if len(reasons) == 1:
        return reasons[0]
    try:
        est = stats.estimate_rounds(stats.pair_rounds((s.replicate, s.round, s.side, s.seconds) for s in samples),
                                    confidence=settings.confidence, resamples=min(settings.bootstrap, 500), seed=seed)
    except ValueError:
        return STOP_ROUNDS
    if est.relative_half_width <= settings.target_ci:
        return STOP_TARGET
    return next((r for r in reasons if r != STOP_TARGET), STOP_SPREAD)


def measure_replicated(
    cases: Sequence[str],
    open_replicate: Callable[[int], Replicate],
    settings: MeasureSettings,
    *,
    rng: random.Random,
    clock: Callable[[], float] = time.perf_counter,
    progress: Optional[ProgressFn] = None,
) -> Replicated:
    """Measure every case in ``measure.processes`` fresh replicates, replicate-major.

    Replicate ``r`` is opened, measures each case with its share of the budget
    (:func:`share`), and is closed (always, also after an error) before ``r + 1`` opens.
    A case that raises is left out of the later replicates and of the result, with its
    error kept; a replicate that fails to open ends the loop, and every case not yet
    finished gets that error. A case's stop reason is the target when the interval over
    all its processes is within ``target_ci``; otherwise the first process's reason for
    stopping short, or :data:`STOP_SPREAD` when each process reached its own target.

    Each case's blocks are calibrated once, in the first replicate that measures it; the
    later ones time blocks of as many calls (with the sides in workers each of
    :func:`calibrate`'s blocks is a request of its own)."""
    k = max(1, settings.processes)
    got: Dict[str, List[Sample]] = {c: [] for c in cases}
    reasons: Dict[str, List[str]] = {c: [] for c in cases}
    timed: Dict[str, float] = {c: 0.0 for c in cases}
    wall: Dict[str, float] = {c: 0.0 for c in cases}
    method: Dict[str, str] = {}
    info: Dict[str, Optional[TimerInfo]] = {}
    errors: Dict[str, BaseException] = {}
    numbers: Dict[str, Dict[str, int]] = {}  # each case's calls a block, by side, from its first replicate
    for r in range(k):
        try:
            rep = open_replicate(r)
        except Exception as e:
            for c in cases:
                errors.setdefault(c, e)
            break
        try:
            for c in cases:
                if c in errors:
                    continue
                t0 = clock()
                try:
                    sides = rep.sides(c)
                    samples, why, secs = _sample_rounds(
                        c, {"baseline": sides.baseline, "candidate": sides.candidate}, sides.timer, settings,
                        share(settings, k, r), replicate=r, rng=rng, clock=clock, progress=progress,
                        numbers=numbers.get(c))
                    rep.finish(c)
                except Exception as e:
                    errors[c] = e
                    continue
                got[c] += samples
                numbers.setdefault(c, {x.side: x.number for x in samples})
                reasons[c].append(why)
                timed[c] += secs
                wall[c] += clock() - t0
                method.setdefault(c, sides.timer.method)
                info.setdefault(c, TimerInfo.coerce(getattr(sides.timer, "info", None)))
        finally:
            rep.close()
    out = {c: CaseSamples(c, tuple(got[c]), _final_stop(settings, got[c], reasons[c], seed=i), timed[c], wall[c],
                          method[c], info.get(c))
           for i, c in enumerate(cases) if c not in errors}
    return Replicated(out, errors, k)
