"""Rules for the parent's clock read on the same recorded requests: honest pairs against cheats.

Reads the JSON lines ``benchmarks/outside_clock_load.py --rows FILE`` wrote (each run's block
requests as the parent's clock saw them) and prints, for every rule and file, the largest
ratio an honest run reached and the smallest a clock cheat did (ratio: the candidate's excess
over the baseline's part divided by the margin allowed; above 1 is ``invalid``). A rule is the
floor a call (the baseline's harness seconds a call: their mean, or a quantile over its
requests) and how the baseline's part is read: by its own account of its harness seconds, or,
like the candidate's, by its calls times the floor. ``expkit/bench/defences/outside_clock.py``
reads the floor at the lower quartile and both sides through it ("q25 floor, baseline by the
floor").

The quartile rules are compared on their own; the line above each table counts what main's
whole check (the quartiles, then the medians) makes of the same runs.

``--per-call`` prints instead, per manifest over every file given, the allowance a call
(``outside_clock.CALL_ABS_S``) at which its runs meet the margin: for an honest manifest the
largest any of its runs needs to stay within it, for a cheat the smallest that lets one of
its runs through; for the quartiles' check and the medians' (for the latter, only the runs where the medians are further apart than the baseline's gaps
spread: in the others no allowance makes that check fire, and they are counted apart).

    python benchmarks/clock_rules.py [--per-call] ROWS.jsonl [ROWS.jsonl ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from expkit.bench.defences import outside_clock as oc

Row = Sequence[Any]  # side, envelope, timed, calls, harness
CHEATS = ("adaptive_reply_forger", "adaptive_partial_reply_forger", "adaptive_untimed_work")


def _mean(base: List[Row]) -> float:
    calls = sum(r[3] for r in base)
    return sum(r[4] for r in base) / calls if calls else 0.0


def _quantile_floor(q: float) -> Callable[[List[Row]], float]:
    return lambda base: oc._quantile([r[4] / r[3] for r in base if r[3] > 0], q)


FLOORS = {"mean": _mean, "q25": _quantile_floor(0.25), "median": _quantile_floor(0.5)}


def ratio(rows: Sequence[Row], floor: str, own_account: bool) -> Optional[float]:
    """The ratio one rule gives on one run's requests (``None``: too few requests)."""
    base = [r for r in rows if r[0] == "baseline"]
    cand = [r for r in rows if r[0] == "candidate"]
    if len(base) < oc.MIN_REQUESTS or len(cand) < oc.MIN_REQUESTS:
        return None
    f = FLOORS[floor](base)
    gb = [r[1] - r[2] - (r[4] if own_account else r[3] * f) for r in base]
    gc = [r[1] - r[2] - r[3] * f for r in cand]
    excess = oc._quantile(gc, oc.QUANTILE) - oc._quantile(gb, oc.QUANTILE)
    allowed = oc.margin(statistics.median(r[2] for r in cand), statistics.median(r[3] * f for r in cand),
                        statistics.median(r[3] for r in cand))
    return excess / allowed


RULES = [("mean", True), ("q25", True), ("median", True), ("mean", False), ("q25", False), ("median", False)]


