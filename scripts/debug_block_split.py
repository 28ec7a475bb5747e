"""Debug: a run's timed blocks split into their parts, as the workers and the parent account for them.

A script for the device (or the CPU machine), not a test. Runs ``run_manifest`` once per
variant in this process (each variant a ``;``-separated override list after ``--``;
default: the defences on and off), wrapping ``CaseSides._relay`` so that every batch of
blocks is summed: the parent's time of the batch (``relay``), and each block's own account
from its worker: ``timed`` (the calls, as the timer counts them), ``untimed`` (the rest of
the sampling span: fresh inputs, per-call hooks, on a GPU the L2 flushes, launches, the
hold and the record's flush), ``checks`` (before and after the calls), ``recheck`` and
``wall``; ``relay - wall`` is the channel and the hand-overs. Calibration blocks are
included. Prints one row per variant: totals in seconds and per block in milliseconds.

    python scripts/debug_block_split.py MANIFEST [-- "k=v k=v" ; "k=v" ...]

Base overrides: ``measure=quick measure.max_seconds=2 measure.target_ci=0`` (a pinned budget).
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
BASE = ["measure=quick", "measure.max_seconds=2", "measure.target_ci=0"]
PARTS = ("timed", "untimed", "checks", "recheck", "wall")


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    manifest = argv[0]
    rest = " ".join(argv[argv.index("--") + 1:]) if "--" in argv else "defences.enabled=true;defences.enabled=false"
    variants = [v.split() for v in rest.split(";")]
    sys.path.insert(0, str(ROOT))
    from expkit.bench import case_sides as P
    from expkit.runner import run_manifest

    acc: Dict[str, float] = collections.defaultdict(float)
    n: collections.Counter = collections.Counter()
    relay = P.CaseSides._relay

    def counted(self: Any, requests: Any) -> Any:
        t0 = time.perf_counter()
        out = relay(self, requests)
        acc["relay"] += time.perf_counter() - t0
        n["batches"] += 1
        for b in out["blocks"]:
            n["blocks"] += 1
            for k in PARTS:
                acc[k] += float(b.get(k) or 0.0)
        return out

    P.CaseSides._relay = counted
    out = Path(tempfile.mkdtemp(prefix="block-split-"))
    print("| variant | verdict | blocks | relay s | " + " | ".join(f"{k} s" for k in PARTS)
          + " | per block ms: relay - timed | checks | untimed | relay - wall |")
    print("|---|---|---|---|" + "---|" * len(PARTS) + "---|---|---|---|")
    try:
        for i, v in enumerate([[]] + variants):  # the first run warms up (fork server, CUDA), not printed
            acc.clear()
            n.clear()
            r = run_manifest(manifest, [*BASE, *v], out_dir=out / str(i)).result
            if i == 0:
                continue
            b = max(1, n["blocks"])
            print(f"| {' '.join(v) or '(as shipped)'} | {r['verdict']} | {n['blocks']} | {acc['relay']:.3f} | "
                  + " | ".join(f"{acc[k]:.3f}" for k in PARTS)
                  + f" | {(acc['relay'] - acc['timed']) / b * 1e3:.2f} | {acc['checks'] / b * 1e3:.2f} | "
                  f"{acc['untimed'] / b * 1e3:.2f} | {(acc['relay'] - acc['wall']) / b * 1e3:.2f} |")
    finally:
        P.CaseSides._relay = relay
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
