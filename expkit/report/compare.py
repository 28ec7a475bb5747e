"""Compare two runs or sessions case by case: what got slower, what got faster, what cannot tell.

``A`` and ``B`` are each a run folder, a session folder, or a folder of run folders. Runs are
matched by manifest name (two single runs whatever their names), cases by name. Every row of
either side is kept, with exactly one mark per metric, as asv's ``compare`` does: ``+`` worse
in B, significant and by more than ``min_effect``; ``-`` better likewise; ``~`` moved by more
than ``min_effect`` but the samples cannot tell; ``=`` no change beyond ``min_effect`` found
(not proof of none); ``!`` newly invalid; ``x`` cannot be compared (the note says why).

* **Candidate time**: one side's samples in A against B, the Mann-Whitney U test
  (``scipy.stats.mannwhitneyu``, two-sided, as asv's ``is_different``); significant below
  ``1 - confidence`` with the samples leaning the way the medians moved. Too few samples stay
  ``~``, never significant.
* **Speedup**: a ratio of two sides within each run, so no rank test applies; significant when
  the percentile-bootstrap interval of its change excludes 1.

The guarantee is one-sided: if the assumptions hold, a ``+`` or ``-`` is wrong about the
direction with probability at most ``(1 - confidence) / 2``; ``=`` and ``~`` promise nothing, and
an untestable row is ``x``, never ``+``. Both tests see only the noise within each run and treat
samples as independent, so a mark also needs ``min_effect``: a clear 1% shift between two runs on
a shared machine is as likely the machine as the code. The speedup is steadier for before/after
on one machine (the baseline absorbs drift); the candidate time is the one to read across GPUs.

``expkit compare`` exits 1 where any row is ``+`` or ``!`` in the gated metric (``gate``:
``time``, ``speedup`` or ``either``), else 0; 2 for a usage error.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import store
from ..core.errors import ExpkitError
from .session import RunEntry, load_session
from .formatting import cell, template_env
from ..verdict.wording import fmt_time, fmt_x

# history: 1 -- first version (rows with time and speedup marks);
#          2 -- each change carries ``p_value`` (Mann-Whitney U for the time; null for the speedup).
COMPARE_SCHEMA_VERSION = 2
WORSE, BETTER, UNSURE, SAME, BROKE, NA = "+", "-", "~", "=", "!", "x"
MARKS = (WORSE, BETTER, UNSURE, SAME, BROKE, NA)
GATES = ("time", "speedup", "either")
DEFAULT_CONFIDENCE = 0.99
DEFAULT_MIN_EFFECT = 0.05
_CHUNK = 256  # bootstrap resamples per block: bounds memory for runs with thousands of samples


@dataclass(frozen=True)
class Change:
    """One metric of one row: B over A, with its interval and mark."""

    a: Optional[float]
    b: Optional[float]
    ratio: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    mark: str
    p_value: Optional[float] = None  # Mann-Whitney U, two-sided (the time); None where no rank test applies


@dataclass(frozen=True)
class Row:
    run: str
    case: str
    time: Change      # candidate seconds per call; ratio > 1 is slower
    speedup: Change   # baseline / candidate; ratio < 1 is worse
    note: str = ""

    def gated(self, gate: str) -> bool:
        marks = {"time": (self.time.mark,), "speedup": (self.speedup.mark,),
                 "either": (self.time.mark, self.speedup.mark)}[gate]
        return WORSE in marks or BROKE in marks


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    rows: Tuple[Row, ...]
    confidence: float
    min_effect: float
    gate: str
    resamples: int

    @property
    def regressions(self) -> Tuple[Row, ...]:
        return tuple(r for r in self.rows if r.gated(self.gate))

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def to_dict(self) -> Dict[str, Any]:
        return {"schema_version": COMPARE_SCHEMA_VERSION, "a": self.a, "b": self.b,
                "confidence": self.confidence, "min_effect": self.min_effect, "gate": self.gate,
                "resamples": self.resamples, "exit_code": self.exit_code,
                "rows": [asdict(r) for r in self.rows]}


def _boot_medians(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    out = np.empty(resamples)
    for start in range(0, resamples, _CHUNK):
        n = min(_CHUNK, resamples - start)
        out[start:start + n] = np.median(x[rng.integers(0, x.size, size=(n, x.size))], axis=1)
    return out


def _mark(ratio: float, lo: float, hi: float, min_effect: float, worse_up: bool,
          significant: Optional[bool] = None) -> str:
    """Mark of a B/A ratio; ``worse_up``: a ratio above 1 is worse (times), else better (speedups).
    ``significant``: the test's answer where one was run, else the interval excluding 1."""
    moved = ratio > 1 + min_effect or ratio < 1 / (1 + min_effect)
    if significant is None:
        significant = lo > 1 or hi < 1
    if not moved:
        return SAME
    if not significant:
        return UNSURE
    up = ratio > 1
    return WORSE if up == worse_up else BETTER


