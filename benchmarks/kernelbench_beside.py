"""expkit beside KernelBench's own evaluation, problem by problem (issue 19's reference).

A script that prints a table, not a test. It joins two result files of the same problems:
``kernelbench_sweep.py``'s (one ``expkit run ... measure=quick`` command per problem, its
reference as the candidate) and ``kernelbench_reference_eval.py``'s (KernelBench's
``eval_kernel_against_ref`` on the same identity solution, every problem in one process).
Each problem's latest record of each is used (files later on the command line are later).

What the two walls cover is not the same, and the table says so:

* **expkit**: the whole command, a fresh Python process per problem (imports, two worker
  processes per replicate, five replicates at ``quick``, the correctness trials on fresh
  inputs and awkward sizes, identity profiles, the report). ``expkit own`` is the run's
  own clock (``result.json`` ``wall_seconds``).
* **KernelBench**: one ``eval_kernel_against_ref`` call in a process that has already
  imported torch and made its CUDA context (paid once, by the first problem of the
  command): 5 correctness trials and 100 timed calls of each side on one input set, in
  the one process that also holds the reference.

Usage::

    python benchmarks/kernelbench_beside.py --sweep SWEEP.jsonl... --kbeval KBEVAL.jsonl... \\
        [--out TABLE.md] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence


def _latest(paths: Sequence[Path], mode: str) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("mode") == mode:
                out[rec["problem"]] = rec  # later lines, and later files, are later runs
    return out


def _f(x: Optional[float], digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def rows(sweep: Dict[str, Dict[str, Any]], kb: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per problem both files ran, in problem-number order."""
    out = []
    for name in sorted(set(sweep) & set(kb), key=lambda n: (len(n.split("_")[0]), n)):
        e, k = sweep[name], kb[name]
        ratio = e["wall_s"] / k["wall_s"] if e.get("wall_s") and k.get("wall_s") else None
        out.append({"problem": name.split("/")[-1].removesuffix(".py"), "verdict": e.get("verdict"),
                    "expkit_wall": e.get("wall_s"), "expkit_own": e.get("expkit_wall_s"),
                    "kb_result": k.get("result"), "kb_wall": k.get("wall_s"), "ratio": ratio,
                    "expkit_peak": e.get("peak_gpu_gib"), "kb_peak": k.get("peak_gpu_gib"),
                    "plain_peak": e.get("plain_peak_gib")})
    return out


def table(rs: Sequence[Dict[str, Any]]) -> str:
    lines = ["| problem | expkit verdict | expkit command s | expkit own s | KernelBench result | KernelBench s "
             "| expkit / KernelBench | expkit peak GiB | KernelBench peak GiB | plain call GiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        lines.append(f"| {r['problem']} | {r['verdict']} | {_f(r['expkit_wall'])} | {_f(r['expkit_own'])} | "
                     f"{r['kb_result']} | {_f(r['kb_wall'])} | {_f(r['ratio'], 2)} | {_f(r['expkit_peak'], 2)} | "
                     f"{_f(r['kb_peak'], 2)} | {_f(r['plain_peak'], 2)} |")
    # Walls compared only where KernelBench's evaluation finished (an error ends it early).
    walls = [(r["expkit_wall"], r["kb_wall"]) for r in rs
             if r["expkit_wall"] and r["kb_wall"] and r["kb_result"] == "correct"]
    if walls:
        e, k = [w[0] for w in walls], [w[1] for w in walls]
        left = len(rs) - len(walls)
        lines += ["", f"{len(walls)} problems KernelBench's evaluation finished"
                  + (f" ({left} more it did not)" if left else "")
                  + f": expkit's command wall median {statistics.median(e):.1f} s (sum {sum(e):.0f} s); "
                  f"KernelBench's per-problem wall median {statistics.median(k):.1f} s (sum {sum(k):.0f} s); "
                  f"expkit slower on {sum(a > b for a, b in walls)} of {len(walls)}."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=Path, nargs="+", required=True, help="kernelbench_sweep.py's JSONL files")
    ap.add_argument("--kbeval", type=Path, nargs="+", required=True, help="kernelbench_reference_eval.py's JSONL files")
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    ap.add_argument("--note", default="", help="a line above the table (machine, commit, date)")
    args = ap.parse_args(argv)
    for p in (*args.sweep, *args.kbeval):
        if not p.is_file():
            print(f"error: {p}: no such file", file=sys.stderr)
            return 2
    rs = rows(_latest(args.sweep, "identity"), _latest(args.kbeval, "kb-eval"))
    if not rs:
        print("error: no problem is in both the sweep's files and KernelBench's", file=sys.stderr)
        return 2
    text = (args.note + "\n\n" if args.note else "") + table(rs)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
