"""Verdict validity: do expkit's intervals cover, and do its verdicts err, at the stated rates?

A script, not a test, and no GPU: it drives expkit's own measurement loop
(``timing.measure.measure_replicated``, its stopping rule and its budget split), its
statistics (``timing.measure.case_estimate`` → ``verdict.stats.estimate_rounds``) and its
verdict rule (``verdict.rules.judge_case``) with seeded simulated timings, many times
over, and counts. Every trial is one ``expkit run`` of one case in miniature: fresh
replicates ("processes") opened through the same seam the runner uses, each drawing
its own process effect, timed by a simulated clock.

The simulated pair is a ~10 us GPU pair: baseline 13 us, candidate 10 us a call (true
speedup 1.3), blocks of ``min_block_seconds`` as the presets set them. Timing noise is
per block and multiplicative, with the same distribution on both sides (so the true
ratio of medians is exactly 1.3 and is what every interval should cover):

==================  ===========================================================================
scenario            per-block noise
==================  ===========================================================================
lognormal 2%        ``exp(N(0, 0.02))`` (a cold ~10 us kernel on an H200 spreads 5-10% max-min)
lognormal 10%       ``exp(N(0, 0.10))``: a noisy, shared machine
bimodal             lognormal 1%, and 35% of blocks 6% slower (two clock or cache states)
heavy tail          lognormal 1% times ``1 + 0.01 * Lomax(1.5)`` (infinite variance: rare huge stalls)
drift               lognormal 2% and both sides slowing by 2% per second of run time
AR(1)               a machine state shared by whatever block runs, ``phi = 0.9`` block to block,
                    stationary sd 2%, plus lognormal 1% of each block's own
==================  ===========================================================================

Each scenario runs **within a run** (no process effect: every process draws the same
machine) and **across processes** (each process multiplies each side's times by its own
``exp(N(0, 0.01))``, a 1% process effect; the truth is then the centre of the processes,
1.3, and the interval must cover *that*, not the one process it saw). The
``process effect 1%`` row of the issue is the lognormal-2% scenario across processes.

Per preset and scenario it reports: coverage of the truth by the final interval; the
rate of ``supported`` for a claim overstated by 10% (claim 1.43, tolerance 5%: bar
1.3585 > 1.3); of ``refuted`` for the true claim (1.3, tolerance 5%); A/A runs (the same
op on both sides, truth 1.0) judged against a claim of 1.05 with tolerance 0 (bar 1.05:
``supported`` would be wrong) and with the default 5% (bar 0.9975, *below* the truth: there
``supported`` is a correct answer, counted only to show it); the interval's mean
half-width; the timed seconds and the warm-up a verdict cost (GPU-seconds of device time
for this pair; process start-up is not simulated and comes on top); and how sampling
stopped. For the default preset it also computes, on the same samples, the intervals
expkit does *not* use, to show why: the two sides resampled independently (no pairing),
all rounds pooled as if from one process, and the literal two-level bootstrap
(processes, then rounds as pairs within each).

Usage::

    python benchmarks/verdict_validity.py [--quick] [--trials N] [--jobs 2] [--out DIR]
    python benchmarks/verdict_validity.py --render evidence/verdicts/verdict_validity.json.gz

``--quick`` (a handful of trials per cell, under two minutes on a 2-core machine) proves
the script runs; its numbers mean little. Results go to ``--out`` (default
``evidence/verdicts``) as ``verdict_validity.json`` and ``verdict_validity.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from expkit.manifest.settings import MeasureSettings  # noqa: E402
from expkit.timing import measure  # noqa: E402
from expkit.verdict import stats  # noqa: E402
from expkit.verdict.rules import REFUTED, SUPPORTED, judge_case  # noqa: E402

BASE_S, CAND_S = 13e-6, 10e-6
TRUTH = BASE_S / CAND_S
PROCESS_EFFECT = 0.01
OVERSTATED = 1.10
TOLERANCE = 0.05
AA_CLAIM = 1.05
# The intervals expkit does not use are computed on the first ALT_TRIALS trials of each
# default cell, from ALT_RESAMPLES resamples: a comparison, not the verdict's interval.
ALT_TRIALS = 200
ALT_RESAMPLES = 500
# Trials per cell (A/A: half): rigorous costs most per trial and is not the preset the targets name.
TRIALS = {"quick": 400, "default": 400, "rigorous": 200}

# The presets as conf/measure/*.yaml sets them (read from there, so the table tracks them).
PRESETS = ("quick", "default", "rigorous")


def preset(name: str) -> MeasureSettings:
    import yaml

    path = Path(__file__).resolve().parent.parent / "conf" / "measure" / f"{name}.yaml"
    data = {k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items()}
    return MeasureSettings(**data)


# ---------------------------------------------------------------------------------------
# The simulated machine


@dataclass(frozen=True)
class Scenario:
    name: str
    sigma: float = 0.0            # lognormal per-block noise
    bimodal_p: float = 0.0        # share of blocks in the slow state
    bimodal_step: float = 0.0     # how much slower
    lomax_scale: float = 0.0      # heavy tail: 1 + scale * Lomax(alpha)
    lomax_alpha: float = 1.5
    drift: float = 0.0            # fractional slow-down per second of run time
    ar_phi: float = 0.0           # AR(1) machine state, block to block
    ar_sd: float = 0.0            # its stationary sd (log scale)
    process: float = 0.0          # process effect: sd of each side's log factor per process


SCENARIOS: Tuple[Scenario, ...] = (
    Scenario("lognormal 2%", sigma=0.02),
    Scenario("lognormal 10%", sigma=0.10),
    Scenario("bimodal", sigma=0.01, bimodal_p=0.35, bimodal_step=0.06),
    Scenario("heavy tail", sigma=0.01, lomax_scale=0.01),
    Scenario("drift", sigma=0.02, drift=0.02),
    Scenario("AR(1)", sigma=0.01, ar_phi=0.9, ar_sd=0.02),
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Op:
    """One side in one process: its true per-call seconds (process effect included)."""

    seconds: float
    clock: Clock

    def __call__(self) -> None:  # warm-up calls: time passes
        self.clock.now += self.seconds

    def warm_up(self, seconds: float) -> None:
        self.clock.now += seconds


class Machine:
    """The machine every process of one trial runs on: its clock, drift and AR(1) state."""

    def __init__(self, sc: Scenario, rng: np.random.Generator) -> None:
        self.sc, self.rng, self.clock = sc, rng, Clock()
        self.state = rng.normal(0, sc.ar_sd) if sc.ar_sd else 0.0
        self.warm = 0.0  # warm-up seconds spent

    def block(self, seconds: float, number: int) -> float:
        sc, rng = self.sc, self.rng
        log = rng.normal(0, sc.sigma) if sc.sigma else 0.0
        if sc.ar_sd:
            self.state = sc.ar_phi * self.state + math.sqrt(1 - sc.ar_phi ** 2) * rng.normal(0, sc.ar_sd)
            log += self.state
        f = math.exp(log) * (1 + sc.drift * self.clock.now)
        if sc.bimodal_p and rng.random() < sc.bimodal_p:
            f *= 1 + sc.bimodal_step
        if sc.lomax_scale:
            f *= 1 + sc.lomax_scale * rng.pareto(sc.lomax_alpha)
        per_call = seconds * f
        self.clock.now += per_call * number
        return per_call


class Timer:
    method = "simulated"

    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def sample(self, fn: Op, number: int) -> float:
        return self.machine.block(fn.seconds, number)


class Replica:
    """One simulated replicate: a fresh worker pair with its own process effect."""

    def __init__(self, machine: Machine, base_s: float, cand_s: float) -> None:
        sc, rng = machine.sc, machine.rng
        ub, uc = (rng.normal(0, sc.process, 2) if sc.process else (0.0, 0.0))
        self.sides_ = measure.CaseSides(Op(base_s * math.exp(ub), machine.clock),
                                        Op(cand_s * math.exp(uc), machine.clock), Timer(machine))

    def sides(self, case: str) -> measure.CaseSides:
        return self.sides_

    def finish(self, case: str) -> None:
        pass

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------
# One trial


def two_level_bootstrap(rounds: Sequence[stats.Rounds], confidence: float, resamples: int,
                        seed: int) -> Tuple[float, float]:
    """The literal two-level bootstrap: draw K processes with replacement, then each drawn
    process's rounds with replacement as pairs; the geometric mean of the drawn
    processes' ratios of medians; central ``confidence`` quantiles. (Not what expkit uses.)"""
    rng = np.random.default_rng(seed)
    k = len(rounds)
    arrays = [(np.asarray(r.baseline), np.asarray(r.candidate)) for r in rounds]
    out = np.zeros(resamples)
    picks = rng.integers(0, k, size=(resamples, k))
    for p, (b, c) in enumerate(arrays):
        uses = (picks == p).sum(axis=1)  # how many times each resample drew process p
        m = int(uses.max())
        if m == 0:
            continue
        idx = rng.integers(0, b.size, size=(resamples, m, b.size))
        y = np.log(stats.median(b[idx])) - np.log(stats.median(c[idx]))  # resamples x m
        mask = np.arange(m)[None, :] < uses[:, None]
        out += (y * mask).sum(axis=1)
    out /= k
    a = 1 - confidence
    lo, hi = np.quantile(out, [a / 2, 1 - a / 2])
    return math.exp(lo), math.exp(hi)


