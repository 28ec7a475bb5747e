"""What the defences' checks around each timed block cost inside the workers (issue #13).

A script, not a test. ``defence_overhead.py --micro`` times each check in a hot loop in
this process; this one times them where they run: in both workers of one real run, right
after the side's timed calls. It wraps the checks ``SideBench.block`` makes (the function
and state snapshots, ``settle``, the CPU-time account, the child-process and thread
counts) with a clock, runs the manifest with the workers forked from this process (so
they inherit the wrappers), and prints, per check, how often it ran and its seconds per
block, summed over both sides and every process of the run, beside the hot-loop figure of
the same check in this process, measured after the run. In this process it also times
each block request's wait beyond the worker's own account of the block (the channel and
the wake-ups), and the opening and closing of the later processes' worker pairs.

    python benchmarks/block_checks.py [MANIFEST] [-- key=value ...]

Default: ``manifests/examples/cpu/honest-win.yaml`` at ``measure=quick``,
``measure.max_seconds=2``, ``measure.target_ci=0`` (as ``defence_overhead.py``). CPU only:
the workers must be forked (``defences.start_method=fork``).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "manifests/examples/cpu/honest-win.yaml"

#: (label, owner, attribute): what is wrapped. ``owner``: a class of ``expkit.bench.sides.side``,
#: or ``side`` / ``block_checks``, the module whose namespace the caller looks the name up in.
WRAPPED = [
    ("block (whole request)", "SideBench", "block"),
    ("tamper_findings", "SideBench", "tamper_findings"),
    ("  function snapshot (hot)", "FunctionSnapshot", "changed"),
    ("  state snapshot", "side", "snapshot_state"),
    ("  state comparison", "side", "state_changes"),
    ("settle", "side", "settle"),
    ("CPU-time account: begin", "ResourceAccount", "begin"),
    ("CPU-time account: end", "ResourceAccount", "end"),
    ("live threads", "block_checks", "threads_now"),
    ("child processes", "block_checks", "child_pids"),
    ("new threads", "block_checks", "new_activity"),
    ("parked threads", "block_checks", "parked_new_threads"),
]


def _wrap(owner: Any, attr: str, label: str, acc: Dict[str, float], cnt: collections.Counter) -> None:
    f = getattr(owner, attr)

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t0
            cnt[label] += 1

    setattr(owner, attr, timed)


def _hot_loop(n: int = 200) -> Dict[str, float]:
    """Seconds per call of the snapshots in a hot loop, on a side built in this process."""
    from expkit.bench.sides.side import BASELINE, SideBench
    from expkit.checks.global_state import snapshot_state
    from expkit.manifest.settings import Settings
    from expkit.manifest.spec import load

    lm = load(DEFAULT)
    side = SideBench(lm, Settings(), "cpu", BASELINE)
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=1)
    side.block(4)
    out = {}
    for label, fn in (("  function snapshot (hot)", lambda: side.funcs0.changed(hot_only=True)),
                      ("  state snapshot", snapshot_state)):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out[label] = (time.perf_counter() - t0) / n
    side.close()
    return out


def main(argv: List[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = argv[:argv.index("--")] if "--" in argv else argv
    manifest = Path(args[0]) if args else DEFAULT
    sys.path.insert(0, str(ROOT))
    from expkit.bench.defences import block_checks as BC
    from expkit.bench.sides import side as S
    from expkit.runner import run_manifest

    dump = Path(tempfile.mkdtemp(prefix="block-checks-"))
    acc: Dict[str, float] = collections.defaultdict(float)
    cnt: collections.Counter = collections.Counter()
    originals = []
    for label, owner, attr in WRAPPED:
        target = {"side": S, "block_checks": BC}.get(owner) or getattr(S, owner)
        originals.append((target, attr, getattr(target, attr)))
        _wrap(target, attr, label, acc, cnt)
    close: Callable[..., Any] = S.SideBench.close

    def close_and_dump(self: Any) -> Any:
        if cnt:
            (dump / f"{self.role}-{os.getpid()}.json").write_text(json.dumps({"acc": acc, "cnt": cnt}))
        return close(self)

    S.SideBench.close = close_and_dump
    # In this process: each block request's wait beyond the worker's own account of it
    # (the channel and the wake-ups), and the replicates' pairs opened and closed.
    from expkit.bench.sides import endpoint as E, pair as P, replicates as R

    beyond: List[float] = []
    pairs: Dict[str, List[float]] = {"open": [], "close": []}
    request, open_pair, pair_close = E.WorkerEndpoint.request, R.open_pair, P.Pair.close

    def timed_request(self: Any, op: str, **payload: Any) -> Any:
        t0 = time.perf_counter()
        rep = request(self, op, **payload)
        if op == "block":  # one block, or a side's consecutive blocks (``blocks``)
            beyond.append(time.perf_counter() - t0 - sum(b["wall"] for b in rep.get("blocks", [rep])))
        return rep

    def timed_open(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return open_pair(*a, **k)
        finally:
            pairs["open"].append(time.perf_counter() - t0)

    def timed_close(self: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return pair_close(self, *a, **k)
        finally:
            pairs["close"].append(time.perf_counter() - t0)

    E.WorkerEndpoint.request, R.open_pair, P.Pair.close = timed_request, timed_open, timed_close
    overrides = ["measure=quick", "measure.max_seconds=2", "measure.target_ci=0.0", "defences.enabled=true",
                 "defences.start_method=fork", *extra]
    result = run_manifest(manifest, overrides, out_dir=dump / "run").result
    # After the run: torch's thread pool, started by the hot loop's ops, must not be in
    # the process the workers fork from (their first parallel op would hang).
    S.SideBench.close = close
    E.WorkerEndpoint.request, R.open_pair, P.Pair.close = request, open_pair, pair_close
    for target, attr, f in originals:
        setattr(target, attr, f)
    hot = _hot_loop()
    total: Dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()
    for f in glob.glob(str(dump / "*.json")):
        d = json.loads(Path(f).read_text())
        for k, v in d["acc"].items():
            total[k] += v
        calls.update(d["cnt"])
    blocks = calls["block (whole request)"] or 1
    print(f"{manifest.name}, {' '.join(overrides)}: verdict {result['verdict']}, {blocks} timed blocks "
          f"(both sides, every process)\n")
    print("| check | calls | total s | us per block | us per call, hot loop here |")
    print("|---|---|---|---|---|")
    for label, _, _ in WRAPPED:
        if label not in calls:
            continue
        h = hot.get(label)
        print(f"| {label} | {calls[label]} | {total[label]:.3f} | {total[label] / blocks * 1e6:.0f} | "
              f"{'' if h is None else f'{h * 1e6:.0f}'} |")
    if beyond:
        import statistics

        print(f"\nIn the parent: each block request waited {statistics.median(beyond) * 1e6:.0f} us (median; "
              f"{sum(beyond):.3f} s over {len(beyond)} requests) beyond the workers' own wall time for its "
              "blocks. "
              f"Pairs of workers: {len(pairs['open'])} opened for later processes, "
              f"{sum(pairs['open']):.3f} s ({', '.join(f'{x:.3f}' for x in pairs['open'])}); "
              f"{len(pairs['close'])} closed, {sum(pairs['close']):.3f} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
