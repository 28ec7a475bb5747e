"""The summary of an audit: KernelBench's measures with intervals, and claims set against them.

Pure functions of the records :mod:`expkit.report.audit_report` reads (``candidates.jsonl``).
KernelBench's measures (``src/kernelbench/score.py``, ``scripts/benchmark_eval_analysis.py``):
``fast_p`` is the fraction of units correct **and** faster than p, over all units; the
geometric-mean speedup is over the correct units only; the correctness rate is correct over
all. :func:`summarise` gives three views of a run (the first sample per problem, as KernelBench
scores it; every candidate; the best correct sample per problem) and their intervals: Wilson
score for rates over problems, a percentile bootstrap resampling problems (seeded) for the
geometric means and for the every-candidate rates, whose samples of one problem are not
independent (two stages: problems, then the samples of each chosen problem).
:func:`read_claims` reads a run's own figures; :func:`claims_against` and
:func:`summary_against` set them beside the measurement.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..core.errors import ExpkitError

THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
BOOTSTRAP = 2000
SEED = 0
FAILURE, CHEAT, ERROR = "failure", "cheat", "error"


# --- the summary ----------------------------------------------------------------------------


def wilson(k: int, n: int, confidence: float = 0.95) -> Tuple[Optional[float], Optional[float]]:
    """Wilson score interval of ``k`` successes in ``n`` independent trials."""
    if n == 0:
        return None, None
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (0.0 if k == 0 else max(0.0, mid - half)), (1.0 if k == n else min(1.0, mid + half))


def _bootstrap(units: Sequence[Sequence[Tuple[float, float]]], confidence: float, *, log: bool = False,
               n_boot: int = BOOTSTRAP, seed: int = SEED, chunk: int = 250) -> Tuple[Optional[float], Optional[float]]:
    """Percentile interval of ``sum(num) / sum(den)`` over every unit ``(num, den)`` (``exp`` of it with
    ``log``), by a two-stage bootstrap: problems resampled, then each chosen problem's units.

    The second stage keeps the interval honest where every problem looks alike (three samples
    each, two correct: resampling problems alone would give a zero-width interval). None where
    fewer than two problems hold a unit with ``den > 0``: resampling them shows nothing."""

    if sum(any(d > 0 for _, d in us) for us in units) < 2:
        return None, None
    n_prob, width = len(units), max(len(us) for us in units)
    num = np.zeros((n_prob, width))
    den = np.zeros((n_prob, width))
    for i, us in enumerate(units):
        for j, (a, b) in enumerate(us):
            num[i, j], den[i, j] = a, b
    sizes = np.array([len(us) for us in units])
    rng = np.random.default_rng(seed)
    stats = []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        idx = rng.integers(0, n_prob, size=(b, n_prob))
        n = sizes[idx][..., None]
        pos = np.minimum((rng.random((b, n_prob, width)) * n).astype(int), n - 1)
        mask = np.arange(width) < n
        top = (num[idx[..., None], pos] * mask).sum(axis=(1, 2))
        bottom = (den[idx[..., None], pos] * mask).sum(axis=(1, 2))
        keep = bottom > 0
        stats.append(top[keep] / bottom[keep])
    stat = np.concatenate(stats)
    if log:
        stat = np.exp(stat)
    alpha = (1 - confidence) / 2
    return float(np.quantile(stat, alpha)), float(np.quantile(stat, 1 - alpha))


def _units(records: Sequence[Mapping[str, Any]], view: str) -> Dict[Tuple[Any, Any], List[Dict[str, Any]]]:
    """Per problem, the units a view scores: its sample 0, every sample, or its best correct one."""
    problems: Dict[Tuple[Any, Any], List[Mapping[str, Any]]] = {}
    for r in records:
        problems.setdefault((r["level"], r["problem"]), []).append(r)
    out: Dict[Tuple[Any, Any], List[Dict[str, Any]]] = {}
    missing = {"correct": False, "speedup": None, "ci_low": None}
    for key, rs in sorted(problems.items(), key=lambda kv: (str(kv[0][0]), _num(kv[0][1]))):
        if view == "all":
            out[key] = [dict(r) for r in rs]
        elif view == "first":
            first = [r for r in rs if r["sample"] == 0]
            out[key] = [dict(first[0]) if first else dict(missing)]
        else:
            good = [r for r in rs if r["correct"]]
            out[key] = [{"correct": True, "speedup": max(r["speedup"] for r in good),
                         "ci_low": max(r["ci_low"] or 0.0 for r in good)} if good else dict(missing)]
    return out


def _num(x: Any) -> Any:
    try:
        return (0, int(x))
    except (TypeError, ValueError):
        return (1, str(x))


def _rate(hits: Sequence[Sequence[bool]], clustered: bool, confidence: float) -> Dict[str, Any]:
    """``hits``: per problem, one flag per unit. Wilson over problems, or the two-stage bootstrap."""
    k, n = sum(sum(h) for h in hits), sum(len(h) for h in hits)
    if not clustered:
        lo, hi = wilson(k, n, confidence)
    elif k in (0, n):  # nothing to resample: Wilson's over the problems, the independent units
        lo, hi = wilson(len(hits) if k else 0, len(hits), confidence)
    else:
        lo, hi = _bootstrap([[(float(x), 1.0) for x in h] for h in hits], confidence)
    return {"k": k, "n": n, "value": k / n if n else None, "ci_low": lo, "ci_high": hi}


def summarise(records: Sequence[Mapping[str, Any]], thresholds: Sequence[float] = THRESHOLDS,
              confidence: float = 0.95, unjudged: int = 0) -> Dict[str, Any]:
    """The field's measures for each view (``first``, ``all``, ``best``), each with its interval.

    ``unjudged`` problems of the level had no candidate in the run: the first and best-of-k
    views count each as a problem not solved, as KernelBench's analysis does (it scores every
    problem of the level); the every-candidate view has no unit for them."""
    views: Dict[str, Any] = {}
    for view in ("first", "all", "best"):
        units = _units(records, view)
        if view != "all":
            for i in range(unjudged):
                units[("unjudged", i)] = [{"correct": False, "speedup": None, "ci_low": None}]
        clustered = view == "all"
        rows = list(units.values())
        out: Dict[str, Any] = {"problems": len(rows), "units": sum(len(u) for u in rows)}
        out["correct"] = _rate([[bool(u["correct"]) for u in us] for us in rows], clustered, confidence)
        logs = [[(math.log(u["speedup"]), 1.0) if u["correct"] and u["speedup"] else (0.0, 0.0) for u in us]
                for us in rows]
        n_ok = int(sum(d for us in logs for _, d in us))
        gm = math.exp(sum(a for us in logs for a, _ in us) / n_ok) if n_ok else None
        lo, hi = _bootstrap(logs, confidence, log=True)
        out["geomean"] = {"value": gm, "n": n_ok, "ci_low": lo, "ci_high": hi}
        out["fast_p"] = {}
        for p in thresholds:
            point = [[bool(u["correct"] and u["speedup"] > p) for u in us] for us in rows]
            lower = [[bool(u["correct"] and (u["ci_low"] or 0.0) > p) for u in us] for us in rows]
            out["fast_p"][p_key(p)] = {**_rate(point, clustered, confidence),
                                    "lower_bound": _rate(lower, clustered, confidence)}
        views[view] = out
    return views


def p_key(p: float) -> str:
    return f"{p:g}"


def invalid_counts(records: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Per category of not-correct candidates: kind, count, first-sample count, and what timing said."""
    rows: Dict[str, Dict[str, Any]] = {}
    for r in records:
        if r["correct"]:
            continue
        row = rows.setdefault(r["category"], {"category": r["category"], "kind": r["kind"], "candidates": 0,
                                              "first": 0, "timed": [], "example": r["candidate"]})
        row["candidates"] += 1
        row["first"] += int(r["sample"] == 0)
        if r.get("speedup") is not None:
            row["timed"].append(float(r["speedup"]))
    order = {CHEAT: 0, FAILURE: 1, ERROR: 2}
    return sorted(rows.values(), key=lambda x: (order.get(x["kind"], 3), -x["candidates"], x["category"]))


