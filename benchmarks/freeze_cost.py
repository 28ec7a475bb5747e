"""What the freeze costs: the other side's worker stopped while a side's blocks are timed.

``defences.freeze`` (``expkit/bench/defences/freeze.py``) stops the idle worker before each block
request of the other side and continues it before its own. This runs a manifest at a
pinned budget (``measure=quick measure.max_seconds=S measure.target_ci=0``) with the
freeze on and off, alternating, at each ``measure.cpu_threads`` asked for, each run a
fresh process of this script, and prints one row per run: the verdict, the measurement
phase (``result.json``'s ``measure`` stage), the block requests, the parent's time in the
freeze (each hand-over's median, 90th percentile and maximum, and the sum), and the other
worker's CPU time while a side was timed, as a share of the timed side's requests' wall.
Then, per thread count, the medians of the measurement phase each way.

    python benchmarks/freeze_cost.py [MANIFEST] [--rounds 3] [--threads 1 2] [--max-seconds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "manifests/examples/cpu/honest-win.yaml"


def one(manifest: str, overrides: List[str]) -> Dict[str, Any]:
    """One run in this process, the freeze's hand-overs timed; its figures."""
    sys.path.insert(0, str(ROOT))
    from expkit.bench.defences import freeze
    from expkit.runner import run_manifest

    waits: List[float] = []
    quiet = freeze.Freeze.quiet

    def timed(self: Any, side: str) -> None:
        t0 = time.perf_counter()
        quiet(self, side)
        waits.append(time.perf_counter() - t0)

    freeze.Freeze.quiet = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as out:
        res = run_manifest(manifest, overrides, out_dir=out).result
    seen = res["defences"].get("interference") or {}
    wall = sum(rec["timed_ms"] for case in seen.values() for rec in case.values())
    other = sum(rec["other_cpu_ms"] for case in seen.values() for rec in case.values())
    waits.sort()
    q = (lambda p: waits[min(len(waits) - 1, int(len(waits) * p))] * 1e6) if waits else (lambda p: 0.0)
    return {"verdict": res["verdict"], "measure_s": res["stages"]["measure"], "handovers": len(waits),
            "median_us": q(0.5), "p90_us": q(0.9), "max_us": q(1.0), "sum_s": sum(waits),
            "other_share": other / wall if wall else None, "frozen": res["defences"].get("frozen")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest", nargs="?", default=str(DEFAULT))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--max-seconds", type=float, default=2.0)
    ap.add_argument("--one", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(one(a.manifest, a.one)))
        return 0
    base = ["measure=quick", f"measure.max_seconds={a.max_seconds}", "measure.target_ci=0"]
    print(f"# {Path(a.manifest).name}, pinned {a.max_seconds:g} s a case, {a.rounds} round(s), freeze on and off alternating\n")
    print("| round | threads | freeze | verdict | measure s | hand-overs | wait median us | p90 us | max us | sum s | other worker's share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    phases: Dict[tuple, List[float]] = {}
    for r in range(a.rounds):
        for t in a.threads:
            order = ("true", "false") if r % 2 == 0 else ("false", "true")
            for f in order:
                ov = base + [f"measure.cpu_threads={t}", f"defences.freeze={f}"]
                got = subprocess.run([sys.executable, __file__, a.manifest, "--one", *ov],
                                     capture_output=True, text=True, cwd=ROOT)
                if got.returncode != 0:
                    print(f"| {r + 1} | {t} | {f} | failed: {got.stderr.strip().splitlines()[-1:]} |")
                    continue
                d = json.loads(got.stdout.strip().splitlines()[-1])
                phases.setdefault((t, f), []).append(d["measure_s"])
                share = "n/a" if d["other_share"] is None else f"{d['other_share']:.4f}"
                print(f"| {r + 1} | {t} | {f} | {d['verdict']} | {d['measure_s']:.2f} | {d['handovers']} | "
                      f"{d['median_us']:.0f} | {d['p90_us']:.0f} | {d['max_us']:.0f} | {d['sum_s']:.3f} | {share} |")
    print("\n| threads | freeze on: median measure s | off | on over off |")
    print("|---|---|---|---|")
    for t in a.threads:
        on, off = phases.get((t, "true")), phases.get((t, "false"))
        if on and off:
            m_on, m_off = statistics.median(on), statistics.median(off)
            print(f"| {t} | {m_on:.2f} ({min(on):.2f}-{max(on):.2f}) | {m_off:.2f} ({min(off):.2f}-{max(off):.2f}) | "
                  f"{100 * (m_on / m_off - 1):+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
