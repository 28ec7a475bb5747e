"""What an audit cost, by kind of candidate: prints a markdown table from an audit folder.

Reads ``audit.json`` (the wall time over every call that worked on the audit, the workers at
a time), ``candidates.jsonl`` (each attempt's worker seconds and verdict) and each attempt's
``result.json`` (its ``stages``: loading, starting the first pair, the preflight, the
measurement). A kind is a sample number, named with ``--kinds`` (for the run
``kernelbench_generation_run.py`` writes: ``0=identity,1=torch.compile,2=wrong``).

    python benchmarks/audit_cost.py AUDIT --kinds 0=identity,1=torch.compile,2=wrong [--tsv stages.tsv]
    python benchmarks/audit_cost.py AUDIT --retries
    python benchmarks/audit_cost.py AUDIT --kinds ... --requests

``--tsv`` also writes one row per attempt: candidate, attempt, step (the preset, ``-pN`` where a retry
raised the processes to N), verdict, seconds, stages, each case's rounds a process and why it stopped.

``--retries`` prints instead, for every ``inconclusive`` attempt, the retry the audit's policy
picks for it (``expkit.suites.retries.Retries.next_step``: more processes at the same preset, or
the next preset) and what the budget takes it to cost (``Retries.predict``, under the overrides
``audit.json`` names), against the attempt's seconds times the presets' ratio (the estimate of a
retry one preset up before the rounds were read), and the retry that ran and its seconds.

``--requests`` prints instead, by kind, where each side's worker spent its seconds: the median
over first attempts of each request's seconds summed over the attempt's processes (the
``requests`` each side's ledger stores in ``result.json``), beside the measurement stage's wall
and the seconds its timed calls took.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from expkit.suites.retries import Retries, Step, next_preset

STAGES = ("load", "start", "plan", "preflight", "measure", "judge")


def _records(audit: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in (audit / "candidates.jsonl").read_text().splitlines() if line.strip()]


def _result(audit: Path, record: Dict[str, Any]) -> Dict[str, Any]:
    path = audit / str(record.get("run_dir") or "") / "result.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _stages(audit: Path, record: Dict[str, Any]) -> Dict[str, float]:
    return dict(_result(audit, record).get("stages") or {})


def _rounds(result: Dict[str, Any]) -> Tuple[str, str]:
    """Each case's rounds a process (``6,7,6``; cases split by ``;``) and why each stopped."""
    cases = list(((result.get("measured") or {}).get("cases") or {}).values())
    return (";".join(",".join(str(p.get("rounds")) for p in c.get("per_process") or []) for c in cases),
            ";".join(str(c.get("stopped") or "") for c in cases))