def trial(args: Tuple[str, Scenario, bool, int, bool]) -> Dict[str, Any]:
    """One simulated run of one case: its interval, verdicts and cost."""
    preset_name, sc, aa, seed, alternatives = args
    settings = preset(preset_name)
    rng = np.random.default_rng(seed)
    machine = Machine(sc, rng)
    base_s = CAND_S if aa else BASE_S
    truth = 1.0 if aa else TRUTH
    got = measure.measure_replicated(["c"], lambda r: Replica(machine, base_s, CAND_S), settings,
                                     rng=random.Random(seed), clock=machine.clock)
    cs = got.cases["c"]
    est = measure.case_estimate(cs, confidence=settings.confidence, resamples=settings.bootstrap, seed=seed % 2**32)
    out: Dict[str, Any] = {
        "covered": est.ci_low <= truth <= est.ci_high,
        "half_width": est.relative_half_width,
        "timed_s": cs.timed_seconds,
        "warmup_s": settings.warmup_seconds * (1 + (got.processes - 1) / got.processes),
        "rounds": len(cs.samples) // 2,
        "stopped": cs.stopped,
        "processes": got.processes,
    }
    if aa:
        out["aa_supported_tol0"] = judge_case("c", est, AA_CLAIM, 0.0, cs.budget_spent).verdict == SUPPORTED
        out["aa_supported_tol5"] = judge_case("c", est, AA_CLAIM, TOLERANCE, cs.budget_spent).verdict == SUPPORTED
    else:
        out["true_refuted"] = judge_case("c", est, truth, TOLERANCE, cs.budget_spent).verdict == REFUTED
        out["over_supported"] = judge_case("c", est, truth * OVERSTATED, TOLERANCE,
                                           cs.budget_spent).verdict == SUPPORTED
    if alternatives:
        resamples = ALT_RESAMPLES
        rounds = cs.rounds()
        b = [x for r in rounds for x in r.baseline]
        c = [x for r in rounds for x in r.candidate]
        alts = {
            "independent": stats.estimate(b, c, confidence=settings.confidence, resamples=resamples,
                                          seed=seed % 2**32),
            "pooled_paired": stats.estimate_rounds([stats.Rounds(0, tuple(b), tuple(c))],
                                                   confidence=settings.confidence, resamples=resamples,
                                                   seed=seed % 2**32),
        }
        for name, e in alts.items():
            out[f"{name}_covered"] = e.ci_low <= truth <= e.ci_high
            out[f"{name}_half_width"] = e.relative_half_width
        if len(rounds) > 1:
            lo, hi = two_level_bootstrap(rounds, settings.confidence, resamples, seed)
            out["two_level_covered"] = lo <= truth <= hi
            out["two_level_half_width"] = (hi - lo) / (2 * est.speedup)
    return out


