"""What a recheck does to the blocks after it: each side's second round against the rest.

In a defended run each process re-checks at least its first candidate block of a case
(``defences.min_rechecks``, shared between the processes): the baseline's worker runs the
baseline on that call's inputs and the oracles (a float64 reference for ``rounding`` and
``relative_error``) before the next round starts. Round 1 is then the first round after
a recheck. This runs the manifest ``--rounds`` times per variant, alternating, and reads
each run's ``samples.csv``: per case and side, the mean over the runs' processes of round
1's block relative to its process's median block, the same for rounds 2-9 (every
process times at least ``min_rounds``), and what round 1 moves the process's estimate:
its log ratio of medians (baseline over candidate) with round 1 less without it. A variant
without rechecks shows what round 1 is without one.

    python benchmarks/recheck_aftermath.py [MANIFEST] [--rounds 3] [--via SCRIPT]
        [--variant NAME=OVERRIDE,OVERRIDE ...] [-- key=value ...]

An override ``env:KEY=VALUE`` sets an environment variable for that variant's runs;
``--via SCRIPT`` runs ``python SCRIPT run ...`` instead of ``python -m expkit run ...``
(``60f880e:scripts/debug_recheck_variants.py``, whose changes an ``env:`` override picks).

Default variants: ``rechecks`` (as shipped) and ``none``
(``defences.min_rechecks=0 defences.recheck_budget=0``); every run gets
``measure=default`` unless the extra overrides name another preset.
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
from variant_runs import ROOT, parse_variants, require_manifest, split_overrides, run_samples, with_preset  # noqa: E402
DEFAULT = ROOT / "manifests/examples/cpu/honest-win.yaml"
VARIANTS = {"rechecks": [], "none": ["defences.min_rechecks=0", "defences.recheck_budget=0"]}
LATER = range(2, 10)


def aftermath(rows: Sequence[Mapping[str, str]]) -> Dict[Tuple[str, str], Tuple[List[float], List[float]]]:
    """(case, side) -> (round 1 over its process's median block, one per process; the mean
    of rounds 2-9 over the same median, one per process)."""
    blocks: Dict[Tuple[str, str, str], Dict[int, float]] = defaultdict(dict)
    for r in rows:
        blocks[(r["case"], r["side"], r["replicate"])][int(r["round"])] = float(r["seconds"])
    out: Dict[Tuple[str, str], Tuple[List[float], List[float]]] = defaultdict(lambda: ([], []))
    for (case, side, _), by_round in blocks.items():
        later = [by_round[i] for i in LATER if i in by_round]
        if 1 not in by_round or not later:
            continue
        med = statistics.median(by_round.values())
        out[(case, side)][0].append(by_round[1] / med)
        out[(case, side)][1].append(statistics.mean(later) / med)
    return out


def shift(rows: Sequence[Mapping[str, str]]) -> Dict[str, List[float]]:
    """case -> per process, its log ratio of medians (baseline over candidate, over its full
    rounds) less the same without round 1."""
    rounds: Dict[Tuple[str, str], Dict[int, Dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        rounds[(r["case"], r["replicate"])][int(r["round"])][r["side"]] = float(r["seconds"])
    out: Dict[str, List[float]] = defaultdict(list)
    for (case, _), by_round in rounds.items():
        full = [v for v in by_round.values() if len(v) == 2]
        rest = [v for i, v in by_round.items() if len(v) == 2 and i != 1]
        if len(full) == len(rest) or not rest:
            continue
        est = lambda vs: math.log(statistics.median(v["baseline"] for v in vs)  # noqa: E731
                                  / statistics.median(v["candidate"] for v in vs))
        out[case].append(est(full) - est(rest))
    return out


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", default=str(DEFAULT))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--via", default="", help="a script to run in place of `python -m expkit`")
    ap.add_argument("--variant", action="append", default=[], help="NAME=OVERRIDE,OVERRIDE (repeatable)")
    own, extra = split_overrides(argv)
    args = ap.parse_args(own)
    require_manifest(args.manifest, "recheck_aftermath.py")
    extra = with_preset(extra, "default")
    variants = parse_variants(args.variant, VARIANTS)
    got: Dict[str, Dict[Tuple[str, str], Tuple[List[float], List[float]]]] = defaultdict(
        lambda: defaultdict(lambda: ([], [])))
    moved: Dict[str, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for name, overrides in variants.items():
                try:
                    rows = run_samples(Path(args.manifest), extra + overrides, Path(tmp) / f"{i}-{name}", args.via)
                except (OSError, KeyError, ValueError) as e:
                    print(f"round {i + 1}, {name}: no samples ({type(e).__name__}: {e})", file=sys.stderr)
                    continue
                for key, (first, later) in aftermath(rows).items():
                    got[name][key][0].extend(first)
                    got[name][key][1].extend(later)
                for case, moves in shift(rows).items():
                    moved[name][case].extend(moves)
    print(f"<!-- {Path(args.manifest).name} {' '.join(extra)}; {args.rounds} runs a variant, in turn -->")
    print("| variant | case | side | processes | round 1 / median, mean (range) | rounds 2-9 / median, mean |")
    print("|---|---|---|---|---|---|")
    for name, per in got.items():
        for (case, side), (first, later) in sorted(per.items()):
            print(f"| {name} | {case} | {side} | {len(first)} | {statistics.mean(first):.3f} "
                  f"({min(first):.2f}-{max(first):.2f}) | {statistics.mean(later):.3f} |")
    print()
    print("| variant | case | processes | round 1's move of a process's log speedup, mean (range) |")
    print("|---|---|---|---|")
    for name, per_case in moved.items():
        for case, moves in sorted(per_case.items()):
            print(f"| {name} | {case} | {len(moves)} | {statistics.mean(moves):+.4f} ({min(moves):+.4f} to "
                  f"{max(moves):+.4f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
