"""Where the measurement loop's time goes, block by block: one run, the parent's wait on its
batches of timed blocks split into what the workers report for each block (``timed``: the
calls; ``untimed``: fresh inputs between them; ``checks``: the checks around them and any
export for the recheck) and the channel's latency (the parent's wait outside the workers'
stamps). A table on stdout; nothing is written but the run's folder (a temporary one).

    python benchmarks/block_overhead.py MANIFEST [override ...]

By default with ``defence_overhead.py``'s settings (``measure=quick``,
``measure.max_seconds=2``, ``measure.target_ci=0``), so that every run times the same
amount of calls. Issue 13: the per-block costs are what longer blocks, or fewer checks
per block, would save.
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence

from expkit import api
from expkit.bench import pair as pair_module

DEFAULTS = ["measure=quick", "measure.max_seconds=2", "measure.target_ci=0.0"]
PARTS = ("timed", "untimed", "checks")


def main(argv: List[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    manifest, overrides = argv[0], [*DEFAULTS, *argv[1:]]
    acc: Dict[str, float] = collections.Counter()
    original = pair_module.CaseSides._run_blocks

    def counted(self: Any, requests: Sequence[Any]) -> Dict[str, Any]:
        t0 = time.perf_counter()
        out = original(self, requests)
        acc["parent"] += time.perf_counter() - t0
        acc["latency"] += out["latency"]
        acc["blocks"] += len(out["blocks"])
        acc["batches"] += 1
        for b in out["blocks"]:
            for part in PARTS:
                acc[part] += b.get(part) or 0.0
        return out

    pair_module.CaseSides._run_blocks = counted
    t0 = time.perf_counter()
    result = api.run(manifest, out=tempfile.mkdtemp(prefix="expkit-blocks-"), overrides=overrides, plots=False)
    wall = time.perf_counter() - t0
    n = max(1, int(acc["blocks"]))
    print(f"{manifest}: {result.verdict}, {wall:.1f} s wall, {n} blocks in {int(acc['batches'])} batches "
          f"({' '.join(overrides)})\n")
    print("| part | seconds | per block (ms) | share of the batches' wait |")
    print("|---|---|---|---|")
    rest = acc["parent"] - sum(acc[p] for p in PARTS) - acc["latency"]
    for name, secs in [*((p, acc[p]) for p in PARTS), ("channel latency", acc["latency"]), ("parent, between", rest),
                       ("the batches' wait", acc["parent"])]:
        share = secs / acc["parent"] if acc["parent"] else 0.0
        print(f"| {name} | {secs:.3f} | {1e3 * secs / n:.3f} | {100 * share:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
