"""From raw per-call times to a speedup with a confidence interval.

The speedup of a case is the ratio of medians, baseline over candidate. Medians
because timing noise is one-sided (interrupts, clock dips and cache misses only ever
add time), so the mean chases the tail; the median stays with the bulk.

The interval is a percentile bootstrap: resample each side's samples with
replacement, recompute the ratio of medians, and take the central ``confidence``
quantiles of the resampled ratios. It makes no normality assumption, but it is an
approximation with two known weaknesses, both stated where they matter:

* with few samples (under ~20 a side) the bootstrap distribution of a median is
  lumpy and the interval too narrow, so an estimate built on fewer carries a warning;
* it treats samples as independent. Rounds interleave the two sides in a random
  order, so slow drift hits both alike and cancels in the ratio, but samples taken
  close together are still correlated, and the interval is somewhat optimistic.
  That is why the verdict demands ``lo >= threshold`` and not merely a point estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

import numpy as np

FEW_SAMPLES = 20
NOISY_IQR = 0.10


@dataclass(frozen=True)
class SideSummary:
    """One side of one case: median per-call seconds with its interval and spread."""

    median: float
    ci_low: float
    ci_high: float
    iqr: float
    n: int

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else float("inf")


@dataclass(frozen=True)
class Estimate:
    """Speedup of candidate over baseline for one case, with its caveats attached."""

    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    baseline: SideSummary
    candidate: SideSummary
    warnings: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.ci_low <= self.speedup <= self.ci_high):
            # Percentile intervals can in rare lumpy cases exclude the point estimate;
            # the interval is what the verdict uses, so keep them consistent.
            object.__setattr__(self, "ci_low", min(self.ci_low, self.speedup))
            object.__setattr__(self, "ci_high", max(self.ci_high, self.speedup))

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width over the point estimate (0.01 means ±1%)."""
        return (self.ci_high - self.ci_low) / (2 * self.speedup) if self.speedup > 0 else float("inf")

    @property
    def includes_one(self) -> bool:
        return self.ci_low <= 1.0 <= self.ci_high


def _summary(x: np.ndarray, boot_medians: np.ndarray, alpha: float) -> SideSummary:
    q1, q3 = np.percentile(x, [25, 75])
    lo, hi = np.quantile(boot_medians, [alpha / 2, 1 - alpha / 2])
    return SideSummary(float(np.median(x)), float(lo), float(hi), float(q3 - q1), int(x.size))


def estimate(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """Ratio of medians (baseline / candidate) with a percentile-bootstrap interval.

    ``seed`` makes the interval reproducible from the stored samples, so a report
    re-rendered later shows the same numbers.
    """
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    if b.size == 0 or c.size == 0:
        raise ValueError("estimate needs at least one sample on each side")
    if np.any(b <= 0) or np.any(c <= 0):
        raise ValueError("times must be positive")
    rng = np.random.default_rng(seed)
    alpha = 1 - confidence
    boot_b = np.median(b[rng.integers(0, b.size, size=(resamples, b.size))], axis=1)
    boot_c = np.median(c[rng.integers(0, c.size, size=(resamples, c.size))], axis=1)
    ratios = boot_b / boot_c
    lo, hi = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    sb, sc = _summary(b, boot_b, alpha), _summary(c, boot_c, alpha)
    warnings = []
    n_min = min(b.size, c.size)
    if n_min < FEW_SAMPLES:
        warnings.append(f"only {n_min} samples on one side: the bootstrap interval is likely too narrow")
    for label, s in (("baseline", sb), ("candidate", sc)):
        if s.relative_iqr > NOISY_IQR:
            warnings.append(f"{label} times are noisy: interquartile range is {s.relative_iqr:.0%} of the median")
    return Estimate(float(sb.median / sc.median), float(lo), float(hi), confidence, sb, sc, tuple(warnings))