# ---------------------------------------------------------------------------------------
# The table


def cells(quick: bool) -> List[Tuple[str, Scenario]]:
    out = []
    for p in PRESETS:
        for sc in SCENARIOS:
            for across in (False, True):
                out.append((p, replace(sc, process=PROCESS_EFFECT) if across else sc))
    return out


def rate(xs: Sequence[Dict[str, Any]], key: str) -> Optional[float]:
    vals = [x[key] for x in xs if key in x]
    return float(np.mean(vals)) if vals else None


def summarise(rows: Sequence[Dict[str, Any]], aa_rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    stops: Dict[str, int] = {}
    for r in rows:
        stops[r["stopped"]] = stops.get(r["stopped"], 0) + 1
    out = {
        "trials": len(rows), "aa_trials": len(aa_rows),
        "coverage": rate(rows, "covered"),
        "aa_coverage": rate(aa_rows, "covered"),
        "false_supported_overstated": rate(rows, "over_supported"),
        "false_refuted_true": rate(rows, "true_refuted"),
        "aa_supported_claim_1_05_tol0": rate(aa_rows, "aa_supported_tol0"),
        "aa_supported_claim_1_05_tol5": rate(aa_rows, "aa_supported_tol5"),
        "half_width_mean": rate(rows, "half_width"),
        "timed_s_mean": rate(rows, "timed_s"),
        "timed_s_p90": float(np.percentile([r["timed_s"] for r in rows], 90)) if rows else None,
        "warmup_s": rows[0]["warmup_s"] if rows else None,
        "rounds_mean": rate(rows, "rounds"),
        "stopped": stops,
        "processes": rows[0]["processes"] if rows else None,
    }
    for alt in ("independent", "pooled_paired", "two_level"):
        if any(f"{alt}_covered" in r for r in rows):
            out[f"{alt}_coverage"] = rate(rows, f"{alt}_covered")
            out[f"{alt}_half_width_mean"] = rate(rows, f"{alt}_half_width")
    return out


def binomial_se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))


