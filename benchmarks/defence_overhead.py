"""What the defences cost: the same manifest run with ``defences.enabled`` true and false.

Usage::

    python benchmarks/defence_overhead.py [MANIFEST ...] [--repeats 3] [--max-seconds 2]
                                          [--json OUT.json] [-- key=value ...]

Each manifest runs ``--repeats`` times each way, alternating (on, off, on, off, ...)
after one discarded warm-up run each way (the fork server's start, torch's lazy
imports). Measurement is pinned to a fixed budget: ``measure.target_ci=0`` can never
be met, so every run times exactly ``--max-seconds`` of calls per case and stops on
the budget; the two ways then do the same timed work, and the difference in wall
time is what the defences add around it (worker process, channel round trips, fresh
inputs, rechecks, the envelope, the preflight's extra calls).

The table gives, per manifest and way: the median wall time of the whole run, of
the measurement phase (``measured.cases.*.wall_seconds``, summed over cases) and of
the timed calls themselves, the overhead of "on" over "off" on each, and the
verdicts and speedups, so that "an honest example's verdict is unchanged" can be
read off the same rows. The wall time on a machine other people use is noisy: run
it on a quiet one, and read the spread (min-max) before the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "manifests/examples/cpu/honest-win.yaml", ROOT / "tests/adversarial/cpu/honest_gemv.yaml"]


def one(manifest: Path, on: bool, max_seconds: float, extra: List[str], out: Path) -> Dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from expkit.runner import run_manifest

    overrides = ["measure=quick", f"measure.max_seconds={max_seconds}", "measure.target_ci=0.0",
                 f"defences.enabled={'true' if on else 'false'}", *extra]
    t0 = time.perf_counter()
    r = run_manifest(manifest, overrides, out_dir=out).result
    wall = time.perf_counter() - t0
    cases = r["measured"]["cases"]
    return {"wall": wall, "measure_wall": sum(c["wall_seconds"] for c in cases.values()),
            "timed": sum(c["timed_seconds"] for c in cases.values()), "verdict": r["verdict"],
            "speedups": {k: round(c["speedup"], 3) for k, c in cases.items()},
            "alarms": [f["check"] for f in r["checks"] if not f["ok"] and f.get("severity") != "warning"]}


def main(argv: List[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("manifests", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=2.0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    rows: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.manifests:
            for on in (True, False):  # warm-up, discarded
                one(m, on, min(args.max_seconds, 0.2), extra, Path(tmp) / f"warm-{m.stem}-{on}")
            got: Dict[str, List[Dict[str, Any]]] = {"on": [], "off": []}
            for k in range(args.repeats):
                for on in (True, False):
                    got["on" if on else "off"].append(
                        one(m, on, args.max_seconds, extra, Path(tmp) / f"{m.stem}-{k}-{on}"))
            rows[str(m)] = got
    print("| manifest | defences | runs | wall s (median, min-max) | measure phase s | timed s | "
          "overhead: wall | overhead: measure phase | verdicts | speedups | alarms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m, got in rows.items():
        med = {w: {k: statistics.median(r[k] for r in got[w]) for k in ("wall", "measure_wall", "timed")}
               for w in ("on", "off")}
        for w in ("on", "off"):
            runs = got[w]
            walls = [r["wall"] for r in runs]
            over = over_m = ""
            if w == "on":
                over = f"{med['on']['wall'] / med['off']['wall'] - 1:+.1%}"
                over_m = f"{med['on']['measure_wall'] / med['off']['measure_wall'] - 1:+.1%}"
            print(f"| {Path(m).name} | {w} | {len(runs)} | {med[w]['wall']:.2f} ({min(walls):.2f}-{max(walls):.2f}) "
                  f"| {med[w]['measure_wall']:.2f} | {med[w]['timed']:.2f} | {over} | {over_m} "
                  f"| {', '.join(sorted({r['verdict'] for r in runs}))} "
                  f"| {'; '.join(json.dumps(r['speedups']) for r in runs)} "
                  f"| {', '.join(sorted({a for r in runs for a in r['alarms']})) or 'none'} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
