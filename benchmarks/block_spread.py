"""How much a run's timed blocks vary, variant by variant: what decides how long a run at
a stopping rule takes.

At ``measure=default`` every process times rounds until its own interval reaches the
target, so a run's length grows with the square of its blocks' spread. This runs one
manifest at a pinned budget (``measure=quick measure.max_seconds=S measure.target_ci=0``,
``default``'s 5 ms blocks and warm-up), each variant in turn, ``--rounds`` times, and
reads each run's ``samples.csv``. Per variant, as means over its runs' processes, cases
and sides: the interquartile range and the 5th-95th percentile range of the blocks'
times, each relative to its process's median, and the standard deviation of the rounds'
log ratios (baseline over candidate): the spread the per-process interval is made from.

    python benchmarks/block_spread.py [MANIFEST] [--rounds 3] [--processes 1]
        [--variant NAME=OVERRIDE,OVERRIDE ...] [-- key=value ...]

Default variants: ``defended`` (as shipped), ``one process`` (``defences.isolate=false``:
the checks without the workers), ``undefended``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variant_runs import ROOT, parse_variants, require_manifest, split_overrides, run_samples  # noqa: E402
DEFAULT = ROOT / "manifests/examples/cpu/honest-win.yaml"
PINNED = ["measure=quick", "measure.target_ci=0", "measure.min_block_seconds=0.005", "measure.warmup_seconds=0.2"]
VARIANTS = {"defended": [], "one process": ["defences.isolate=false"], "undefended": ["defences.enabled=false"]}


def spread(rows: Sequence[Mapping[str, str]]) -> Dict[str, float]:
    """``iqr``, ``q05_q95`` (blocks' times relative to their process's median) and
    ``sd_log_ratio`` (of the rounds' baseline/candidate ratios), each the mean over the
    processes (and sides) of one run's samples."""
    times: Dict[Tuple[str, str, str], List[float]] = defaultdict(list)
    rounds: Dict[Tuple[str, str], Dict[str, Dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        key = (r["case"], r["replicate"], r["side"])
        times[key].append(float(r["seconds"]))
        rounds[(r["case"], r["replicate"])][r["round"]][r["side"]] = float(r["seconds"])
    iqr, wide, sd = [], [], []
    for xs in times.values():
        m = statistics.median(xs)
        q = statistics.quantiles([x / m for x in xs], n=20, method="inclusive")  # 5%, 10%, ... 95%
        iqr.append(q[14] - q[4])
        wide.append(q[18] - q[0])
    for by_round in rounds.values():
        lr = [math.log(v["baseline"] / v["candidate"]) for v in by_round.values() if len(v) == 2]
        if len(lr) > 1:
            sd.append(statistics.stdev(lr))
    return {"iqr": statistics.mean(iqr), "q05_q95": statistics.mean(wide), "sd_log_ratio": statistics.mean(sd)}


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", default=str(DEFAULT))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=2.0)
    ap.add_argument("--variant", action="append", default=[], help="NAME=OVERRIDE,OVERRIDE (repeatable)")
    own, extra = split_overrides(argv)
    args = ap.parse_args(own)
    require_manifest(args.manifest, "block_spread.py")
    variants = parse_variants(args.variant, VARIANTS)
    base = PINNED + [f"measure.max_seconds={args.max_seconds}", f"measure.processes={args.processes}", *extra]
    got: Dict[str, List[Dict[str, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for name, overrides in variants.items():
                out = Path(tmp) / f"{i}-{len(got[name])}-{name.replace(' ', '_')}"
                try:
                    got[name].append(spread(run_samples(Path(args.manifest), base + overrides, out)))
                except (OSError, KeyError, ValueError, statistics.StatisticsError) as e:
                    print(f"round {i + 1}, {name}: no samples ({type(e).__name__}: {e})", file=sys.stderr)
    print(f"<!-- {Path(args.manifest).name} {' '.join(base)}; {args.rounds} rounds, variants in turn -->")
    print("| variant | runs | IQR of blocks (rel.) | 5th-95th percentile range | SD of rounds' log ratios, per run |")
    print("|---|---|---|---|---|")
    for name, runs in got.items():
        if not runs:
            continue
        sds = ", ".join(f"{r['sd_log_ratio']:.3f}" for r in runs)
        print(f"| {name} | {len(runs)} | {statistics.mean(r['iqr'] for r in runs):.3f} | "
              f"{statistics.mean(r['q05_q95'] for r in runs):.3f} | "
              f"{statistics.mean(r['sd_log_ratio'] for r in runs):.3f} ({sds}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
