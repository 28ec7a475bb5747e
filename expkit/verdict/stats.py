"""From raw per-call times to a speedup with a confidence interval.

Medians, because timing noise is one-sided (interrupts, clock dips and cache misses only add
time). The data are *rounds* (one baseline and one candidate block back to back, in a random
order) in *processes* (replicates: fresh pairs of workers), so the interval must see the noise
within a process, which rounds narrow, and between processes, which only more processes can.

* **Point estimate**: in one process the ratio of medians over the rounds whose two sides were
  both kept; over ``K`` processes the geometric mean of their ratios (each weighs the same).
  Each side's figure is the geometric mean of its per-process medians, so the speedup is
  exactly their ratio.
* **Interval, one process**: a percentile bootstrap (``scipy.stats.bootstrap``,
  ``paired=True``) that resamples rounds as pairs, so noise the two sides shared cancels as it
  did in the measurement. It covers the noise within that process only, and says so.
* **Interval, K ≥ 2 processes**: Student's t over the processes' log ratios, back on the ratio
  scale; never narrower than the within-process noise alone implies, because K processes can
  agree by chance, or exactly, when a timer is coarse.

Approximations: the t interval assumes roughly normal per-process log ratios (a bimodal process
effect is not); a one-process bootstrap treats rounds as exchangeable, so correlated rounds make
it narrow (fewer than 20 rounds carry a warning; ``method`` names a one-process estimate);
:func:`estimate`'s independent resampling, kept for stored runs without rounds, ignores what the
sides shared. Why t and not a two-level bootstrap, and percentile and not BCa: docs/decisions.md.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

FEW_SAMPLES = 20
NOISY_IQR = 0.10

INDEPENDENT = "percentile bootstrap, the two sides resampled independently"
PAIRED = ("paired percentile bootstrap over rounds (scipy.stats.bootstrap), one process: it covers the noise "
          "within that process, not the spread between processes")
STUDENT = "Student t over processes of their paired ratios of medians"


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
class ProcessEstimate:
    """One process's speedup: its ratio of medians over its paired rounds, with the
    paired-bootstrap interval and the bootstrap variance of the log ratio."""

    replicate: int
    speedup: float
    ci_low: float
    ci_high: float
    rounds: int
    log_variance: float

    @property
    def relative_half_width(self) -> float:
        return (self.ci_high - self.ci_low) / (2 * self.speedup) if self.speedup > 0 else float("inf")


@dataclass(frozen=True)
class Estimate:
    """Speedup of candidate over baseline for one case, with its caveats attached.

    ``processes`` holds one entry per process for estimates built from rounds
    (:func:`estimate_rounds`), none for :func:`estimate`; ``method`` names the interval."""

    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    baseline: SideSummary
    candidate: SideSummary
    warnings: Tuple[str, ...] = ()
    processes: Tuple[ProcessEstimate, ...] = ()
    method: str = INDEPENDENT

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

    @property
    def process_spread(self) -> Optional[float]:
        """(max − min) of the per-process speedups over the estimate; None under two processes."""
        if len(self.processes) < 2:
            return None
        s = [p.speedup for p in self.processes]
        return (max(s) - min(s)) / self.speedup

    @property
    def process_sd(self) -> Optional[float]:
        """Standard deviation of the per-process log speedups (≈ relative); None under two processes."""
        if len(self.processes) < 2:
            return None
        return float(np.std([math.log(p.speedup) for p in self.processes], ddof=1))

    @property
    def spread_dominates(self) -> bool:
        """Whether the processes disagree by more than the noise within each explains
        (:func:`spread_dominates`). More rounds in each process then would not narrow the
        interval; more processes would."""
        return spread_dominates([math.log(p.speedup) for p in self.processes],
                                [p.log_variance for p in self.processes])

    def record(self) -> Dict[str, Any]:
        """The fields ``result.json`` keeps per case about the interval and the processes
        (schema 3, ``report/store.py``)."""
        return {
            "interval": self.method,
            "processes": len(self.processes) or 1,
            "per_process": [{"speedup": p.speedup, "ci_low": p.ci_low, "ci_high": p.ci_high, "rounds": p.rounds}
                            for p in self.processes] or None,
            "process_spread": self.process_spread,
            "process_sd": self.process_sd,
        }


def overall(estimates: Sequence[Estimate], confidence: float) -> Optional[Dict[str, Any]]:
    """The run's headline figure over its cases (``result.json``'s ``measured.overall``), or
    None where no case was measured.

    **Figure**: the geometric mean of the cases' speedups, each case weighing the same.
    **Interval**: the geometric mean of the cases' lower bounds, and of their upper bounds:
    the interval of the mean where the cases' errors move together (comonotone variables'
    mean has their quantiles' mean as its quantile), wider than independent errors give (on
    the log scale, the half-widths' mean against their root sum of squares over the count).
    It is an interval for the mean of *these* cases, the sizes the manifest declares, with no
    term for the spread between them: they are not a sample of some population of sizes, the
    claim is about them. Two consequences, both tested (``tests/test_stats.py``):

    * where every case's figure lies inside every other case's interval (the cases agree),
      the interval covers every case's figure: on the log scale ``mean(m) - m_j`` is the mean
      of ``m_i - m_j``, each at most case ``i``'s lower half-width, and alike above;
    * where the cases differ by more than their intervals (27.8x and 121x), the interval of
      their mean may exclude each one's own figure, as an interval of a mean should.

    The verdict never reads this figure: it judges each case against its bar and combines
    them by the manifest's ``aggregate`` (``verdict/rules.py``)."""
    ests = list(estimates)
    if not ests:
        return None

    def geomean(xs: Sequence[float]) -> float:
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    return {"speedup": geomean([e.speedup for e in ests]), "ci_low": geomean([e.ci_low for e in ests]),
            "ci_high": geomean([e.ci_high for e in ests]), "confidence": confidence, "cases": len(ests)}


