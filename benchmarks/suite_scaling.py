"""Suite scaling over GPUs: the same GPU suite on one GPU, then on two.

A script, not a test; it needs a machine with at least two CUDA GPUs. It writes N
equal GPU manifests (an elementwise ReLU against ``clamp_min``, 2^24 fp32 elements,
each case measured for a fixed ``--seconds`` of timed work) into a folder under
``--out`` and runs them with ``expkit run FOLDER`` twice, in fresh processes: with
``CUDA_VISIBLE_DEVICES=<first GPU>`` and with ``CUDA_VISIBLE_DEVICES=<both>``. The
local launcher runs one worker per GPU at a time, so the second suite should take
about half as long; the target is a ratio close to 0.5 (the fork server's start and
the suite's bookkeeping do not halve).

It also checks, from each run folder's ``worker.json`` and ``env.json``, that every
worker ran on the GPU it was given and that no two runs overlapped on one GPU.

Output: a table on stdout, and ``suite_scaling.md`` + ``suite_scaling.json`` in
``--out`` (default ``$OUT`` when set, else ``evidence/harness-cost/suite``), beside the two
session folders.

Usage: ``python benchmarks/suite_scaling.py [--n 8] [--seconds 6] [--gpus 0,1] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KERNELS = textwrap.dedent('''
    import torch
    def inputs(params, gen, device):
        return (torch.randn(int(params["n"]), generator=gen, device=device),)
    def relu(x):
        return torch.relu(x)
    def clamp(x):
        return x.clamp_min(0)
''')

MANIFEST = textwrap.dedent('''
    name: scaling-{i}
    description: ReLU against clamp_min on 2^24 fp32 elements; equal work in every copy.
    claim: {{speedup: 1.0, tolerance: 0.2}}
    baseline: scaling_kernels:relu
    candidate: scaling_kernels:clamp
    inputs: {{factory: scaling_kernels:inputs}}
    cases: [{{name: n16M, params: {{n: 16777216}}}}]
    # relu and clamp_min launch the same elementwise kernel: sharing it is the point here.
    expect: {{forbid_baseline: false}}
    device: cuda
''')


def _overrides(seconds: float) -> list:
    # A target interval no run reaches: every case measures for exactly `seconds` of timed work.
    return ["measure=quick", f"measure.min_seconds={seconds}", f"measure.max_seconds={seconds}",
            "measure.target_ci=0.00001", "launcher.timeout_seconds=900"]


def run_suite(folder: Path, gpus: str, session: Path, seconds: float) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "expkit", "run", str(folder), *_overrides(seconds), "--out", str(session)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1, 3, 4):
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"suite with CUDA_VISIBLE_DEVICES={gpus} failed with exit code {proc.returncode}")
    runs = []
    for sub in sorted(p for p in session.iterdir() if (p / "worker.json").is_file()):
        w = json.loads((sub / "worker.json").read_text())
        e = json.loads((sub / "env.json").read_text()) if (sub / "env.json").is_file() else {}
        r = json.loads((sub / "result.json").read_text())
        runs.append({"run": sub.name, "gpu": w.get("gpu"), "seen": (e.get("gpu") or {}).get("visible_devices"),
                     "gpu_name": (e.get("gpu") or {}).get("name"), "started": w.get("started"),
                     "seconds": w.get("supervisor_seconds"), "verdict": r["verdict"]})
    unmeasured = [r["run"] for r in runs if r["verdict"] == "invalid"]
    if unmeasured:
        # An invalid run skips measurement, so the suite would time preflights, not the work.
        raise SystemExit(f"suite with CUDA_VISIBLE_DEVICES={gpus}: {len(unmeasured)} run(s) invalid, so not "
                         f"measured ({', '.join(unmeasured)}); see their result.json under {session}")
    return {"gpus": gpus, "wall": wall, "runs": runs, "exit_code": proc.returncode}


def _overlaps(runs: list) -> list:
    """Pairs of runs that ran on the same GPU at the same time (there should be none)."""
    spans = []
    for r in runs:
        start = _dt.datetime.fromisoformat(r["started"]).timestamp()
        spans.append((r["gpu"], start, start + float(r["seconds"]), r["run"]))
    bad = []
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            # started is stamped to the second: allow one second of slack
            if a[0] == b[0] and a[1] < b[2] - 1 and b[1] < a[2] - 1:
                bad.append(f"{a[3]} and {b[3]} on GPU {a[0]}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="manifests in the suite (default 8)")
    ap.add_argument("--seconds", type=float, default=6.0, help="timed work per manifest (default 6)")
    ap.add_argument("--gpus", default="0,1", help="the two GPUs, as CUDA_VISIBLE_DEVICES entries (default 0,1)")
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else
                    ROOT / "evidence" / "harness-cost" / "suite")
    args = ap.parse_args()
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    if len(gpus) != 2:
        raise SystemExit("--gpus: give two GPUs, e.g. 0,1")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = args.out / f"suite_scaling-{stamp}"
    folder = base / "manifests"
    folder.mkdir(parents=True)
    (folder / "scaling_kernels.py").write_text(KERNELS)
    for i in range(args.n):
        (folder / f"scaling-{i}.yaml").write_text(MANIFEST.format(i=i))
    one = run_suite(folder, gpus[0], base / "session-1gpu", args.seconds)
    two = run_suite(folder, ",".join(gpus), base / "session-2gpu", args.seconds)
    ratio = two["wall"] / one["wall"]
    checks = []
    for s in (one, two):
        wrong = [r["run"] for r in s["runs"] if r["seen"] != r["gpu"]]
        checks.append(f"CUDA_VISIBLE_DEVICES={s['gpus']}: GPUs used {sorted({r['gpu'] for r in s['runs']})}; "
                      f"runs whose env.json saw another device: {wrong or 'none'}; "
                      f"overlapping runs on one GPU: {_overlaps(s['runs']) or 'none'}")
    name = next((r["gpu_name"] for r in one["runs"] if r["gpu_name"]), "unknown GPU")
    lines = [f"# Suite scaling: {args.n} equal GPU manifests, {args.seconds:g} s of timed work each", "",
             f"{name}; {_dt.datetime.now().isoformat(timespec='seconds')}; `python benchmarks/suite_scaling.py "
             f"--n {args.n} --seconds {args.seconds:g} --gpus {args.gpus}`", "",
             "| GPUs | suite wall (s) | per manifest (s) | verdicts |", "|---|---|---|---|"]
    for s in (one, two):
        verdicts = sorted({r["verdict"] for r in s["runs"]})
        lines.append(f"| {s['gpus']} | {s['wall']:.1f} | {s['wall'] / args.n:.2f} | {', '.join(verdicts)} |")
    lines += ["", f"Ratio two GPUs / one GPU: **{ratio:.3f}** (ideal 0.5; the fork server's start, the suite's "
              "bookkeeping and an odd manifest count do not halve).", ""]
    lines += [f"- {c}" for c in checks]
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / "suite_scaling.md").write_text(text)
    (args.out / "suite_scaling.json").write_text(json.dumps({"ratio": ratio, "one": one, "two": two,
                                                             "n": args.n, "seconds": args.seconds}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