# --- claims ---------------------------------------------------------------------------------


def read_claims(path: Path) -> Dict[str, Any]:
    """A run's own figures: per-problem speedups (CSV or JSON) and/or a summary (JSON).

    CSV: columns ``problem`` (id or name), ``speedup``, optionally ``sample`` (default 0)
    and ``level``. JSON: ``{"problems": [{"problem", "sample", "speedup"}, ...]}`` or
    ``{"<problem>": speedup}``, and/or the summary ``benchmark_eval_analysis.py`` writes
    (``fast_p``, ``geo_mean_speedup``, ``correctness_rate``). Returns
    ``{"problems": [...], "summary": {...}}``; a file expkit cannot read is one line (exit 2).
    """
    path = Path(path)
    if not path.is_file():
        raise ExpkitError(f"--claims {path}: no such file")
    try:
        if path.suffix.lower() == ".csv":
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
            if not rows or not {"problem", "speedup"} <= set(rows[0]):
                raise ValueError("needs the columns problem and speedup (sample and level optional)")
            return {"problems": [_claim_row(r) for r in rows], "summary": {}}
        data = json.loads(path.read_text())
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise ExpkitError(f"--claims {path}: {e}; give a CSV with columns problem,sample,speedup or a JSON "
                          "summary (fast_p, geo_mean_speedup, correctness_rate)") from None
    if not isinstance(data, dict):
        raise ExpkitError(f"--claims {path}: expected a JSON object (problems and/or summary figures)")
    summary = {k: data[k] for k in ("fast_p", "geo_mean_speedup", "correctness_rate") if k in data}
    if isinstance(data.get("summary"), dict):
        summary.update(data["summary"])
    if isinstance(data.get("problems"), list):
        problems = [_claim_row(r) for r in data["problems"]]
    elif summary:  # benchmark_eval_analysis.py's output: its other numbers are counts, not speedups
        problems = []
    else:
        problems = [{"level": None, "problem": _key(k), "sample": 0, "speedup": float(v)}
                    for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not problems and not summary:
        raise ExpkitError(f"--claims {path}: no per-problem speedup and no summary figure found")
    return {"problems": problems, "summary": summary}


def _key(x: Any) -> Any:
    s = str(x).strip()
    return int(s) if s.isdigit() else s


def _claim_row(r: Mapping[str, Any]) -> Dict[str, Any]:
    level = r.get("level")
    return {"level": int(level) if level not in (None, "") else None, "problem": _key(r["problem"]),
            "sample": int(r.get("sample") or 0), "speedup": float(r["speedup"])}


def _matches(claim: Mapping[str, Any], rec: Mapping[str, Any]) -> bool:
    if claim["level"] is not None and claim["level"] != rec["level"]:
        return False
    return claim["sample"] == rec["sample"] and claim["problem"] in (rec["problem"], rec["problem_name"])


def claims_against(records: Sequence[Mapping[str, Any]], claims: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Each per-problem claim beside the measurement of the same candidate, with a reading."""
    out = []
    for c in claims.get("problems") or []:
        rec = next((r for r in records if _matches(c, r)), None)
        reading = _reading(c["speedup"], rec)
        out.append({"claim": c, "record": rec, "reading": reading})
    return out


def _reading(claimed: float, rec: Optional[Mapping[str, Any]]) -> str:
    if rec is None:
        return "no such candidate in the audit"
    if not rec["correct"]:
        return f"not correct: {rec['category']}"
    lo, hi = rec.get("ci_low"), rec.get("ci_high")
    if lo is None or hi is None:
        return "measured without an interval"
    if claimed > hi:
        return "overstated: the claim is above the interval"
    if claimed < lo:
        return "understated: the claim is below the interval"
    return "consistent: the claim is inside the interval"


def summary_against(views: Mapping[str, Any], claims: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The run's summary figures beside KernelBench's own view (first sample per problem)."""
    s = claims.get("summary") or {}
    first = views["first"]
    rows = []
    if "correctness_rate" in s:
        rows.append(("correctness rate", float(s["correctness_rate"]), first["correct"]))
    if "geo_mean_speedup" in s:
        rows.append(("geometric-mean speedup", float(s["geo_mean_speedup"]), first["geomean"]))
    for p, v in sorted((s.get("fast_p") or {}).items(), key=lambda kv: float(kv[0])):
        got = first["fast_p"].get(p_key(float(p)))
        if got is not None:
            rows.append((f"fast_{p_key(float(p))}", float(v), got))
    out = []
    for name, claimed, got in rows:
        lo, hi = got.get("ci_low"), got.get("ci_high")
        if got.get("value") is None or lo is None:
            reading = "not measured"
        elif claimed > hi:
            reading = "above the interval"
        elif claimed < lo:
            reading = "below the interval"
        else:
            reading = "inside the interval"
        out.append({"measure": name, "claimed": claimed, "measured": got, "reading": reading})
    return out