def spread_dominates(log_speedups: Sequence[float], log_variances: Sequence[float], level: float = 0.95) -> bool:
    """Cochran's Q test of heterogeneity: whether per-process log speedups differ by more
    than their own variances (within each process) explain, at ``level``.

    ``Q = sum((x_i - x_w)^2 / v_i)`` around the inverse-variance weighted mean ``x_w``
    follows a chi-squared law with ``k - 1`` degrees of freedom when the processes share
    one true speedup; a Q above its ``level`` quantile says they do not. With fewer than
    two processes, or without a positive variance for each, it says False."""
    # lazy: scipy loads in the runner with its BLAS on one thread first (bench/processes/blas.py)
    from scipy.stats import chi2

    k = len(log_speedups)
    if k < 2 or len(log_variances) != k or any(not (v > 0) for v in log_variances):
        return False
    w = [1.0 / v for v in log_variances]
    mean = sum(wi * x for wi, x in zip(w, log_speedups)) / sum(w)
    q = sum(wi * (x - mean) ** 2 for wi, x in zip(w, log_speedups))
    return bool(q > chi2.ppf(level, k - 1))


def stored_log_variance(ci_low: float, ci_high: float, confidence: float = 0.95) -> float:
    """A process's log-speedup variance from its stored interval (normal approximation)."""
    # lazy: scipy loads in the runner with its BLAS on one thread first (bench/processes/blas.py)
    from scipy.stats import norm

    if not (ci_low > 0 and ci_high > 0):
        return float("nan")
    return ((math.log(ci_high) - math.log(ci_low)) / (2 * norm.ppf(0.5 + confidence / 2))) ** 2


#: Why a case of several processes stopped when each reached its own target and their interval
#: is still wide (``timing/measure.py`` stores it as the case's ``stopped``).
STOP_SPREAD = ("every process reached its own target, but the interval over the processes is wider than the "
               "target (their spread, and the few processes it is estimated from, widen it): more processes "
               "(measure.processes) narrow it, more rounds would not")


