"""An audit's cost beside KernelBench's own batch evaluation of the same candidates: a markdown table.

A script that prints a table, not a test. It joins an ``expkit audit`` folder
(``candidates.jsonl``: each attempt's seconds and verdict; ``audit.json``: the audit's wall)
with ``kernelbench_batch_eval.py``'s records of the same generation run, candidate by
candidate, and prints:

* by kind of candidate (``--kinds``, a sample number to a name): the candidates both
  finished, the seconds each spent on them in total and a candidate's median, and the ratio
  of the totals;
* by problem: the same totals over its candidates that both finished;
* candidate by candidate: expkit's final verdict, its attempts and their seconds (a retry
  included), KernelBench's result and its seconds, and their ratio.

What the seconds cover differs, and the table's notes say so: expkit's are each attempt's
worker wall (its manifest's preflight, the correctness trials on fresh inputs, the
measurement in fresh processes, the report); KernelBench's are its batch loop's wall for the
candidate (a spawned process, its evaluation, the pool's end). The audit's own start (its
fork server's imports) is in its wall, not in any candidate's seconds; KernelBench's loop
pays its start once per candidate.

    python benchmarks/batch_beside.py AUDIT KB.jsonl --kinds 0=identity,1=torch.compile,2=wrong
    python benchmarks/batch_beside.py AUDIT1 KB1.jsonl AUDIT2 KB2.jsonl ...   # several calls

With several calls it prints one table instead: each problem whose every candidate both
finished in one call (the last such call), and the totals over those problems.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple


def _jsonl(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def audit_candidates(audit: Path) -> Dict[str, Dict[str, Any]]:
    """Each candidate's final verdict, attempts and seconds over them, from ``candidates.jsonl``."""
    out: Dict[str, Dict[str, Any]] = {}
    for r in _jsonl(audit / "candidates.jsonl"):
        c = out.setdefault(r["candidate"], {"sample": int(r["sample"]), "problem": int(r["problem"]),
                                            "attempts": 0, "seconds": 0.0, "verdict": None})
        c["attempts"] += 1
        c["seconds"] += float(r["seconds"])
        if r.get("final"):
            c["verdict"] = r["verdict"]
    return {k: v for k, v in out.items() if v["verdict"] is not None}


def kernelbench_candidates(path: Path) -> Dict[str, Dict[str, Any]]:
    """The last record of each candidate in ``kernelbench_batch_eval.py``'s JSONL."""
    return {r["candidate"]: r for r in _jsonl(path)}


def _problem(candidate: str) -> Optional[int]:
    """The problem number in a candidate's name (``level_1_problem_7_sample_0``)."""
    found = re.search(r"_problem_(\d+)_", candidate)
    return int(found.group(1)) if found else None


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def _median(xs: List[float]) -> str:
    return f"{statistics.median(xs):.1f}" if xs else "-"