def rank_test(a: np.ndarray, b: np.ndarray, alpha: float) -> Tuple[float, bool, bool]:
    """Mann-Whitney U of B's samples against A's: (p-value, significant at ``alpha``, B leans slower)."""
    # lazy: scipy loads in the runner with its BLAS on one thread first (bench/processes/blas.py)
    from scipy.stats import mannwhitneyu

    res = mannwhitneyu(b, a, alternative="two-sided")
    p = float(res.pvalue)
    return p, p < alpha, float(res.statistic) / (a.size * b.size) > 0.5


def compare_samples(a_base: Sequence[float], a_cand: Sequence[float], b_base: Sequence[float],
                    b_cand: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE,
                    min_effect: float = DEFAULT_MIN_EFFECT, resamples: int = 2000,
                    seed: int = 0) -> Tuple[Change, Change]:
    """The time and speedup changes from A's to B's samples (see the module docstring)."""
    sets = [np.asarray(s, dtype=float) for s in (a_base, a_cand, b_base, b_cand)]
    if any(s.size == 0 for s in sets):
        raise ValueError("every side needs at least one sample")
    rng = np.random.default_rng(seed)
    ab, ac, bb, bc = (_boot_medians(s, rng, resamples) for s in sets)
    mab, mac, mbb, mbc = (float(np.median(s)) for s in sets)
    alpha = 1 - confidence
    q = [alpha / 2, 1 - alpha / 2]
    t_ratio = mbc / mac
    t_lo, t_hi = (float(v) for v in np.quantile(bc / ac, q))
    sa, sb = mab / mac, mbb / mbc
    s_ratio = sb / sa
    s_lo, s_hi = (float(v) for v in np.quantile((bb / bc) / (ab / ac), q))
    # A percentile interval can, when the resampled medians are lumpy, miss its own point estimate.
    t_lo, t_hi = min(t_lo, t_ratio), max(t_hi, t_ratio)
    s_lo, s_hi = min(s_lo, s_ratio), max(s_hi, s_ratio)
    p, rejects, slower = rank_test(sets[1], sets[3], alpha)
    t_mark = _mark(t_ratio, t_lo, t_hi, min_effect, worse_up=True, significant=rejects and slower == (t_ratio > 1))
    return (Change(mac, mbc, t_ratio, t_lo, t_hi, t_mark, p),
            Change(sa, sb, s_ratio, s_lo, s_hi, _mark(s_ratio, s_lo, s_hi, min_effect, worse_up=False)))


def _samples(entry: RunEntry, case: str) -> Tuple[np.ndarray, np.ndarray]:
    df = store.read_samples(entry.folder / store.SAMPLES)
    if not len(df):
        return np.array([]), np.array([])
    rows = df[(df["case"] == case)]
    if "flagged" in rows:
        rows = rows[~rows["flagged"].astype(bool)]
    return (rows[rows["side"] == "baseline"]["seconds"].to_numpy(dtype=float),
            rows[rows["side"] == "candidate"]["seconds"].to_numpy(dtype=float))


def _why_not(entry: Optional[RunEntry], side: str) -> Optional[str]:
    if entry is None:
        return f"not in {side}"
    if entry.result is None:
        return f"unfinished in {side} ({entry.status})" + (f": {entry.error}" if entry.error else "")
    if entry.result["verdict"] == "invalid":
        reasons = entry.result.get("reasons") or ["no reason recorded"]
        return f"invalid in {side}: {reasons[0]}"
    return None


def _keyed(entries: Sequence[RunEntry]) -> Dict[str, RunEntry]:
    out: Dict[str, RunEntry] = {}
    for e in entries:
        key = (e.result or {}).get("name") or e.name
        k, n = key, 1
        while k in out:
            n += 1
            k = f"{key} #{n}"
        out[k] = e
    return out


def _device(entry: RunEntry) -> str:
    return ((entry.result or {}).get("environment") or {}).get("where") or "?"


