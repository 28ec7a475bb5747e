"""Where a run's measurement stage goes, with the defences on and off (issue #13's cost).

A script, not a test. Runs one manifest in this process with ``defences.enabled`` off and
on, alternating, after one discarded run each way (the fork server's start, lazy imports),
and times, by wrapping them, the parts of the measurement stage: opening each replicate
(its pair of workers started and greeted), each case's ``sides`` (the workers' inputs
built), the warm-ups, the block-size calibration's single blocks, the batches of timed
blocks, the stopping checks, each case's ``finish`` and each replicate's close. Prints,
per round and way, the run's wall time, its ``start``, ``preflight`` and ``measure``
stages (``result.json``'s ``stages``), the timed seconds, and the seconds and count of
each part.

    python benchmarks/measure_phases.py [MANIFEST] [--rounds N] [-- key=value ...]

Default: ``manifests/examples/cpu/honest-win.yaml`` at ``measure=quick`` as shipped (its
own stopping rule), which is what a user's run pays. Timings on a shared machine are
noisy: read the rounds side by side.
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "manifests/examples/cpu/honest-win.yaml"

#: (label, module, owner, attribute) of what is timed; ``owner`` None: a module function.
PARTS: List[Tuple[str, str, Any, str]] = [
    ("open a replicate", "expkit.bench.sides.replicates", "Replicates", "open"),
    ("a case's sides (inputs)", "expkit.bench.sides.replicates", "_Replicate", "sides"),
    ("warm-up", "expkit.bench.sides.case_sides", "CaseSides", "_warm"),
    ("calibration blocks", "expkit.bench.defences.envelope", "SessionTimer", "sample"),
    ("batches of blocks", "expkit.bench.defences.envelope", "SessionTimer", "sample_batch"),
    ("stopping checks", "expkit.timing.measure", None, "_own_width"),
    ("finish a case", "expkit.bench.sides.replicates", "_Replicate", "finish"),
    ("close a replicate", "expkit.bench.sides.replicates", "_Replicate", "close"),
]


def _wrap(acc: Dict[str, float], cnt: collections.Counter) -> List[Tuple[Any, str, Any]]:
    """Wrap each of :data:`PARTS`; returns (owner, attribute, original) to put back."""
    import importlib

    originals = []
    for label, module, owner, attr in PARTS:
        target = importlib.import_module(module)
        if owner is not None:
            target = getattr(target, owner)
        f: Callable[..., Any] = getattr(target, attr)
        originals.append((target, attr, f))

        def timed(*a: Any, _f: Callable[..., Any] = f, _label: str = label, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                acc[_label] += time.perf_counter() - t0
                cnt[_label] += 1

        setattr(target, attr, timed)
    return originals


def main(argv: List[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = argv[:argv.index("--")] if "--" in argv else argv
    rounds = 3
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i:i + 2]
    manifest = Path(args[0]) if args else DEFAULT
    sys.path.insert(0, str(ROOT))
    acc: Dict[str, float] = collections.defaultdict(float)
    cnt: collections.Counter = collections.Counter()
    originals = _wrap(acc, cnt)
    try:
        _rounds(manifest, rounds, extra, acc, cnt)
    finally:
        for target, attr, f in originals:
            setattr(target, attr, f)
    return 0


def _rounds(manifest: Path, rounds: int, extra: List[str], acc: Dict[str, float], cnt: collections.Counter) -> None:
    from expkit.runner import run_manifest

    out = Path(tempfile.mkdtemp(prefix="measure-phases-"))
    print(f"{manifest.name}, measure=quick {' '.join(extra)}\n")
    print("| round | defences | wall s | start stage s | preflight stage s | measure stage s | timed s | "
          + " | ".join(label for label, *_ in PARTS) + " |")
    print("|---|---|---|---|---|---|---|" + "---|" * len(PARTS))
    for i in range(rounds + 1):
        for on in ("false", "true"):
            acc.clear()
            cnt.clear()
            t0 = time.perf_counter()
            r = run_manifest(manifest, ["measure=quick", f"defences.enabled={on}", *extra],
                             out_dir=out / f"{i}-{on}").result
            wall = time.perf_counter() - t0
            if i == 0:
                continue  # the discarded warm-up run each way
            timed = sum(c["timed_seconds"] for c in r["measured"]["cases"].values())
            cells = " | ".join(f"{acc[label]:.3f} ({cnt[label]})" for label, *_ in PARTS)
            st = r["stages"]
            print(f"| {i} | {'on' if on == 'true' else 'off'} | {wall:.2f} | {st.get('start', 0.0):.3f} | "
                  f"{st.get('preflight', 0.0):.3f} | {st['measure']:.2f} | "
                  f"{timed:.3f} | {cells} |")
    print("\nEach part: seconds (calls), summed over the run. The parts overlap where one calls another"
          " (a replicate's first case's `sides` waits for its workers' hello when they were started early).")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