def pct(x: Optional[float], digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def render(data: Dict[str, Any]) -> str:
    meta = data["meta"]
    lines = [
        "# Verdict validity (simulated, expkit's own loop, statistics and verdict rule)",
        "",
        f"Written by `benchmarks/verdict_validity.py{' --quick' if meta['quick'] else ''}` on {meta['date']} "
        f"({meta['machine']}, {meta['jobs']} jobs, {meta['wall_s']:.0f} s). "
        f"True speedup {TRUTH:g} "
        f"({BASE_S * 1e6:g} us over {CAND_S * 1e6:g} us); across processes: each side's times multiplied "
        f"by exp(N(0, {PROCESS_EFFECT})) per process.",
        "",
        "Targets (issue 15): coverage >= 94% for a nominal 95% interval in every scenario, within a run and "
        "across processes; `supported` for a claim overstated by 10% at most 2%; `refuted` for a true claim "
        "at most 2%; A/A never `supported` for a claim of 1.05; a `default` verdict on a ~10 us pair at most "
        "3 GPU-seconds.",
        "",
    ]
    for p in PRESETS:
        rows = [r for r in data["cells"] if r["preset"] == p]
        if not rows:
            continue
        s = rows[0]["settings"]
        n, n_aa = rows[0]["summary"]["trials"], rows[0]["summary"]["aa_trials"]
        lines += [f"## `{p}`: {s['processes']} process{'es' if s['processes'] != 1 else ''}, "
                  f"{s['confidence']:.0%} interval, target ±{s['target_ci']:.1%}, "
                  f"{s['max_seconds']:g} s budget", "",
                  f"{n} trials per row and {n_aa} A/A trials; a rate's binomial standard error is about "
                  f"{pct(binomial_se(s['confidence'], n))} at {s['confidence']:.0%} and "
                  f"{pct(binomial_se(0.02, n))} at 2%.", ""]
        lines += ["| scenario | processes differ | coverage | false `supported` (claim +10%) | "
                  "false `refuted` (true claim) | A/A `supported`, 1.05 tol 0 | A/A `supported`, 1.05 tol 5% | "
                  "A/A coverage | mean half-width | timed s (mean / p90) | warm-up s | rounds | stopped at target |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            m = r["summary"]
            target = m["stopped"].get(measure.STOP_TARGET, 0) / max(m["trials"], 1)
            lines.append(
                f"| {r['scenario']} | {'1% effect' if r['process'] else 'no'} | {pct(m['coverage'])} | "
                f"{pct(m['false_supported_overstated'])} | {pct(m['false_refuted_true'])} | "
                f"{pct(m['aa_supported_claim_1_05_tol0'])} | {pct(m['aa_supported_claim_1_05_tol5'])} | "
                f"{pct(m['aa_coverage'])} | {pct(m['half_width_mean'], 2)} | "
                f"{m['timed_s_mean']:.2f} / {m['timed_s_p90']:.2f} | {m['warmup_s']:.2f} | "
                f"{m['rounds_mean']:.0f} | {pct(target, 0)} |")
        lines.append("")
        if any("two_level_coverage" in r["summary"] or "independent_coverage" in r["summary"] for r in rows):
            lines += [f"Intervals expkit does not use, on the same samples (`{p}`): coverage / mean half-width.",
                      "",
                      "| scenario | processes differ | expkit (paired; t over processes) | sides independent "
                      "(no pairing) | all rounds pooled as one process (paired) | two-level bootstrap |",
                      "|---|---|---|---|---|---|"]
            for r in rows:
                m = r["summary"]

                def both(key: str) -> str:
                    if f"{key}_coverage" not in m:
                        return "n/a"
                    return f"{pct(m[f'{key}_coverage'])} / {pct(m[f'{key}_half_width_mean'], 2)}"

                lines.append(f"| {r['scenario']} | {'1% effect' if r['process'] else 'no'} | "
                             f"{pct(m['coverage'])} / {pct(m['half_width_mean'], 2)} | {both('independent')} | "
                             f"{both('pooled_paired')} | {both('two_level')} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few trials per cell: proves the script runs")
    ap.add_argument("--trials", type=int, default=None,
                    help="trials per cell, every preset (default: quick and default 400, rigorous 200; --quick 4)")
    ap.add_argument("--aa-trials", type=int, default=None, help="A/A trials per cell (default: half the trials)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "evidence" / "verdicts")
    ap.add_argument("--render", type=Path, default=None, help="re-render the markdown from a stored JSON")
    a = ap.parse_args(argv)
    if a.render is not None:
        data = json.loads(gzip.decompress(a.render.read_bytes()) if a.render.suffix == ".gz"
                          else a.render.read_text())
        (a.render.parent / "verdict_validity.md").write_text(render(data))
        return 0
    presets = [p for p in a.presets.split(",") if p]
    t0 = time.perf_counter()
    jobs: List[Tuple[str, Scenario, bool, int, bool]] = []
    layout = []
    for ci, (p, sc) in enumerate(c for c in cells(a.quick) if c[0] in presets):
        trials = a.trials or (4 if a.quick else TRIALS[p])
        aa_trials = a.aa_trials or max(1, trials // 2)
        alternatives = p == "default"
        layout.append((p, sc, trials, aa_trials))
        jobs += [(p, sc, False, 1_000_000 * ci + i, alternatives and i < ALT_TRIALS) for i in range(trials)]
        jobs += [(p, sc, True, 1_000_000 * ci + 500_000 + i, False) for i in range(aa_trials)]
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(trial, jobs, chunksize=4))
    out_cells = []
    at = 0
    for p, sc, trials, aa_trials in layout:
        rows, aa = results[at:at + trials], results[at + trials:at + trials + aa_trials]
        at += trials + aa_trials
        out_cells.append({"preset": p, "scenario": sc.name, "process": sc.process, "scenario_params": asdict(sc),
                          "settings": asdict(preset(p)), "summary": summarise(rows, aa)})
    wall = time.perf_counter() - t0
    data = {"schema_version": 1,
            "meta": {"quick": a.quick, "trials": {p: t for p, _, t, _ in layout},
                     "aa_trials": {p: t for p, _, _, t in layout}, "jobs": a.jobs, "wall_s": wall,
                     "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                     f"Python {platform.python_version()}", "truth": TRUTH, "process_effect": PROCESS_EFFECT},
            "cells": out_cells}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "verdict_validity.json").write_text(json.dumps(data, indent=1) + "\n")
    (a.out / "verdict_validity.md").write_text(render(data))
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