def compare(a: Path, b: Path, *, confidence: float = DEFAULT_CONFIDENCE, min_effect: float = DEFAULT_MIN_EFFECT,
            gate: str = "time", resamples: int = 2000) -> Comparison:
    """Compare the runs in folder ``a`` (before) with those in folder ``b`` (after)."""
    if not 0 < confidence < 1:
        raise ExpkitError(f"confidence must be in (0, 1), got {confidence}")
    if min_effect < 0:
        raise ExpkitError(f"min_effect must be >= 0, got {min_effect}")
    if gate not in GATES:
        raise ExpkitError(f"gate must be one of {', '.join(GATES)}, got {gate!r}")
    sa, sb = load_session(Path(a)), load_session(Path(b))
    ka, kb = _keyed(sa.runs), _keyed(sb.runs)
    renamed = ""
    if len(ka) == 1 and len(kb) == 1 and set(ka) != set(kb):
        (na, ea), (nb, eb) = next(iter(ka.items())), next(iter(kb.items()))
        kb = {na: eb}
        renamed = f"names differ (A: {na}, B: {nb})"
    rows: List[Row] = []
    for key in list(ka) + [k for k in kb if k not in ka]:
        ea, eb = ka.get(key), kb.get(key)
        notes = [renamed] if renamed else []
        if ea is not None and eb is not None and ea.result and eb.result:
            if _device(ea) != _device(eb):
                notes.append(f"different devices (A: {_device(ea)}, B: {_device(eb)})")
            sha_a = (ea.result.get("manifest") or {}).get("sha256")
            sha_b = (eb.result.get("manifest") or {}).get("sha256")
            if sha_a and sha_b and sha_a != sha_b:
                notes.append("the manifest changed between A and B")
        why_a, why_b = _why_not(ea, "A"), _why_not(eb, "B")
        cases_a = ((ea.result or {}).get("measured") or {}).get("cases") or {} if ea else {}
        cases_b = ((eb.result or {}).get("measured") or {}).get("cases") or {} if eb else {}
        names = list(cases_a) + [c for c in cases_b if c not in cases_a]
        if why_a or why_b or not names:
            broke = why_a is None and why_b is not None and eb is not None and eb.result is not None
            mark = BROKE if broke else NA
            na_change = Change(None, None, None, None, None, mark)
            for case in names or ["all"]:
                rows.append(Row(key, case, na_change, na_change,
                                "; ".join(notes + [w for w in (why_a, why_b) if w] or ["nothing measured"])))
            continue
        assert ea is not None and eb is not None
        for case in names:
            ca, cb = cases_a.get(case), cases_b.get(case)
            if ca is None or cb is None:
                na_change = Change(None, None, None, None, None, NA)
                rows.append(Row(key, case, na_change, na_change,
                                "; ".join(notes + [f"case not measured in {'A' if ca is None else 'B'}"])))
                continue
            (a_b, a_c), (b_b, b_c) = _samples(ea, case), _samples(eb, case)
            if min(a_b.size, a_c.size, b_b.size, b_c.size) == 0:
                na_change = Change(ca["candidate"]["median"], cb["candidate"]["median"], None, None, None, NA)
                rows.append(Row(key, case, na_change, na_change,
                                "; ".join(notes + ["samples.csv missing or empty on one side: cannot test"])))
                continue
            seed = zlib.crc32(f"{key}/{case}".encode())
            t, s = compare_samples(a_b, a_c, b_b, b_c, confidence=confidence, min_effect=min_effect,
                                   resamples=resamples, seed=seed)
            rows.append(Row(key, case, t, s, "; ".join(notes)))
    return Comparison(str(a), str(b), tuple(rows), confidence, min_effect, gate, resamples)


def context(c: Comparison) -> Dict[str, Any]:

    def ratio(ch: Change) -> str:
        if ch.ratio is None:
            return "n/a"
        p = "" if ch.p_value is None else f", p {ch.p_value:.2g}"
        return f"{ch.ratio:.3f} [{ch.ci_low:.3f}, {ch.ci_high:.3f}]{p}"

    rows = []
    for r in c.rows:
        rows.append({
            "run": cell(r.run), "case": cell(r.case),
            "t_mark": r.time.mark, "t_a": fmt_time(r.time.a), "t_b": fmt_time(r.time.b), "t_ratio": ratio(r.time),
            "s_mark": r.speedup.mark, "s_a": fmt_x(r.speedup.a), "s_b": fmt_x(r.speedup.b),
            "s_ratio": ratio(r.speedup), "note": cell(r.note),
        })
    n = len(c.regressions)
    gate = {"time": "candidate time", "speedup": "speedup", "either": "candidate time or speedup"}[c.gate]
    verdict = (f"**{n} regression{'s' if n != 1 else ''}** in {gate} (exit code 1)." if n
               else f"No significant regression in {gate} (exit code 0).")
    return {"a": cell(c.a), "b": cell(c.b), "rows": rows, "verdict": verdict,
            "confidence": f"{c.confidence:.0%}", "min_effect": f"{c.min_effect:.0%}", "resamples": c.resamples,
            "alpha": f"{1 - c.confidence:.2g}"}


def render(c: Comparison) -> str:

    return template_env().get_template("compare.md.j2").render(**context(c))
