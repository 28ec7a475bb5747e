"""What the defences cost a run that stops at its own target, as a user runs it: fresh
``expkit run`` commands, variants alternating, and what each run's processes timed.

At a pinned budget (``defence_overhead.py``, ``isolation_floor.py``) both ways time the
same calls. A run at ``measure=default`` does not: each process times rounds until its own
interval is narrow enough, so the rounds it needs, and the command's length, follow the
blocks' spread. This prints one row per run (the command's seconds, the measurement
stage's, and per case the timed seconds and each process's rounds) and one summary row
per variant (medians over its runs).

    python benchmarks/stopping_cost.py [MANIFEST] [--rounds 4]
        [--variant NAME=OVERRIDE,OVERRIDE ...] [-- key=value ...]

Default variants: ``defended`` (as shipped) and ``undefended``; every run gets
``measure=default`` unless the extra overrides name another preset.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variant_runs import ROOT, parse_variants, require_manifest, split_overrides, run_cli, with_preset  # noqa: E402
DEFAULT = ROOT / "manifests/examples/cpu/honest-win.yaml"
VARIANTS = {"defended": [], "undefended": ["defences.enabled=false"]}


def run_once(manifest: Path, overrides: Sequence[str], out: Path) -> Dict[str, Any]:
    """One fresh command: its seconds as the shell sees them and its ``result.json``."""
    t0 = time.perf_counter()
    run_cli(manifest, overrides, out)
    seconds = time.perf_counter() - t0
    result = json.loads((out / "result.json").read_text())
    return {"seconds": seconds, "result": result}


def row(run: Mapping[str, Any]) -> Dict[str, Any]:
    """The figures of one run: command and measurement-stage seconds, the verdict, and per
    case the timed seconds, each process's rounds and why the case stopped."""
    r = run["result"]
    cases = {}
    for name, c in (r.get("measured") or {}).get("cases", {}).items():
        cases[name] = {"timed": float(c.get("timed_seconds") or 0.0),
                       "rounds": [int(p.get("rounds") or 0) for p in c.get("per_process") or []],
                       "stopped": str(c.get("stopped", ""))}
    return {"seconds": run["seconds"], "measure": float((r.get("stages") or {}).get("measure") or 0.0),
            "verdict": r.get("verdict"), "cases": cases}


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", default=str(DEFAULT))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variant", action="append", default=[], help="NAME=OVERRIDE,OVERRIDE (repeatable)")
    own, extra = split_overrides(argv)
    args = ap.parse_args(own)
    require_manifest(args.manifest, "stopping_cost.py")
    extra = with_preset(extra, "default")
    variants = parse_variants(args.variant, VARIANTS)
    got: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    print(f"<!-- {Path(args.manifest).name} {' '.join(extra)}; {args.rounds} rounds, variants in turn -->")
    print("| round | variant | verdict | command s | measure s | per case: timed s, rounds per process |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for name, overrides in variants.items():
                out = Path(tmp) / f"{i}-{name.replace(' ', '_')}"
                try:
                    r = row(run_once(Path(args.manifest), extra + overrides, out))
                except (OSError, ValueError) as e:
                    print(f"round {i + 1}, {name}: no result ({type(e).__name__}: {e})", file=sys.stderr)
                    continue
                got[name].append(r)
                per_case = "; ".join(f"{c}: {v['timed']:.2f}, {v['rounds']}" for c, v in r["cases"].items())
                print(f"| {i + 1} | {name} | {r['verdict']} | {r['seconds']:.2f} | {r['measure']:.2f} | {per_case} |",
                      flush=True)
    print()
    print("| variant | runs | command s, median (range) | measure s, median | rounds per process, median (max) |")
    print("|---|---|---|---|---|")
    for name, runs in got.items():
        secs = [r["seconds"] for r in runs]
        rounds = [n for r in runs for c in r["cases"].values() for n in c["rounds"]]
        print(f"| {name} | {len(runs)} | {statistics.median(secs):.2f} ({min(secs):.2f}-{max(secs):.2f}) | "
              f"{statistics.median(r['measure'] for r in runs):.2f} | "
              f"{statistics.median(rounds) if rounds else 0:g} ({max(rounds, default=0)}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