def table(audit: Path, kb_path: Path, kinds: Dict[int, str]) -> str:
    ours, theirs = audit_candidates(audit), kernelbench_candidates(kb_path)
    both = sorted(set(ours) & set(theirs), key=lambda k: (ours[k]["problem"], ours[k]["sample"]))
    plan = json.loads((audit / "audit.json").read_text())
    by_kind: Dict[str, List[Tuple[float, float]]] = {}
    for k in both:
        kind = kinds.get(ours[k]["sample"], f"sample {ours[k]['sample']}")
        by_kind.setdefault(kind, []).append((ours[k]["seconds"], float(theirs[k]["wall_s"])))
    lines = ["| kind | candidates | expkit s, total | KernelBench s, total | expkit s a candidate, median "
             "| KernelBench s a candidate, median | expkit / KernelBench (totals) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for kind, pairs in by_kind.items():
        e, b = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        lines.append(f"| {kind} | {len(pairs)} | {e:.1f} | {b:.1f} | {_median([p[0] for p in pairs])} "
                     f"| {_median([p[1] for p in pairs])} | {_ratio(e, b)} |")
    e_all = sum(ours[k]["seconds"] for k in both)
    b_all = sum(float(theirs[k]["wall_s"]) for k in both)
    lines.append(f"| **all** | {len(both)} | {e_all:.1f} | {b_all:.1f} | {_median([ours[k]['seconds'] for k in both])} "
                 f"| {_median([float(theirs[k]['wall_s']) for k in both])} | {_ratio(e_all, b_all)} |")
    lines += ["", "| problem | candidates | expkit s | KernelBench s | expkit / KernelBench |", "|---:|---:|---:|---:|---:|"]
    for problem in sorted({ours[k]["problem"] for k in both}):
        ks = [k for k in both if ours[k]["problem"] == problem]
        e, b = sum(ours[k]["seconds"] for k in ks), sum(float(theirs[k]["wall_s"]) for k in ks)
        lines.append(f"| {problem} | {len(ks)} | {e:.1f} | {b:.1f} | {_ratio(e, b)} |")
    only = sorted((set(ours) | set(theirs)) - set(both))
    lines += ["", f"The audit's wall: {float(plan.get('wall_seconds') or 0):.1f} s for {len(ours)} candidates with a "
              f"final verdict ({plan.get('slots')} workers at a time), its own start included. "
              + (f"Left out, not finished by both: {', '.join(only)}." if only else "Every candidate was finished by both."),
              "", "| candidate | expkit verdict | attempts | expkit s | KernelBench result | KernelBench s | expkit / KernelBench |",
              "|---|---|---:|---:|---|---:|---:|"]
    for k in both:
        o, t = ours[k], theirs[k]
        lines.append(f"| {k} | {o['verdict']} | {o['attempts']} | {o['seconds']:.1f} | {t['result']} "
                     f"| {float(t['wall_s']):.1f} | {_ratio(o['seconds'], float(t['wall_s']))} |")
    return "\n".join(lines) + "\n"


def combined(pairs: List[Tuple[Path, Path]]) -> str:
    """Over several calls, each a (audit, KernelBench records) pair: every problem whose every
    candidate both finished in one call, from the last such call, and the totals over them."""
    rows: Dict[int, Tuple[int, int, float, float]] = {}
    for i, (audit, kb_path) in enumerate(pairs, 1):
        ours, theirs = audit_candidates(audit), kernelbench_candidates(kb_path)
        for problem in {o["problem"] for o in ours.values()}:
            ks = [k for k in set(ours) | set(theirs) if _problem(k) == problem]
            if all(k in ours and k in theirs for k in ks):
                rows[problem] = (i, len(ks), sum(ours[k]["seconds"] for k in ks),
                                 sum(float(theirs[k]["wall_s"]) for k in ks))
    lines = ["| problem | call | candidates | expkit s | KernelBench s | expkit / KernelBench |",
             "|---:|---:|---:|---:|---:|---:|"]
    for problem, (call, n, e, b) in sorted(rows.items()):
        lines.append(f"| {problem} | {call} | {n} | {e:.1f} | {b:.1f} | {_ratio(e, b)} |")
    n = sum(r[1] for r in rows.values())
    e, b = sum(r[2] for r in rows.values()), sum(r[3] for r in rows.values())
    lines.append(f"| **{len(rows)} problems** | | {n} | {e:.1f} | {b:.1f} | {_ratio(e, b)} |")
    lines += ["", f"A candidate, on average: expkit {e / max(n, 1):.1f} s, KernelBench {b / max(n, 1):.1f} s."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("audit", type=Path)
    ap.add_argument("kernelbench", type=Path, help="kernelbench_batch_eval.py's JSONL")
    ap.add_argument("more", type=Path, nargs="*", help="more AUDIT KB.jsonl pairs, one a call: the combined table")
    ap.add_argument("--kinds", default="", help="sample=name pairs, comma-separated")
    args = ap.parse_args(argv)
    if len(args.more) % 2:
        ap.error("give an AUDIT and a KernelBench JSONL for every call")
    pairs = [(args.audit, args.kernelbench)] + list(zip(args.more[::2], args.more[1::2]))
    for audit, kb_path in pairs:
        if not (audit / "audit.json").is_file() or not (audit / "candidates.jsonl").is_file():
            ap.error(f"{audit}: not an audit folder (no audit.json and candidates.jsonl; expkit audit writes them)")
        if not kb_path.is_file():
            ap.error(f"{kb_path}: no such file (kernelbench_batch_eval.py --results writes it)")
    try:
        kinds = {int(a): b for a, b in (p.split("=", 1) for p in args.kinds.split(",") if p)}
    except ValueError:
        ap.error(f"--kinds {args.kinds!r}: give sample=name pairs, as 0=identity,1=torch.compile")
    print(table(args.audit, args.kernelbench, kinds) if len(pairs) == 1 else combined(pairs), end="")


if __name__ == "__main__":
    main()
