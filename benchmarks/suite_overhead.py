"""Suite overhead: what running a manifest in its own worker costs beyond its measurement.

A script, not a test. It writes N copies of a tiny CPU manifest (a 64-element add
against a multiply, measured for a fixed 0.05 s a case) into a temporary folder,
runs them as one suite with each worker start method, and prints a table.

Per manifest:

* ``suite wall`` -- the suite's wall time divided by N, once the fork server is up
  (its one-time start is its own column: it is paid once per suite, not per manifest);
* ``suite bookkeeping`` -- suite wall less the supervisor's wall time per worker:
  session writes, scheduling, the summary;
* ``worker start + exit`` -- the supervisor's wall time less the worker's own time
  in ``run_manifest`` (both from the run folder's ``worker.json``): fork or
  interpreter start, imports not preloaded, exit;
* ``runner: preflight, report`` -- ``run_manifest``'s time less the timed phase:
  settings, preflight, identity trace, verdict, plots and report;
* ``measuring`` -- the timed phase alone (the cases' ``wall_seconds``);
* ``overhead`` = suite wall - measuring -- what the issue's target (under 3 s a
  manifest on CPU) bounds.

Usage: ``python benchmarks/suite_overhead.py [--n 6] [--start forkserver spawn]
[--out DIR]`` (``--out`` also gets ``suite_overhead.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KERNELS = textwrap.dedent('''
    import torch
    def inputs(params, gen, device):
        return (torch.randn(int(params["n"]), generator=gen, device=device),)
    def mul(x):
        return x * 2
    def add(x):
        return x + x
''')

MANIFEST = textwrap.dedent('''
    name: tiny-{i}
    claim: {{speedup: 1.0, tolerance: 0.5}}
    baseline: overhead_kernels:mul
    candidate: overhead_kernels:add
    inputs: {{factory: overhead_kernels:inputs}}
    cases: [{{name: n64, params: {{n: 64}}}}]
''')

OVERRIDES = ["measure=quick", "measure.min_seconds=0.05", "measure.max_seconds=0.05", "measure.warmup_seconds=0.01",
             "measure.min_rounds=4", "launcher.timeout_seconds=300"]


def run(start: str, n: int, folder: Path, out: Path) -> dict:
    from expkit.suites import manifest_process
    from expkit.suites.suite import run_suite

    t0 = time.perf_counter()
    warm = manifest_process.warm_up(start)  # the fork server's imports: once per suite
    t1 = time.perf_counter()
    outcome = run_suite([str(folder)], OVERRIDES + [f"launcher.start={start}"], out=out / f"session-{start}")
    t2 = time.perf_counter()
    sup, run_s, measuring = [], [], []
    for row in outcome.rows:
        res = row.result or {}
        w = json.loads((outcome.session_dir / row.run / "worker.json").read_text())
        sup.append(float(w["supervisor_seconds"]))
        run_s.append(float(w["run_seconds"]))
        measuring.append(sum(float(c.get("wall_seconds") or 0)
                             for c in (res.get("measured") or {}).get("cases", {}).values()))
    per = (t2 - t1) / n
    med = statistics.fmean  # means: the columns then add up to the suite's wall time
    return {"start": start, "n": n, "one_time": warm if start == "forkserver" else t1 - t0, "suite_per": per,
            "bookkeeping": per - med(sup), "worker_start_exit": med(sup) - med(run_s),
            "runner_rest": med(run_s) - med(measuring), "measuring": med(measuring),
            "overhead": per - med(measuring), "verdicts": sorted({r.verdict or r.status for r in outcome.rows})}


def table(rows: list, cores: int) -> str:
    lines = [f"Suite overhead per manifest ({platform.node()}, {cores} cores, Python {platform.python_version()})", "",
             "| start | manifests | one-time start (s) | suite wall / manifest (s) | suite bookkeeping (s) "
             "| worker start + exit (s) | runner: preflight, report (s) | measuring (s) | overhead / manifest (s) "
             "| verdicts |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['start']} | {r['n']} | {r['one_time']:.2f} | {r['suite_per']:.2f} | {r['bookkeeping']:.2f} "
                     f"| {r['worker_start_exit']:.2f} | {r['runner_rest']:.2f} | {r['measuring']:.2f} "
                     f"| {r['overhead']:.2f} | {', '.join(r['verdicts'])} |")
    lines += ["", "Means over the manifests. overhead = suite wall / manifest - measuring = bookkeeping (the suite "
              "process: session, scheduling) + worker start and exit (fork or interpreter start, imports, settings) "
              "+ the runner's own work besides timing (preflight, identity trace, plots, report). "
              "Target: overhead < 3 s on CPU."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--start", nargs="+", default=["forkserver", "spawn"], choices=["forkserver", "spawn"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="expkit-overhead-") as tmp:
        folder = Path(tmp) / "manifests"
        folder.mkdir()
        (folder / "overhead_kernels.py").write_text(KERNELS)
        for i in range(args.n):
            (folder / f"tiny-{i}.yaml").write_text(MANIFEST.format(i=i))
        rows = [run(s, args.n, folder, Path(tmp)) for s in args.start]
    text = table(rows, os.cpu_count() or 0)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "suite_overhead.md").write_text(text)
        (args.out / "suite_overhead.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
