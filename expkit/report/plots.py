"""The two figures of a run report, drawn from the stored files alone (matplotlib, Agg).

* ``timings.png``: per case, every timed sample's per-call time for the baseline and the
  candidate, as a box (median and quartiles) over the individual points, on a log axis
  because the two sides may differ by orders of magnitude. Samples that telemetry flagged
  and the statistics left out are drawn as crosses, so the reader sees what was dropped.
* ``speedup.png``: per case, the measured speedup with its interval, against the claim
  (a diamond), the claim's bar (claim less tolerance, a tick) and 1× (a vertical line):
  the verdict rule (docs/decisions.md), drawn.

Both are deterministic for the same stored files (the horizontal jitter of the points
comes from a fixed seed), so a re-rendered report shows the same pictures. Nothing here
may fail a run: :func:`write_run_plots` returns the figures it could draw and a note for
each it could not.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

import numpy as np

from .store import atomic_write

TIMINGS = "timings.png"
SPEEDUP = "speedup.png"
_COLORS = {"baseline": "#4c72b0", "candidate": "#dd8452"}
_DPI = 100


def _figure(**kw: Any) -> Any:
    # A bare Figure draws with the Agg canvas and touches no pyplot state: no window on a
    # headless machine, no backend switched under a notebook that calls report.write().
    # lazy: matplotlib's import is slow; a verdict is printed before figures are drawn
    from matplotlib.figure import Figure

    return Figure(**kw)


def _save(fig: Any, path: Path) -> Path:

    buf = io.BytesIO()
    # No software/date metadata: the same stored files give byte-identical images.
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    atomic_write(path, buf.getvalue())
    return path


def timing_plot(samples: Any, cases: List[str], path: Path) -> Path:
    """Per-call time distributions, one panel per case (``samples``: the samples.csv frame)."""
    rng = np.random.default_rng(0)
    n = len(cases)
    fig = _figure(figsize=(max(3.2 * n, 4.5), 3.6))
    axes = fig.subplots(1, n, squeeze=False)
    for ax, case in zip(axes[0], cases):
        rows = samples[samples["case"] == case]
        data, labels = [], []
        for i, side in enumerate(("baseline", "candidate")):
            side_rows = rows[rows["side"] == side]
            flagged = side_rows["flagged"].astype(bool).to_numpy() if "flagged" in side_rows else \
                np.zeros(len(side_rows), dtype=bool)
            secs = side_rows["seconds"].to_numpy(dtype=float)
            kept = secs[~flagged]
            data.append(kept if kept.size else np.array([np.nan]))
            labels.append(f"{side}\n(n={kept.size})")
            x = i + 1 + rng.uniform(-0.12, 0.12, size=secs.size)
            ax.scatter(x[~flagged], kept, s=8, alpha=0.45, color=_COLORS[side], linewidths=0)
            if flagged.any():
                ax.scatter(x[flagged], secs[flagged], s=14, marker="x", color="#888888", label="flagged, left out")
        ax.boxplot(data, widths=0.5, showfliers=False, medianprops={"color": "black"})
        ax.set_xticks([1, 2], labels)
        ax.set_yscale("log")
        ax.set_title(case, fontsize=10)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("seconds per call (log)")
    fig.suptitle("Per-call times of every timed sample", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def speedup_plot(cases: Mapping[str, Mapping[str, Any]], confidence: float, path: Path) -> Path:
    """Measured speedup with its interval per case, against the claim, its bar and 1×."""
    names = list(cases)
    fig = _figure(figsize=(6.4, 0.7 * len(names) + 1.6))
    ax = fig.subplots()
    ys = np.arange(len(names))[::-1]
    values = []
    for y, name in zip(ys, names):
        c = cases[name]
        lo, s, hi = c["ci_low"], c["speedup"], c["ci_high"]
        ax.errorbar([s], [y], xerr=[[s - lo], [hi - s]], fmt="o", color="black", capsize=5,
                    label=f"measured, {confidence:.0%} interval" if y == ys[0] else None)
        if c.get("claimed") is not None:
            ax.scatter([c["claimed"]], [y], marker="D", color="#c44e52", zorder=3,
                       label="claimed" if y == ys[0] else None)
            values.append(c["claimed"])
        if c.get("threshold") is not None:
            ax.plot([c["threshold"]] * 2, [y - 0.3, y + 0.3], color="#c44e52", linestyle="--",
                    label="bar (claim less tolerance)" if y == ys[0] else None)
            values.append(c["threshold"])
        values += [lo, hi]
    ax.axvline(1.0, color="#555555", linewidth=1, label="1× (no change)")
    values.append(1.0)
    lo_all, hi_all = min(values), max(values)
    if hi_all / lo_all > 10:  # orders of magnitude apart: a linear axis would crush the claim
        ax.set_xscale("log")
    ax.set_yticks(ys, names)
    ax.set_ylim(-0.8, len(names) - 0.2)
    ax.set_xlabel("speedup (baseline time / candidate time)")
    ax.grid(axis="x", which="both", alpha=0.3)
    # Below the axes: inside, it would cover the intervals it explains.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    ax.set_title("Speedup per case against the claim", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def write_run_plots(run_dir: Path, result: Mapping[str, Any], samples: Any) -> Tuple[Dict[str, str], List[str]]:
    """Draw the figures of one run beside its report.

    Returns ``({figure: file name}, [notes])``: only figures that exist are named, and each
    one that could not be drawn has a note (a run with nothing measured has no figures and
    no notes: there is nothing to draw).
    """
    run_dir = Path(run_dir)
    measured = (result.get("measured") or {}).get("cases") or {}
    drawn: Dict[str, str] = {}
    notes: List[str] = []
    if not measured:
        return drawn, notes
    conf = (result.get("measured") or {}).get("confidence", 0.95)
    jobs = [("speedup", SPEEDUP, lambda p: speedup_plot(measured, conf, p))]
    if len(samples):
        cases = [c for c in measured if (samples["case"] == c).any()]
        if cases:
            jobs.append(("timings", TIMINGS, lambda p: timing_plot(samples, cases, p)))
    for key, name, draw in jobs:
        try:
            draw(run_dir / name)
            drawn[key] = name
        except Exception as e:  # a figure is worth less than the report it sits in
            notes.append(f"{name} could not be drawn: {type(e).__name__}: {e}")
    return drawn, notes
