"""The parent's clock beside busy processes: how far honest pairs and clock cheats sit from its margin.

Runs each manifest ``--rounds`` times (the adversarial suite's fast settings) with ``--busy``
processes spinning beside it, and prints, for every run, the verdict and the outside clock's
figures for its case (``expkit.bench.defences.outside_clock``): the candidate's excess over the
baseline's gap, the margin allowed, their ratio (above 1 is ``invalid``), and the
excess as a share of the candidate's calibrated harness seconds. Then, per manifest, the
largest and smallest ratio.

    python benchmarks/outside_clock_load.py [--busy 1] [--rounds 3] [--rows FILE] [--set KEY=VALUE ...] [NAME ...]

``--set KEY=VALUE`` adds an override to every run (``--set measure.processes=3``: a replicated run,
whose later processes have no preflight). ``--rows FILE`` appends each run's block requests as the parent's clock saw them (one JSON
line a run, seconds to the microsecond), so that other rules can be read on the same requests
(``benchmarks/clock_rules.py``).

NAME: a manifest under tests/adversarial/cpu/ (its stem), or a path. Default: the honest
candidates of the adversarial suite, the honest ``1_leaky_relu_where`` KernelBench-style
test pair, and the three cheats that move time out of their calls.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
ADV = ROOT / "tests" / "adversarial" / "cpu"
FAST = ["measure=quick", "measure.min_seconds=0.05", "measure.max_seconds=0.3", "measure.warmup_seconds=0.01",
        "oracle.trials=2"]
HONEST = ["honest_adaptive", "honest_blocked", "honest_chatty", "honest_compiled", "honest_gemv", "honest_issue_matmul",
          "honest_out_buffer", "honest_own_pool", "honest_rowsum", "honest_scoped", "honest_softmax", "honest_split_k",
          "honest_threaded", "honest_workspace"]
CHEATS = ["adaptive_reply_forger", "adaptive_partial_reply_forger", "adaptive_untimed_work"]


def _spin() -> None:
    while True:
        pass


def _manifest(name: str, scratch: Path) -> Path:
    if name == "1_leaky_relu_where":
        made = scratch / "kb" / f"{name}.yaml"
        if not made.is_file():
            from expkit.suites import kernelbench_import as kbi

            kbi.write_manifests(ROOT / "tests" / "data" / "kernelbench", scratch / "kb", device="cpu")
        return made
    return Path(name) if "/" in name else ADV / f"{name}.yaml"


def one(path: Path, out: Path, extra: Sequence[str] = ()) -> Dict[str, Any]:
    """One run: its verdict, the clock's figures for its case and its requests."""
    from unittest import mock

    from expkit.bench.defences import outside_clock
    from expkit.runner import run_manifest

    seen: Dict[str, Any] = {}
    real = outside_clock.clock_figures

    def spy(rows: Any) -> Dict[str, Any]:
        seen["rows"] = list(rows)
        return real(rows)

    with mock.patch.object(outside_clock, "clock_figures", spy):
        got = run_manifest(path, FAST + list(extra), out_dir=out)
    figures: Optional[Dict[str, Any]] = None
    for per_case in (got.result.get("defences", {}) or {}).get("outside_clock", {}).values():
        figures = per_case
    us = 6  # seconds to the microsecond: the clock's margins are tenths of a millisecond
    requests = [[r.side, round(r.envelope, us), round(r.timed, us), r.calls, round(r.harness, us)]
                for r in seen.get("rows", [])]
    return {"verdict": got.verdict, "clock": figures or {}, "requests": requests}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--busy", type=int, default=1, help="processes spinning beside the runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=Path, help="append each run's requests here (JSON lines)")
    ap.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="an override added to every run (repeatable)")
    args = ap.parse_args(argv)
    names = args.names or HONEST + ["1_leaky_relu_where"] + CHEATS
    scratch = Path(tempfile.mkdtemp(prefix="expkit-clock-load-"))
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    rows: List[Dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            for name in names:
                got = one(_manifest(name, scratch), scratch / f"{name}-{r}", args.extra)
                c = got["clock"]
                ratio = share = None
                if "excess_s" in c:
                    ratio = c["excess_s"] / c["allowed_s"]
                    share = c["excess_s"] / c["candidate_median_harness_s"] if c["candidate_median_harness_s"] else None
                if args.rows:
                    with args.rows.open("a") as fh:
                        fh.write(json.dumps({"name": name, "round": r, "busy": args.busy, "set": args.extra,
                                             "verdict": got["verdict"],
                                             "requests": got["requests"]}) + "\n")
                rows.append({"name": name, "round": r, "verdict": got["verdict"], "ratio": ratio, "share": share, **c})
                print(f"{name:24} {r} {got['verdict']:12} "
                      + (f"excess {c['excess_s'] * 1e3:8.3f} ms  allowed {c['allowed_s'] * 1e3:7.3f} ms  "
                         f"ratio {ratio:6.2f}  of harness {share if share is None else round(share, 2)}"
                         if ratio is not None else "(too few requests for the clock)"), flush=True)
    finally:
        for p in busy:
            p.terminate()
    print("\nper manifest: smallest and largest excess/allowed (above 1 is invalid), largest excess/harness")
    for name in names:
        rs = [x for x in rows if x["name"] == name and x["ratio"] is not None]
        if rs:
            shares = [x["share"] for x in rs if x["share"] is not None]
            print(f"{name:24} {min(x['ratio'] for x in rs):6.2f} {max(x['ratio'] for x in rs):6.2f} "
                  f"{max(shares) if shares else float('nan'):6.2f}  verdicts "
                  + ", ".join(sorted({x['verdict'] for x in rows if x['name'] == name})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