def _median(xs: List[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def _fmt(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(audit: Path, kinds: Dict[int, str]) -> str:
    plan = json.loads((audit / "audit.json").read_text())
    records = _records(audit)
    by_kind: Dict[str, List[Dict[str, Any]]] = {}
    for r in records:
        by_kind.setdefault(kinds.get(int(r["sample"]), f"sample {r['sample']}"), []).append(r)
    lines = ["| kind | candidates | final verdicts | seconds a first attempt, median (10th-90th) "
             "| worker seconds, every attempt | start, preflight, measurement (median s) |",
             "|---|---:|---|---|---:|---|"]
    for kind, rs in by_kind.items():
        finals = [r for r in rs if r["final"]]
        verdicts: Dict[str, int] = {}
        for r in finals:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        first = sorted(float(r["seconds"]) for r in rs if r["attempt"] == 1)
        spread = (f"{_fmt(_median(first))} ({_fmt(first[len(first) // 10])}-{_fmt(first[(9 * len(first)) // 10])})"
                  if first else "-")
        st = [_stages(audit, r) for r in rs if r["attempt"] == 1]
        parts = ", ".join(_fmt(_median([s[k] for s in st if k in s])) for k in ("start", "preflight", "measure"))
        lines.append(f"| {kind} | {len(finals)} | {', '.join(f'{n} {v}' for v, n in sorted(verdicts.items()))} "
                     f"| {spread} | {sum(float(r['seconds']) for r in rs):.0f} | {parts} |")
    n = len({r["candidate"] for r in records if r["final"]})
    worker = sum(float(r["seconds"]) for r in records)
    wall = float(plan.get("wall_seconds") or 0)
    lines += ["", f"{n} candidates with a final verdict, {len(records)} attempts, {plan.get('slots')} workers at a "
              f"time; wall {wall:.0f} s ({wall / max(n, 1):.2f} s a candidate), worker seconds {worker:.0f} "
              f"({worker / max(n, 1):.2f} s a candidate: the wall of one worker at a time)."]
    return "\n".join(lines)


def _ledger(result: Dict[str, Any]) -> Dict[Tuple[str, str], float]:
    """Seconds by (side, request) over every process of one attempt."""
    measured = (result.get("memory") or {}).get("measured") or {}
    return {(side, op): float(r.get("seconds") or 0.0)
            for side, v in measured.items() for op, r in ((v or {}).get("requests") or {}).items()}


def requests_table(audit: Path, kinds: Dict[int, str]) -> str:
    """Median seconds a first attempt spends in each side's requests, by kind."""
    by_kind: Dict[str, List[Dict[str, Any]]] = {}
    for r in _records(audit):
        if r["attempt"] == 1:
            by_kind.setdefault(kinds.get(int(r["sample"]), f"sample {r['sample']}"), []).append(_result(audit, r))
    names = list(by_kind)
    rows: Dict[Tuple[str, str], Dict[str, float]] = {}
    for kind, results in by_kind.items():
        ledgers = [_ledger(res) for res in results]
        for key in sorted({k for led in ledgers for k in led}):
            rows.setdefault(key, {})[kind] = _median([led.get(key, 0.0) for led in ledgers]) or 0.0
        walls = [float(res["stages"]["measure"]) for res in results if "measure" in (res.get("stages") or {})]
        timed = [float(c["timed_seconds"]) for res in results
                 for c in ((res.get("measured") or {}).get("cases") or {}).values() if "timed_seconds" in c]
        for key, xs in ((("measurement", "stage wall"), walls), (("measurement", "timed calls"), timed)):
            if xs:
                rows.setdefault(key, {})[kind] = statistics.median(xs)
    lines = ["| side | request | " + " | ".join(f"{k} (median s)" for k in names) + " |",
             "|---|---|" + "---:|" * len(names)]
    for (side, op), vals in rows.items():
        if max(vals.values()) >= 0.005:
            lines.append(f"| {side} | {op} | " + " | ".join(_fmt(vals.get(k), 3) for k in names) + " |")
    return "\n".join(lines)


def write_tsv(audit: Path, out: Path) -> None:
    rows = ["\t".join(("candidate", "attempt", "step", "verdict", "seconds") + STAGES
                      + ("rounds_per_process", "stopped"))]
    for r in _records(audit):
        result = _result(audit, r)
        s = dict(result.get("stages") or {})
        rows.append("\t".join([r["candidate"], str(r["attempt"]), Step.of(r).label, str(r["verdict"]),
                               f"{r['seconds']:.3f}"] + [_fmt(s.get(k), 3) if k in s else "" for k in STAGES]
                              + list(_rounds(result))))
    out.write_text("\n".join(rows) + "\n")


def retries_table(audit: Path) -> str:
    """Each inconclusive attempt: its seconds, the retry the audit's policy picks for it
    (``Retries.next_step``) and the budget's estimate of that retry, the presets' ratio times
    its seconds (the estimate of a retry one preset up before it), and the retry's own
    seconds and step where it ran."""
    overrides = json.loads((audit / "audit.json").read_text()).get("overrides") or []
    retry = Retries(overrides, 1, None)
    records = _records(audit)
    after = {(r["candidate"], r["attempt"]): r for r in records}
    lines = ["| candidate | attempt | seconds | retry | estimate of it | seconds x presets' ratio | "
             "the retry that ran | its seconds |",
             "|---|---:|---:|---|---:|---:|---|---:|"]
    for r in records:
        up = next_preset(r["preset"])
        if r["verdict"] != "inconclusive":
            continue
        try:
            result = json.loads((audit / str(r.get("run_dir") or "") / "result.json").read_text())
        except (OSError, ValueError):
            result = None
        step = Step.of(r)
        nxt = retry.next_step(result, step)
        then = after.get((r["candidate"], r["attempt"] + 1))
        ratio = f"{r['seconds'] * max(1.0, retry._cap(up) / retry._cap(r['preset'])):.1f}" if up else "-"
        lines.append(f"| {r['candidate']} | {r['attempt']} | {r['seconds']:.1f} | "
                     f"{nxt.words if nxt else 'none'} | "
                     f"{_fmt(retry.predict(result, r['seconds'], step, nxt) if nxt else None)} | {ratio} | "
                     f"{Step.of(then).words if then else '-'} | {_fmt(then['seconds']) if then else '-'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("audit", type=Path)
    ap.add_argument("--kinds", default="", help="sample=name pairs, comma-separated")
    ap.add_argument("--tsv", type=Path, help="also write each attempt's stages here")
    ap.add_argument("--retries", action="store_true",
                    help="print the budget's estimate of each inconclusive attempt's retry instead")
    ap.add_argument("--requests", action="store_true",
                    help="print where each side's worker spent its seconds, by kind, instead")
    a = ap.parse_args()
    if not (a.audit / "audit.json").is_file() or not (a.audit / "candidates.jsonl").is_file():
        ap.error(f"{a.audit}: not an audit folder (no audit.json and candidates.jsonl; expkit audit writes them)")
    try:
        kinds = {int(k): v for k, v in (p.split("=", 1) for p in a.kinds.split(",") if p)}
    except ValueError:
        ap.error(f"--kinds {a.kinds!r}: give sample=name pairs, comma-separated (0=identity,1=torch.compile)")
    if a.retries:
        print(retries_table(a.audit))
        return
    if a.requests:
        print(requests_table(a.audit, kinds))
        return
    print(table(a.audit, kinds))
    if a.tsv:
        write_tsv(a.audit, a.tsv)


if __name__ == "__main__":
    main()