def summary(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for floor, own in RULES:
        honest: List[tuple] = []
        cheats: List[tuple] = []
        for run in runs:
            x = ratio(run["requests"], floor, own)
            if x is not None:
                (cheats if _name(run) in CHEATS else honest).append((x, _name(run)))
        out.append({"rule": f"{floor} floor, baseline by {'its own account' if own else 'the floor'}",
                    "honest_runs": len(honest), "honest_max": max(honest, default=None),
                    "honest_alarms": sum(1 for x, _ in honest if x > 1),
                    "cheat_runs": len(cheats), "cheat_min": min(cheats, default=None),
                    "cheats_missed": sum(1 for x, _ in cheats if x <= 1)})
    return out


def per_call_needed(rows: Sequence[Row]) -> Optional[Dict[str, float]]:
    """The allowance a call at which main's margin meets the excess of one run, for the
    quartiles' check and the medians' (seconds a call; below 0: the other terms suffice;
    ``-inf`` for the medians where the baseline's spread already exceeds their distance, which
    no allowance changes)."""
    f = oc.clock_figures([oc.RequestClock(*r) for r in rows])
    if "excess_s" not in f:
        return None
    calls = f["candidate_median_calls"]
    rest = f["allowed_s"] - oc.CALL_ABS_S * calls
    median = ((f["median_excess_s"] - rest) / calls if f["median_excess_s"] > f["baseline_spread_s"]
              else float("-inf"))
    return {"quartile": (f["excess_s"] - rest) / calls, "median": median}


def per_call_table(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per manifest: its runs and the allowance a call each check needs (honest: the
    largest over its runs) or lets it through at (cheat: the smallest)."""
    by: Dict[str, List[Dict[str, float]]] = {}
    for run in runs:
        got = per_call_needed(run["requests"])
        if got is not None:
            by.setdefault(_name(run), []).append(got)
    out = []
    for name, got in sorted(by.items()):
        cheat = name in CHEATS
        pick = min if cheat else max
        medians = [g["median"] for g in got if g["median"] != float("-inf")]
        out.append({"name": name, "kind": "cheat" if cheat else "honest", "runs": len(got),
                    "quartile": pick(g["quartile"] for g in got), "median": pick(medians, default=None),
                    "median_unreachable": len(got) - len(medians)})
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--per-call", action="store_true", help="the allowance a call each manifest needs")
    args = ap.parse_args(argv)
    if args.per_call:
        runs = [json.loads(line) for path in args.files for line in path.read_text().splitlines() if line.strip()]
        print(f"{len(runs)} runs; CALL_ABS_S in main: {oc.CALL_ABS_S * 1e6:g} us")
        print("| manifest | kind | runs | us a call, quartiles' check | us a call, medians' check | runs the medians' "
              "check cannot reach |")
        print("|---|---|---:|---:|---:|---:|")
        for r in per_call_table(runs):
            med = "-" if r["median"] is None else f"{r['median'] * 1e6:.1f}"
            print(f"| {r['name']} | {r['kind']} | {r['runs']} | {r['quartile'] * 1e6:.1f} | {med} | "
                  f"{r['median_unreachable']} |")
        return 0
    for path in args.files:
        every = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for busy in sorted({r.get("busy", 0) for r in every}):
            runs = [r for r in every if r.get("busy", 0) == busy]
            _table(f"{path.name}, {busy} busy process(es) beside it: {len(runs)} runs", runs)
    return 0


def main_findings(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, int]]:
    """What main's whole check (``outside_clock.clock_findings``: the quartiles, then the
    medians) makes of each run, counted by honest and cheat: no finding, a warning, invalid."""
    out: Dict[str, Dict[str, int]] = {"honest": {}, "cheat": {}}
    for run in runs:
        found = oc.clock_findings("c", [oc.RequestClock(*r) for r in run["requests"]])
        kind = "none" if not found else found[0].severity
        group = out["cheat" if _name(run) in CHEATS else "honest"]
        group[kind] = group.get(kind, 0) + 1
    return out


def _name(run: Dict[str, Any]) -> str:
    return Path(run["name"]).stem if run["name"].endswith(".yaml") else run["name"]


def _table(title: str, runs: List[Dict[str, Any]]) -> None:
    print(f"\n{title}")
    print("main's check, runs by outcome:", main_findings(runs))
    print("| rule | honest runs | largest honest ratio | honest alarms | cheat runs | smallest cheat ratio | cheats missed |")
    print("|---|---:|---|---:|---:|---|---:|")
    for s in summary(runs):
        hm, cm = s["honest_max"], s["cheat_min"]
        print(f"| {s['rule']} | {s['honest_runs']} | {_pair(hm)} | {s['honest_alarms']} | "
              f"{s['cheat_runs']} | {_pair(cm)} | {s['cheats_missed']} |")


def _pair(x: Optional[tuple]) -> str:
    return "-" if x is None else f"{x[0]:.2f} ({x[1]})"


if __name__ == "__main__":
    sys.exit(main())
