"""The parent's clock beside busy processes: how far honest pairs and clock cheats sit from its margin.

Runs each manifest ``--rounds`` times (the adversarial suite's fast settings) with ``--busy``
processes spinning beside it, and prints, for every run, the verdict and the outside clock's
figures for its case (``expkit.bench.defences.outside_clock``): the candidate's excess over the
baseline's fixed part, the margin allowed, their ratio (above 1 is ``invalid``), and the
excess as a share of the candidate's calibrated harness seconds, and the ratio the same
requests give with the floor read at the lower quartile of the baseline's requests instead of
its mean harness seconds a call (``q25 floor``: the alternative that host bursts inside the
harness's work do not inflate). Then, per manifest, the largest and smallest ratio.

    python benchmarks/outside_clock_load.py [--busy 1] [--rounds 3] [--out DIR] [NAME ...]

NAME: a manifest under tests/adversarial/cpu/ (its stem), or a path. Default: the honest
candidates of the adversarial suite, the honest ``1_leaky_relu_where`` KernelBench-style
test pair, and the two cheats that move time out of their calls.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
ADV = ROOT / "tests" / "adversarial" / "cpu"
FAST = ["measure=quick", "measure.min_seconds=0.05", "measure.max_seconds=0.3", "measure.warmup_seconds=0.01",
        "oracle.trials=2"]
HONEST = ["honest_adaptive", "honest_blocked", "honest_chatty", "honest_compiled", "honest_gemv", "honest_issue_matmul",
          "honest_out_buffer", "honest_own_pool", "honest_rowsum", "honest_scoped", "honest_softmax", "honest_split_k",
          "honest_threaded", "honest_workspace"]
CHEATS = ["adaptive_reply_forger", "adaptive_untimed_work"]


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


def _q25_floor(rows: Any) -> float:
    from expkit.bench.defences import outside_clock

    per_call = [r.harness / r.calls for r in rows if r.calls > 0]
    return outside_clock._quantile(per_call, outside_clock.QUANTILE) if per_call else 0.0


def one(path: Path, out: Path) -> Dict[str, Any]:
    from unittest import mock

    from expkit.bench.defences import outside_clock
    from expkit.runner import run_manifest

    seen: Dict[str, Any] = {}
    real = outside_clock.clock_figures

    def spy(rows: Any) -> Dict[str, Any]:
        seen["rows"] = list(rows)
        return real(rows)

    with mock.patch.object(outside_clock, "clock_figures", spy):
        got = run_manifest(path, FAST, out_dir=out)
    figures: Optional[Dict[str, Any]] = None
    for per_case in (got.result.get("defences", {}) or {}).get("outside_clock", {}).values():
        figures = per_case
    q25_ratio = None
    if "rows" in seen:
        with mock.patch.object(outside_clock, "_per_call_floor", _q25_floor):
            alt = real(seen["rows"])
        if "excess_s" in alt:
            q25_ratio = alt["excess_s"] / alt["allowed_s"]
    return {"verdict": got.verdict, "clock": figures or {}, "q25_ratio": q25_ratio}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--busy", type=int, default=1, help="processes spinning beside the runs")
    ap.add_argument("--rounds", type=int, default=3)
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
                got = one(_manifest(name, scratch), scratch / f"{name}-{r}")
                c = got["clock"]
                ratio = share = None
                if "excess_s" in c:
                    ratio = c["excess_s"] / c["allowed_s"]
                    share = c["excess_s"] / c["candidate_median_harness_s"] if c["candidate_median_harness_s"] else None
                rows.append({"name": name, "round": r, "verdict": got["verdict"], "ratio": ratio, "share": share,
                             "q25_ratio": got["q25_ratio"], **c})
                print(f"{name:24} {r} {got['verdict']:12} "
                      + (f"excess {c['excess_s'] * 1e3:8.3f} ms  allowed {c['allowed_s'] * 1e3:7.3f} ms  "
                         f"ratio {ratio:6.2f}  of harness {share if share is None else round(share, 2)}  "
                         f"q25-floor ratio {got['q25_ratio'] if got['q25_ratio'] is None else round(got['q25_ratio'], 2)}"
                         if ratio is not None else "(too few requests for the clock)"), flush=True)
    finally:
        for p in busy:
            p.terminate()
    print("\nper manifest: smallest and largest excess/allowed (above 1 is invalid), largest excess/harness, "
          "smallest and largest with the q25 floor")
    for name in names:
        rs = [x for x in rows if x["name"] == name and x["ratio"] is not None]
        if rs:
            shares = [x["share"] for x in rs if x["share"] is not None]
            alts = [x["q25_ratio"] for x in rs if x["q25_ratio"] is not None]
            print(f"{name:24} {min(x['ratio'] for x in rs):6.2f} {max(x['ratio'] for x in rs):6.2f} "
                  f"{max(shares) if shares else float('nan'):6.2f} "
                  f"{min(alts) if alts else float('nan'):6.2f} {max(alts) if alts else float('nan'):6.2f}  verdicts "
                  + ", ".join(sorted({x['verdict'] for x in rows if x['name'] == name})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