def spread_is_the_width(case: Mapping[str, Any]) -> Optional[str]:
    """Why more processes, not more rounds, would narrow a stored case's interval, or None.

    ``case`` is one of ``result.json``'s ``measured.cases``. ``"disagree"`` where its
    processes differ by more than the noise within each (:func:`spread_dominates` on the
    stored per-process intervals); ``"each reached"`` where every process stopped at its
    own target (:data:`STOP_SPREAD`, which older results word with the same start). With
    one process, None: rounds are all there is."""
    processes = int(case.get("processes") or 1)
    if processes < 2:
        return None
    per = [p for p in case.get("per_process") or [] if p.get("speedup")]
    confidence = float(case.get("confidence") or 0.95)
    if spread_dominates([math.log(p["speedup"]) for p in per],
                        [stored_log_variance(p["ci_low"], p["ci_high"], confidence) for p in per]):
        return "disagree"
    if str(case.get("stopped") or "").startswith("every process"):
        return "each reached"
    return None


@dataclass(frozen=True)
class Rounds:
    """One process's rounds with both sides kept: ``baseline[i]`` and ``candidate[i]``
    were timed in the same round. ``dropped``: rounds left out because a side was not
    kept (a sample flagged by telemetry takes its round's other side with it)."""

    replicate: int
    baseline: Tuple[float, ...]
    candidate: Tuple[float, ...]
    dropped: int = 0

    def __post_init__(self) -> None:
        if len(self.baseline) != len(self.candidate):
            raise ValueError("rounds pair one baseline with one candidate time each")


def pair_rounds(rows: Iterable[Tuple[int, int, str, float]]) -> Tuple[Rounds, ...]:
    """Group ``(replicate, round, side, seconds)`` rows into each process's paired rounds.

    A round missing a side is dropped whole (and counted), so that every resampled round
    is a pair. A round with two samples of one side is an error (the loop never makes one)."""
    got: Dict[int, Dict[int, Dict[str, float]]] = defaultdict(dict)
    for rep, rnd, side, seconds in rows:
        sides = got[int(rep)].setdefault(int(rnd), {})
        if side in sides:
            raise ValueError(f"replicate {rep} round {rnd} has two {side} samples")
        sides[side] = float(seconds)
    out = []
    for rep in sorted(got):
        pairs = [(s["baseline"], s["candidate"]) for _, s in sorted(got[rep].items())
                 if "baseline" in s and "candidate" in s]
        dropped = len(got[rep]) - len(pairs)
        out.append(Rounds(rep, tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), dropped))
    return tuple(out)


def median(x: np.ndarray) -> np.ndarray:
    """``np.median`` over the last axis, bit for bit, about five times faster on resamples of
    hundreds of rounds: one partition at the upper middle, and the lower middle as the
    largest element below it (``np.median`` partitions at both, which costs far more)."""
    n = x.shape[-1]
    h = n // 2
    p = np.partition(x, h, axis=-1)
    if n % 2:
        return p[..., h]
    return (p[..., :h].max(axis=-1) + p[..., h]) / 2


