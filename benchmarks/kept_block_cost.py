"""What a timed block costs when the recheck keeps its call, against one that keeps none.

One side's bench (``expkit.bench.sides.side.SideBench``) in this process, on one case of a
manifest: after a short warm-up, blocks of one call alternate between keeping nothing
and keeping that call for the recheck (a pristine copy of its inputs made before it, its
inputs and output exported to shared memory after it, released afterwards, as the
parent does once the baseline has re-checked them). A table on stdout of each block's
wall time and the parts the bench reports (``timed``: the call; ``untimed``: fresh
inputs and the pristine copy; ``checks``: the checks and the exports) and the release;
nothing is written.

    python benchmarks/kept_block_cost.py MANIFEST [--case NAME] [--side candidate] [--pairs 3] [override ...]

On the 0.5 GiB elementwise workload of ``harness_cost.py --builtin-cpu``, read with
``request_times.py``: the candidate's blocks took 19.45 s against the baseline's 4.19 s
over the same 15 blocks, and only the candidate's blocks are kept for the recheck.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import List, Optional, Sequence

from expkit.bench.sides.side import SideBench
from expkit.manifest.settings import load_settings
from expkit.manifest.spec import load


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--case", default=None, help="the case to time (default: the manifest's first)")
    ap.add_argument("--side", default="candidate", choices=("candidate", "baseline"))
    ap.add_argument("--pairs", type=int, default=3, help="blocks of each kind, alternating")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("overrides", nargs="*", help="runner settings (key=value), after measure=quick")
    a = ap.parse_args(argv)
    lm = load(a.manifest)
    settings = load_settings(["measure=quick", *a.overrides], lm.manifest.measure)
    names = [c.name for c in lm.manifest.cases]
    case = a.case or names[0]
    if case not in names:
        ap.error(f"{a.manifest}: no case {case!r} under cases: (it has {', '.join(names)}); pass one of them to --case")
    side = SideBench(lm, settings, a.device, a.side)
    side.prepare(case, 1, 2, 1, True)
    side.warm_up(0.05)
    rows: List[tuple] = []
    for i in range(2 * a.pairs):
        keep = 0 if i % 2 else None
        t0 = time.perf_counter()
        rep = side.block(1, keep)
        wall = time.perf_counter() - t0
        release = None
        if keep is not None:
            t1 = time.perf_counter()
            side.release()
            release = time.perf_counter() - t1
        rows.append((i, "kept" if keep is not None else "none", wall, rep["timed"], rep["untimed"], rep["checks"],
                     release))
    print(f"{a.manifest}, case {case}, {a.side}, device {a.device}\n")
    print("| block | recheck | wall s | timed s | untimed s | checks s | release s |")
    print("|---|---|---|---|---|---|---|")
    for i, kind, wall, timed, untimed, checks, release in rows:
        rel = "" if release is None else f"{release:.3f}"
        print(f"| {i} | {kind} | {wall:.3f} | {timed:.3f} | {untimed:.3f} | {checks:.3f} | {rel} |")
    for kind in ("none", "kept"):
        walls = [r[2] for r in rows if r[1] == kind]
        print(f"\nmedian wall, {kind}: {statistics.median(walls):.3f} s over {len(walls)} blocks", end="")
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
