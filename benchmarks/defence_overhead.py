"""What the defences cost: the same manifest run with ``defences.enabled`` true and false.

Usage::

    python benchmarks/defence_overhead.py [MANIFEST ...] [--repeats 3] [--max-seconds 2]
                                          [--json OUT.json] [-- key=value ...]

Each manifest runs ``--repeats`` times each way, alternating (on, off, on, off, ...)
after one discarded warm-up run each way (the fork server's start, torch's lazy
imports). Once an undefended run has run torch in this process, the defended runs
start their workers from the fork server, not by forking this process as a fresh
``expkit run`` does: their whole-run figure is that of a Python caller who ran torch
first. Measurement is pinned to a fixed budget: ``measure.target_ci=0`` can never
be met, so every run times exactly ``--max-seconds`` of calls per case and stops on
the budget; the two ways then do the same timed work, and the difference in wall
time is what the defences add around it (worker process, channel round trips, fresh
inputs, rechecks, the envelope, the preflight's extra calls).

``--micro`` instead times, in this process, each check the defences of issue #13 add
per call or per block, over many repetitions (the median of 7 rounds): the function
snapshot's hot check (the lead calls it before and after each timed block), the
global-state snapshot, the CPU-time account's ``begin()`` + ``end()``, the child-process
count, the rounding oracle against ``allclose`` on one output, the profiled identity
call with and without the operand record, and the work around every timed call (the
thread count, twice a call, the old way and the new, and the fresh inputs' salt). A per-block cost is to be read against a
block's length (at least the clock's resolution times the calls in it: milliseconds).

The table gives, per manifest and way: the median wall time of the whole run, of
the measurement phase (``measured.cases.*.wall_seconds``, summed over cases) and of
the timed calls themselves, the overhead of "on" over "off" on each, and the
verdicts and speedups, so that "an honest example's verdict is unchanged" can be
read off the same rows. ``--as-shipped`` leaves ``quick``'s own stopping rule in place
(target 5%, 3 s of timed calls at most): the cost a user pays, where each run may stop
after a different amount of timed work (the "timed s" column says how much). The wall
time on a machine other people use is noisy: run it on a quiet one, and read the spread
(min-max) before the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "manifests/examples/cpu/honest-win.yaml", ROOT / "tests/adversarial/cpu/honest_gemv.yaml"]


def one(manifest: Path, on: bool, max_seconds: float, extra: List[str], out: Path,
        pinned: bool = True) -> Dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from expkit.runner import run_manifest

    budget = [f"measure.max_seconds={max_seconds}", "measure.target_ci=0.0"] if pinned else []
    overrides = ["measure=quick", *budget,
                 f"defences.enabled={'true' if on else 'false'}", *extra]
    t0 = time.perf_counter()
    r = run_manifest(manifest, overrides, out_dir=out).result
    wall = time.perf_counter() - t0
    cases = r["measured"]["cases"]
    return {"wall": wall, "measure_wall": sum(c["wall_seconds"] for c in cases.values()),
            "timed": sum(c["timed_seconds"] for c in cases.values()), "verdict": r["verdict"],
            "speedups": {k: round(c["speedup"], 3) for k, c in cases.items()},
            "alarms": [f["check"] for f in r["checks"] if not f["ok"] and f.get("severity") != "warning"]}


def _per_call(fn: Any, number: int) -> float:
    """Median over 7 rounds of the seconds one call of ``fn`` takes."""
    fn()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def micro() -> List[Dict[str, Any]]:
    """The per-call costs of the checks issue #13 adds (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    import torch

    from expkit.bench.defences import tamper
    from expkit.checks import activity, global_state, oracles, recording, rounding, trace
    from expkit.manifest.spec import Oracle

    snap = tamper.FunctionSnapshot.take()
    snap.watch(tamper.torch_callables_for(["aten::matmul", "aten::mm", "aten::softmax", "aten::linear",
                                           "aten::addmm", "aten::gelu", "aten::layer_norm"]))
    acc = activity.ResourceAccount(1)

    def account() -> None:
        acc.begin()
        acc.end()

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 1024, generator=g), torch.randn(1024, 256, generator=g)
    exp, act = a @ b, torch.einsum("mk,kn->mn", a, b)
    ladder = rounding.ReferenceLadder(torch.mm, (a, b))
    rows = [
        ("tamper: FunctionSnapshot.changed(hot_only=True)", f"{sum(1 for n in snap.entries if n.startswith(tamper.HOT_PREFIXES))} hot entries",
         _per_call(lambda: snap.changed(hot_only=True), 200)),
        ("global-state: snapshot_state()", "", _per_call(global_state.snapshot_state, 200)),
        ("resources: ResourceAccount begin() + end()", f"{len(os.listdir('/proc/self/task'))} threads",
         _per_call(account, 200)),
        ("threads: child_pids()", "", _per_call(activity.child_pids, 200)),
        ("oracle:rounding on one 256x256 output (K=1024), float64 reference included", "",
         _per_call(lambda: oracles.check_outputs(Oracle(), exp, act, case="c", reference64=ladder, inputs=(a, b)), 5)),
        ("oracle:allclose on the same output", "",
         _per_call(lambda: oracles.check_outputs(Oracle(kind="allclose", rtol=1e-3, atol=1e-3), exp, act,
                                                 case="c"), 5)),
        ("identity: one profiled call, with shapes and allocations (now)", "", _per_call(
            lambda: recording.capture(lambda: torch.matmul(a, b), cuda=False), 3)),
    ]

    def plain() -> None:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.matmul(a, b)
        trace.parse_chrome_trace(recording.exported(prof, cuda=False))

    rows.append(("identity: the same without them (before)", "", _per_call(plain, 3)))
    # Per timed call (the defended CPU loop, bench/sides/side.py CaseState.before/after): twice a call.
    import random
    import threading

    from expkit.bench.defences.fresh import FreshInputs

    gemv = FreshInputs([(torch.randn(64, 128, generator=g), torch.randn(128, generator=g))], "salt",
                       random.Random(0))
    rows += [
        ("per call: threading.active_count() (the thread count before)", "",
         _per_call(threading.active_count, 100_000)),
        ("per call: activity.thread_count() (_thread._count, now)", "", _per_call(activity.thread_count, 100_000)),
        ("per call: FreshInputs.take() (salt) on a 64x128 GEMV's inputs", "", _per_call(gemv.take, 100_000)),
    ]
    return [{"check": n, "note": note, "seconds": sec} for n, note, sec in rows]


