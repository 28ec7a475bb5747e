"""Debug: each timed call inside each defended CPU block: how the calls after a hand-over compare.

A script, not a test. Runs ``expkit run MANIFEST [override ...]`` in this process with the
workers forked from it (``defences.start_method=fork``), after wrapping the defended CPU
timer's ``sample`` (``timing.per_call.PerCallTimer``) so that each block also reads its
own calls' times, one by one, and writes them to a file per process. The wrapper is in
place before any worker takes its function snapshot, so the tamper check sees it as the
harness's own. The wrapper's two clock reads a call fall inside what it reads, not inside
what the run times.

Prints, per process and block size (calls a block), each relative to the median call of
all that process's blocks of that size: the mean first call of a block, the mean of its
calls 2-4 and of the rest, the mean call of a block, and the first eight blocks' mean calls
in order (the first candidate blocks a process re-checks, and the ones after them).
Processes are named by pid; with ``defences.isolate=false`` both sides share one.

With ``--spin N`` each block is first preceded, outside its timed calls, by a fixed loop of
``N`` integer additions in pure Python, timed on its own: a gauge of how fast the core runs
code that needs no memory beyond the interpreter's; the table then adds its mean time and
the first eight blocks' spins relative to the process's median spin.

    python scripts/debug_block_calls.py [--spin N] MANIFEST OUT_DIR [override ...]

Overrides default to ``measure=default`` with one process and 4 s a case at most.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
DEFAULT = ["measure=default", "measure.processes=1", "measure.max_seconds=4"]


def _spin(n: int) -> None:
    x = 0
    for i in range(n):
        x += i


def _wrap(cls: type, log_dir: str, spin: int = 0) -> None:
    inner = cls.sample
    clock = time.perf_counter

    def sample(self, fn, number):
        calls: List[float] = []
        gauge = 0.0
        if spin:
            g0 = clock()
            _spin(spin)
            gauge = clock() - g0

        def one():
            t0 = clock()
            fn()
            calls.append(clock() - t0)

        per_call = inner(self, one, number)
        with open(os.path.join(log_dir, f"calls-{os.getpid()}.txt"), "a") as f:
            f.write(json.dumps([number, calls, gauge]) + "\n")
        return per_call

    cls.sample = sample


def summarise(log_dir: str) -> List[str]:
    """The table (markdown lines) from the files :func:`_wrap` wrote."""
    lines = ["| process | calls a block | blocks | first call | calls 2-4 | the rest | a block's mean call | "
             "first eight blocks' mean calls |", "|---|---|---|---|---|---|---|---|"]
    by: Dict[Tuple[str, int], List[List[float]]] = {}
    spins: Dict[Tuple[str, int], List[float]] = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "calls-*.txt"))):
        for line in open(path):
            number, calls, gauge = json.loads(line)
            key = (Path(path).stem.split("-", 1)[1], int(number))
            by.setdefault(key, []).append(calls)
            spins.setdefault(key, []).append(gauge)
    gauged = any(g for gs in spins.values() for g in gs)
    if gauged:
        lines[0] += " spin, mean (us) | first eight blocks' spins |"
        lines[1] += "---|---|"
    for (proc, number), blocks in sorted(by.items()):
        if len(blocks) < 10 or number < 5:  # calibration blocks; too few calls to split
            continue
        med = statistics.median(c for b in blocks for c in b)
        rel = lambda xs: statistics.mean(xs) / med  # noqa: E731
        first = statistics.mean(b[0] for b in blocks) / med
        early = statistics.mean(rel(b[1:4]) for b in blocks)
        rest = statistics.mean(rel(b[4:]) for b in blocks)
        whole = statistics.mean(rel(b) for b in blocks)
        head = " ".join(f"{rel(b):.2f}" for b in blocks[:8])
        row = (f"| {proc} | {number} | {len(blocks)} | {first:.2f} | {early:.2f} | {rest:.3f} | {whole:.3f} | "
               f"{head} |")
        if gauged:
            gs = spins[(proc, number)]
            gm = statistics.median(gs)
            row += f" {statistics.mean(gs) * 1e6:.0f} | {' '.join(f'{g / gm:.2f}' for g in gs[:8])} |"
        lines.append(row)
    return lines


def main(argv: list) -> int:
    spin = 0
    if argv[:1] == ["--spin"] and len(argv) > 1:
        spin, argv = int(argv[1]), argv[2:]
    if len(argv) < 2:
        print(__doc__)
        return 2
    manifest, out = argv[0], Path(argv[1])
    overrides = argv[2:] or DEFAULT
    log_dir = out / "calls"
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("calls-*.txt"):
        old.unlink()
    sys.path.insert(0, str(REPO))
    from expkit.timing.per_call import PerCallTimer

    _wrap(PerCallTimer, str(log_dir), spin)
    from expkit.cli.commands import main as cli

    cli(["run", manifest, *overrides, "defences.start_method=fork", "--out", str(out / "run"), "--quiet"])
    print(f"<!-- {Path(manifest).name} {' '.join(overrides)} -->")
    print("\n".join(summarise(str(log_dir))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