def _log_medians(b: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
    if axis != -1:
        b, c = np.moveaxis(b, axis, -1), np.moveaxis(c, axis, -1)
    lb, lc = np.log(median(b)), np.log(median(c))
    return np.stack([lb - lc, lb, lc])


def _bootstrap(b: np.ndarray, c: np.ndarray, confidence: float, resamples: int,
               seed: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paired percentile bootstrap of (log ratio, log median b, log median c): point, (low, high), draws."""
    # lazy: scipy loads in the runner with its BLAS on one thread first (bench/processes/blas.py)
    from scipy.stats import bootstrap

    point = _log_medians(b, c)
    if b.size < 2:  # nothing to resample: the interval is the point (and a warning says why)
        return point, np.stack([point, point]), np.repeat(point[:, None], 2, axis=1)
    res = bootstrap((b, c), _log_medians, paired=True, vectorized=True, n_resamples=resamples,
                    confidence_level=confidence, method="percentile", **_seeded(bootstrap, seed))
    ci = np.stack([np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)])
    return point, ci, np.asarray(res.bootstrap_distribution)


def _seeded(fn: Any, seed: int) -> Dict[str, Any]:
    """The seed keyword of a scipy function: ``rng`` from scipy 1.15, ``random_state`` before."""

    key = "rng" if "rng" in inspect.signature(fn).parameters else "random_state"
    return {key: np.random.default_rng(seed)}


def within_process(rounds: Rounds, *, confidence: float = 0.95, resamples: int = 2000,
                   seed: int = 0) -> ProcessEstimate:
    """One process's ratio of medians with its paired percentile-bootstrap interval."""
    b, c = _checked(rounds)
    point, ci, draws = _bootstrap(b, c, confidence, resamples, seed)
    return ProcessEstimate(rounds.replicate, math.exp(point[0]), math.exp(ci[0][0]), math.exp(ci[1][0]), b.size,
                           float(np.var(draws[0], ddof=1)))


def _checked(rounds: Rounds) -> Tuple[np.ndarray, np.ndarray]:
    b = np.asarray(rounds.baseline, dtype=float)
    c = np.asarray(rounds.candidate, dtype=float)
    if b.size == 0:
        raise ValueError(f"replicate {rounds.replicate} has no round with both sides kept")
    if np.any(b <= 0) or np.any(c <= 0):
        raise ValueError("times must be positive")
    return b, c


def check_width(rounds: Rounds, *, confidence: float, resamples: int, seed: int, percentile: bool) -> float:
    """A stopping check's relative half-width of one process's paired ratio of medians.

    The same paired resampling as :func:`within_process`, in expkit's own few lines:
    the loop makes dozens of these checks per case, and ``scipy.stats.bootstrap``'s fixed
    cost per call (input checks, broadcasting: about 2 ms, measured with cProfile on a
    simulated default run) is many times the work of a check of a few hundred rounds.
    ``percentile``: half the central ``confidence`` range of the resampled ratios over the
    ratio (what :func:`within_process` reports); else ``z`` times their standard
    deviation on the log scale (what the interval over several processes is built from)."""
    b, c = _checked(rounds)
    if b.size < 2:
        return 0.0
    idx = np.random.default_rng(seed).integers(0, b.size, size=(resamples, b.size))
    y = np.log(median(b[idx])) - np.log(median(c[idx]))
    if not percentile:
        return z_quantile(confidence) * float(np.std(y, ddof=1))
    a = 1 - confidence
    lo, hi = np.quantile(y, [a / 2, 1 - a / 2])
    point = float(np.log(median(b)) - np.log(median(c)))
    return (math.exp(max(hi, point)) - math.exp(min(lo, point))) / (2 * math.exp(point))


@functools.lru_cache(maxsize=None)
def z_quantile(confidence: float) -> float:
    """The standard normal quantile of a two-sided ``confidence`` interval (1.96 at 95%)."""
    # lazy: scipy loads in the runner with its BLAS on one thread first (bench/processes/blas.py)
    from scipy.stats import norm

    return float(norm.ppf(1 - (1 - confidence) / 2))


def process_target(target_ci: float, confidence: float, processes: int) -> float:
    """The relative half-width each of ``processes`` processes must reach on its own.

    With one process, the target itself. With K, the final interval is about
    ``t(K−1) · sd / √K`` where ``sd`` is a process's own standard error if the processes
    differ by nothing else; each process stops once its own interval (``z · sd``) is
    within ``target · √K · z / t(K−1)``. Rounds cannot narrow the spread between
    processes, so the rule does not chase it (and does not look at it, which would
    make the stop depend on the very spread the final interval must estimate)."""
    if processes <= 1:
        return target_ci
    # lazy: scipy loads in the runner with its BLAS on one thread first (bench/processes/blas.py)
    from scipy.stats import norm, t

    q = 1 - (1 - confidence) / 2
    return target_ci * math.sqrt(processes) * float(norm.ppf(q)) / float(t.ppf(q, processes - 1))


def _side(x: np.ndarray, center: float, lo: float, hi: float) -> SideSummary:
    q1, q3 = np.percentile(x, [25, 75])
    return SideSummary(float(center), float(lo), float(hi), float(q3 - q1), int(x.size))


def estimate_rounds(processes: Sequence[Rounds], *, confidence: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> Estimate:
    """The speedup over one or more processes' paired rounds (see the module docstring).

    ``seed`` makes the interval reproducible from the stored samples, so a report
    re-rendered later shows the same numbers. Processes with no paired round are left out.
    """
    procs = [p for p in processes if len(p.baseline)]
    if not procs:
        raise ValueError("estimate needs at least one round with both sides")
    alpha = 1 - confidence
    points, cis, draws, arrays = [], [], [], []
    for i, p in enumerate(procs):
        b, c = _checked(p)
        point, ci, d = _bootstrap(b, c, confidence, resamples, seed + 7919 * i)
        points.append(point)
        cis.append(ci)
        draws.append(d)
        arrays.append((b, c))
    per = tuple(ProcessEstimate(p.replicate, math.exp(pt[0]), math.exp(ci[0][0]), math.exp(ci[1][0]), len(p.baseline),
                                float(np.var(d[0], ddof=1)))
                for p, pt, ci, d in zip(procs, points, cis, draws))
    all_b = np.concatenate([a[0] for a in arrays])
    all_c = np.concatenate([a[1] for a in arrays])
    k = len(procs)
    if k == 1:
        pt, ci = points[0], cis[0]
        lo, hi = ci[0], ci[1]  # rows: log ratio, log median b, log median c
        method = PAIRED
    else:
        # lazy: scipy loads in the runner with its BLAS on one thread first (bench/processes/blas.py)
        from scipy.stats import norm, t

        y = np.stack(points)  # k x 3
        pt = y.mean(axis=0)
        s = y.std(axis=0, ddof=1)
        within = np.stack([d.var(axis=1, ddof=1) for d in draws]).mean(axis=0)  # per statistic
        q = 1 - alpha / 2
        half = np.maximum(float(t.ppf(q, k - 1)) * s / math.sqrt(k), float(norm.ppf(q)) * np.sqrt(within / k))
        lo, hi = pt - half, pt + half
        method = f"{STUDENT}: {k} processes, {k - 1} degrees of freedom"
    sb = _side(all_b, math.exp(pt[1]), math.exp(lo[1]), math.exp(hi[1]))
    sc = _side(all_c, math.exp(pt[2]), math.exp(lo[2]), math.exp(hi[2]))
    warnings: List[str] = []
    n = int(all_b.size)
    if n < FEW_SAMPLES:
        warnings.append(f"only {n} rounds with both sides: the interval is likely too narrow")
    if k == 2:
        warnings.append("two processes: one degree of freedom between them makes the interval wide; "
                        "use three or more (measure.processes)")
    dropped = sum(p.dropped for p in procs)
    if dropped:
        warnings.append(f"{dropped} rounds left out whole because one side's sample was not kept")
    for label, side in (("baseline", sb), ("candidate", sc)):
        if side.relative_iqr > NOISY_IQR:
            warnings.append(f"{label} times are noisy: interquartile range is {side.relative_iqr:.0%} of the median")
    return Estimate(math.exp(pt[0]), math.exp(lo[0]), math.exp(hi[0]), confidence, sb, sc, tuple(warnings), per,
                    method)


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
    """Ratio of medians (baseline / candidate) with a percentile-bootstrap interval,
    the two sides resampled independently: for samples without rounds.

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
    boot_b = median(b[rng.integers(0, b.size, size=(resamples, b.size))])
    boot_c = median(c[rng.integers(0, c.size, size=(resamples, c.size))])
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