def main(argv: List[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--micro" in argv:
        out = micro()
        print(f"torch threads {__import__('torch').get_num_threads()}, load average {os.getloadavg()[0]:.2f}")
        print("| check | per call | note |")
        print("|---|---|---|")
        for r in out:
            us = r["seconds"] * 1e6
            print(f"| {r['check']} | {us:,.{2 if us < 10 else 1}f} us | {r['note']} |")
        return 0
    extra: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("manifests", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=2.0)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--as-shipped", action="store_true",
                   help="measure as quick ships (its own target and budget) instead of pinning the timed "
                        "work: what a user pays, where the two ways may time different amounts")
    args = p.parse_args(argv)
    rows: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.manifests:
            # Warm-up, discarded; "off" first: it runs torch in this process, after which
            # the defended runs start their workers from the fork server, whose start
            # (seconds) the "on" warm-up then pays. In the other order the first measured
            # "on" run paid it (5-8 s of its whole run on the 2-core machine, 2026-11-26).
            for on in (False, True):
                one(m, on, min(args.max_seconds, 0.2), extra, Path(tmp) / f"warm-{m.stem}-{on}")
            got: Dict[str, List[Dict[str, Any]]] = {"on": [], "off": []}
            for k in range(args.repeats):
                for on in (True, False):
                    got["on" if on else "off"].append(
                        one(m, on, args.max_seconds, extra, Path(tmp) / f"{m.stem}-{k}-{on}",
                            pinned=not args.as_shipped))
            rows[str(m)] = got
    print("| manifest | defences | runs | wall s (median, min-max) | measure phase s | timed s | "
          "overhead: wall | overhead: measure phase | verdicts | speedups | alarms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m, got in rows.items():
        med = {w: {k: statistics.median(r[k] for r in got[w]) for k in ("wall", "measure_wall", "timed")}
               for w in ("on", "off")}
        for w in ("on", "off"):
            runs = got[w]
            walls = [r["wall"] for r in runs]
            over = over_m = ""
            if w == "on":
                over = f"{med['on']['wall'] / med['off']['wall'] - 1:+.1%}"
                over_m = f"{med['on']['measure_wall'] / med['off']['measure_wall'] - 1:+.1%}"
            print(f"| {Path(m).name} | {w} | {len(runs)} | {med[w]['wall']:.2f} ({min(walls):.2f}-{max(walls):.2f}) "
                  f"| {med[w]['measure_wall']:.2f} | {med[w]['timed']:.2f} | {over} | {over_m} "
                  f"| {', '.join(sorted({r['verdict'] for r in runs}))} "
                  f"| {'; '.join(json.dumps(r['speedups']) for r in runs)} "
                  f"| {', '.join(sorted({a for r in runs for a in r['alarms']})) or 'none'} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
