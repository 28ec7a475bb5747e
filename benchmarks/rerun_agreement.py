"""Rerun agreement: does each run's interval hold the estimates of the same claim's other runs?

A script, not a test. It reads run folders that ``expkit run`` wrote (``result.json``
only), grouped: each GROUP argument is a folder whose sub-folders are runs of one
manifest in separate, fresh invocations (or a list of run folders joined by commas).
For every case it tabulates each run's verdict, processes, estimate, interval and the
spread between its processes, then for every ordered pair of runs (i, j) whether run i's
interval contains run j's estimate, and writes ``rerun_agreement.md`` and
``rerun_agreement.json`` to ``--out``.

What to expect. An interval at 95% covers the speedup with that probability; another
run's *estimate* carries its own noise, so it lands inside less often: for two runs of
equal precision and a normal interval, ``P(|Z| < 1.96 / sqrt(2)) = 83%``. An interval
built from one process misses the spread between processes altogether, and then other
runs' estimates land outside it far more often (the issue behind this script: on an
H200 a ~10 us pair varied by 1.54% across 5 fresh processes while each run's own
interval was about ±1%).

Usage (the GPU commands, five fresh invocations a manifest)::

    for i in 1 2 3 4 5; do expkit run benchmarks/rerun/aa.yaml --out reports/rerun/aa/run-$i; done
    for i in 1 2 3 4 5; do expkit run benchmarks/rerun/pair.yaml --out reports/rerun/pair/run-$i; done
    python benchmarks/rerun_agreement.py reports/rerun/aa reports/rerun/pair --out evidence/verdicts/rerun-agreement-gpu
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from expkit.report import store  # noqa: E402


def runs_of(group: str) -> List[Path]:
    """The run folders of a GROUP argument: a folder of run folders, or a comma-separated list."""
    if "," in group:
        return [Path(p) for p in group.split(",") if p]
    folder = Path(group)
    if store.is_run_dir(folder):
        return [folder]
    return sorted(p for p in folder.iterdir() if store.is_run_dir(p))


def agreement(folders: Sequence[Path]) -> Dict[str, Any]:
    """Per case: each run's figures, and which runs' intervals hold which runs' estimates."""
    results = [(f, store.load_result(f / store.RESULT)) for f in folders]
    names = {r.get("name") for _, r in results}
    cases: Dict[str, Any] = {}
    for case in dict.fromkeys(c for _, r in results for c in ((r.get("measured") or {}).get("cases") or {})):
        runs = []
        for folder, r in results:
            c = ((r.get("measured") or {}).get("cases") or {}).get(case)
            if c is None:
                continue
            runs.append({"run": folder.name, "verdict": r.get("verdict"), "case_verdict": c.get("verdict"),
                         "speedup": c["speedup"], "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                         "confidence": c.get("confidence"), "processes": c.get("processes", 1),
                         "process_spread": c.get("process_spread"), "interval": c.get("interval"),
                         "timed_seconds": c.get("timed_seconds"), "wall_seconds": r.get("wall_seconds")})
        holds = [[i != j and a["ci_low"] <= b["speedup"] <= a["ci_high"] for j, b in enumerate(runs)]
                 for i, a in enumerate(runs)]
        pairs = len(runs) * (len(runs) - 1)
        est = [x["speedup"] for x in runs]
        for i, x in enumerate(runs):
            x["holds_others"] = sum(holds[i])
        cases[case] = {
            "runs": runs,
            "holds": holds,
            "pairs": pairs,
            "pairs_held": sum(map(sum, holds)),
            "estimates_spread": (max(est) - min(est)) / statistics.median(est) if est else None,
            "mean_half_width": (statistics.mean((x["ci_high"] - x["ci_low"]) / (2 * x["speedup"]) for x in runs)
                                if runs else None),
        }
    return {"manifests": sorted(n for n in names if n), "folders": [str(f) for f in folders], "cases": cases}


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def render(groups: Dict[str, Dict[str, Any]]) -> str:
    lines = ["# Rerun agreement: each run's interval against the other runs' estimates", "",
             "Written by `benchmarks/rerun_agreement.py` from the runs' `result.json`. For two runs of equal "
             "precision, a 95% normal interval holds the other run's estimate about 83% of the time "
             "(`P(|Z| < 1.96/sqrt 2)`); an interval that leaves out the spread between processes holds it "
             "far less often.", ""]
    for group, g in groups.items():
        for case, c in g["cases"].items():
            lines += [f"## {', '.join(g['manifests']) or group}: case `{case}`", "",
                      f"{len(c['runs'])} runs; intervals holding another run's estimate: "
                      f"**{c['pairs_held']} of {c['pairs']}** ordered pairs; estimates spread "
                      f"{_pct(c['estimates_spread'])} (max - min over median); mean half-width "
                      f"{_pct(c['mean_half_width'])}.", "",
                      "| run | verdict | processes | speedup | interval | spread between its processes | "
                      "holds others' estimates | timed s | wall s |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for x in c["runs"]:
                lines.append(f"| {x['run']} | {x['verdict']} | {x['processes']} | {x['speedup']:.4f} | "
                             f"[{x['ci_low']:.4f}, {x['ci_high']:.4f}] | {_pct(x['process_spread'])} | "
                             f"{x['holds_others']} of {len(c['runs']) - 1} | "
                             f"{x['timed_seconds'] or 0:.2f} | {x['wall_seconds'] or 0:.1f} |")
            lines += ["", f"Interval: {c['runs'][0]['interval'] if c['runs'] else 'n/a'}", ""]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="+", help="a folder of run folders, or run folders joined by commas")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "evidence" / "verdicts")
    a = ap.parse_args(argv)
    groups = {g: agreement(runs_of(g)) for g in a.groups}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "rerun_agreement.json").write_text(json.dumps({"schema_version": 1, "groups": groups}, indent=1) + "\n")
    text = render(groups)
    (a.out / "rerun_agreement.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
